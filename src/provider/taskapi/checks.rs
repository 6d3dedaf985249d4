//! The per-task check limit some providers enforce (CapSolver: 120 `getTaskResult` per task),
//! kept by the client itself so no poll schedule, however configured, can pass it.
//!
//! Owns: counting checks per task id and forgetting them. An entry goes when its task ends, and
//! entries older than [`FORGET_AFTER`] are dropped whenever the table passes [`PRUNE_ABOVE`], so
//! tasks the poller abandoned (deadline passed) cannot make it grow without bound.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// CapSolver keeps a result for 5 minutes; a task older than twice that is not checked again.
pub const FORGET_AFTER: Duration = Duration::from_secs(10 * 60);
/// Below this many entries nothing is pruned: that many live tasks cost a few hundred kB.
pub const PRUNE_ABOVE: usize = 1024;

#[derive(Debug)]
pub struct CheckBudget {
    limit: Option<u32>,
    counts: Mutex<HashMap<String, (u32, Instant)>>,
}

impl CheckBudget {
    /// `None`: the provider has no limit, and nothing is counted.
    pub fn new(limit: Option<u32>) -> Self {
        Self {
            limit,
            counts: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one check of `id`: false once the task has had `limit` checks.
    pub fn take(&self, id: &str) -> bool {
        let Some(limit) = self.limit else {
            return true;
        };
        let mut counts = self.lock();
        let now = Instant::now();
        if counts.len() > PRUNE_ABOVE {
            counts.retain(|_, (_, first)| now.duration_since(*first) < FORGET_AFTER);
        }
        let entry = counts.entry(id.to_owned()).or_insert((0, now));
        if entry.0 >= limit {
            return false;
        }
        entry.0 += 1;
        true
    }

    /// The task ended: its count is no longer needed.
    pub fn forget(&self, id: &str) {
        if self.limit.is_some() {
            self.lock().remove(id);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u32, Instant)>> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_to_the_limit_and_forgets_ended_tasks() {
        let budget = CheckBudget::new(Some(3));
        assert!((0..3).all(|_| budget.take("a")));
        assert!(!budget.take("a"));
        assert!(budget.take("b"));
        budget.forget("a");
        budget.forget("b");
        assert_eq!(budget.len(), 0);
        let unlimited = CheckBudget::new(None);
        assert!((0..1000).all(|_| unlimited.take("a")));
        assert_eq!(unlimited.len(), 0, "nothing kept without a limit");
    }
}
