//! Tasks of an instance that died (docs/API.md "Tasks of an instance that died"): with a store
//! other instances share, a task solved in this process holds a run lease while it runs, and a
//! reader of a pending task whose lease lapsed takes it over.

use std::time::Duration;

use super::types::past_deadline;
use super::{Engine, SolveFailure, TaskRecord};
use crate::model::now_ms;
use crate::wire::inphp::codes;

/// The shortest run lease. A run lease is twice the store's lease on waiters and claims: the
/// last renewal of a dead instance's run lease is at most a third of it before the death, so by
/// the time it lapses the store has let the dead instance's claims lapse too, and the instance
/// that takes the task over adopts the provider task the dead one had submitted
/// (`lua/lib/target.lua`, `adopt`) instead of paying for the work again beside it.
const MIN_RUN_LEASE: Duration = Duration::from_secs(15);

/// How often a reader of a pending task looks whether its runner is gone. A stopping instance
/// lets go of its tasks at once, and their callers, moved to another instance, should not wait
/// a third of a lease to notice; one store call a second per reader is cheap beside the reads
/// of the record a long poll makes anyway.
pub(super) const LOOK_FOR_RUNNER: Duration = Duration::from_secs(1);

/// The binding that says a task's runner is alive, bound to the runner's instance id.
pub(super) fn run_lease(task_id: &str) -> String {
    format!("run:{task_id}")
}

pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Engine {
    /// How long a running task's lease on its record lasts, with a store other instances share
    /// (none without: nobody else could take the task over).
    pub fn run_lease_length(&self) -> Option<Duration> {
        let lease = self.store.lease()?;
        Some(lease.saturating_mul(2).max(MIN_RUN_LEASE))
    }

    /// Renews a task's run lease every third of its length; the caller stops it when the task
    /// ends. If another instance took the task over meanwhile (this one was paused past the
    /// lease), both run it and its record keeps the first result.
    pub(super) async fn renew_run_lease(&self, task_id: &str, length: Duration) {
        let lease = run_lease(task_id);
        loop {
            tokio::time::sleep(length / 3).await;
            let me = self.instance();
            let renewed = self
                .store
                .bind_key(&lease, Some(me), me, ms(length), now_ms())
                .await;
            // Bound by nobody: the store restarted empty, or this process was away long enough
            // for it to lapse. Taken again unless another instance has it.
            if matches!(renewed, Ok(false)) {
                let _ = self
                    .store
                    .bind_key(&lease, None, me, ms(length), now_ms())
                    .await;
            }
        }
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

    /// Takes over a pending task whose instance died or stopped (its run lease lapsed or was let
    /// go): binds the lease (only one reader fleet-wide wins) and runs the task here until its
    /// own deadline, or ends it if that has passed. Its upstream work is not paid twice: the
    /// claim this solve makes adopts the provider task the other instance had submitted.
    pub(super) async fn take_over_if_orphaned(&self, record: &TaskRecord) {
        let (Some(redo), Some(length)) = (&record.redo, self.run_lease_length()) else {
            return;
        };
        // A stopping instance (its tracker closes at the signal) takes nothing over: it submits
        // nothing new upstream and would only hand the task back at its cut.
        if self.tracker.is_closed() {
            return;
        }
        // Binds only an unbound lease: whoever holds it (the runner, or a reader that took the
        // task over first) keeps it.
        let lease = run_lease(&record.id);
        if !matches!(
            self.store
                .bind_key(&lease, None, self.instance(), ms(length), now_ms())
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
