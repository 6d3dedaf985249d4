//! `captcha-gateway worker`: consumes the queue with the same engine as `serve` (pools, exact
//! demand, coalescing and the fleet-wide thread budget apply; queued tasks rank below
//! interactive callers and above pool refills), keeping up to `--concurrency` entries in flight.
//!
//! Pieces: [`consume`] takes entries (read loop, reclaim loop), [`process`] runs one to its end,
//! [`lease`] renews what is held, [`ops`] holds the scripts' calls, [`http`] the probes and
//! metrics. On SIGTERM it stops reading, finishes in-flight entries within the grace (renewing
//! them meanwhile), hands back what the cut stops, leaves the rest pending, and exits 0.

mod config;
mod consume;
mod lease;
mod metrics;
mod ops;
mod process;

pub use config::{WorkerSettings, load};
pub use metrics::QueueMetrics;

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::WorkerArgs;
use crate::engine::Engine;
use crate::engine::store::redis::Conn;
use crate::queue::Queue;
use crate::serve::{StartError, build_solving};
use crate::shutdown::Shutdown;

/// One worker process's shared state.
pub struct Worker {
    queue: Queue,
    engine: Engine,
    /// This process's consumer name: `<hostname>-<16 hex boot id>`, never reused.
    consumer: String,
    in_flight: lease::InFlight,
    /// Begins and finishes gathered into one script call each.
    lanes: ops::Lanes,
    metrics: QueueMetrics,
    /// A task's deadline when neither it nor its request names one.
    default_timeout: Duration,
    /// Where entry processing runs, so shutdown can wait for it.
    tracker: TaskTracker,
}

/// `worker`: load the settings, build the engine as `serve` does, consume until SIGTERM.
pub async fn run(mut args: WorkerArgs, shutdown: Shutdown) -> Result<(), StartError> {
    let env = |name: &str| std::env::var(name).ok();
    let settings = load(&mut args, &env).map_err(StartError::Config)?;
    crate::telemetry::init_logs(&settings.serve.log, &settings.serve.secret_values());
    if args.seed_queue {
        return seed_queue(settings, shutdown).await;
    }
    let started = start(settings, shutdown.clone()).await?;
    println!(
        "captcha-gateway worker {} listening on http://{}",
        started.consumer, started.addr
    );
    started.wait(shutdown).await
}

/// Seed 003's list (`--seed-queue`): the seed part (`queue::seed`) runs the process.
async fn seed_queue(settings: WorkerSettings, shutdown: Shutdown) -> Result<(), StartError> {
    crate::queue::seed::run_command(settings, consumer_name(), shutdown).await
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
    let listener = crate::queue::probes::bind(settings.listen).await?;
    let addr = listener.local_addr()?;
    let solving = build_solving(&settings.serve, &shutdown).await?;
    let redis = settings
        .serve
        .redis
        .as_ref()
        .expect("load() requires --redis-url");
    let queue = Queue::open(&redis.target, settings.queue.clone())
        .await
        .map_err(|e| StartError::Store(e.to_string()))?;
    // The blocking reader's own connection, patient for longer than a read blocks.
    let blocking = Conn::open(
        &redis.target,
        settings.queue.read_block() + redis.target.response_timeout,
    )
    .await
    .map_err(|e| StartError::Store(e.to_string()))?;
    let probes_conn = queue.conn();
    let worker = Arc::new(Worker {
        queue,
        engine: solving.engine.clone(),
        consumer: consumer_name(),
        in_flight: lease::InFlight::default(),
        lanes: ops::Lanes::default(),
        metrics: QueueMetrics::default(),
        default_timeout: settings.serve.limits.default_solve_timeout,
        tracker: shutdown.tracker.clone(),
    });
    let background = CancellationToken::new();
    let slots = Arc::new(Semaphore::new(settings.queue.concurrency as usize));
    tokio::spawn(worker.clone().renew_loop(background.clone()));
    tokio::spawn(
        worker
            .clone()
            .read_loop(blocking, slots, shutdown.token.clone()),
    );
    tokio::spawn(worker.clone().upkeep_loop(shutdown.token.clone()));
    crate::queue::probes::spawn(
        probes_conn,
        &solving,
        settings.queue.concurrency,
        |metrics| metrics::register(&worker, metrics),
        crate::queue::probes::Listening {
            listener,
            connections: settings.serve.connections,
            ops: &settings.serve.ops,
        },
        background.clone(),
    );
    crate::status::publish_worker(
        &solving,
        settings.serve.status_every,
        &redis.target,
        &shutdown,
    )
    .await;
    tracing::info!(%addr, consumer = %worker.consumer, queue = %settings.queue.name, "worker consuming");
    Ok(Started {
        addr,
        consumer: worker.consumer.clone(),
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
            in_flight = self.worker.in_flight.len(),
            "stopping: no new entries; finishing those in flight"
        );
        shutdown
            .drain_until(tokio::time::Instant::now() + self.grace, async {})
            .await;
        let left = self.worker.in_flight.len();
        if left > 0 {
            tracing::warn!(left, "entries left pending for other workers");
        }
        self.background.cancel();
        Ok(())
    }

    pub fn metrics(&self) -> &QueueMetrics {
        &self.worker.metrics
    }
}

/// `<hostname>-<16 hex random boot id>`: unique per process start, so a restarted pod never
/// inherits (and keeps alive) a dead predecessor's pending entries.
fn consumer_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(63)
        .collect();
    let host = if host.is_empty() {
        "worker".to_owned()
    } else {
        host
    };
    let boot: [u8; 8] = rand::rng().random();
    format!("{host}-{}", hex::encode(boot))
}
