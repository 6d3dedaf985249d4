//! The busiest poolable targets since the last reading, and how many of their callers the pool
//! served: what the plan advisor sizes pools from (`status::demand` keeps them per bucket). A
//! caller is counted when its call ends. A space-saving table (Metwally, Agrawal and El
//! Abbadi's heavy-hitters counter): a fixed number of counters whatever the targets, so a
//! scraper's million pages cost what one site costs. A target not in the table takes the least
//! counted one's place and inherits its count as error; a target with more than `1 / TRACKED`
//! of the callers between two readings is always in it, and its count is never short.
//!
//! Only poolable single-use kinds are counted: images and texts are a target each (no pool can
//! serve them), and reusable answers are shared, not pooled.
//!
//! Every caller passes here, so the table is split in [`SHARDS`], each worker thread counting in
//! its own: one lock shared by every thread cost a pool hit a measurable share of its time on a
//! loaded machine (a thread descheduled while holding it stalls the others). A reading adds the
//! shards up.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::model::{Kind, Target};

/// Counters in the table: readings every 5 s find every target with more than 1/64 of the
/// callers in that time.
pub const TRACKED: usize = 64;
/// Labels are `kind:host`; a host may be 253 bytes, a label kept for days need not be.
pub const LABEL_MAX: usize = 80;

/// One target's callers between two readings, counted as each one's call ended (answered,
/// failed or gone).
#[derive(Debug, Clone, PartialEq)]
pub struct TargetCount {
    pub id: String,
    pub label: String,
    pub kind: Kind,
    /// At least this many came (the count less what the counter inherited).
    pub callers: u64,
    /// Of those counted since the target took its counter, the ones served from the pool.
    pub pool_hits: u64,
}

#[derive(Debug)]
struct Counter {
    target: TargetCount,
    /// Of `target.callers`, what was inherited from the counter it replaced.
    error: u64,
}

/// Tables the counts are split over: each thread counts in one, threads taking them in turn.
pub const SHARDS: usize = 8;

/// The sharded table [`EngineFigures`](super::EngineFigures) keeps.
#[derive(Debug, Default)]
pub(super) struct BusyCounts {
    shards: [Mutex<BusyTargets>; SHARDS],
}

thread_local! {
    static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// This thread's shard: the next one free when it first counts.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    SHARD.with(|s| {
        *s.get()
            .get_or_insert_with(|| NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS)
    })
}

impl BusyCounts {
    /// A caller of `target` is done; `hit` if the pool served it.
    pub fn counted(&self, target: &Target, hit: bool) {
        self.shards[shard()]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .counted(target, hit);
    }

    /// Every shard's counts since the last call, added up by target, busiest first.
    pub fn take(&self) -> Vec<TargetCount> {
        let mut out: Vec<TargetCount> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for shard in &self.shards {
            let counts = shard.lock().unwrap_or_else(PoisonError::into_inner).take();
            for c in counts {
                match index.get(&c.id) {
                    Some(&i) => {
                        out[i].callers += c.callers;
                        out[i].pool_hits += c.pool_hits;
                    }
                    None => {
                        index.insert(c.id.clone(), out.len());
                        out.push(c);
                    }
                }
            }
        }
        out.sort_by(|a, b| b.callers.cmp(&a.callers).then_with(|| a.id.cmp(&b.id)));
        out
    }
}

#[derive(Debug, Default)]
pub(super) struct BusyTargets {
    counters: Vec<Counter>,
    index: HashMap<String, usize>,
}

impl BusyTargets {
    pub fn counted(&mut self, target: &Target, hit: bool) {
        let hit = u64::from(hit);
        if let Some(&i) = self.index.get(target.id.as_str()) {
            self.counters[i].target.callers += 1;
            self.counters[i].target.pool_hits += hit;
            return;
        }
        let mut counter = Counter {
            target: TargetCount {
                id: target.id.clone(),
                label: bounded(&target.label),
                kind: target.kind,
                callers: 1,
                pool_hits: hit,
            },
            error: 0,
        };
        if self.counters.len() < TRACKED {
            self.index.insert(target.id.clone(), self.counters.len());
            self.counters.push(counter);
            return;
        }
        let (i, least) = self
            .counters
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| c.target.callers)
            .map(|(i, c)| (i, c.target.callers))
            .expect("the table is full");
        counter.target.callers += least;
        counter.error = least;
        self.index.remove(&self.counters[i].target.id);
        self.index.insert(target.id.clone(), i);
        self.counters[i] = counter;
    }

    /// The counts since the last call, busiest first, and an empty table.
    pub fn take(&mut self) -> Vec<TargetCount> {
        self.index.clear();
        let mut out: Vec<TargetCount> = std::mem::take(&mut self.counters)
            .into_iter()
            .filter_map(|c| {
                let callers = c.target.callers - c.error;
                (callers > 0).then_some(TargetCount {
                    callers,
                    pool_hits: c.target.pool_hits.min(callers),
                    ..c.target
                })
            })
            .collect();
        out.sort_by(|a, b| b.callers.cmp(&a.callers).then_with(|| a.id.cmp(&b.id)));
        out
    }
}

/// `label` cut to [`LABEL_MAX`] bytes at a character boundary.
pub fn bounded(label: &str) -> String {
    let mut end = label.len().min(LABEL_MAX);
    while !label.is_char_boundary(end) {
        end -= 1;
    }
    label[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(n: usize) -> Target {
        Target {
            kind: Kind::RecaptchaV2,
            id: format!("{n:032x}"),
            label: format!("recaptcha_v2:site{n}.example"),
        }
    }

    #[test]
    fn heavy_targets_are_counted_exactly_among_a_flood_of_one_offs() {
        let mut busy = BusyTargets::default();
        // Two busy targets among 10,000 pages asked for once each.
        for n in 0..10_000 {
            busy.counted(&target(100_000 + n), false);
            if n % 10 == 0 {
                // Every other caller of the busiest is served from its pool.
                busy.counted(&target(1), n % 20 == 0);
            }
            if n % 50 == 0 {
                busy.counted(&target(2), false);
            }
        }
        let counts = busy.take();
        assert!(counts.len() <= TRACKED);
        assert_eq!(counts[0].id, target(1).id);
        // Never more than arrived; the busiest is in the table from its first call on.
        assert_eq!((counts[0].callers, counts[0].pool_hits), (1000, 500));
        assert!(counts[1].id == target(2).id && counts[1].callers <= 200);
        assert!(busy.take().is_empty(), "a reading empties the table");
    }

    #[test]
    fn threads_count_in_their_own_shards_and_a_reading_adds_them_up() {
        let busy = std::sync::Arc::new(BusyCounts::default());
        let threads: Vec<_> = (0..SHARDS + 2)
            .map(|_| {
                let busy = busy.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        busy.counted(&target(7), i < 10);
                    }
                    busy.counted(&target(8), false);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let counts = busy.take();
        let n = (SHARDS + 2) as u64;
        assert_eq!(counts.len(), 2);
        assert_eq!((counts[0].callers, counts[1].callers), (100 * n, n));
        assert_eq!((counts[0].pool_hits, counts[1].pool_hits), (10 * n, 0));
        assert!(busy.take().is_empty());
    }

    #[test]
    fn labels_are_bounded_at_a_character_boundary() {
        let long = format!("recaptcha_v2:{}", "é".repeat(200));
        let cut = bounded(&long);
        assert!(cut.len() <= LABEL_MAX && long.starts_with(&cut));
        assert_eq!(bounded("turnstile:a.example"), "turnstile:a.example");
    }
}
