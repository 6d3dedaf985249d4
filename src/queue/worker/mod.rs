//! `captcha-gateway worker`: consumes the queue with the same engine as `serve` (pools, exact
//! demand, coalescing and the fleet-wide thread budget apply; queued tasks rank below
//! interactive callers and above pool refills), keeping up to `--concurrency` entries in flight.
//!
//! Pieces: [`consume`] takes entries (read loop, reclaim loop), [`process`] runs one to its end,
//! [`lease`] renews what is held, [`ops`] holds the scripts' calls, [`metrics`] its figures.
//! The command around it (settings, engine, probes) is `commands::worker`. On SIGTERM it stops reading, finishes in-flight entries within the grace (renewing
//! them meanwhile), hands back what the cut stops, leaves the rest pending, and exits 0.

mod consume;
mod lease;
mod metrics;
mod ops;
mod process;

pub use metrics::QueueMetrics;

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::Engine;
use crate::engine::store::redis::Conn;
use crate::queue::{Queue, QueueSettings};

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

/// What a worker needs besides its engine.
pub struct WorkerParts {
    pub queue: Queue,
    /// The blocking reader's own connection, patient for longer than a read blocks.
    pub blocking: Conn,
    /// This process's consumer name (`consumer_name`).
    pub consumer: String,
    pub settings: QueueSettings,
    /// A task's deadline when neither it nor its request names one.
    pub default_timeout: Duration,
}

impl Worker {
    /// Starts reading, renewing and reclaiming; `reading` stops taking new entries, `background`
    /// stops the renewer after in-flight work ended.
    pub fn spawn(
        engine: Engine,
        parts: WorkerParts,
        tracker: TaskTracker,
        reading: CancellationToken,
        background: CancellationToken,
    ) -> Arc<Worker> {
        let worker = Arc::new(Worker {
            queue: parts.queue,
            engine,
            consumer: parts.consumer,
            in_flight: lease::InFlight::default(),
            lanes: ops::Lanes::default(),
            metrics: QueueMetrics::default(),
            default_timeout: parts.default_timeout,
            tracker,
        });
        let slots = Arc::new(Semaphore::new(parts.settings.concurrency as usize));
        tokio::spawn(worker.clone().renew_loop(background));
        tokio::spawn(
            worker
                .clone()
                .read_loop(parts.blocking, slots, reading.clone()),
        );
        tokio::spawn(worker.clone().upkeep_loop(reading));
        worker
    }

    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Entries this process holds now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    pub fn metrics(&self) -> &QueueMetrics {
        &self.metrics
    }

    /// Registers the worker's figures (and the queue's depth) on `/metrics`.
    pub fn register_metrics(self: &Arc<Self>, metrics: &mut crate::telemetry::Metrics) {
        metrics::register(self, metrics);
    }
}

/// `<hostname>-<16 hex random boot id>`: unique per process start, so a restarted pod never
/// inherits (and keeps alive) a dead predecessor's pending entries.
pub fn consumer_name() -> String {
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
