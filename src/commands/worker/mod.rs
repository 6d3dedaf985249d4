//! `captcha-gateway worker`: the solving stack as `serve` builds it (`wiring`), consuming the
//! queue instead of serving the APIs: the one `queue::worker` over the stream
//! (`queue::stream`) or over seed 003's lists (`--seed-queue`, `queue::seed`), with its probes
//! and metrics on `--listen` ([`probes`]). On SIGTERM it stops taking, lets the entries in
//! flight finish within the grace (their claims kept alive meanwhile), hands back what the cut
//! stops or what it still holds, and exits 0.

mod probes;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::cli::WorkerArgs;
use crate::config::{WorkerSettings, load_worker};
use crate::queue::Queue;
use crate::queue::seed::{self, SeedFigures, SeedSettings, SeedStats};
use crate::queue::stream::{Stream, StreamParts};
use crate::queue::worker::{Running, Source, WorkerFigures, consumer_name};
use crate::redis_base::{Conn, RedisTarget};
use crate::setting::ConfigError;
use crate::shutdown::Shutdown;
use crate::telemetry::Metrics;
use crate::wiring::{Solving, StartError, build_solving};

/// `worker`: load the settings, build the engine as `serve` does, consume until SIGTERM.
pub async fn run(
    mut args: WorkerArgs,
    env: &dyn Fn(&str) -> Option<String>,
    shutdown: Shutdown,
) -> Result<(), StartError> {
    let settings = load_worker(&mut args, env).map_err(StartError::Config)?;
    crate::telemetry::init_logs(&settings.serve.log, &settings.serve.secret_values());
    let host = env("HOSTNAME")
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .unwrap_or_default();
    let consumer = consumer_name(&host);
    let target = settings
        .serve
        .redis
        .as_ref()
        .expect("load_worker() requires --redis-url")
        .target
        .clone();
    if args.seed_queue && target.cluster {
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
    let probes_conn = Conn::open(&target, target.response_timeout)
        .await
        .map_err(store_error)?;
    let figures = Arc::new(WorkerFigures::default());
    let background = CancellationToken::new();
    let listening = probes::Listening {
        listener,
        connections: settings.serve.connections,
        ops: &settings.serve.ops,
    };
    let serve_probes = |own: Box<dyn FnOnce(&mut Metrics) + '_>| {
        probes::spawn(
            probes_conn,
            &solving,
            settings.queue.concurrency,
            own,
            listening,
            background.clone(),
        )
    };
    let consuming = Consuming {
        settings: &settings,
        solving: &solving,
        target: &target,
        consumer: &consumer,
        addr,
        figures: figures.clone(),
    };
    if args.seed_queue {
        let seed =
            SeedSettings::from_queue(&settings.queue, settings.serve.limits.default_solve_timeout);
        let stats = Arc::new(SeedStats::default());
        let prefix = seed.prefix.clone();
        let source = seed::open(
            solving.engine.clone(),
            &target,
            seed,
            &consumer,
            stats.clone(),
        )
        .await
        .map_err(store_error)?;
        let own = SeedFigures {
            stats,
            worker: figures,
            prefix,
        };
        serve_probes(Box::new(|metrics| own.register(metrics.registry())));
        consuming.until_stopped(source, shutdown).await;
    } else {
        let queue = Queue::open(&target, settings.queue.clone())
            .await
            .map_err(store_error)?;
        let blocking = Conn::open(
            &target,
            settings.queue.read_block() + target.response_timeout,
        )
        .await
        .map_err(store_error)?;
        let source = Stream::new(
            solving.engine.clone(),
            StreamParts {
                queue,
                blocking,
                consumer: consumer.clone(),
                default_timeout: settings.serve.limits.default_solve_timeout,
            },
        );
        serve_probes(Box::new(|metrics| {
            source.register_metrics(figures.clone(), metrics)
        }));
        consuming.until_stopped(source, shutdown).await;
    }
    background.cancel();
    Ok(())
}

fn store_error(e: impl std::fmt::Display) -> StartError {
    StartError::Store(e.to_string())
}

/// What consuming needs from the command, whatever the source.
struct Consuming<'a> {
    settings: &'a WorkerSettings,
    solving: &'a Solving,
    target: &'a RedisTarget,
    consumer: &'a str,
    addr: SocketAddr,
    figures: Arc<WorkerFigures>,
}

impl Consuming<'_> {
    /// Consumes `source` until the shutdown signal, then lets the entries in flight end within
    /// the grace period and hands back what is left.
    async fn until_stopped<S: Source>(self, source: Arc<S>, shutdown: Shutdown) {
        crate::status::publish_worker(
            self.solving.engine.clone(),
            self.solving.upstream.clone(),
            self.settings.serve.status_every,
            self.settings.serve.demand_bucket,
            self.settings.queue.concurrency.into(),
            self.target,
            &shutdown,
        )
        .await;
        let mut running = Running::start(
            source,
            self.settings.queue.concurrency as usize,
            self.figures,
            shutdown.tracker.clone(),
            shutdown.token.clone(),
        );
        println!(
            "captcha-gateway worker {} listening on http://{}",
            self.consumer, self.addr
        );
        tracing::info!(addr = %self.addr, consumer = %self.consumer, queue = %self.settings.queue.name, "worker consuming");
        shutdown.token.cancelled().await;
        tracing::info!(
            in_flight = running.in_flight(),
            "stopping: no new entries; finishing those in flight"
        );
        let deadline = tokio::time::Instant::now() + self.settings.grace;
        if shutdown
            .drain_until(deadline, running.in_flight_done())
            .await
            .is_none()
        {
            tracing::warn!(
                left = running.in_flight(),
                "grace period over: handing back what is unfinished"
            );
        }
        running.close().await;
    }
}
