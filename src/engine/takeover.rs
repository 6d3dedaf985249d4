//! Tasks of an instance that died (docs/API.md "Tasks of an instance that died"): with a store
//! other instances share, a task solved in this process is bound to this instance for its life,
//! and a reader of a pending task whose instance is no longer alive (it said so every beat, for
//! its lease and a beat: the one lease of every instance and worker) takes it over.

use std::time::Duration;

use super::types::past_deadline;
use super::{Engine, SolveFailure, TaskRecord};
use crate::model::now_ms;
use crate::wire::inphp::codes;

/// How often a reader of a pending task looks whether its runner is gone. A stopping instance
/// lets go of its tasks at once, and their callers, moved to another instance, should not wait
/// long to notice; two store calls a second per reader of such a task.
pub(super) const LOOK_FOR_RUNNER: Duration = Duration::from_secs(1);

/// The binding that names a task's runner, bound to the runner's instance id.
pub(super) fn run_lease(task_id: &str) -> String {
    format!("run:{task_id}")
}

pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Engine {
    /// How long after an instance's last beat it is taken for dead and its tasks are taken
    /// over, with a store other instances share (none without: nobody else could take a task
    /// over). Its lease and one more beat: by then the store has let its claims lapse too, so
    /// the instance that takes a task over adopts the provider task the dead one had submitted
    /// (`lua/lib/target.lua`, `adopt`) instead of paying for the work again.
    pub fn run_lease_length(&self) -> Option<Duration> {
        let lease = self.store.lease()?;
        Some(lease + lease / 3)
    }

    /// How long a task's binding to its runner is kept: its whole life and a lease more, so it
    /// never lapses under a live runner (the runner's liveness is what lapses, once, for all of
    /// its tasks: no renewal per task).
    pub(super) fn binding_ttl(&self, left: Duration) -> u64 {
        ms(left.saturating_add(self.run_lease_length().unwrap_or_default()))
    }

    /// Leaves a task this instance is stopping before its answer came to whichever instance
    /// reads it next: the run lease is let go now rather than left to lapse, and the claim the
    /// cut solve handed back keeps its provider task for that instance to adopt. A lease that
    /// cannot be let go (the store away) lapses within its length instead.
    pub(super) async fn hand_back_task(&self, task_id: &str) {
        // Rebound for a millisecond: the store call that lets go only of our own binding (one
        // another instance took while this one was paused stays theirs).
        let me = self.instance();
        let _ = self
            .store
            .bind_key(&run_lease(task_id), Some(me), me, 1, now_ms())
            .await;
        tracing::info!(task = %task_id, "stopping before the task's answer came; left for another instance to take over");
    }

    /// Takes over a pending task whose instance died or stopped (it is no longer alive, or let
    /// the task go): binds the task to this instance (compare-and-set on the binding it read,
    /// so only one reader fleet-wide wins) and runs it here until its own deadline, or ends it
    /// if that has passed. Its upstream work is not paid twice: the claim this solve makes
    /// adopts the provider task the other instance had submitted.
    pub(super) async fn take_over_if_orphaned(&self, record: &TaskRecord) {
        let (Some(redo), Some(_)) = (&record.redo, self.run_lease_length()) else {
            return;
        };
        // A stopping instance (its tracker closes at the signal) takes nothing over: it submits
        // nothing new upstream and would only hand the task back at its cut.
        if self.tracker.is_closed() {
            return;
        }
        // A live runner (the first, or a reader that took the task over first) keeps it.
        let lease = run_lease(&record.id);
        let runner = match self.store.bound_key(&lease, now_ms()).await {
            Ok(runner) => runner,
            Err(_) => return,
        };
        if let Some(runner) = &runner {
            if runner == self.instance() || self.store.instance_alive(runner).await.unwrap_or(true)
            {
                return;
            }
        }
        let left = Duration::from_millis(redo.deadline_at.saturating_sub(now_ms()));
        let ttl = self.binding_ttl(left);
        if !matches!(
            self.store
                .bind_key(&lease, runner.as_deref(), self.instance(), ttl, now_ms())
                .await,
            Ok(true)
        ) {
            return;
        }
        self.figures.task_taken_over();
        let left = redo.deadline_at.saturating_sub(now_ms());
        let parsed = crate::wire::native::parse_native_value(redo.request.clone(), Duration::MAX);
        match parsed {
            Ok(native) if left > 0 => {
                tracing::info!(task = %record.id, "taking over a task whose instance stopped renewing it");
                self.start_task(
                    record.id.clone(),
                    native.req,
                    Duration::from_millis(left),
                    (),
                );
            }
            Ok(_) => self.fail_task(&record.id, past_deadline()).await,
            Err(e) => {
                tracing::warn!(task = %record.id, code = e.code, "a task to take over has a request that does not parse");
                let failure =
                    SolveFailure::new(codes::SERVER_ERROR, "the task could not be taken over");
                self.fail_task(&record.id, failure).await;
            }
        }
    }
}
