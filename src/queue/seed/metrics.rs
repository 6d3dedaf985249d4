//! The seed worker's own figures on `/metrics` (served by `queue::probes`): this consumer's
//! counters, labelled with the queue's key prefix.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use super::SeedStats;
use crate::queue::worker::WorkerFigures;
use crate::telemetry::collect::{Label, counters};

/// What `/metrics` shows for a seed worker.
#[derive(Debug)]
pub struct SeedFigures {
    pub stats: Arc<SeedStats>,
    pub worker: Arc<WorkerFigures>,
    pub prefix: String,
}

impl SeedFigures {
    pub fn register(self, registry: &mut Registry) {
        registry.register_collector(Box::new(self));
    }
}

impl Collector for SeedFigures {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let s = &self.stats;
        let rows = [
            (
                "taken",
                "Entries moved into this consumer's processing list",
                &self.worker.taken,
            ),
            (
                "solved",
                "Entries solved (success result written or found)",
                &s.solved,
            ),
            ("failed", "Solves that ended in an error result", &s.failed),
            (
                "refused",
                "Entries with an id that could not be solved as sent (error result)",
                &s.refused,
            ),
            (
                "unreadable",
                "Entries without a usable id, dropped",
                &s.unreadable,
            ),
            (
                "duplicates",
                "Results not written: the entry had been given to another consumer",
                &s.duplicates,
            ),
            (
                "recovered",
                "Dead consumers' entries given back to the queue",
                &s.recovered,
            ),
            (
                "taken_for_dead",
                "Times this consumer found it had been taken for dead",
                &s.taken_for_dead,
            ),
            (
                "lost",
                "Entries finished after they were given back to the queue",
                &s.lost,
            ),
            ("swept", "Results removed after the retention", &s.swept),
            (
                "redis_errors",
                "Redis calls that failed (retried)",
                &s.redis_errors,
            ),
        ];
        for (name, help, value) in rows {
            let row: ([Label; 1], u64) = ([("queue", self.prefix.clone())], SeedStats::get(value));
            counters(&mut encoder, &format!("seed_queue_{name}"), help, [row])?;
        }
        Ok(())
    }
}
