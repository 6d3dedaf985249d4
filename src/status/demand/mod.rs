//! The demand this process served over days, for the plan advisor (`status::advice`): per kind,
//! callers answered and how (pool, solved, shared), failed, or gone before an answer (hung up),
//! and upstream solves with their summed solve time and its histogram, in fixed buckets (5
//! minutes by default, 14 days kept), with the threads in use at their busiest in each bucket,
//! callers refused for want of capacity and those a tenant's own limit refused. Fed by the
//! status sampler from the same cumulative readings the dashboard's 15-minute ring keeps, so it
//! costs nothing on the request path.
//!
//! Bounded whatever the traffic: at most `keep / bucket` buckets (4,032 by default), a bucket
//! holds only the kinds that had demand in it, and a bucket without demand is not kept at all,
//! so the worst case is every kind (16) busy for the whole span (about 9.8 MB at the defaults) and a
//! quiet gateway keeps almost nothing. Each bucket also keeps its busiest poolable targets
//! with their pool hits and expired answers (`targets`: at most 8, up to 6.2 MB more over 14
//! days at the longest labels), and each account's share (`accounts`).

mod accounts;
mod solve_times;
pub mod targets;

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::accounts::{AccountDemand, AccountTotals};
pub use self::solve_times::SolveTimes;
pub use self::targets::{PoolExpiries, TargetDemand};
use crate::model::{BySource, Kind};

/// One bucket's span when the settings name none.
pub const DEFAULT_BUCKET: Duration = Duration::from_secs(300);
/// How far back the log reaches when the settings name nothing.
pub const DEFAULT_KEEP: Duration = Duration::from_secs(14 * 24 * 3600);

/// Cumulative counts of one kind since the process started, as the owners keep them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KindTotals {
    pub answers: BySource<u64>,
    /// Solves that ended without an answer (any code).
    pub failed: u64,
    /// Callers gone before their call ended (hung up).
    pub departed: u64,
    /// Upstream solves whose time was measured, that time summed, in seconds, and their
    /// histogram.
    pub solves: u64,
    pub solve_seconds: f64,
    pub solve_times: crate::telemetry::histogram::Buckets,
    /// Seconds upstream threads were held for this kind, whatever the task's end.
    pub thread_seconds: f64,
}

/// Everything the log reads at one sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub kinds: [KindTotals; Kind::ALL.len()],
    /// Every configured account.
    pub accounts: Vec<AccountTotals>,
    /// Upstream threads taken now, and the plan's cap now (fleet-wide with Redis).
    pub threads_in_use: u64,
    pub threads_cap: u64,
    /// This process's callers waiting for a thread now (the plan was full for them).
    pub threads_waiting: u64,
    /// Callers refused at once since start: this instance full (`overloaded`) or the fleet's
    /// threads all taken with enough waiting (`fleet_busy`).
    pub refused: u64,
    /// Callers refused by a tenant's `max_concurrent` or `max_solves_per_hour` since start.
    pub tenant_refused: u64,
    /// Each configured pool's answers expired unused so far, as the store counts them
    /// (fleet-wide with Redis).
    pub pool_expired: Vec<PoolExpiries>,
    /// The busiest poolable targets' callers since the last reading (not cumulative: the
    /// engine's table is emptied by each reading).
    pub targets: Vec<TargetDemand>,
}

/// One kind's demand within one bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct KindDemand {
    /// Every caller once, whatever the source or the end: answered, failed or departed.
    pub callers: u64,
    pub pool: u64,
    pub solved: u64,
    pub shared: u64,
    pub failed: u64,
    /// Callers gone before their call ended (a client that hung up): demand the plan saw but
    /// did not serve (absent in an older instance's share).
    #[serde(default)]
    pub departed: u64,
    /// Upstream solves finished, and their summed solve time (submit to answer ready).
    pub solves: u64,
    pub solve_seconds: f64,
    /// The same solves' times as a histogram (absent in an older instance's share).
    #[serde(default, skip_serializing_if = "SolveTimes::is_empty")]
    pub solve_times: SolveTimes,
    /// Seconds upstream threads were held for the kind, from taking one to giving it back:
    /// submits, failed and abandoned tasks included (absent in an older instance's share).
    #[serde(default)]
    pub thread_seconds: f64,
}

impl KindDemand {
    /// Nothing to keep. Solve time alone counts: a histogram's count and sum are two atomics,
    /// so a sample may read a solve's count before its time, and the time comes a sample later.
    fn is_empty(&self) -> bool {
        self.callers == 0
            && self.solves == 0
            && self.solve_seconds == 0.0
            && self.thread_seconds == 0.0
    }

    /// Seconds of threads this demand held: the measured figure, or the solve time where a
    /// share predates it.
    pub fn threads_held_s(&self) -> f64 {
        if self.thread_seconds > 0.0 {
            self.thread_seconds
        } else {
            self.solve_seconds
        }
    }

    pub(super) fn add(&mut self, other: &KindDemand) {
        self.callers += other.callers;
        self.pool += other.pool;
        self.solved += other.solved;
        self.shared += other.shared;
        self.failed += other.failed;
        self.departed += other.departed;
        self.solves += other.solves;
        self.solve_seconds += other.solve_seconds;
        self.solve_times.add(&other.solve_times);
        self.thread_seconds += other.thread_seconds;
    }

    /// What happened between two cumulative readings (a counter that went back, as after a
    /// restart of its owner, counts from zero).
    fn between(now: &KindTotals, then: &KindTotals) -> KindDemand {
        let d = |a: u64, b: u64| a.checked_sub(b).unwrap_or(a);
        let pool = d(now.answers.pool, then.answers.pool);
        let solved = d(now.answers.solved, then.answers.solved);
        let shared = d(now.answers.shared, then.answers.shared);
        let failed = d(now.failed, then.failed);
        let departed = d(now.departed, then.departed);
        let solves = d(now.solves, then.solves);
        let solve_seconds = if now.solves >= then.solves {
            (now.solve_seconds - then.solve_seconds).max(0.0)
        } else {
            now.solve_seconds
        };
        let thread_seconds = if now.thread_seconds >= then.thread_seconds {
            now.thread_seconds - then.thread_seconds
        } else {
            now.thread_seconds
        };
        KindDemand {
            callers: pool + solved + shared + failed + departed,
            pool,
            solved,
            shared,
            failed,
            departed,
            solves,
            solve_seconds,
            solve_times: SolveTimes::between(&now.solve_times, &then.solve_times),
            thread_seconds,
        }
    }
}

/// One bucket: when it starts, each kind with demand in it, the threads at their busiest, and
/// the most callers that waited for a thread at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub start_ms: u64,
    pub kinds: Vec<(Kind, KindDemand)>,
    pub threads_peak: u64,
    pub threads_cap: u64,
    /// The most at one sample; summed over instances, whose own peaks may not coincide (so the
    /// fleet's figure is an upper bound).
    #[serde(default)]
    pub waiting_peak: u64,
    /// Each account that had work in the bucket (absent in an older instance's share).
    #[serde(default)]
    pub accounts: Vec<AccountDemand>,
    /// Callers refused at once in the bucket (`overloaded`, `fleet_busy`): demand the plan
    /// never saw.
    #[serde(default)]
    pub refused: u64,
    /// The busiest poolable targets in the bucket (`targets::KEPT` once closed).
    #[serde(default)]
    pub targets: Vec<TargetDemand>,
    /// Callers a tenant's own limit refused (`max_concurrent`, `max_solves_per_hour`): demand
    /// the operator chose not to serve, shown beside the advice but not sized for.
    #[serde(default)]
    pub tenant_refused: u64,
}

impl Bucket {
    pub fn kind(&self, kind: Kind) -> Option<&KindDemand> {
        self.kinds.iter().find(|(k, _)| *k == kind).map(|(_, d)| d)
    }

    /// A bucket starting at `start_ms` with nothing in it yet.
    pub fn empty(start_ms: u64) -> Bucket {
        Bucket {
            start_ms,
            kinds: Vec::new(),
            threads_peak: 0,
            threads_cap: 0,
            waiting_peak: 0,
            accounts: Vec::new(),
            refused: 0,
            targets: Vec::new(),
            tenant_refused: 0,
        }
    }

    /// Several instances' shares of the bucket at `start_ms` as one: counts added, threads the
    /// largest any saw (a fleet-wide figure every instance reads alike). `None` for no share.
    pub fn sum(start_ms: u64, shares: impl IntoIterator<Item = Bucket>) -> Option<Bucket> {
        let mut out: Option<Bucket> = None;
        for share in shares {
            let sum = out.get_or_insert_with(|| Bucket::empty(start_ms));
            sum.merge(&share, true);
            sum.waiting_peak += share.waiting_peak;
            accounts::merge(&mut sum.accounts, &share.accounts, true);
        }
        if let Some(sum) = &mut out {
            targets::trim(&mut sum.targets, targets::KEPT);
        }
        out
    }

    /// Adds `other`'s demand; the threads are one fleet-wide figure, so the larger reading.
    /// `shares`: `other` is another instance's share, whose pool expiries are the same
    /// fleet-wide counter read there (so the larger, not the sum).
    fn merge(&mut self, other: &Bucket, shares: bool) {
        for (kind, demand) in &other.kinds {
            match self.kinds.iter_mut().find(|(k, _)| k == kind) {
                Some((_, d)) => d.add(demand),
                None => self.kinds.push((*kind, *demand)),
            }
        }
        self.threads_peak = self.threads_peak.max(other.threads_peak);
        self.threads_cap = self.threads_cap.max(other.threads_cap);
        self.refused += other.refused;
        self.tenant_refused += other.tenant_refused;
        targets::merge(&mut self.targets, &other.targets, targets::OPEN, shares);
    }
}

/// The log: the buckets with demand, oldest first, and the last reading to count from.
#[derive(Debug, Clone)]
pub struct DemandLog {
    bucket_ms: u64,
    keep_ms: u64,
    buckets: VecDeque<Bucket>,
    last: Option<Totals>,
}

impl DemandLog {
    pub fn new(bucket: Duration, keep: Duration) -> DemandLog {
        let bucket_ms = u64::try_from(bucket.as_millis()).unwrap_or(u64::MAX).max(1);
        let keep_ms = u64::try_from(keep.as_millis())
            .unwrap_or(u64::MAX)
            .max(bucket_ms);
        DemandLog {
            bucket_ms,
            keep_ms,
            buckets: VecDeque::new(),
            last: None,
        }
    }

    pub fn bucket(&self) -> Duration {
        Duration::from_millis(self.bucket_ms)
    }

    /// The most buckets the log holds.
    pub fn capacity(&self) -> usize {
        usize::try_from(self.keep_ms / self.bucket_ms).unwrap_or(usize::MAX)
    }

    /// Adds what happened since the last reading to the bucket `t_ms` falls in. The readings
    /// count from the process's start, as does the log: the first counts from zero, so the
    /// demand of the moments before the first sample (a pool filled at start and taken at
    /// once) is not lost.
    pub fn record(&mut self, t_ms: u64, mut now: Totals) {
        let then = self.last.take().unwrap_or_default();
        let start_ms = t_ms - t_ms % self.bucket_ms;
        let oldest = start_ms.saturating_sub(self.keep_ms.saturating_sub(self.bucket_ms));
        while self.buckets.front().is_some_and(|b| b.start_ms < oldest) {
            self.buckets.pop_front();
        }
        let kinds: Vec<(Kind, KindDemand)> = Kind::ALL
            .iter()
            .map(|kind| {
                let i = kind.index();
                (*kind, KindDemand::between(&now.kinds[i], &then.kinds[i]))
            })
            .filter(|(_, d)| !d.is_empty())
            .collect();
        let accounts = accounts::between(&now.accounts, &then.accounts);
        let refused = now.refused.checked_sub(then.refused).unwrap_or(now.refused);
        let tenant_refused = now
            .tenant_refused
            .checked_sub(then.tenant_refused)
            .unwrap_or(now.tenant_refused);
        let mut arrived = std::mem::take(&mut now.targets);
        targets::add_expiries(&mut arrived, &now.pool_expired, &then.pool_expired);
        let busy = now.threads_in_use > 0
            || now.threads_waiting > 0
            || refused > 0
            || tenant_refused > 0
            || !arrived.is_empty();
        let open = self.buckets.back().is_some_and(|b| b.start_ms == start_ms);
        let (in_use, cap, waiting) = (now.threads_in_use, now.threads_cap, now.threads_waiting);
        self.last = Some(now);
        if kinds.is_empty() && accounts.is_empty() && !busy && !open {
            return;
        }
        if !open {
            if let Some(closed) = self.buckets.back_mut() {
                targets::trim(&mut closed.targets, targets::KEPT);
            }
            self.buckets.push_back(Bucket::empty(start_ms));
        }
        let bucket = self.buckets.back_mut().expect("just ensured");
        bucket.merge(
            &Bucket {
                kinds,
                threads_peak: in_use,
                threads_cap: cap,
                refused,
                targets: arrived,
                tenant_refused,
                ..Bucket::empty(start_ms)
            },
            false,
        );
        bucket.waiting_peak = bucket.waiting_peak.max(waiting);
        accounts::merge(&mut bucket.accounts, &accounts, false);
    }

    /// The bucket `t_ms` falls in, if it has demand yet.
    pub fn open_bucket(&self, t_ms: u64) -> Option<&Bucket> {
        let start_ms = t_ms - t_ms % self.bucket_ms;
        self.buckets.back().filter(|b| b.start_ms == start_ms)
    }

    /// The starts of every bucket from the one `from_ms` falls in to the one `to_ms` falls in,
    /// the newest `capacity` of them at most.
    pub fn starts(&self, from_ms: u64, to_ms: u64) -> Vec<u64> {
        let first = from_ms - from_ms % self.bucket_ms;
        let oldest_kept = to_ms
            .saturating_sub(to_ms % self.bucket_ms)
            .saturating_sub(self.keep_ms.saturating_sub(self.bucket_ms));
        (first.max(oldest_kept)..=to_ms)
            .step_by(usize::try_from(self.bucket_ms).unwrap_or(usize::MAX))
            .collect()
    }

    pub fn keep(&self) -> Duration {
        Duration::from_millis(self.keep_ms)
    }

    /// The buckets that start at or after `from_ms`, oldest first.
    pub fn since(&self, from_ms: u64) -> impl Iterator<Item = &Bucket> {
        self.buckets.iter().filter(move |b| b.start_ms >= from_ms)
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn totals(kind: Kind, solved: u64, solves: u64, seconds: f64, threads: u64) -> Totals {
        let mut t = Totals {
            threads_in_use: threads,
            threads_cap: 50,
            ..Totals::default()
        };
        t.kinds[kind.index()] = KindTotals {
            answers: BySource {
                pool: 0,
                solved,
                shared: 0,
            },
            failed: 0,
            departed: 0,
            solves,
            solve_seconds: seconds,
            solve_times: [0; 15],
            // Threads held a second longer than each solve (until the poll that saw it).
            thread_seconds: seconds + solves as f64,
        };
        t
    }

    #[test]
    fn readings_become_per_bucket_differences_and_quiet_buckets_are_not_kept() {
        let mut log = DemandLog::new(Duration::from_secs(10), Duration::from_secs(100));
        let k = Kind::Turnstile;
        log.record(1_000, totals(k, 0, 0, 0.0, 0));
        log.record(5_000, totals(k, 4, 4, 8.0, 3));
        log.record(9_000, totals(k, 6, 6, 12.0, 5));
        log.record(12_000, totals(k, 7, 7, 14.0, 1));
        // Nothing happens for a while: no bucket for it.
        log.record(35_000, totals(k, 7, 7, 14.0, 0));
        assert_eq!(log.len(), 2);
        let first = log.since(0).next().unwrap();
        assert_eq!(first.start_ms, 0);
        let d = first.kind(k).unwrap();
        assert_eq!((d.callers, d.solved, d.solves), (6, 6, 6));
        assert!((d.solve_seconds - 12.0).abs() < 1e-9);
        assert!((d.thread_seconds - 18.0).abs() < 1e-9);
        assert_eq!(first.threads_peak, 5);
        assert_eq!(first.kind(Kind::Image), None);
        assert_eq!(log.since(10_000).count(), 1);
        assert_eq!(log.starts(5_000, 35_000), [0, 10_000, 20_000, 30_000]);
        // A window longer than the log keeps ends at the newest bucket, not before it.
        let all = log.starts(0, 1_000_000);
        assert_eq!(all.len(), log.capacity());
        assert_eq!(all.last(), Some(&1_000_000));
    }

    #[test]
    fn the_first_reading_counts_what_happened_since_the_start() {
        let mut log = DemandLog::new(Duration::from_secs(10), Duration::from_secs(100));
        log.record(1_000, totals(Kind::RecaptchaV2, 4, 4, 8.0, 2));
        let d = *log
            .since(0)
            .next()
            .unwrap()
            .kind(Kind::RecaptchaV2)
            .unwrap();
        assert_eq!((d.callers, d.solves), (4, 4));
    }

    #[test]
    fn a_bucket_keeps_its_busiest_targets_and_a_closed_one_only_the_busiest_few() {
        let mut log = DemandLog::new(Duration::from_secs(10), Duration::from_secs(100));
        let arrived = |n: u64, callers: u64| TargetDemand {
            id: format!("{n:032x}"),
            label: format!("turnstile:site{n}.example"),
            kind: Kind::Turnstile,
            callers,
            pool_hits: 0,
            expired: 0,
        };
        let reading = |targets: Vec<TargetDemand>| Totals {
            targets,
            ..Totals::default()
        };
        // Readings are counts since the last: they add up within the bucket.
        log.record(1_000, reading((0..20).map(|n| arrived(n, n + 1)).collect()));
        log.record(2_000, reading(vec![arrived(0, 100)]));
        let open = log.open_bucket(2_000).unwrap();
        assert_eq!(open.targets.len(), 20);
        assert_eq!(
            (open.targets[0].id.as_str(), open.targets[0].callers),
            (arrived(0, 0).id.as_str(), 101)
        );
        // The next bucket closes it to the busiest few.
        log.record(11_000, reading(vec![arrived(3, 1)]));
        let closed = log.since(0).next().unwrap();
        assert_eq!(closed.targets.len(), targets::KEPT);
        assert_eq!(closed.targets[1].callers, 20);
        // Shares of a bucket add by target.
        let share = log.open_bucket(11_000).cloned().unwrap();
        let sum = Bucket::sum(10_000, [share.clone(), share]).unwrap();
        assert_eq!(sum.targets[0].callers, 2);
    }

    #[test]
    fn callers_who_hung_up_and_those_a_tenant_limit_refused_are_kept_apart() {
        let mut log = DemandLog::new(Duration::from_secs(10), Duration::from_secs(100));
        let k = Kind::RecaptchaV2;
        let reading = |solved, departed, tenant_refused| {
            let mut t = totals(k, solved, solved, solved as f64, 0);
            t.kinds[k.index()].departed = departed;
            t.tenant_refused = tenant_refused;
            t
        };
        log.record(1_000, reading(0, 0, 0));
        log.record(2_000, reading(4, 2, 5));
        log.record(3_000, reading(6, 3, 7));
        let b = log.since(0).next().unwrap();
        let d = b.kind(k).unwrap();
        // Every caller once: answered or gone.
        assert_eq!((d.callers, d.departed, d.solved), (9, 3, 6));
        assert_eq!(b.tenant_refused, 7);
        // Refusals alone keep a bucket.
        log.record(12_000, reading(6, 3, 8));
        assert_eq!(log.open_bucket(12_000).unwrap().tenant_refused, 1);
    }

    #[test]
    fn solve_time_read_a_sample_after_its_count_is_kept() {
        let mut log = DemandLog::new(Duration::from_secs(10), Duration::from_secs(100));
        let k = Kind::Turnstile;
        log.record(1_000, totals(k, 0, 0, 0.0, 0));
        log.record(2_000, totals(k, 1, 1, 0.0, 0));
        log.record(3_000, totals(k, 1, 1, 2.5, 0));
        let d = *log.since(0).next().unwrap().kind(k).unwrap();
        assert_eq!(d.solves, 1);
        assert!((d.solve_seconds - 2.5).abs() < 1e-9);
    }

    #[test]
    fn a_counter_that_went_back_counts_from_zero() {
        let mut log = DemandLog::new(Duration::from_secs(10), Duration::from_secs(100));
        let k = Kind::Image;
        log.record(1_000, totals(k, 100, 100, 50.0, 0));
        log.record(12_000, totals(k, 3, 3, 1.5, 0));
        let d = *log.since(10_000).next().unwrap().kind(k).unwrap();
        assert_eq!((d.callers, d.solves), (3, 3));
        assert!((d.solve_seconds - 1.5).abs() < 1e-9);
    }

    #[test]
    fn shares_of_one_bucket_add_up_and_keep_the_fleets_thread_reading() {
        let share = |solved, threads, waiting| {
            let mut log = DemandLog::new(Duration::from_secs(10), Duration::from_secs(100));
            log.record(1_000, totals(Kind::Turnstile, 0, 0, 0.0, 0));
            let mut now = totals(Kind::Turnstile, solved, solved, solved as f64, threads);
            now.threads_waiting = waiting;
            log.record(2_000, now);
            log.open_bucket(2_500).cloned().unwrap()
        };
        let sum = Bucket::sum(0, [share(3, 7, 2), share(5, 8, 3)]).unwrap();
        let d = sum.kind(Kind::Turnstile).unwrap();
        assert_eq!((d.callers, d.solves), (8, 8));
        assert_eq!((sum.threads_peak, sum.waiting_peak), (8, 5));
        assert_eq!(Bucket::sum(0, []), None);
    }

    /// The bound the module states: every kind busy in every bucket for the whole span, in
    /// memory and as one instance's share in Redis, and what each account and the busiest
    /// targets add to it.
    #[test]
    fn a_full_log_is_under_nine_point_eight_megabytes_and_accounts_and_targets_add_a_bounded_amount()
     {
        let log = DemandLog::new(DEFAULT_BUCKET, DEFAULT_KEEP);
        // Solves in every histogram bucket, each count at ten digits.
        let full_times = SolveTimes::between(&[4_000_000_000; 15], &[0; 15]);
        let full = Bucket {
            start_ms: 1_796_000_000_000,
            kinds: Kind::ALL
                .iter()
                .map(|k| {
                    let d = KindDemand {
                        callers: 123_456,
                        pool: 23_456,
                        solved: 100_000,
                        shared: 0,
                        failed: 12,
                        departed: 3,
                        solves: 100_012,
                        solve_seconds: 1_234_567.891,
                        solve_times: full_times,
                        thread_seconds: 2_345_678.912,
                    };
                    (*k, d)
                })
                .collect(),
            threads_peak: 500,
            threads_cap: 500,
            waiting_peak: 10_000,
            accounts: Vec::new(),
            refused: 123_456,
            targets: Vec::new(),
            tenant_refused: 123_456,
        };
        let per_bucket = std::mem::size_of::<Bucket>()
            + full.kinds.capacity() * std::mem::size_of::<(Kind, KindDemand)>();
        let bytes = log.capacity() * per_bucket;
        assert_eq!(log.capacity(), 4032);
        assert!(bytes <= 9_800_000, "{bytes}");
        let share = serde_json::to_string(&full).unwrap();
        assert!(share.len() < 6_000, "share {}", share.len());

        // An account (its name at the longest allowed) solving every kind in every bucket.
        let account = AccountDemand {
            name: "a".repeat(64),
            provider: "anticaptcha".into(),
            thread_seconds: 2_345_678.912,
            solved: Kind::ALL.iter().map(|k| (*k, 100_012)).collect(),
            in_use_peak: 500,
            cap: 500,
            waiting_peak: 10_000,
        };
        let per_account = std::mem::size_of::<AccountDemand>()
            + account.name.capacity()
            + account.provider.capacity()
            + account.solved.capacity() * std::mem::size_of::<(Kind, u64)>();
        let account_bytes = log.capacity() * per_account;
        assert!(account_bytes <= 1_800_000, "accounts {account_bytes}");
        let json = serde_json::to_string(&account).unwrap();
        assert!(json.len() < 560, "account {}", json.len());

        // The busiest targets, labels at their longest: a closed bucket keeps `KEPT`, the open
        // one (an instance's share) `OPEN`.
        let target = |n: usize| TargetDemand {
            id: format!("{n:032x}"),
            label: "x".repeat(crate::engine::LABEL_MAX),
            kind: Kind::RecaptchaV2,
            callers: 123_456,
            pool_hits: 123_456,
            expired: 123_456,
        };
        let per_target = std::mem::size_of::<TargetDemand>() + 32 + crate::engine::LABEL_MAX;
        let target_bytes = log.capacity() * targets::KEPT * per_target;
        assert!(target_bytes <= 6_200_000, "{target_bytes}");
        let open: Vec<TargetDemand> = (0..targets::OPEN).map(target).collect();
        let open_json = serde_json::to_string(&open).unwrap();
        assert!(open_json.len() < 6_700, "{}", open_json.len());
        assert!(
            share.len() + 64 * json.len() + open_json.len() < super::super::fleet::MAX_SHARE_BYTES,
            "a share with the most accounts a gateway routes over and its busiest targets is read back"
        );
    }

    proptest! {
        /// Whatever the readings, the log never holds more than its capacity, never a bucket
        /// older than it keeps, and every caller counted in a kept bucket happened.
        #[test]
        fn the_log_stays_bounded(steps in proptest::collection::vec((1u64..40_000, 0u64..50, 0u64..8), 1..300)) {
            let mut log = DemandLog::new(Duration::from_secs(10), Duration::from_secs(60));
            let (mut t, mut solved) = (0u64, 0u64);
            for (dt, more, threads) in steps {
                t += dt;
                solved += more;
                log.record(t, totals(Kind::RecaptchaV2, solved, solved, solved as f64, threads));
                prop_assert!(log.len() <= log.capacity());
                let oldest = log.since(0).next().map_or(t, |b| b.start_ms);
                prop_assert!(t - oldest < 60_000 + 10_000);
                let counted: u64 = log.since(0).filter_map(|b| b.kind(Kind::RecaptchaV2)).map(|d| d.callers).sum();
                prop_assert!(counted <= solved);
            }
        }
    }
}
