//! The embedded store: one process, one mutex-guarded map per concern. Keeps promises 1-4 inside
//! the process. A `std::sync::Mutex` because no critical section awaits (mini-redis `db.rs`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Notify, oneshot};

use super::{
    Arrival, Backend, ClaimId, Finished, Housekeeping, IdempotencyKeys, Reusable, SharedArrival,
    SingleUse, StoreError, TargetCounts, TargetFigures, TaskOutcome, TaskRecords, WaiterId,
};
use crate::engine::{Delivery, SolveFailure, TaskRecord, TaskState};
use crate::model::{Answer, Millis, Reuse, Target};

pub struct MemoryStore {
    /// How long an empty target is kept after its last use ([`Housekeeping::retire`]).
    target_idle_ms: u64,
    /// No hand-off gives out an answer with less left than this (promise 2), not only none
    /// that expired.
    min_remaining_ms: u64,
    targets: Mutex<HashMap<String, TargetState>>,
    shared: Mutex<HashMap<String, SharedState>>,
    tasks: Mutex<HashMap<String, (TaskRecord, Arc<Notify>)>>,
    /// Idempotency keys: binding and when it expires (ms); `sweep` drops expired ones.
    keys: Mutex<HashMap<String, (String, Millis)>>,
    next_claim: AtomicU64,
    next_lead: AtomicU64,
}

#[derive(Default)]
struct TargetState {
    label: String,
    /// Spare answers, any order; taken earliest-expiry-first so the fewest expire unused.
    pool: Vec<Answer>,
    in_flight: HashSet<ClaimId>,
    /// Oldest first (promise 3: an answer goes to the oldest waiter).
    waiters: VecDeque<(WaiterId, oneshot::Sender<Delivery>)>,
    figures: TargetFigures,
    /// The last arrival, finish, abandon, put or reserve (the store's clock, ms).
    last_used: Millis,
}

#[derive(Default)]
struct SharedState {
    cached: Option<Answer>,
    /// Present while one task solves the target.
    followers: Option<Vec<oneshot::Sender<Delivery>>>,
    /// Fencing token of the current leader.
    lead: u64,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whether `target`'s answers may wait in a pool (GeeTest's may not: one per challenge).
fn poolable_kind(target: &Target) -> bool {
    matches!(target.kind.reuse(), Reuse::SingleUse { poolable: true })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind, never a broken invariant
    // that matters more than staying up; keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_target_idle(crate::engine::EngineSettings::default().target_idle)
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A store that retires empty targets unused for `target_idle`.
    pub fn with_target_idle(target_idle: Duration) -> Self {
        Self {
            target_idle_ms: u64::try_from(target_idle.as_millis()).unwrap_or(u64::MAX),
            min_remaining_ms: ms(crate::engine::EngineSettings::default().min_remaining),
            targets: Mutex::default(),
            shared: Mutex::default(),
            tasks: Mutex::default(),
            keys: Mutex::default(),
            next_claim: AtomicU64::default(),
            next_lead: AtomicU64::default(),
        }
    }

    /// The same store, handing nothing out with less than `min_remaining` left (the engine's
    /// setting; the default is the engine's default).
    pub fn with_min_remaining(mut self, min_remaining: Duration) -> Self {
        self.min_remaining_ms = ms(min_remaining);
        self
    }

    /// The target's state, created if it was never seen or was retired; marked used at `now`.
    fn touch<'a>(
        targets: &'a mut HashMap<String, TargetState>,
        target: &Target,
        now: Millis,
    ) -> &'a mut TargetState {
        let t = targets.entry(target.id.clone()).or_default();
        if t.label.is_empty() {
            t.label = target.label.clone();
        }
        t.last_used = t.last_used.max(now);
        t
    }

    fn claim(&self) -> ClaimId {
        ClaimId(format!(
            "local:{}",
            self.next_claim.fetch_add(1, Ordering::Relaxed)
        ))
    }
}

impl TargetState {
    fn drop_stale(&mut self, now: Millis, min_remaining_ms: u64) {
        let before = self.pool.len();
        self.pool.retain(|a| a.fresh_at(now, min_remaining_ms));
        self.figures.expired_unused += (before - self.pool.len()) as u64;
    }

    fn take_fresh(&mut self, now: Millis, min_remaining_ms: u64) -> Option<Answer> {
        self.drop_stale(now, min_remaining_ms);
        let idx = (0..self.pool.len()).min_by_key(|&i| self.pool[i].expires_at)?;
        Some(self.pool.swap_remove(idx))
    }

    /// Hands `delivery` to the oldest waiter still listening. Gives it back when nobody is.
    fn hand_to_oldest(&mut self, mut delivery: Delivery) -> Option<Delivery> {
        while let Some((_, tx)) = self.waiters.pop_front() {
            match tx.send(delivery) {
                Ok(()) => return None,
                // That caller left between its last check and now: try the next one.
                Err(back) => delivery = back,
            }
        }
        Some(delivery)
    }

    /// An answer with no task attached (import, a leaving caller's answer): next waiter or pool.
    /// One with less than `min_remaining_ms` left at `now` (its holder was paused on the way) is
    /// waste, never handed out.
    fn place(&mut self, answer: Answer, poolable: bool, now: Millis, min_remaining_ms: u64) {
        if !answer.fresh_at(now, min_remaining_ms) {
            self.figures.expired_unused += 1;
            return;
        }
        if let Some(Ok(answer)) = self.hand_to_oldest(Ok(answer)) {
            if poolable {
                self.pool.push(answer);
            } else {
                self.figures.expired_unused += 1;
            }
        }
    }
}

impl Backend for MemoryStore {
    fn instance(&self) -> &str {
        "local"
    }
}

#[async_trait]
impl SingleUse for MemoryStore {
    /// One process: every waiter is always covered by a task, nothing to re-cover.
    async fn cover(&self, _target: &Target, _now: Millis) -> Result<Vec<ClaimId>, StoreError> {
        Ok(Vec::new())
    }

    fn arrive_at_once(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Option<Answer> {
        let mut targets = lock(&self.targets);
        let t = targets.get_mut(&target.id)?;
        let answer = t.take_fresh(now, min_remaining_ms)?;
        t.last_used = t.last_used.max(now);
        t.figures.pool_hits += 1;
        Some(answer)
    }

    async fn arrive(
        &self,
        target: &Target,
        waiter: &WaiterId,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<Arrival, StoreError> {
        let mut targets = lock(&self.targets);
        let t = Self::touch(&mut targets, target, now);
        if let Some(answer) = t.take_fresh(now, min_remaining_ms) {
            t.figures.pool_hits += 1;
            return Ok(Arrival::Pooled(answer));
        }
        let (tx, rx) = oneshot::channel();
        // Waiters no longer listening would make us start too few tasks: forget them first.
        t.waiters.retain(|(_, tx)| !tx.is_closed());
        let covered = t.waiters.len() < t.in_flight.len();
        t.waiters.push_back((waiter.clone(), tx));
        if covered {
            t.figures.waits_served += 1;
            Ok(Arrival::Wait(rx))
        } else {
            let claim = self.claim();
            t.in_flight.insert(claim.clone());
            t.figures.new_tasks += 1;
            Ok(Arrival::Start(rx, claim))
        }
    }

    async fn finish(
        &self,
        target: &Target,
        claim: &ClaimId,
        outcome: TaskOutcome,
        poolable: bool,
        now: Millis,
    ) -> Result<Finished, StoreError> {
        let mut targets = lock(&self.targets);
        let t = Self::touch(&mut targets, target, now);
        t.in_flight.remove(claim);
        t.waiters.retain(|(_, tx)| !tx.is_closed());
        let min = self.min_remaining_ms;
        let outcome = match outcome {
            // Too old by now (a pause after the engine's freshness check): stale.
            TaskOutcome::Answer(answer) if !answer.fresh_at(now, min) => TaskOutcome::Stale,
            other => other,
        };
        let poolable = poolable && poolable_kind(target);
        let stale = matches!(outcome, TaskOutcome::Stale);
        match outcome {
            TaskOutcome::Answer(answer) => t.place(answer, poolable, now, min),
            TaskOutcome::Failed(failure) => {
                // Only a waiter that no remaining task covers loses out; the rest keep waiting.
                if t.waiters.len() > t.in_flight.len() {
                    t.hand_to_oldest(Err(failure));
                }
            }
            // One process: whoever this task covered is shutting down with it.
            TaskOutcome::Requeue => {}
            TaskOutcome::Stale | TaskOutcome::Withdrawn => {
                if stale {
                    t.figures.expired_unused += 1;
                }
                if t.waiters.len() > t.in_flight.len() {
                    let claim = self.claim();
                    t.in_flight.insert(claim.clone());
                    t.figures.new_tasks += 1;
                    return Ok(Finished::Restart(claim));
                }
            }
        }
        Ok(Finished::Done)
    }

    async fn abandon(
        &self,
        target: &Target,
        waiter: &WaiterId,
        delivered: Option<Delivery>,
        poolable: bool,
        now: Millis,
    ) -> Result<(), StoreError> {
        let mut targets = lock(&self.targets);
        if delivered.is_none() && !targets.contains_key(&target.id) {
            // Retired: the waiter is long gone from it, and it has nothing to pass on.
            return Ok(());
        }
        let t = Self::touch(&mut targets, target, now);
        t.waiters.retain(|(id, _)| id != waiter);
        if let Some(Ok(answer)) = delivered {
            t.place(
                answer,
                poolable && poolable_kind(target),
                now,
                self.min_remaining_ms,
            );
        }
        Ok(())
    }

    async fn put(&self, target: &Target, answer: Answer, now: Millis) -> Result<(), StoreError> {
        let mut targets = lock(&self.targets);
        let t = Self::touch(&mut targets, target, now);
        t.place(answer, poolable_kind(target), now, self.min_remaining_ms);
        Ok(())
    }

    async fn reserve(
        &self,
        target: &Target,
        size: u32,
        now: Millis,
    ) -> Result<Vec<ClaimId>, StoreError> {
        let mut targets = lock(&self.targets);
        let t = Self::touch(&mut targets, target, now);
        t.drop_stale(now, self.min_remaining_ms);
        t.waiters.retain(|(_, tx)| !tx.is_closed());
        let counts = TargetCounts {
            pooled: t.pool.len() as u64,
            in_flight: t.in_flight.len() as u64,
            waiting: t.waiters.len() as u64,
        };
        let claims: Vec<ClaimId> = (0..super::deficit(size, counts))
            .map(|_| self.claim())
            .collect();
        t.in_flight.extend(claims.iter().cloned());
        t.figures.new_tasks += claims.len() as u64;
        t.figures.refills += claims.len() as u64;
        Ok(claims)
    }

    async fn counts(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<TargetCounts, StoreError> {
        let mut targets = lock(&self.targets);
        let Some(t) = targets.get_mut(&target.id) else {
            return Ok(TargetCounts::default());
        };
        t.drop_stale(now, min_remaining_ms);
        t.waiters.retain(|(_, tx)| !tx.is_closed());
        Ok(TargetCounts {
            pooled: t.pool.len() as u64,
            in_flight: t.in_flight.len() as u64,
            waiting: t.waiters.len() as u64,
        })
    }
}

#[async_trait]
impl Reusable for MemoryStore {
    async fn shared_arrive(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<SharedArrival, StoreError> {
        let mut shared = lock(&self.shared);
        let s = shared.entry(target.id.clone()).or_default();
        if let Some(answer) = &s.cached {
            if answer.fresh_at(now, min_remaining_ms) {
                return Ok(SharedArrival::Cached(answer.clone()));
            }
            s.cached = None;
        }
        let (tx, rx) = oneshot::channel();
        match &mut s.followers {
            Some(followers) => {
                followers.push(tx);
                Ok(SharedArrival::Follow(rx))
            }
            None => {
                s.followers = Some(vec![tx]);
                s.lead = self.next_lead.fetch_add(1, Ordering::Relaxed) + 1;
                Ok(SharedArrival::Lead(rx, s.lead))
            }
        }
    }

    async fn shared_finish(
        &self,
        target: &Target,
        lead: u64,
        outcome: Result<Answer, SolveFailure>,
        _now: Millis,
    ) -> Result<(), StoreError> {
        let mut shared = lock(&self.shared);
        let s = shared.entry(target.id.clone()).or_default();
        if s.lead != lead {
            // A newer leader holds the target (this finish is late: a lost reply run again). Its
            // task covers everyone waiting, so a failure here fails nobody; an answer is as good
            // as any for a reusable target, so it is shared and cached, and the lock stays.
            if let Ok(answer) = outcome {
                for tx in s.followers.iter_mut().flat_map(|f| f.drain(..)) {
                    let _ = tx.send(Ok(answer.clone()));
                }
                s.cached = Some(answer);
            }
            return Ok(());
        }
        for tx in s.followers.take().unwrap_or_default() {
            // A follower that left needs nothing.
            let _ = tx.send(outcome.clone());
        }
        if let Ok(answer) = outcome {
            s.cached = Some(answer);
        }
        Ok(())
    }

    /// One process: a leader's task lives and dies with the followers waiting on it, so there is
    /// never a dead leader to take over from, and `shared_finish` drains every follower, so none
    /// is left beside a cached answer.
    async fn shared_takeover(
        &self,
        _target: &Target,
        _now: Millis,
        _min_remaining_ms: u64,
    ) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    async fn shared_evict(&self, target_id: &str) -> Result<(), StoreError> {
        if let Some(s) = lock(&self.shared).get_mut(target_id) {
            s.cached = None;
        }
        Ok(())
    }
}

#[async_trait]
impl TaskRecords for MemoryStore {
    async fn create_task(&self, record: TaskRecord) -> Result<(), StoreError> {
        lock(&self.tasks).insert(record.id.clone(), (record, Arc::new(Notify::new())));
        Ok(())
    }

    async fn finish_task(&self, id: &str, state: TaskState, now: Millis) -> Result<(), StoreError> {
        let mut tasks = lock(&self.tasks);
        if let Some((record, notify)) = tasks.get_mut(id) {
            // Written once (promise 6): a second finish keeps the first state.
            if record.state == TaskState::Pending {
                record.state = state;
                record.redo = None;
                record.finished_at = Some(now);
                notify.notify_waiters();
            }
        }
        Ok(())
    }

    async fn mark_reported(&self, id: &str) -> Result<bool, StoreError> {
        let mut tasks = lock(&self.tasks);
        Ok(match tasks.get_mut(id) {
            Some((record, _)) if !record.reported => {
                record.reported = true;
                true
            }
            _ => false,
        })
    }

    async fn get_task(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        Ok(lock(&self.tasks).get(id).map(|(r, _)| r.clone()))
    }

    async fn wait_task(&self, id: &str, wait: Duration) -> Result<Option<TaskRecord>, StoreError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notify = {
                let tasks = lock(&self.tasks);
                match tasks.get(id) {
                    None => return Ok(None),
                    Some((r, _)) if r.state != TaskState::Pending => return Ok(Some(r.clone())),
                    Some((_, n)) => n.clone(),
                }
            };
            let notified = notify.notified();
            tokio::pin!(notified);
            // Register before re-checking, so a finish between the check and the wait is not missed.
            notified.as_mut().enable();
            if let Some((r, _)) = lock(&self.tasks).get(id) {
                if r.state != TaskState::Pending {
                    return Ok(Some(r.clone()));
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(lock(&self.tasks).get(id).map(|(r, _)| r.clone()));
            }
        }
    }
}

#[async_trait]
impl IdempotencyKeys for MemoryStore {
    async fn bound_key(&self, scoped: &str, now: Millis) -> Result<Option<String>, StoreError> {
        Ok(lock(&self.keys)
            .get(scoped)
            .filter(|(_, expires)| *expires > now)
            .map(|(value, _)| value.clone()))
    }

    async fn bind_key(
        &self,
        scoped: &str,
        expected: Option<&str>,
        value: &str,
        ttl_ms: u64,
        now: Millis,
    ) -> Result<bool, StoreError> {
        let mut keys = lock(&self.keys);
        let current = keys
            .get(scoped)
            .filter(|(_, expires)| *expires > now)
            .map(|(v, _)| v.as_str());
        if current != expected {
            return Ok(false);
        }
        keys.insert(
            scoped.to_owned(),
            (value.to_owned(), now.saturating_add(ttl_ms)),
        );
        Ok(true)
    }
}

#[async_trait]
impl Housekeeping for MemoryStore {
    async fn sweep(
        &self,
        now: Millis,
        retention_ms: u64,
        pending_limit_ms: u64,
    ) -> Result<usize, StoreError> {
        lock(&self.keys).retain(|_, (_, expires)| *expires > now);
        let mut tasks = lock(&self.tasks);
        let before = tasks.len();
        tasks.retain(|_, (r, _)| match r.finished_at {
            Some(done) => now.saturating_sub(done) <= retention_ms,
            None => now.saturating_sub(r.created_at) <= pending_limit_ms,
        });
        let removed = before - tasks.len();
        drop(tasks);
        for t in lock(&self.targets).values_mut() {
            t.drop_stale(now, 0);
        }
        lock(&self.shared).retain(|_, s| {
            s.followers.is_some() || s.cached.as_ref().is_some_and(|a| a.fresh_at(now, 0))
        });
        Ok(removed)
    }

    async fn retire(&self, now: Millis, keep: &HashSet<String>) -> Result<usize, StoreError> {
        let idle_ms = self.target_idle_ms;
        let mut targets = lock(&self.targets);
        let before = targets.len();
        // Under the same lock as `arrive`: a caller comes either before (the target is busy or
        // freshly used, so it stays) or after (it starts a new entry from nothing).
        targets.retain(|id, t| {
            if keep.contains(id) || now.saturating_sub(t.last_used) < idle_ms {
                return true;
            }
            t.drop_stale(now, 0);
            t.waiters.retain(|(_, tx)| !tx.is_closed());
            !(t.pool.is_empty() && t.in_flight.is_empty() && t.waiters.is_empty())
        });
        // A map keeps its peak capacity: after a burst of pages, give the memory back.
        let live = targets.len();
        if targets.capacity() > 4 * live.max(256) {
            targets.shrink_to(2 * live);
        }
        Ok(before - live)
    }

    async fn figures(&self) -> Result<Vec<TargetFigures>, StoreError> {
        let targets = lock(&self.targets);
        let mut out: Vec<_> = targets
            .iter()
            .map(|(id, t)| TargetFigures {
                id: id.clone(),
                label: t.label.clone(),
                pooled: t.pool.len() as u64,
                in_flight: t.in_flight.len() as u64,
                waiting: t.waiters.iter().filter(|(_, tx)| !tx.is_closed()).count() as u64,
                ..t.figures.clone()
            })
            .collect();
        out.sort_by(|a, b| a.label.cmp(&b.label));
        Ok(out)
    }
}
