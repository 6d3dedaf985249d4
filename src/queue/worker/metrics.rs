//! The worker's queue figures for `/metrics` (Prometheus text).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::queue::figures::QueueFigures;
use crate::telemetry::metrics::escape;

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
    pub in_flight: AtomicU64,
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

    /// The figures as Prometheus text, with the queue's depth as Redis told it.
    pub fn render(&self, depth: &QueueFigures) -> String {
        let mut out = String::new();
        let q = format!("queue=\"{}\"", escape(&depth.queue));
        let _ = writeln!(
            out,
            "# HELP captcha_gateway_queue_processed_total Delivered entries by how they ended on this worker.\n# TYPE captcha_gateway_queue_processed_total counter"
        );
        for o in Outcome::ALL {
            let _ = writeln!(
                out,
                "captcha_gateway_queue_processed_total{{{q},outcome=\"{}\"}} {}",
                o.label(),
                self.processed(o)
            );
        }
        let simple = [
            (
                "reclaimed_total",
                "counter",
                "Entries taken over from stalled consumers.",
                &self.reclaimed,
            ),
            (
                "deleted_pending_total",
                "counter",
                "Pending ids found deleted (never expected).",
                &self.deleted_seen,
            ),
            (
                "retries_promoted_total",
                "counter",
                "Due retries moved back into the stream.",
                &self.promoted,
            ),
            (
                "leases_lost_total",
                "counter",
                "Entries this worker found taken over by another.",
                &self.leases_lost,
            ),
            (
                "in_flight",
                "gauge",
                "Entries this worker holds now.",
                &self.in_flight,
            ),
        ];
        for (name, kind, help, value) in simple {
            let _ = writeln!(
                out,
                "# HELP captcha_gateway_queue_{name} {help}\n# TYPE captcha_gateway_queue_{name} {kind}\ncaptcha_gateway_queue_{name}{{{q}}} {}",
                value.load(Ordering::Relaxed)
            );
        }
        out.push_str(&depth.render());
        out
    }
}

/// The stream worker's own figures on `/metrics`, with the group's lag as KEDA reads it.
#[async_trait::async_trait]
impl crate::queue::probes::OwnFigures for super::Worker {
    async fn render(&self) -> String {
        self.metrics.render(&self.queue.figures().await)
    }
}
