//! `worker --seed-queue` as a process: the engine built as `serve` builds it, the probes and
//! metrics on `--listen`, the consumer until SIGTERM, then the grace period (the same shutdown as
//! the stream worker: stop taking, finish in flight, hand back what the cut stops, exit 0).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::probes;
use crate::config::WorkerSettings;
use crate::engine::store::redis::Conn;
use crate::queue::seed::{self, SeedSettings, SeedStats};
use crate::setting::ConfigError;
use crate::shutdown::Shutdown;
use crate::wiring::{StartError, build_solving};

/// The seed mode's settings from the worker's: `--queue` is the key prefix (`captcha`, the
/// seed's, by default), `--lease-s` how long a silent consumer lives, `--result-ttl-s` the
/// results' retention.
pub fn seed_settings(worker: &WorkerSettings) -> SeedSettings {
    let retention = worker.queue.result_ttl;
    SeedSettings {
        prefix: worker.queue.name.clone(),
        concurrency: worker.queue.concurrency as usize,
        lease: worker.queue.lease,
        retention,
        solve_timeout: worker.serve.limits.default_solve_timeout,
        // A quarter of the retention, at most a minute: results outlive it by that much at most.
        sweep_every: (retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(60)),
        ..SeedSettings::default()
    }
}

/// Runs the seed consumer as `consumer` until the shutdown signal and its grace period.
pub async fn run(
    settings: WorkerSettings,
    consumer: String,
    shutdown: Shutdown,
) -> Result<(), StartError> {
    let target = settings
        .serve
        .redis
        .as_ref()
        .expect("the worker's settings require --redis-url")
        .target
        .clone();
    if target.cluster {
        return Err(StartError::Config(ConfigError {
            setting: "--seed-queue".into(),
            problem: "seed 003's key names have no hash tag, so they span Redis Cluster slots"
                .into(),
            fix: "point --redis-url at one Redis server (the one seed 003's producer writes to)"
                .into(),
        }));
    }
    let listener = probes::bind(settings.listen).await?;
    let addr = listener.local_addr()?;
    let solving = build_solving(&settings.serve, &shutdown).await?;
    let seed = seed_settings(&settings);
    let stats = Arc::new(SeedStats::default());
    let background = CancellationToken::new();
    let probes_conn = Conn::open(&target, target.response_timeout)
        .await
        .map_err(|e| StartError::Store(e.to_string()))?;
    let figures = seed::SeedFigures {
        stats: stats.clone(),
        prefix: seed.prefix.clone(),
    };
    probes::spawn(
        probes_conn,
        &solving,
        u32::try_from(seed.concurrency).unwrap_or(u32::MAX),
        |metrics| figures.register(metrics.registry()),
        probes::Listening {
            listener,
            connections: settings.serve.connections,
            ops: &settings.serve.ops,
        },
        background.clone(),
    );
    crate::status::publish_worker(
        solving.engine.clone(),
        solving.upstream.clone(),
        settings.serve.status_every,
        &target,
        &shutdown,
    )
    .await;
    println!("captcha-gateway worker {consumer} listening on http://{addr}");
    let consuming = seed::run(
        solving.engine,
        &target,
        seed,
        &consumer,
        stats,
        shutdown.token.clone(),
    );
    tokio::pin!(consuming);
    let ended_early = tokio::select! {
        ended = &mut consuming => Some(ended),
        () = shutdown.token.cancelled() => None,
    };
    let ended = match ended_early {
        Some(ended) => {
            shutdown.token.cancel();
            shutdown.drain(settings.grace).await;
            Some(ended)
        }
        None => {
            tracing::info!("stopping: no new entries; finishing those in flight");
            shutdown
                .drain_until(tokio::time::Instant::now() + settings.grace, &mut consuming)
                .await
        }
    };
    background.cancel();
    match ended {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(StartError::Store(e.to_string())),
        None => {
            tracing::warn!("grace period over: unfinished entries stay listed for other workers");
            Ok(())
        }
    }
}
