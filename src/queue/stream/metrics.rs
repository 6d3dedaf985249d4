//! The stream consumer's own figures on `/metrics`: how delivered entries ended here, its
//! reclaims and leases, and the queue's depth (docs/API.md "Metrics").

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::Stream;
use crate::queue::figures::QueueDepth;
use crate::queue::worker::WorkerFigures;
use crate::telemetry::Metrics;
use crate::telemetry::collect::{Label, counters, gauges};

/// How a delivered entry ended on this worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A result was written (ready or failed).
    Written,
    /// Its result was already there (a reclaimed entry finished by its first worker).
    AlreadyDone,
    /// Scheduled for a later attempt.
    Retried,
    /// Moved to the dead-letter stream.
    DeadLettered,
    /// This worker lost the lease: its new owner finishes it.
    LeaseLost,
    /// Left unacknowledged (stopping, or Redis unreachable): reclaimed after the lease.
    LeftPending,
}

impl Outcome {
    const ALL: [Outcome; 6] = [
        Outcome::Written,
        Outcome::AlreadyDone,
        Outcome::Retried,
        Outcome::DeadLettered,
        Outcome::LeaseLost,
        Outcome::LeftPending,
    ];

    fn label(self) -> &'static str {
        match self {
            Outcome::Written => "written",
            Outcome::AlreadyDone => "already_done",
            Outcome::Retried => "retried",
            Outcome::DeadLettered => "dead_lettered",
            Outcome::LeaseLost => "lease_lost",
            Outcome::LeftPending => "left_pending",
        }
    }
}

#[derive(Default)]
pub struct QueueMetrics {
    processed: [AtomicU64; 6],
    /// Entries taken over from other consumers by the reclaim loop.
    pub reclaimed: AtomicU64,
    /// Ids the reclaim loop found deleted while pending (never expected: we XDEL only acked).
    pub deleted_seen: AtomicU64,
    /// Retries moved back into the stream by this worker's promoter.
    pub promoted: AtomicU64,
    /// Entries whose lease this worker found lost (taken over while it was slow or paused).
    pub leases_lost: AtomicU64,
}

impl QueueMetrics {
    pub fn count(&self, outcome: Outcome) {
        let i = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.processed[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn processed(&self, outcome: Outcome) -> u64 {
        let i = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.processed[i].load(Ordering::Relaxed)
    }
}

/// This worker's counters and the queue's depth on `/metrics`.
pub(super) fn register(stream: &Arc<Stream>, worker: Arc<WorkerFigures>, metrics: &mut Metrics) {
    QueueDepth::register(stream.queue.clone(), metrics);
    metrics
        .registry()
        .register_collector(Box::new(StreamFigures {
            stream: stream.clone(),
            worker,
        }));
}

struct StreamFigures {
    stream: Arc<Stream>,
    worker: Arc<WorkerFigures>,
}

impl fmt::Debug for StreamFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StreamFigures")
            .field(&self.stream.consumer)
            .finish()
    }
}

impl Collector for StreamFigures {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let m = &self.stream.metrics;
        let queue = || -> Label { ("queue", self.stream.queue.settings().name.clone()) };
        counters(
            &mut encoder,
            "queue_processed",
            "Delivered entries by how they ended on this worker",
            Outcome::ALL.map(|o| {
                let labels: [Label; 2] = [queue(), ("outcome", o.label().to_owned())];
                (labels, m.processed(o))
            }),
        )?;
        let counted = [
            (
                "queue_reclaimed",
                "Entries taken over from stalled consumers",
                &m.reclaimed,
            ),
            (
                "queue_deleted_pending",
                "Pending ids found deleted (never expected)",
                &m.deleted_seen,
            ),
            (
                "queue_retries_promoted",
                "Due retries moved back into the stream",
                &m.promoted,
            ),
            (
                "queue_leases_lost",
                "Entries this worker found taken over by another",
                &m.leases_lost,
            ),
        ];
        for (name, help, value) in counted {
            let row = ([queue()], value.load(Ordering::Relaxed));
            counters(&mut encoder, name, help, [row])?;
        }
        let row = ([queue()], WorkerFigures::get(&self.worker.in_flight));
        gauges(
            &mut encoder,
            "queue_in_flight",
            "Entries this worker holds now",
            [row],
        )
    }
}
