//! `captcha-gateway worker`: the solving stack as `serve` builds it (`wiring`), consuming the
//! queue (`queue::worker` on the stream, `queue::seed` on seed 003's list) instead of serving
//! the APIs, with its probes and metrics on `--listen` ([`probes`]). On SIGTERM it stops
//! reading, finishes in-flight entries within the grace (renewing them meanwhile), hands back
//! what the cut stops, leaves the rest pending, and exits 0.

mod probes;
mod seed;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::cli::WorkerArgs;
use crate::config::{WorkerSettings, load_worker};
use crate::engine::store::redis::Conn;
use crate::queue::Queue;
use crate::queue::worker::{QueueMetrics, Worker, WorkerParts, consumer_name};
use crate::shutdown::Shutdown;
use crate::wiring::{StartError, build_solving};

pub use seed::seed_settings;

/// `worker`: load the settings, build the engine as `serve` does, consume until SIGTERM.
pub async fn run(mut args: WorkerArgs, shutdown: Shutdown) -> Result<(), StartError> {
    let env = |name: &str| std::env::var(name).ok();
    let settings = load_worker(&mut args, &env).map_err(StartError::Config)?;
    crate::telemetry::init_logs(&settings.serve.log, &settings.serve.secret_values());
    if args.seed_queue {
        return seed::run(settings, consumer_name(), shutdown).await;
    }
    let started = start(settings, shutdown.clone()).await?;
    println!(
        "captcha-gateway worker {} listening on http://{}",
        started.consumer, started.addr
    );
    started.wait(shutdown).await
}

/// A running worker.
pub struct Started {
    pub addr: std::net::SocketAddr,
    pub consumer: String,
    worker: Arc<Worker>,
    grace: Duration,
    /// Stops the renewer and the HTTP server, after in-flight work ended.
    background: CancellationToken,
}

/// Builds the engine and the queue, starts reading, renewing, reclaiming and serving probes.
pub async fn start(settings: WorkerSettings, shutdown: Shutdown) -> Result<Started, StartError> {
    let listener = probes::bind(settings.listen).await?;
    let addr = listener.local_addr()?;
    let solving = build_solving(&settings.serve, &shutdown).await?;
    let redis = settings
        .serve
        .redis
        .as_ref()
        .expect("load_worker() requires --redis-url");
    let queue = Queue::open(&redis.target, settings.queue.clone())
        .await
        .map_err(|e| StartError::Store(e.to_string()))?;
    let blocking = Conn::open(
        &redis.target,
        settings.queue.read_block() + redis.target.response_timeout,
    )
    .await
    .map_err(|e| StartError::Store(e.to_string()))?;
    let probes_conn = queue.conn();
    let background = CancellationToken::new();
    let worker = Worker::spawn(
        solving.engine.clone(),
        WorkerParts {
            queue,
            blocking,
            consumer: consumer_name(),
            settings: settings.queue.clone(),
            default_timeout: settings.serve.limits.default_solve_timeout,
        },
        shutdown.tracker.clone(),
        shutdown.token.clone(),
        background.clone(),
    );
    probes::spawn(
        probes_conn,
        &solving,
        settings.queue.concurrency,
        |metrics| worker.register_metrics(metrics),
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
        &redis.target,
        &shutdown,
    )
    .await;
    tracing::info!(%addr, consumer = %worker.consumer(), queue = %settings.queue.name, "worker consuming");
    Ok(Started {
        addr,
        consumer: worker.consumer().to_owned(),
        worker,
        grace: settings.grace,
        background,
    })
}

impl Started {
    /// Runs until the shutdown signal, then lets in-flight entries finish within the grace
    /// (their leases still renewed); what the cut stops is handed back, the rest stays pending.
    pub async fn wait(self, shutdown: Shutdown) -> Result<(), StartError> {
        shutdown.token.cancelled().await;
        tracing::info!(
            in_flight = self.worker.in_flight(),
            "stopping: no new entries; finishing those in flight"
        );
        shutdown
            .drain_until(tokio::time::Instant::now() + self.grace, async {})
            .await;
        let left = self.worker.in_flight();
        if left > 0 {
            tracing::warn!(left, "entries left pending for other workers");
        }
        self.background.cancel();
        Ok(())
    }

    pub fn metrics(&self) -> &QueueMetrics {
        self.worker.metrics()
    }
}
