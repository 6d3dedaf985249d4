//! What the simulator counts ([`SimStats`], served at `GET /stats`), so tests and benchmarks can
//! check how a client behaved: how often it polled, whether it respected the thread limit,
//! whether it used each token once.
//!
//! Owns the request counters. The task counters (solved, concurrency) live with the tasks,
//! which compute them from ready times under their own lock.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// A snapshot of everything the simulator counted since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SimStats {
    /// Tasks accepted by `in.php`.
    pub submits: u64,
    /// Submits refused because every thread was busy.
    pub capacity_rejections: u64,
    /// Submits answered with an injected error: `ERROR_SERVER_ERROR`, HTML 502, the capacity
    /// code with threads free, or `ERROR_ZERO_BALANCE`.
    pub injected_errors: u64,
    /// Replies whose connection was dropped on purpose (`drop_rate`).
    pub dropped_connections: u64,
    /// Replies cut off mid-JSON on purpose (`malformed_rate`).
    pub malformed_replies: u64,
    /// Replies held back on purpose (`slow_rate`).
    pub slow_replies: u64,
    /// HTTP requests to `res.php`, whatever the action.
    pub res_calls: u64,
    /// Task ids asked about by `get`/`get2`, each id of a batch counted.
    pub ids_polled: u64,
    /// Tasks that became ready with an answer.
    pub solved: u64,
    /// Tasks that became ready as `ERROR_CAPTCHA_UNSOLVABLE`.
    pub unsolvable: u64,
    /// Tasks being solved right now (holding a thread).
    pub current_concurrent: u64,
    /// The most tasks ever solved at once.
    pub peak_concurrent: u64,
    /// Answers fetched: tasks a poll found ready (each counted once, at its first such poll).
    pub answers_fetched: u64,
    /// Over those, the time from ready to that first poll, summed (ms): how promptly the client
    /// polls, divided by `answers_fetched`.
    pub ready_to_fetch_ms_total: u64,
    /// The longest time from ready to first fetch (ms).
    pub ready_to_fetch_ms_max: u64,
    /// `reportbad` calls recorded (one per task).
    pub reports_bad: u64,
    /// `reportgood` calls recorded (one per task).
    pub reports_good: u64,
    /// Tokens accepted by `/verify`.
    pub verify_ok: u64,
    /// Tokens presented to `/verify` a second time.
    pub verify_duplicate: u64,
    /// Tokens presented to `/verify` after their lifetime.
    pub verify_expired: u64,
    /// Malformed or forged tokens presented to `/verify`.
    pub verify_invalid: u64,
}

/// The task-side figures, computed by the task table at the moment of the snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TaskCounts {
    pub solved: u64,
    pub unsolvable: u64,
    pub current: u64,
    pub peak: u64,
    pub fetched: u64,
    pub fetch_delay_total: u64,
    pub fetch_delay_max: u64,
}

/// One event the simulator counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    Submit,
    CapacityRejection,
    InjectedError,
    DroppedConnection,
    MalformedReply,
    SlowReply,
    ResCall,
    IdPolled,
    ReportBad,
    ReportGood,
    VerifyOk,
    VerifyDuplicate,
    VerifyExpired,
    VerifyInvalid,
}

/// Lock-free request counters. Relaxed ordering is enough: each counter is independent and a
/// snapshot only promises to include every event that finished before it was requested.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    submits: AtomicU64,
    capacity_rejections: AtomicU64,
    injected_errors: AtomicU64,
    dropped_connections: AtomicU64,
    malformed_replies: AtomicU64,
    slow_replies: AtomicU64,
    res_calls: AtomicU64,
    ids_polled: AtomicU64,
    reports_bad: AtomicU64,
    reports_good: AtomicU64,
    verify_ok: AtomicU64,
    verify_duplicate: AtomicU64,
    verify_expired: AtomicU64,
    verify_invalid: AtomicU64,
}

impl Counters {
    pub fn count(&self, event: Event) {
        self.add(event, 1);
    }

    pub fn add(&self, event: Event, n: u64) {
        let counter = match event {
            Event::Submit => &self.submits,
            Event::CapacityRejection => &self.capacity_rejections,
            Event::InjectedError => &self.injected_errors,
            Event::DroppedConnection => &self.dropped_connections,
            Event::MalformedReply => &self.malformed_replies,
            Event::SlowReply => &self.slow_replies,
            Event::ResCall => &self.res_calls,
            Event::IdPolled => &self.ids_polled,
            Event::ReportBad => &self.reports_bad,
            Event::ReportGood => &self.reports_good,
            Event::VerifyOk => &self.verify_ok,
            Event::VerifyDuplicate => &self.verify_duplicate,
            Event::VerifyExpired => &self.verify_expired,
            Event::VerifyInvalid => &self.verify_invalid,
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self, tasks: TaskCounts) -> SimStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SimStats {
            submits: get(&self.submits),
            capacity_rejections: get(&self.capacity_rejections),
            injected_errors: get(&self.injected_errors),
            dropped_connections: get(&self.dropped_connections),
            malformed_replies: get(&self.malformed_replies),
            slow_replies: get(&self.slow_replies),
            res_calls: get(&self.res_calls),
            ids_polled: get(&self.ids_polled),
            solved: tasks.solved,
            unsolvable: tasks.unsolvable,
            current_concurrent: tasks.current,
            peak_concurrent: tasks.peak,
            answers_fetched: tasks.fetched,
            ready_to_fetch_ms_total: tasks.fetch_delay_total,
            ready_to_fetch_ms_max: tasks.fetch_delay_max,
            reports_bad: get(&self.reports_bad),
            reports_good: get(&self.reports_good),
            verify_ok: get(&self.verify_ok),
            verify_duplicate: get(&self.verify_duplicate),
            verify_expired: get(&self.verify_expired),
            verify_invalid: get(&self.verify_invalid),
        }
    }
}
