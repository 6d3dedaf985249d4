//! The queue on a Redis stream and consumer group, as one worker's [`Source`]: entries are read
//! with `XREADGROUP` (and taken over with `XAUTOCLAIM` once idle past a lease), each runs under
//! its own lease, renewed while it is processed, and ends in an owner-checked script that writes
//! its one result, schedules a retry or dead-letters it.
//!
//! Pieces: [`consume`] takes entries (read, reclaim) and tidies the group (due retries, dead
//! consumers), [`process`] runs one to its end, [`lease`] renews what is held, [`ops`] holds the
//! scripts' calls, [`metrics`] its figures. A cut solve is handed back at once; what is still
//! processed when the grace ends stays pending and is reclaimed after its lease.

mod consume;
mod lease;
mod metrics;
mod ops;
mod process;

pub use metrics::QueueMetrics;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::engine::Engine;
use crate::queue::Queue;
use crate::queue::entry::Entry;
use crate::queue::worker::{Source, WorkerFigures};
use crate::redis_base::Conn;

/// One stream consumer's state.
pub struct Stream {
    queue: Queue,
    engine: Engine,
    /// This process's consumer name (`worker::consumer_name`), never reused.
    consumer: String,
    /// The blocking reader's own connection, patient for longer than a read blocks.
    blocking: Conn,
    held: lease::InFlight,
    /// Begins and finishes gathered into one script call each.
    lanes: ops::Lanes,
    metrics: QueueMetrics,
    /// A task's deadline when neither it nor its request names one.
    default_timeout: Duration,
    /// When the next take looks for entries idle past their lease first.
    next_reclaim: Mutex<tokio::time::Instant>,
}

/// What a stream consumer needs besides its engine.
pub struct StreamParts {
    pub queue: Queue,
    /// The blocking reader's own connection, patient for longer than a read blocks.
    pub blocking: Conn,
    pub consumer: String,
    /// A task's deadline when neither it nor its request names one.
    pub default_timeout: Duration,
}

impl Stream {
    pub fn new(engine: Engine, parts: StreamParts) -> Arc<Self> {
        let reclaim_every = parts.queue.settings().beat();
        Arc::new(Stream {
            queue: parts.queue,
            engine,
            consumer: parts.consumer,
            blocking: parts.blocking,
            held: lease::InFlight::default(),
            lanes: ops::Lanes::default(),
            metrics: QueueMetrics::default(),
            default_timeout: parts.default_timeout,
            next_reclaim: Mutex::new(tokio::time::Instant::now() + reclaim_every),
        })
    }

    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    pub fn metrics(&self) -> &QueueMetrics {
        &self.metrics
    }

    /// Registers the consumer's figures (and the queue's depth) on `/metrics`.
    pub fn register_metrics(
        self: &Arc<Self>,
        worker: Arc<WorkerFigures>,
        metrics: &mut crate::telemetry::Metrics,
    ) {
        metrics::register(self, worker, metrics);
    }
}

impl Source for Stream {
    type Entry = Entry;

    async fn take(&self, most: usize, stop: &CancellationToken) -> redis::RedisResult<Vec<Entry>> {
        self.take_entries(most, stop).await
    }

    async fn process(self: Arc<Self>, entry: Entry) {
        self.process_entry(entry).await;
    }

    async fn keep_alive(self: Arc<Self>, life: CancellationToken) {
        tokio::join!(
            self.clone().renew_loop(life.clone()),
            self.upkeep_loop(life)
        );
    }

    async fn hand_back(&self) {
        let left = self.held.len();
        if left > 0 {
            tracing::warn!(
                left,
                "entries left pending: other workers take them over after their lease"
            );
        }
    }
}
