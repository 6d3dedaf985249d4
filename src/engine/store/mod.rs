//! The store seam (docs/ARCHITECTURE.md, "Modules"): every decision that must be atomic across
//! callers of one target lives behind [`Store`], so the engine does not know whether it runs alone
//! (the embedded [`MemoryStore`]) or in a fleet sharing Redis (`RedisStore`, which keeps the same
//! promises).
//!
//! Owns: pools, demand and in-flight accounting per target, the FIFO of waiters, the cache and
//! coalescing of reusable answers, task records of the compatible and native APIs.
//! Does not own: talking to providers, or deciding lifetimes (the engine passes times in).

mod memory;
pub mod redis;

pub use memory::MemoryStore;

use std::collections::HashSet;

use async_trait::async_trait;
use tokio::sync::oneshot;

use crate::model::{Answer, Millis, Target, UpstreamRef};

use super::{Delivery, SolveFailure, TaskRecord, TaskState};

/// Identifies one waiting caller across every process sharing a store: `<instance>:<seq>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaiterId(pub String);

impl WaiterId {
    /// The id of an instance's `seq`-th caller. The number is zero-padded so one instance's ids
    /// sort in arrival order as text: Redis orders waiters by arrival millisecond, then by id, and
    /// unpadded, caller 10 would be served before caller 9 of the same millisecond.
    pub fn new(instance: &str, seq: u64) -> Self {
        WaiterId(format!("{instance}:{seq:020}"))
    }
}

/// Identifies one upstream task's claim on a target's in-flight count, fleet-wide.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimId(pub String);

/// The atomic decision for a caller of a single-use target (promise 3).
#[derive(Debug)]
pub enum Arrival {
    /// A fresh pooled answer, now owned by this caller alone.
    Pooled(Answer),
    /// Wait: an in-flight task not yet spoken for will deliver to this caller (or to an older one).
    Wait(oneshot::Receiver<Delivery>),
    /// Wait, and start one new upstream task under `ClaimId`: demand exceeds pool plus in flight.
    Start(oneshot::Receiver<Delivery>, ClaimId),
}

/// A target's figures at one moment, for refill decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TargetCounts {
    /// Fresh answers ready in the pool.
    pub pooled: u64,
    /// Upstream tasks running for the target.
    pub in_flight: u64,
    /// Callers waiting for an answer.
    pub waiting: u64,
}

/// How many refills a pool of `size` needs now: tasks already promised to waiting callers will
/// not reach the pool, so only the rest of those in flight count as coming.
pub fn deficit(size: u32, counts: TargetCounts) -> u64 {
    let coming = counts.in_flight.saturating_sub(counts.waiting);
    u64::from(size).saturating_sub(counts.pooled.saturating_add(coming))
}

/// The atomic decision for a caller of a reusable target (promise 4).
#[derive(Debug)]
pub enum SharedArrival {
    /// A cached answer still fresh enough.
    Cached(Answer),
    /// Another caller's task is solving it: wait for that.
    Follow(oneshot::Receiver<Delivery>),
    /// Nobody is solving it: this caller starts the one task under the fencing token, and
    /// waits like a follower.
    Lead(oneshot::Receiver<Delivery>, u64),
}

/// How an upstream task for a single-use target ended.
#[derive(Debug, Clone)]
pub enum TaskOutcome {
    Answer(Answer),
    Failed(SolveFailure),
    /// The answer arrived with less than `min_remaining` of life: thrown away, not handed out.
    Stale,
    /// This instance is shutting down before the task ended: its claim is released and nothing
    /// is delivered, so no caller fails for it. A waiter it covered is uncovered again, and the
    /// coverer of the waiter's own instance starts a task for it (see [`SingleUse::cover`]).
    Requeue,
    /// Never submitted, and the caller it was started for has gone: nothing was spent. A waiter
    /// it covered that no other task covers gets a new task (a restart), as after `Stale`.
    Withdrawn,
}

/// What the engine must do after [`SingleUse::finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    Done,
    /// A waiter is left without a task to cover it: start one more, under this claim.
    Restart(ClaimId),
}

/// Per-target counters behind the hit-rate and waste figures.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TargetFigures {
    pub id: String,
    pub label: String,
    pub pooled: u64,
    pub in_flight: u64,
    pub waiting: u64,
    pub pool_hits: u64,
    pub waits_served: u64,
    pub new_tasks: u64,
    /// Of `new_tasks`, those started to fill the pool rather than for a waiting caller.
    pub refills: u64,
    pub expired_unused: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

/// A script reply that is not what its contract says is treated as Redis being unusable for
/// that operation: the engine solves without the store rather than act on a misread reply.
impl From<crate::redis_base::ReplyError> for StoreError {
    fn from(e: crate::redis_base::ReplyError) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}

/// What a store is: this process's identity in it, whether it is shared by a fleet (and with
/// which lease), and whether it can be reached.
pub trait Backend: Send + Sync {
    /// This process's id in waiter and claim ids (random per boot, never reused).
    fn instance(&self) -> &str;

    /// True while the shared backend cannot be reached (solving continues without the pool).
    fn degraded(&self) -> bool {
        false
    }

    /// What `/metrics` calls this store: `memory` or `redis`.
    fn backend(&self) -> &'static str {
        "memory"
    }

    /// How long the store keeps a waiter or claim of an instance that stopped renewing it, before
    /// taking its work over (a fleet store); `None` for a store no other process shares.
    fn lease(&self) -> Option<std::time::Duration> {
        None
    }

    /// What a shared store knows of the servers under it and of the operations it could not
    /// be sure of; `None` for the embedded store.
    fn server_report(&self) -> Option<redis::ServerReport> {
        None
    }
}

#[async_trait]
/// Single-use targets (promises 1-4 of docs/ARCHITECTURE.md): the pool, the waiters' FIFO and the
/// claims of upstream tasks, each decision one atomic step.
pub trait SingleUse: Send + Sync {
    /// Decides, in one atomic step, pool / wait for in-flight / start a new task. Pooled answers
    /// with less than `min_remaining_ms` left at `now` are dropped as waste, never handed out.
    async fn arrive(
        &self,
        target: &Target,
        waiter: &WaiterId,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<Arrival, StoreError>;

    /// [`arrive`](Self::arrive) when it can be decided at once, in memory: a pooled answer this
    /// process already holds for `target` (the embedded pool, or a Redis instance's claim
    /// batch), handed out and counted as the arrival it is. `None` when the caller must
    /// `arrive` (no answer is handed out, no arrival counted). A pool hit is the call a fleet makes
    /// most; this spares it the task, the timer and the copies an arrival that may wait on
    /// the store needs (docs/BENCHMARKS.md).
    fn arrive_at_once(
        &self,
        _target: &Target,
        _now: Millis,
        _min_remaining: u64,
    ) -> Option<Answer> {
        None
    }

    /// An upstream task for `target` ended: the answer goes to the oldest live waiter, else to the
    /// pool (when `poolable`); a failure goes to the oldest waiter no task covers any more. An
    /// answer already expired at `now` is handled as [`TaskOutcome::Stale`].
    async fn finish(
        &self,
        target: &Target,
        claim: &ClaimId,
        outcome: TaskOutcome,
        poolable: bool,
        now: Millis,
    ) -> Result<Finished, StoreError>;

    /// The caller gave up. `delivered` is what already reached its mailbox, if anything; it is
    /// passed on to the next waiter or the pool so a caller that leaves wastes nothing.
    async fn abandon(
        &self,
        target: &Target,
        waiter: &WaiterId,
        delivered: Option<Delivery>,
        poolable: bool,
        now: Millis,
    ) -> Result<(), StoreError>;

    /// Adds answers obtained elsewhere (imports, refills) to a target's pool, or to its waiters.
    async fn put(&self, target: &Target, answer: Answer, now: Millis) -> Result<(), StoreError>;

    /// Claims in-flight slots for tasks no caller asked for (pool refills): as many as a pool
    /// of `size` lacks, counted and claimed in one atomic step, so instances topping up the same
    /// pool at once never both start its shortfall. Tasks promised to waiting callers do not count
    /// as coming to the pool. Each answer goes to the oldest waiter or the pool like any other
    /// (finish it with [`SingleUse::finish`]).
    async fn reserve(
        &self,
        target: &Target,
        size: u32,
        now: Millis,
    ) -> Result<Vec<ClaimId>, StoreError>;

    /// After another instance died, waiters may outnumber running tasks once its claims expire:
    /// claims the missing tasks (at most as many as this instance has waiters on `target`).
    /// The engine starts one upstream task per returned claim.
    async fn cover(&self, target: &Target, now: Millis) -> Result<Vec<ClaimId>, StoreError>;

    /// Records the provider task a claim's upstream task submitted, kept adoptable for `keep`:
    /// if this instance dies (or stops) before the task ends, a claim of the same target started
    /// elsewhere polls that provider task instead of paying for the work again, and this claim's
    /// own late outcome is then dropped. Best effort: without the note the work is only redone.
    /// A store no other process shares has nobody to adopt it and records nothing.
    async fn note_upstream(
        &self,
        _target: &Target,
        _claim: &ClaimId,
        _task: &UpstreamRef,
        _keep: std::time::Duration,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// The provider task `claim` adopted from a dead instance's claim when it was claimed
    /// ([`SingleUse::arrive`], [`SingleUse::cover`], [`SingleUse::reserve`]), if any; asked once, as its
    /// upstream task starts.
    fn adopted(&self, _claim: &ClaimId) -> Option<UpstreamRef> {
        None
    }

    /// Pool, in-flight and waiting counts now; answers with less than `min_remaining_ms` left
    /// are not counted as pooled.
    async fn counts(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<TargetCounts, StoreError>;
}

#[async_trait]
/// Reusable targets: one task per target, shared by every caller, and its cached answer.
pub trait Reusable: Send + Sync {
    /// Cached reusable answer, or join/lead the one task solving it.
    async fn shared_arrive(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<SharedArrival, StoreError>;

    /// The one task for a reusable target ended: every follower gets the outcome; an answer is
    /// cached until it expires. `lead` is the fencing token from [`SharedArrival::Lead`] (or
    /// [`Reusable::shared_takeover`]): a leader that no longer holds the lock (its lease ran out, a
    /// follower took over, or its finish runs twice) never releases a newer leader's lock and
    /// its failure fails nobody (another task covers the followers), but its answer is still
    /// shared and cached. Answers are delivered whatever life they have left: the caller checks
    /// `min_remaining`.
    async fn shared_finish(
        &self,
        target: &Target,
        lead: u64,
        outcome: Result<Answer, SolveFailure>,
        now: Millis,
    ) -> Result<(), StoreError>;

    /// Called every third of a lease for each reusable target this instance has callers
    /// following: when its leader is gone (a fleet store's lock lapsed because the leader's
    /// instance died) and callers still follow it, takes over, and at most one caller of this
    /// at a time fleet-wide gets the new fencing token; the engine then starts the one task
    /// under it, as for [`SharedArrival::Lead`]. A fresh cached answer (at least
    /// `min_remaining_ms` left) goes to the followers instead. `None` while a leader lives.
    async fn shared_takeover(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<Option<u64>, StoreError>;

    /// Forgets a cached reusable answer (after `reportbad`).
    async fn shared_evict(&self, target_id: &str) -> Result<(), StoreError>;
}

#[async_trait]
/// Task records of the compatible and native APIs (`in.php`/`res.php`, `/v1/tasks`).
pub trait TaskRecords: Send + Sync {
    async fn create_task(&self, record: TaskRecord) -> Result<(), StoreError>;

    async fn finish_task(&self, id: &str, state: TaskState, now: Millis) -> Result<(), StoreError>;

    /// Marks a finished task as reported; false when it already was (one report per task).
    async fn mark_reported(&self, id: &str) -> Result<bool, StoreError>;

    async fn get_task(&self, id: &str) -> Result<Option<TaskRecord>, StoreError>;

    /// The record once it is finished, or as it is when `wait` runs out.
    async fn wait_task(
        &self,
        id: &str,
        wait: std::time::Duration,
    ) -> Result<Option<TaskRecord>, StoreError>;

    /// Whether `instance` said it is alive within its lease and a beat (a fleet store's
    /// instances each say so every beat). A store no other process shares has no other
    /// instance to lose: always true.
    async fn instance_alive(&self, _instance: &str) -> Result<bool, StoreError> {
        Ok(true)
    }
}

#[async_trait]
/// Idempotency keys (docs/API.md "Idempotency keys"): what each key is bound to.
pub trait IdempotencyKeys: Send + Sync {
    /// What an idempotency key (`scoped`: already namespaced per tenant) is bound to at `now`,
    /// if anything (docs/API.md "Idempotency keys").
    async fn bound_key(&self, scoped: &str, now: Millis) -> Result<Option<String>, StoreError>;

    /// Binds an idempotency key to `value` for `ttl_ms`, atomically and only when it is unbound
    /// (`expected` is `None`) or still bound to `expected`. False when it was bound otherwise:
    /// read it again with [`IdempotencyKeys::bound_key`].
    async fn bind_key(
        &self,
        scoped: &str,
        expected: Option<&str>,
        value: &str,
        ttl_ms: u64,
        now: Millis,
    ) -> Result<bool, StoreError>;
}

#[async_trait]
/// What keeps the store's size bounded and its figures readable: sweeping old records and
/// retiring idle targets.
pub trait Housekeeping: Send + Sync {
    /// Drops task records finished more than `retention_ms` ago and pending ones older than
    /// `pending_limit_ms`, expired pooled answers (counted as waste) and expired idempotency
    /// keys. Returns how many records went.
    async fn sweep(
        &self,
        now: Millis,
        retention_ms: u64,
        pending_limit_ms: u64,
    ) -> Result<usize, StoreError>;

    /// Retires every target unused for the store's `target_idle` that has nothing pooled,
    /// nothing in flight and nobody waiting, except those in `keep` (configured pools): its
    /// state and counters go, so per-target state grows with the targets in use, not with every
    /// target ever seen. A caller arriving at the same moment either keeps the target alive or
    /// finds it gone and starts afresh; nothing it could be owed is dropped. Returns how many went.
    async fn retire(&self, now: Millis, keep: &HashSet<String>) -> Result<usize, StoreError>;

    async fn figures(&self) -> Result<Vec<TargetFigures>, StoreError>;
}

/// Every concern together: what the engine holds (`Arc<dyn Store>`). Implement the concerns; this
/// follows. Callers bring the concern traits they use into scope (or [`prelude`]).
pub trait Store:
    Backend + SingleUse + Reusable + TaskRecords + IdempotencyKeys + Housekeeping + 'static
{
}

impl<S> Store for S where
    S: Backend + SingleUse + Reusable + TaskRecords + IdempotencyKeys + Housekeeping + 'static
{
}

/// The concern traits in scope without their names (`use store::prelude::*`), for code that calls
/// a concrete store's methods; a `dyn Store` needs none of them.
pub mod prelude {
    pub use super::{
        Backend as _, Housekeeping as _, IdempotencyKeys as _, Reusable as _, SingleUse as _,
        TaskRecords as _,
    };
}
