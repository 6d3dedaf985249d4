//! The single-use target operations (promises 1-3): arrive, finish, abandon, put, reserve,
//! cover, counts. Each is one script run through `ops.rs`, so a lost reply is resolved by
//! running the same operation again, never by guessing.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use redis::Value;
use tokio::sync::oneshot;

use super::call::{FinishOutcome, Hold, Release, TargetCall};
use super::fanout::LocalWaiter;
use super::held::{Batch, HOLD, LEASE_SLACK, Look, STUCK_AFTER, Turn};
use super::ops::{OpError, Pk};
use super::reply::{ArriveCode, Arrived, Claimed, Counted, Delivered, Woken};
use super::{Inner, mail, ms, poolable};
use crate::engine::store::{Arrival, ClaimId, Finished, StoreError, TargetCounts, WaiterId};
use crate::engine::store::{TaskOutcome, TaskOutcome::*};
use crate::model::{Answer, Millis, Target, UpstreamRef};

/// How long an arrival's reply is kept. An arrival whose outcome is unknown is only undone in
/// the background (its caller already went on alone), so it is retried for half of this; giving
/// up then loses at most a pooled answer, never hands one out twice. Short, because arrivals are
/// the hot path: at thousands of pool hits a second, records kept for minutes would be millions
/// of keys.
const ARRIVAL_RECORD: std::time::Duration = std::time::Duration::from_secs(60);

/// The provider task in a note (`lua/note.lua`: keep-until, account, task id), or `None` for ''.
fn adopted_task(note: &str) -> Option<UpstreamRef> {
    let mut parts = note.splitn(3, '\n');
    let (_keep, account, task_id) = (parts.next()?, parts.next()?, parts.next()?);
    (!account.is_empty() && !task_id.is_empty()).then(|| UpstreamRef {
        account: account.to_owned(),
        task_id: task_id.to_owned(),
    })
}

/// One caller's arrival. A caller this instance can serve from a local claim batch
/// (`held.rs`) is served without Redis. Otherwise, when its outcome is unknown the caller is told
/// the store is away (it solves alone) and the arrival is resolved in the background and undone
/// once known: a pooled answer (and any batch) goes back, the wait is given up, a claimed task is
/// released.
pub(super) async fn arrive(
    inner: &Arc<Inner>,
    target: &Target,
    waiter: &WaiterId,
    now: Millis,
    min_remaining_ms: u64,
) -> Result<Arrival, StoreError> {
    let is_poolable = poolable(target) == "1";
    let at = inner.observe(now);
    let (release, hold) = match is_poolable {
        true => match local_turn(inner, &target.id, at, min_remaining_ms).await {
            Turn::Hit(answer) => return Ok(Arrival::Pooled(answer)),
            Turn::Script { release, hold } => (release, hold),
            Turn::Await(_) => (None, None),
        },
        false => (None, None),
    };
    let Some(size) = hold else {
        let arrived = arrive_in_redis(inner, target, waiter, now, min_remaining_ms, release, None);
        return arrived.await.map(|(arrival, _)| arrival);
    };
    let claim = inner.held.claim(&target.id);
    let asked = Hold {
        batch: inner.new_id("b"),
        size,
        lease_ms: ms(HOLD + LEASE_SLACK),
    };
    let until = inner.held.now() + HOLD;
    let arrived = {
        let call = arrive_in_redis(
            inner,
            target,
            waiter,
            now,
            min_remaining_ms,
            release,
            Some(&asked),
        );
        tokio::pin!(call);
        tokio::select! {
            biased;
            arrived = &mut call => arrived,
            () = tokio::time::sleep(STUCK_AFTER) => {
                inner.held.stuck(&target.id);
                call.await
            }
        }
    };
    let batch = match &arrived {
        Ok((_, Some(reply))) if !reply.held.is_empty() => Some(Batch::read(
            asked.batch,
            &reply.held,
            reply.redis_now,
            at,
            until,
        )),
        _ => None,
    };
    let kept = batch.as_ref().map(|b| (b.id.clone(), b.until()));
    let pooled = matches!(arrived, Ok((Arrival::Pooled(_), _)));
    if let Some(back) = claim.land(batch, pooled) {
        inner.clone().unhold_later(target.id.clone(), back);
    } else if let Some((id, until)) = kept {
        let (inner, target_id) = (inner.clone(), target.id.clone());
        // Timed from the hold's clock, so on an explicit clock it still ends within a hold.
        let left = until.saturating_duration_since(inner.held.now());
        tokio::spawn(async move {
            tokio::time::sleep(left).await;
            if let Some(back) = inner.held.lapse(&target_id, &id) {
                inner.unhold(&target_id, back).await;
            }
        });
    }
    arrived.map(|(arrival, _)| arrival)
}

/// A pool hit served from this instance's claim batch for `target`, with no Redis call and no
/// task of its own; `None` when `arrive` must decide.
pub(super) fn arrive_at_once(
    inner: &Inner,
    target: &Target,
    now: Millis,
    min_remaining_ms: u64,
) -> Option<Answer> {
    if poolable(target) != "1" {
        return None;
    }
    let at = inner.observe(now);
    inner.held.hit(&target.id, at, min_remaining_ms)
}

/// This instance's own look at its batches first: a hit, or the script call to make. A caller
/// that finds a batch being taken waits for it and looks again: a batch serves as many callers
/// as it holds, and the next one is asked for those it could not serve. A taker that takes
/// longer than [`STUCK_AFTER`] (stuck on a failing Redis) says so and holds nobody up: each
/// caller then runs its own script, as it would have without batches.
async fn local_turn(inner: &Inner, target_id: &str, at: Millis, min_remaining_ms: u64) -> Turn {
    const LOOKS: usize = 32;
    let mut at = at;
    for n in 1..=LOOKS {
        let look = match n {
            1 => Look::First,
            LOOKS => Look::Last,
            _ => Look::Again,
        };
        match inner.held.arrive(target_id, at, min_remaining_ms, look) {
            Turn::Await(landed) => landed.await,
            turn => return turn,
        }
        at = inner.observe(at);
    }
    inner
        .held
        .arrive(target_id, at, min_remaining_ms, Look::Last)
}

/// What a pool hit's reply carried for a batch: its mails and Redis's time then.
struct HeldReply {
    held: Vec<String>,
    redis_now: u64,
}

/// The arrive script's run and what the caller gets. A batch taken with a pool hit whose
/// hand-out was not confirmed goes straight back; otherwise its mails are returned.
async fn arrive_in_redis(
    inner: &Arc<Inner>,
    target: &Target,
    waiter: &WaiterId,
    now: Millis,
    min_remaining_ms: u64,
    release: Option<Release>,
    hold: Option<&Hold>,
) -> Result<(Arrival, Option<HeldReply>), StoreError> {
    inner.note_target(target, now).await?;
    let at = inner.observe(now);
    let (tx, rx) = oneshot::channel();
    // Registered before the script runs, so a delivery racing the reply finds it.
    inner.local.add_waiter(
        &waiter.0,
        LocalWaiter {
            target: target.clone(),
            tx,
            poolable: poolable(target) == "1",
            arrived: None,
        },
    );
    let claim = inner.new_claim();
    let pk = Pk::of(poolable(target) == "1");
    let call = TargetCall::Arrive {
        waiter: waiter.0.clone(),
        claim: claim.clone(),
        release: release.clone(),
        hold: hold.cloned(),
    };
    let op = inner
        .op(call, &target.id, pk)
        .at(now)
        .min_remaining(min_remaining_ms)
        .ttl(ARRIVAL_RECORD)
        .handout();
    let epoch = inner.epoch();
    let ran = match inner.run_handout(&op, false).await {
        Ok(ran) => ran,
        Err(e) => {
            inner.local.take_waiter(&waiter.0);
            match e {
                OpError::Unknown(_) => {
                    let (inner, target, waiter) = (inner.clone(), target.clone(), waiter.0.clone());
                    let (call, id, issued) = (op.call.clone(), op.id.clone(), op.issued);
                    tokio::spawn(async move {
                        let op = super::ops::Op {
                            call,
                            target_id: &target.id,
                            pk,
                            id,
                            now: Some(now),
                            min_remaining: Some(min_remaining_ms),
                            ttl: Some(ARRIVAL_RECORD),
                            issued,
                            handout: true,
                            refusal_first: false,
                        };
                        if let Ok(ran) = inner.resolve(&op, epoch).await {
                            let batch = match &op.call {
                                TargetCall::Arrive { hold: Some(h), .. } => Some(h.whole()),
                                _ => None,
                            };
                            inner
                                .undo_arrival(&target, &waiter, &claim, batch, ran.values)
                                .await;
                        }
                    });
                }
                // Redis never saw it: the batch it was to end is still held there.
                OpError::NotRun(_) => {
                    if let Some(back) = release {
                        inner.clone().unhold_later(target.id.clone(), back);
                    }
                }
            }
            return Err(e.into());
        }
    };
    let reply = match Arrived::read(ran.values) {
        Ok(reply) => reply,
        Err(e) => {
            // What the script did is unknown here: the caller is solved on its own, and the
            // waiter's lease lapses if one was added (a batch, if any, lapses to waste).
            inner.local.take_waiter(&waiter.0);
            return Err(e);
        }
    };
    let Arrived {
        code,
        arrived,
        answer: json,
        remaining_ms,
        held,
        woken,
    } = reply;
    let mut batch = None;
    let arrival = match code {
        ArriveCode::Pooled => {
            inner.local.take_waiter(&waiter.0);
            let answer: Answer = serde_json::from_str(&json)
                .map_err(|e| StoreError::Unavailable(format!("unreadable pooled answer: {e}")))?;
            let answer = mail::restamp(answer, remaining_ms, at);
            if !ran.confirmed {
                inner.withhold(target, answer, at).await;
                if let (false, Some(h)) = (held.is_empty(), hold) {
                    inner.unhold(&target.id, h.whole()).await;
                }
                inner.notify(&target.id, woken).await;
                return Err(StoreError::Unavailable(
                    "a pool take was not confirmed durable in time".into(),
                ));
            }
            batch = Some(HeldReply {
                held,
                redis_now: arrived,
            });
            Arrival::Pooled(answer)
        }
        ArriveCode::Wait => {
            inner.local.set_arrived(&waiter.0, arrived);
            Arrival::Wait(rx)
        }
        ArriveCode::Start => {
            inner.local.set_arrived(&waiter.0, arrived);
            inner.local.add_claim(&claim, target);
            if let Some(task) = adopted_task(&json) {
                inner.local.set_adoption(&claim, task);
            }
            Arrival::Start(rx, ClaimId(claim))
        }
    };
    inner.notify(&target.id, woken).await;
    Ok((arrival, batch))
}

impl Inner {
    /// An answer taken out of Redis for a caller whose hand-out could not be confirmed: it goes
    /// back (to the oldest waiter, else the pool), where it is once whether the take survives a
    /// failover or not, and hand-outs count as unconfirmed until a probe says otherwise.
    pub(super) async fn withhold(&self, target: &Target, answer: Answer, now: Millis) {
        if let Some(durable) = &self.durable {
            durable.unconfirmed(super::keys::probe(&target.id));
        }
        if let Err(e) = self.put(target, answer, now).await {
            tracing::warn!(error = %e, "could not put back an answer whose hand-out was withheld");
        }
    }

    /// Ends a local claim batch: what was not handed out goes back (`unhold.lua`). Failing, the
    /// batch lapses in Redis and counts as waste; it never goes to a second caller.
    pub(super) async fn unhold(&self, target_id: &str, release: Release) {
        let op = self.op(TargetCall::Unhold(release), target_id, Pk::Yes);
        match self.run(&op, true).await {
            Ok(values) => match Woken::read("unhold.lua", values) {
                Ok(placed) => self.notify(target_id, placed.woken).await,
                Err(e) => tracing::warn!(error = %e, "could not read a batch's release"),
            },
            Err(e) => {
                tracing::warn!(error = %StoreError::from(e), "could not release a local batch")
            }
        }
    }

    /// [`Inner::unhold`] off the caller's path.
    pub(super) fn unhold_later(self: Arc<Self>, target_id: String, release: Release) {
        tokio::spawn(async move { self.unhold(&target_id, release).await });
    }

    /// An arrival the caller did not wait for: whatever it was given goes back, the batch it
    /// asked for (`batch`) too.
    async fn undo_arrival(
        &self,
        target: &Target,
        waiter: &str,
        claim: &str,
        batch: Option<Release>,
        values: Vec<Value>,
    ) {
        let reply = match Arrived::read(values) {
            Ok(reply) => reply,
            Err(e) => {
                // Unreadable: whatever it gave lapses with its lease or goes to waste, never
                // to a second caller.
                tracing::warn!(error = %e, "could not undo an arrival its caller did not wait for");
                return;
            }
        };
        self.notify(&target.id, reply.woken).await;
        let now = self.local_now();
        if let (false, Some(batch)) = (reply.held.is_empty(), batch) {
            self.unhold(&target.id, batch).await;
        }
        let undone = match reply.code {
            ArriveCode::Pooled => match serde_json::from_str::<Answer>(&reply.answer) {
                Ok(a) => {
                    self.put(target, mail::restamp(a, reply.remaining_ms, now), now)
                        .await
                }
                Err(_) => Ok(()),
            },
            code => {
                let pk = poolable(target) == "1";
                let left = self
                    .abandon(&target.id, waiter, None, Pk::of(pk), now)
                    .await;
                if code == ArriveCode::Start {
                    let claim = ClaimId(claim.to_owned());
                    let released = self.finish(target, &claim, Requeue, pk, now).await;
                    left.and(released.map(|_| ()))
                } else {
                    left
                }
            }
        };
        if let Err(e) = undone {
            tracing::warn!(error = %e, "could not undo an arrival its caller did not wait for");
        }
    }

    pub(super) async fn finish(
        &self,
        target: &Target,
        claim: &ClaimId,
        outcome: TaskOutcome,
        poolable: bool,
        now: Millis,
    ) -> Result<Finished, StoreError> {
        let noted = self.local.was_noted(&claim.0);
        self.local.remove_claim(&claim.0);
        let at = self.observe(now);
        let delivered = match &outcome {
            Answer(a) => FinishOutcome::Answer {
                remaining_ms: mail::remaining(a, at),
                json: mail::answer_json(a),
            },
            Failed(f) => FinishOutcome::Failed {
                json: mail::failure_json(f),
            },
            Stale => FinishOutcome::Stale,
            Requeue => FinishOutcome::Requeue,
            Withdrawn => FinishOutcome::Withdrawn,
        };
        let restart = self.new_claim();
        let call = TargetCall::Finish {
            claim: claim.0.clone(),
            outcome: delivered,
            restart: restart.clone(),
        };
        let op = self
            .op(call, &target.id, Pk::of(poolable))
            .at(now)
            .refusal_first();
        let mut ran = self.run(&op, true).await;
        if let Err(OpError::NotRun(_)) = &ran {
            // Refused (Redis down, or a failover under way): Redis never saw this outcome, so
            // nobody else can have it, and this instance's own waiter, if any, gets it now.
            // Else it is sent again while the refusal lasts, rather than dropped; a stopping
            // instance's hand-back is not worth holding its stop for.
            if !noted && self.deliver_here(target, &outcome, at) {
                return Ok(Finished::Done);
            }
            if !matches!(outcome, Requeue) {
                ran = self.run_refused(&op).await;
            }
        }
        match ran {
            Ok(values) => {
                let delivered = Delivered::read(values)?;
                self.notify(&target.id, delivered.woken).await;
                if delivered.restart {
                    self.local.add_claim(&restart, target);
                    return Ok(Finished::Restart(ClaimId(restart)));
                }
                Ok(Finished::Done)
            }
            // A noted provider task may have been adopted by a claim elsewhere, which delivers
            // the same answer: only Redis may decide, so it is not handed out here.
            Err(OpError::NotRun(e)) if noted => Err(e),
            Err(OpError::NotRun(e)) => {
                // Redis never saw this outcome, so nobody else can have it: this instance's own
                // waiters still get what they wait for.
                if self.deliver_here(target, &outcome, at) {
                    return Ok(Finished::Done);
                }
                Err(e)
            }
            // It may have been delivered already: acting on a guess could hand it out twice.
            // But a master replaced by a replica that never saw it still has the claim in
            // flight, and the waiters it covers would wait for its lease to lapse: so the claim
            // is finished again without its outcome (see `refinish`).
            Err(OpError::Unknown(e)) => match outcome {
                Answer(_) | Failed(_) => {
                    match self.refinish(target, claim, poolable, &outcome).await {
                        Some(next) => Ok(Finished::Restart(next)),
                        None => Err(e),
                    }
                }
                Stale | Requeue | Withdrawn => Err(e),
            },
        }
    }

    /// Hands a finished task's outcome Redis never saw to a waiter of this instance, if one
    /// waits and the outcome is still worth having.
    fn deliver_here(&self, target: &Target, outcome: &TaskOutcome, at: Millis) -> bool {
        let delivery = match outcome {
            Answer(a) if a.fresh_at(at, super::ms(self.settings.min_remaining)) => Ok(a.clone()),
            Failed(f) => Err(f.clone()),
            _ => return false,
        };
        match self.local.take_any_waiter(&target.id) {
            Some(w) => {
                let _ = w.tx.send(delivery);
                true
            }
            None => false,
        }
    }

    /// A claim whose finish has an unknown outcome, finished again as stale: its outcome is
    /// dropped (one answer of waste at most, never a second hand-out). Where the first finish
    /// landed, this one is a repeat and does nothing (`finish.lua`); where it was lost, the
    /// claim leaves the in-flight set now, and a waiter it covered is covered by a new task
    /// (returned) instead of waiting out the lease.
    async fn refinish(
        &self,
        target: &Target,
        claim: &ClaimId,
        poolable: bool,
        outcome: &TaskOutcome,
    ) -> Option<ClaimId> {
        if matches!(outcome, Answer(_)) {
            self.counters.given_up.fetch_add(1, Ordering::Relaxed);
        }
        let restart = self.new_claim();
        let call = TargetCall::Finish {
            claim: claim.0.clone(),
            outcome: FinishOutcome::Stale,
            restart: restart.clone(),
        };
        let op = self
            .op(call, &target.id, Pk::of(poolable))
            .at(self.local_now());
        let values = self.run(&op, true).await.ok()?;
        let delivered = Delivered::read(values).ok()?;
        self.notify(&target.id, delivered.woken).await;
        tracing::warn!(
            target = ?target,
            "a finished task's outcome is unknown; finished again without it"
        );
        delivered.restart.then(|| {
            self.local.add_claim(&restart, target);
            ClaimId(restart)
        })
    }

    pub(super) async fn abandon(
        &self,
        target_id: &str,
        waiter: &str,
        answer: Option<Answer>,
        pk: Pk,
        now: Millis,
    ) -> Result<(), StoreError> {
        let at = self.observe(now);
        let call = super::wake::abandon_call(waiter, answer.as_ref(), at);
        let op = self.op(call, target_id, pk).at(now);
        let abandoned = Woken::read("abandon.lua", self.run(&op, true).await?)?;
        self.notify(target_id, abandoned.woken).await;
        Ok(())
    }

    pub(super) async fn put(
        &self,
        target: &Target,
        answer: Answer,
        now: Millis,
    ) -> Result<(), StoreError> {
        let at = self.observe(now);
        let call = TargetCall::Put {
            remaining_ms: mail::remaining(&answer, at),
            answer_json: mail::answer_json(&answer),
        };
        let pk = Pk::of(poolable(target) == "1");
        let op = self.op(call, &target.id, pk).at(now);
        let placed = Woken::read("put.lua", self.run(&op, true).await?)?;
        self.notify(&target.id, placed.woken).await;
        Ok(())
    }

    pub(super) async fn reserve(
        &self,
        target: &Target,
        size: u32,
        now: Millis,
    ) -> Result<Vec<ClaimId>, StoreError> {
        self.observe(now);
        let candidates: Vec<String> = (0..size).map(|_| self.new_claim()).collect();
        let call = TargetCall::Reserve {
            size,
            candidates: candidates.clone(),
        };
        self.claim_some(call, target, candidates, now).await
    }

    pub(super) async fn cover(
        &self,
        target: &Target,
        now: Millis,
    ) -> Result<Vec<ClaimId>, StoreError> {
        self.observe(now);
        let mine = self.local.waiting_on(&target.id);
        if mine == 0 {
            return Ok(Vec::new());
        }
        let candidates: Vec<String> = (0..mine).map(|_| self.new_claim()).collect();
        let call = TargetCall::Cover {
            candidates: candidates.clone(),
        };
        self.claim_some(call, target, candidates, now).await
    }

    /// Records the provider task a claim's upstream task submitted (`lua/note.lua`).
    pub(super) async fn note_upstream(
        &self,
        target: &Target,
        claim: &ClaimId,
        task: &UpstreamRef,
        keep: std::time::Duration,
    ) -> Result<(), StoreError> {
        let call = TargetCall::Note {
            claim: claim.0.clone(),
            keep_ms: super::ms(keep),
            account: task.account.clone(),
            task_id: task.task_id.clone(),
        };
        // Marked before the script runs (if its reply is lost it may still have run); a claim
        // that already ended needs no note.
        if !self.local.set_noted(&claim.0) {
            return Ok(());
        }
        let op = self.op(call, &target.id, Pk::AsRecorded);
        // Setting the same note twice is harmless, so a lost reply needs no record.
        self.run_once(&op).await?;
        Ok(())
    }

    /// Runs a script that claims the first n of `candidates` (`reserve`, `cover`) and returns
    /// `{n, adopted 1..n, woken...}`.
    async fn claim_some(
        &self,
        call: TargetCall,
        target: &Target,
        candidates: Vec<String>,
        now: Millis,
    ) -> Result<Vec<ClaimId>, StoreError> {
        let name = call.file();
        let pk = Pk::of(poolable(target) == "1");
        let op = self.op(call, &target.id, pk).at(now);
        let values = self.run(&op, true).await?;
        let Claimed { adopted, woken } = Claimed::read(name, values, candidates.len())?;
        self.notify(&target.id, woken).await;
        let started: Vec<ClaimId> = candidates
            .into_iter()
            .take(adopted.len())
            .map(ClaimId)
            .collect();
        for (c, note) in started.iter().zip(&adopted) {
            self.local.add_claim(&c.0, target);
            if let Some(task) = adopted_task(note) {
                self.local.set_adoption(&c.0, task);
            }
        }
        Ok(started)
    }

    pub(super) async fn counts(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<TargetCounts, StoreError> {
        self.observe(now);
        let pk = Pk::of(poolable(target) == "1");
        let op = self
            .op(TargetCall::Counts, &target.id, pk)
            .at(now)
            .min_remaining(min_remaining_ms);
        let counted = Counted::read(self.run_once(&op).await?)?;
        self.notify(&target.id, counted.woken).await;
        Ok(TargetCounts {
            pooled: counted.pooled,
            in_flight: counted.in_flight,
            waiting: counted.waiting,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_names_the_account_and_task_and_an_empty_one_nothing() {
        let task = adopted_task("1700000000000\nmain\n7391").unwrap();
        assert_eq!(
            (task.account.as_str(), task.task_id.as_str()),
            ("main", "7391")
        );
        // Task ids of the JSON API are UUIDs; anything after the account is the id.
        let task = adopted_task("1\nacc\nab\ncd").unwrap();
        assert_eq!(task.task_id, "ab\ncd");
        for bad in ["", "1", "1\nacc", "1\n\n7", "1\nacc\n"] {
            assert_eq!(adopted_task(bad), None, "{bad:?}");
        }
    }
}
