//! Reusable targets (promise 4): one task per target fleet-wide, its answer shared by every
//! caller and cached, through [`super::Reusable::shared_arrive`]. A caller that is handed an answer
//! with too little life left asks again; an instance whose callers follow a dead leader takes
//! the target over (docs/REDIS.md, "Reusable answers").

use tokio::time::Instant;
use tracing::Instrument;

use super::solve::Engine;
use super::store::SharedArrival;
use super::types::Priority;
use super::{Handout, SolveError};
use crate::model::{SolveRequest, Source, Target, now_ms};

impl Engine {
    pub(super) async fn shared(
        &self,
        target: &Target,
        req: SolveRequest,
        deadline: Instant,
        priority: Priority,
    ) -> Result<Handout, SolveError> {
        let kind = target.kind;
        loop {
            if self.store.degraded() {
                return self.degraded(req, deadline, priority).await;
            }
            let arriving = self.arrive_shared(target, &req, priority);
            let arrival = match arriving.by(deadline).await {
                Some(Ok(a)) => a,
                Some(Err(_)) => return self.degraded(req, deadline, priority).await,
                None => return Err(SolveError::Timeout),
            };
            let (rx, source) = match arrival {
                SharedArrival::Cached(answer) => {
                    super::trace::handed(&answer, Source::Shared);
                    return Ok(Handout {
                        kind,
                        answer,
                        source: Source::Shared,
                    });
                }
                SharedArrival::Follow(rx) => {
                    super::trace::joined(target);
                    (rx, Source::Shared)
                }
                SharedArrival::Lead(rx, lead) => {
                    self.lead_shared(target.clone(), req.clone(), lead, priority);
                    (rx, Source::Solved)
                }
            };
            // Listed while it waits, so this instance takes over if the leader's dies
            // (`cover_waiting`).
            let _active = self.active.enter(target, &req, priority);
            let delivered = tokio::select! {
                // An answer that came is handed over even if the cut came too.
                biased;
                delivered = tokio::time::timeout_at(deadline, rx) => delivered,
                () = self.cut.cancelled() => return Err(SolveError::ShuttingDown),
            };
            let answer = match delivered {
                Ok(Ok(Ok(answer))) => answer,
                Ok(Ok(Err(failure))) => return Err(SolveError::Failed(failure)),
                Ok(Err(_closed)) => return Err(SolveError::Unavailable),
                Err(_elapsed) => return Err(SolveError::Timeout),
            };
            if answer.fresh_at(now_ms(), self.min_remaining_ms()) {
                super::trace::handed(&answer, source);
                return Ok(Handout {
                    kind,
                    answer,
                    source,
                });
            }
            // Too little life left to hand out (promise 2): an old leader's late answer, or mail
            // that waited. Arrive again: the stale cache is dropped and a new task solves it.
        }
    }

    /// Solves a reusable target as its leader and records the outcome for every follower.
    pub(super) fn lead_shared(
        &self,
        target: Target,
        req: SolveRequest,
        lead: u64,
        priority: Priority,
    ) {
        let engine = self.clone();
        let span = super::trace::upstream_task(&target, priority);
        let task = async move {
            let outcome = engine.run_upstream(&req, priority).await;
            if matches!(&outcome, Err(f) if f.is_shutting_down()) {
                // Cut short by this instance stopping: recording it would fail every follower,
                // on every instance. The lock is left to lapse so a follower's instance takes
                // the target over.
                tracing::info!(target = ?target, "leaving a reusable target's lead at shutdown");
                return;
            }
            let stored = engine
                .store
                .shared_finish(&target, lead, outcome, now_ms())
                .await;
            if let Err(e) = stored {
                tracing::warn!(target = ?target, error = %e, "could not record a shared answer");
            }
        };
        self.tracker.spawn(task.instrument(span));
    }

    /// Takes over `target` when its leader's instance died and this instance's callers still
    /// follow it (the store lets at most one instance win): starts the one task, under the new
    /// fencing token, at the priority of its most urgent caller here. Called by `cover_waiting`
    /// every third of a lease.
    pub(super) async fn take_over(&self, target: Target, req: SolveRequest, priority: Priority) {
        let taken = self
            .store
            .shared_takeover(&target, now_ms(), self.min_remaining_ms())
            .await;
        if let Ok(Some(lead)) = taken {
            tracing::info!(target = ?target, "taking over a reusable target whose leader was lost");
            self.lead_shared(target, req, lead, priority);
        }
    }
}
