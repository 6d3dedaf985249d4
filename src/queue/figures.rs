//! The queue's depth as `/metrics` shows it, read from Redis at scrape time: by a serve process
//! with `--queue` (the producer side) and by stream workers. Every figure Redis could not give is
//! left out rather than shown as zero, so an alert on it does not fire on a blind scrape.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use redis::Value;

use super::Queue;
use super::reply;
use crate::telemetry::Metrics;
use crate::telemetry::collect::{Label, gauges};
use crate::telemetry::metrics::Refresh;

/// One queue's depth at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueFigures {
    /// The queue's configured name (the `queue` label).
    pub queue: String,
    /// Entries not yet delivered to any worker (what KEDA scales on).
    pub lag: Option<u64>,
    /// Entries delivered to a worker and not yet acknowledged.
    pub pending: Option<u64>,
    /// Entries waiting in the retry schedule for a later attempt.
    pub retry_scheduled: Option<u64>,
    /// Entries in the dead-letter stream.
    pub dead_letters: Option<u64>,
}

impl Queue {
    /// Reads the queue's depth; each figure independently, so one failed call hides one figure.
    pub async fn figures(&self) -> QueueFigures {
        let keys = self.keys();
        let mut conn = self.conn();
        let groups: Option<Value> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(keys.tasks())
            .query_async(&mut conn)
            .await
            .ok();
        let (lag, pending) = match &groups {
            Some(groups) => (
                reply::group_field(groups, "lag"),
                reply::group_field(groups, "pending"),
            ),
            // No stream yet: nothing waits.
            None if self.lag().await.ok().flatten() == Some(0) => (Some(0), Some(0)),
            None => (None, None),
        };
        let retry_scheduled: Option<u64> = redis::cmd("ZCARD")
            .arg(keys.retry())
            .query_async(&mut conn)
            .await
            .ok();
        let dead_letters: Option<u64> = redis::cmd("XLEN")
            .arg(keys.dead())
            .query_async(&mut conn)
            .await
            .ok();
        QueueFigures {
            queue: self.settings().name.clone(),
            lag,
            pending,
            retry_scheduled,
            dead_letters,
        }
    }
}

/// The queue's depth as of the last refresh, for `/metrics`.
pub struct QueueDepth {
    queue: Queue,
    last: Mutex<QueueFigures>,
}

impl fmt::Debug for QueueDepth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueDepth")
            .field("queue", &self.queue.settings().name)
            .finish_non_exhaustive()
    }
}

impl QueueDepth {
    /// Registers the depth gauges of `queue`, read from Redis before every scrape.
    pub fn register(queue: Queue, metrics: &mut Metrics) {
        let depth = Arc::new(QueueDepth {
            queue,
            last: Mutex::default(),
        });
        metrics.refresh_before_scrape(depth.clone());
        metrics.registry().register_collector(Box::new(depth));
    }
}

#[async_trait]
impl Refresh for QueueDepth {
    async fn refresh(&self) {
        let figures = self.queue.figures().await;
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = figures;
    }
}

impl Collector for QueueDepth {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let gauges_now = [
            (
                "queue_lag",
                "Entries not yet delivered to any worker (what KEDA scales on)",
                last.lag,
            ),
            (
                "queue_pending",
                "Entries delivered to a worker and not yet acknowledged",
                last.pending,
            ),
            (
                "queue_retry_scheduled",
                "Entries scheduled for a later attempt",
                last.retry_scheduled,
            ),
            (
                "queue_dead_letters",
                "Entries in the dead-letter stream",
                last.dead_letters,
            ),
        ];
        for (name, help, value) in gauges_now {
            let row: Option<([Label; 1], u64)> =
                value.map(|v| ([("queue", last.queue.clone())], v));
            gauges(&mut encoder, name, help, row)?;
        }
        Ok(())
    }
}
