//! `reportgood`/`reportbad` rates per account and kind (docs/API.md "Accounts and failover").
//!
//! Owns: which kind each recently solved task was (so a report, which names only the task, can
//! be counted under its kind) and the counts. Bounded: at most [`REMEMBERED`] tasks per account,
//! each forgotten after [`REMEMBER_FOR`]; a report about a task solved by another instance of
//! the fleet, or long ago, counts under `unknown`. Does not own: sending the report (the
//! account).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::model::{Kind, Millis};

/// Tasks remembered per account: a day of a busy 50-thread plan is far more, but reports come
/// within minutes of the answer, so the newest are the ones that matter.
const REMEMBERED: usize = 20_000;
/// Answers live at most minutes; a report later than an hour is not about a fresh answer.
const REMEMBER_FOR: Millis = 60 * 60 * 1000;

/// The label of reports whose kind is not known here.
pub const UNKNOWN: &str = "unknown";

#[derive(Debug, Default)]
pub struct Reports {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    kinds: HashMap<String, Kind>,
    order: VecDeque<(Millis, String)>,
    /// `[good, bad]` per kind in `Kind::ALL` order, then unknown.
    counts: [[u64; 2]; Kind::ALL.len() + 1],
}

impl Reports {
    /// `task_id` was solved as `kind` at `now`.
    pub fn remember(&self, task_id: &str, kind: Kind, now: Millis) {
        let mut inner = lock(&self.inner);
        if inner.kinds.insert(task_id.to_owned(), kind).is_none() {
            inner.order.push_back((now, task_id.to_owned()));
        }
        inner.forget_old(now);
    }

    /// Counts one report about `task_id`.
    pub fn count(&self, task_id: &str, good: bool, now: Millis) {
        let mut inner = lock(&self.inner);
        inner.forget_old(now);
        let row = match inner.kinds.get(task_id) {
            Some(kind) => Kind::ALL.iter().position(|k| k == kind).unwrap_or(0),
            None => Kind::ALL.len(),
        };
        inner.counts[row][usize::from(!good)] += 1;
    }

    /// `(kind label, good, bad)` for every row with a report.
    pub fn rows(&self) -> Vec<(&'static str, u64, u64)> {
        let inner = lock(&self.inner);
        let labels = Kind::ALL.iter().map(|k| k.as_str()).chain([UNKNOWN]);
        labels
            .zip(inner.counts)
            .filter(|(_, [good, bad])| good + bad > 0)
            .map(|(label, [good, bad])| (label, good, bad))
            .collect()
    }

    #[cfg(test)]
    fn remembered(&self) -> usize {
        lock(&self.inner).kinds.len()
    }
}

impl Inner {
    fn forget_old(&mut self, now: Millis) {
        while let Some((at, _)) = self.order.front() {
            let too_many = self.order.len() > REMEMBERED;
            if !too_many && now.saturating_sub(*at) < REMEMBER_FOR {
                break;
            }
            if let Some((_, id)) = self.order.pop_front() {
                self.kinds.remove(&id);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_count_under_the_kind_of_their_task() {
        let r = Reports::default();
        r.remember("1", Kind::Turnstile, 0);
        r.remember("2", Kind::Image, 0);
        r.count("1", true, 10);
        r.count("2", false, 10);
        r.count("2", false, 10);
        r.count("elsewhere", false, 10);
        assert_eq!(
            r.rows(),
            vec![("turnstile", 1, 0), ("image", 0, 2), (UNKNOWN, 0, 1)]
        );
    }

    #[test]
    fn memory_is_bounded_by_count_and_age() {
        let r = Reports::default();
        for i in 0..REMEMBERED + 10 {
            r.remember(&i.to_string(), Kind::Image, 0);
        }
        assert_eq!(r.remembered(), REMEMBERED);
        r.count("0", true, 0);
        assert_eq!(r.rows(), vec![(UNKNOWN, 1, 0)], "the oldest went first");
        r.remember("late", Kind::Text, REMEMBER_FOR + 1);
        assert_eq!(r.remembered(), 1, "an hour later only the newest is left");
    }
}
