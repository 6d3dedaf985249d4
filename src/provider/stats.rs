//! An account's counters: the live atomics the account and its poller bump, and the snapshot
//! read from them.

use std::sync::atomic::{AtomicU64, Ordering};

use super::requests::{RequestCounts, RequestTable};
use crate::model::Kind;

/// A snapshot of an account's counters (monotonic since start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountStats {
    /// `in.php` requests sent, retries included.
    pub submits: u64,
    pub submit_errors_capacity: u64,
    pub submit_errors_transient: u64,
    pub submit_errors_permanent: u64,
    pub submit_errors_account: u64,
    pub capacity_retries: u64,
    pub transient_retries: u64,
    /// `poll` calls made by the poller (one per batch or single id).
    pub poll_requests: u64,
    /// Task ids across those calls.
    pub ids_polled: u64,
    /// Solves that returned an answer.
    pub solved: u64,
    /// Solves that ended with an error other than their deadline.
    pub failed: u64,
    /// Solves that ended at their deadline.
    pub timeouts: u64,
    /// Provider tasks another instance submitted that this one took over and polled.
    pub adopted: u64,
    /// Requests to the provider by endpoint and result class.
    pub requests: RequestTable,
    /// Milliseconds this account's threads were held, by kind (`Kind::index`): from taking a
    /// thread to giving it back, whatever the task's end (the plan advisor's Little's law).
    pub held_ms: [u64; Kind::ALL.len()],
    /// `solved` by kind (`Kind::index`): what a provider that bills per solve charges for.
    pub solved_by_kind: [u64; Kind::ALL.len()],
}

/// The live counters behind [`AccountStats`], shared with the poller.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(super) submits: AtomicU64,
    pub(super) submit_errors: [AtomicU64; 4],
    pub(super) capacity_retries: AtomicU64,
    pub(super) transient_retries: AtomicU64,
    pub(super) poll_requests: AtomicU64,
    pub(super) ids_polled: AtomicU64,
    pub(super) solved: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) timeouts: AtomicU64,
    pub(super) adopted: AtomicU64,
    pub(super) requests: RequestCounts,
    pub(super) held_ms: [AtomicU64; Kind::ALL.len()],
    pub(super) solved_by_kind: [AtomicU64; Kind::ALL.len()],
}

pub(super) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}
