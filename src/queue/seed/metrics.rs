//! The seed worker's own figures on `/metrics` (served by `queue::probes`): this consumer's
//! counters, labelled with the queue's key prefix.

use std::fmt::Write;
use std::sync::Arc;

use async_trait::async_trait;

use super::SeedStats;
use crate::queue::probes::OwnFigures;

/// What `/metrics` shows first for a seed worker.
pub struct SeedFigures {
    pub stats: Arc<SeedStats>,
    pub prefix: String,
}

#[async_trait]
impl OwnFigures for SeedFigures {
    async fn render(&self) -> String {
        self.stats.render(&self.prefix)
    }
}

impl SeedStats {
    /// This consumer's counters as Prometheus text, labelled with the queue's key prefix.
    pub fn render(&self, prefix: &str) -> String {
        let rows = [
            (
                "taken_total",
                "Entries moved into this consumer's processing list.",
                &self.taken,
            ),
            (
                "solved_total",
                "Entries solved (success result written or found).",
                &self.solved,
            ),
            (
                "failed_total",
                "Solves that ended in an error result.",
                &self.failed,
            ),
            (
                "refused_total",
                "Entries with an id that could not be solved as sent (error result).",
                &self.refused,
            ),
            (
                "unreadable_total",
                "Entries without a usable id, dropped.",
                &self.unreadable,
            ),
            (
                "duplicates_total",
                "Entries whose task already had a result.",
                &self.duplicates,
            ),
            (
                "recovered_total",
                "Dead consumers' entries given back to the queue.",
                &self.recovered,
            ),
            (
                "taken_for_dead_total",
                "Times this consumer found it had been taken for dead.",
                &self.taken_for_dead,
            ),
            (
                "lost_total",
                "Entries finished after they were given back to the queue.",
                &self.lost,
            ),
            (
                "swept_total",
                "Results removed after the retention.",
                &self.swept,
            ),
            (
                "redis_errors_total",
                "Redis calls that failed (retried).",
                &self.redis_errors,
            ),
        ];
        let mut out = String::new();
        for (name, help, value) in rows {
            let _ = writeln!(
                out,
                "# HELP captcha_gateway_seed_queue_{name} {help}\n# TYPE captcha_gateway_seed_queue_{name} counter\ncaptcha_gateway_seed_queue_{name}{{queue=\"{prefix}\"}} {}",
                SeedStats::get(value)
            );
        }
        out
    }
}
