//! Reusable answers (image and text by content, `cf_clearance` per proxy and user agent): one
//! leader per target under a lock with a fencing token, followers on any instance woken with the
//! outcome, the answer cached until it expires (promise 4).
//!
//! The lock and every follower are leases (`redis_lease_s`), renewed by their instance while they
//! live (`lease.rs`); a dead leader's lock lapses within one lease and one follower's instance
//! takes over. docs/REDIS.md, "Reusable answers", tells the whole story.

use std::sync::atomic::Ordering;

use redis::Value;
use tokio::sync::oneshot;

use super::call::{SharedCall, SharedOutcome};
use super::fanout::LocalWaiter;
use super::reply::{SharedArrived, Woken};
use super::{Inner, mail, ms};
use crate::engine::SolveFailure;
use crate::engine::store::{SharedArrival, StoreError};
use crate::model::{Answer, Millis, Target};

impl Inner {
    pub(super) async fn shared_arrive(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<SharedArrival, StoreError> {
        let inner = self;
        // Listed in `cg:targets` so an idle reusable target's keys (its fence counter has no TTL)
        // are retired like any other; marked reusable so figures leave it out.
        inner.note_target(target, now).await?;
        let waiter = format!(
            "{}:s{}",
            inner.instance,
            inner.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let (tx, rx) = oneshot::channel();
        // Registered before the script runs, so a delivery racing the reply finds it, and the
        // renewer keeps its lease from then on.
        inner.local.add_waiter(
            &waiter,
            LocalWaiter {
                target: target.clone(),
                tx,
                poolable: false,
                arrived: None,
            },
        );
        let mut conn = inner.conn();
        let call = SharedCall::Arrive {
            min_remaining_ms,
            waiter: waiter.clone(),
            lease_ms: ms(inner.settings.lease),
        };
        let r = call
            .invocation(&target.id, inner.script_clock(now))
            .invoke_async::<Vec<Value>>(&mut conn)
            .await;
        let values = match inner.seen(r) {
            Ok(v) => v,
            Err(e) => {
                inner.local.take_waiter(&waiter);
                return Err(e);
            }
        };
        let arrived = match SharedArrived::read(values) {
            Ok(arrived) => arrived,
            Err(e) => {
                inner.local.take_waiter(&waiter);
                return Err(e);
            }
        };
        match arrived {
            SharedArrived::Cached {
                answer,
                remaining_ms,
            } => {
                inner.local.take_waiter(&waiter);
                let answer = serde_json::from_str(&answer).map_err(|e| {
                    StoreError::Unavailable(format!("unreadable cached answer: {e}"))
                })?;
                let at = inner.observe(now);
                Ok(SharedArrival::Cached(mail::restamp(
                    answer,
                    remaining_ms,
                    at,
                )))
            }
            SharedArrived::Follow => Ok(SharedArrival::Follow(rx)),
            SharedArrived::Lead { token } => {
                inner
                    .leads
                    .add(target, token, now + ms(inner.settings.lock_ttl));
                Ok(SharedArrival::Lead(rx, token))
            }
        }
    }

    pub(super) async fn shared_finish(
        &self,
        target: &Target,
        lead: u64,
        outcome: Result<Answer, SolveFailure>,
        now: Millis,
    ) -> Result<(), StoreError> {
        let inner = self;
        // The task is over: stop renewing its lock whatever happens to the script (a lock left
        // behind lapses within a lease, and a follower takes over).
        inner.leads.remove(&target.id, lead);
        let mut conn = inner.conn();
        let call = SharedCall::Finish {
            token: lead,
            outcome: shared_outcome(&outcome, inner.observe(now)),
            mail_ttl_ms: inner.mail_ttl(),
        };
        let r = call
            .invocation(&target.id, inner.script_clock(now))
            .invoke_async::<Vec<Value>>(&mut conn)
            .await;
        match inner
            .seen(r)
            .and_then(|values| Woken::read("shared_finish.lua", values))
        {
            Ok(finished) => {
                inner.notify(&target.id, finished.woken).await;
                Ok(())
            }
            Err(e) => {
                // Redis is away (or its reply unreadable): this instance's followers still get
                // the outcome (the same one Redis gave the others if the script ran and only
                // its reply was lost).
                while let Some(w) = inner.local.take_any_waiter(&target.id) {
                    let _ = w.tx.send(outcome.clone());
                }
                Err(e)
            }
        }
    }
}

/// A reusable task's outcome as `shared_finish.lua` takes it: an answer carries its remaining
/// life at `now` (the script stamps its expiry in Redis time), a failure as it is.
fn shared_outcome(outcome: &Result<Answer, SolveFailure>, now: Millis) -> SharedOutcome {
    match outcome {
        Ok(a) => SharedOutcome::Answer {
            remaining_ms: mail::remaining(a, now),
            json: mail::answer_json(a),
        },
        Err(f) => SharedOutcome::Failed {
            json: mail::failure_json(f),
        },
    }
}
