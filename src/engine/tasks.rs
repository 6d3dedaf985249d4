//! Asynchronous tasks (compatible `in.php`/`res.php` and native `/v1/tasks`): a caller submits,
//! gets an id, and reads the result later from any instance sharing the store.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::takeover::{LOOK_FOR_RUNNER, ms, run_lease};
use super::types::past_deadline;
use super::{Engine, Redo, SolveError, SolveFailure, TaskRecord, TaskState};
use crate::model::{Reuse, SolveRequest, now_ms};
use crate::wire::inphp::codes;

/// How a report on a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportOutcome {
    Recorded,
    Duplicate,
    /// No such task for this tenant, or it has no answer to report on.
    UnknownTask,
}

impl Engine {
    /// Accepts a request for asynchronous solving and returns its digit-only id at once; the solve
    /// runs in the background until it ends or `timeout` passes. `hold` is kept alive exactly
    /// as long as the task runs (an admission permit, say).
    pub async fn submit(
        &self,
        tenant: &str,
        req: SolveRequest,
        timeout: Duration,
        hold: impl Send + 'static,
    ) -> Result<String, SolveError> {
        let id = self.open_task(tenant, &req, Some(timeout)).await?;
        self.start_task(id.clone(), req, timeout, hold);
        Ok(id)
    }

    /// Solves an opened task ([`Engine::open_task`]) in the background and finishes its record.
    /// With a shared store the task is bound to this instance (when it was opened), so that if
    /// this process dies, a reader of the record on another instance takes the task over once
    /// this instance is no longer alive ([`Engine::task`]).
    pub fn start_task(
        &self,
        task_id: String,
        req: SolveRequest,
        timeout: Duration,
        hold: impl Send + 'static,
    ) {
        self.start_task_while(task_id, req, timeout, hold, CancellationToken::new());
    }

    /// [`Engine::start_task`] for a task that is wanted only until `wanted` fires (its last
    /// caller left): it then ends at once with `ERROR_SERVER_ERROR`, giving up its place in its
    /// target's demand like a caller that leaves.
    pub fn start_task_while(
        &self,
        task_id: String,
        req: SolveRequest,
        timeout: Duration,
        hold: impl Send + 'static,
        wanted: CancellationToken,
    ) {
        // In the submitting request's span: the solve's lines carry its request id.
        let engine = self.clone();
        let span = tracing::Span::current();
        let task = async move {
            let _hold = hold;
            let solve = engine.solve(req, Instant::now() + timeout);
            let solved = tokio::select! {
                solved = solve => solved,
                () = wanted.cancelled() => Err(SolveError::Failed(SolveFailure::new(
                    codes::SERVER_ERROR,
                    "every caller waiting on the task left",
                ))),
            };
            let state = match solved {
                // Stopping is not the task's failure: with a shared store another instance
                // takes it over (and adopts its provider task); only without one is it lost.
                Err(SolveError::ShuttingDown) if engine.run_lease_length().is_some() => {
                    engine.hand_back_task(&task_id).await;
                    return;
                }
                Ok(handout) => TaskState::Ready(handout),
                Err(SolveError::Failed(f)) => TaskState::Failed(f),
                Err(SolveError::Timeout) => TaskState::Failed(past_deadline()),
                Err(SolveError::Unavailable) => {
                    TaskState::Failed(SolveFailure::new(codes::SERVER_ERROR, "store unavailable"))
                }
                Err(SolveError::ShuttingDown) => TaskState::Failed(SolveFailure::new(
                    codes::SERVER_ERROR,
                    "the gateway shut down before the task's answer came",
                )),
            };
            if let Err(e) = engine.store.finish_task(&task_id, state, now_ms()).await {
                tracing::warn!(error = %e, "could not record a task result");
            }
        };
        self.tracker
            .spawn(tracing::Instrument::instrument(task, span));
    }

    /// Records a pending task for `tenant` and returns its id without solving it: with
    /// `serve --queue` a queue worker solves it and finishes the record (docs/QUEUE.md).
    /// `in_process`: the task's timeout when this process will solve it; with a store other
    /// instances share, the record then keeps the request, so that one of them can take the task
    /// over if this process dies.
    pub async fn open_task(
        &self,
        tenant: &str,
        req: &SolveRequest,
        in_process: Option<Duration>,
    ) -> Result<String, SolveError> {
        if in_process.is_some() {
            if let Some(refused) = self.solver.refuses(req) {
                return Err(SolveError::Failed(refused));
            }
        }
        let target = self.target(req);
        let id = self.fresh_task_id().await?;
        let redo = in_process
            .filter(|_| self.run_lease_length().is_some())
            .map(|timeout| Redo {
                request: crate::wire::native::native_body(req),
                deadline_at: now_ms().saturating_add(ms(timeout)),
            });
        if let Some(timeout) = in_process.filter(|_| redo.is_some()) {
            // Before the record exists, so no reader ever finds it pending without a runner.
            // The id is fresh, so the binding is unbound; a store away now leaves it unbound
            // (the record cannot be written then either).
            let ttl = self.binding_ttl(timeout);
            let _ = self
                .store
                .bind_key(&run_lease(&id), None, self.instance(), ttl, now_ms())
                .await;
        }
        let record = TaskRecord {
            id: id.clone(),
            tenant: tenant.to_owned(),
            kind: target.kind,
            target_id: target.id.clone(),
            created_at: now_ms(),
            state: TaskState::Pending,
            finished_at: None,
            reported: false,
            redo,
        };
        self.store
            .create_task(record)
            .await
            .map_err(|_| SolveError::Unavailable)?;
        Ok(id)
    }

    /// Ends a task that will never be solved (its hand-over to the queue failed), so a reader
    /// hears why instead of waiting for it.
    pub async fn fail_task(&self, id: &str, failure: SolveFailure) {
        if let Err(e) = self
            .store
            .finish_task(id, TaskState::Failed(failure), now_ms())
            .await
        {
            tracing::warn!(error = %e, "could not record a task result");
        }
    }

    /// The tenant's task, or `None` when it does not exist, expired, or belongs to another tenant.
    /// With `wait`, the record once it is finished, or as it is when `wait` runs out or this
    /// instance is cut short. A pending task whose instance died or stopped is taken over here
    /// (see `take_over_if_orphaned`): every reader of a task that can be taken over looks every
    /// [`LOOK_FOR_RUNNER`]; the others wait to be woken by the finish.
    pub async fn task(
        &self,
        tenant: &str,
        id: &str,
        wait: Duration,
    ) -> Result<Option<TaskRecord>, SolveError> {
        let until = Instant::now() + wait;
        // The first read never waits: another tenant's id must answer at once, exactly as an
        // unknown id does, or how long the answer takes would tell that the id exists.
        let mut first = true;
        // Only a task another instance could take over needs a look for its runner each
        // second; any other reader waits to be woken by the finish.
        let mut takeable = true;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let slice = match self.run_lease_length() {
                Some(_) if takeable => left.min(LOOK_FOR_RUNNER),
                _ => left,
            };
            let record = if std::mem::take(&mut first) || slice.is_zero() || self.is_cut() {
                self.store.get_task(id).await
            } else {
                // A stopping instance stops waiting: its reader answers with the task as it is
                // and reads again elsewhere.
                tokio::select! {
                    record = self.store.wait_task(id, slice) => record,
                    () = self.cut.cancelled() => self.store.get_task(id).await,
                }
            };
            let record = record
                .map_err(|_| SolveError::Unavailable)?
                .filter(|r| r.tenant == tenant);
            let Some(r) = &record else {
                return Ok(None);
            };
            takeable = r.redo.is_some();
            if r.state != TaskState::Pending || self.is_cut() {
                return Ok(record);
            }
            self.take_over_if_orphaned(r).await;
            if Instant::now() >= until {
                return Ok(record);
            }
        }
    }

    /// Routes `reportbad`/`reportgood` to the upstream task that produced the answer; a bad
    /// reusable answer is also dropped from the cache so nobody else gets it.
    pub async fn report_task(
        &self,
        tenant: &str,
        id: &str,
        good: bool,
    ) -> Result<ReportOutcome, SolveError> {
        let Some(record) = self.task(tenant, id, Duration::ZERO).await? else {
            return Ok(ReportOutcome::UnknownTask);
        };
        let TaskState::Ready(handout) = &record.state else {
            return Ok(ReportOutcome::UnknownTask);
        };
        if !self
            .store
            .mark_reported(id)
            .await
            .map_err(|_| SolveError::Unavailable)?
        {
            return Ok(ReportOutcome::Duplicate);
        }
        if !good && record.kind.reuse() == Reuse::Reusable {
            self.store
                .shared_evict(&record.target_id)
                .await
                .map_err(|_| SolveError::Unavailable)?;
        }
        if let Some(upstream) = &handout.answer.upstream {
            // The caller's report is recorded either way; a provider that refuses it is only logged.
            if let Err(e) = self.report(upstream, good).await {
                tracing::info!(error = %e, "provider did not take a report");
            }
        }
        Ok(ReportOutcome::Recorded)
    }

    async fn fresh_task_id(&self) -> Result<String, SolveError> {
        loop {
            // 15 digits: unique enough to retry on the rare clash, and exact in a JavaScript number.
            let id = rand::rng()
                .random_range(100_000_000_000_000u64..1_000_000_000_000_000)
                .to_string();
            match self.store.get_task(&id).await {
                Ok(Some(_)) => continue,
                // With the store away a clash (one in 10^14 per live task) is not worth refusing
                // the task for: the record is kept locally until the store returns.
                Ok(None) | Err(_) => return Ok(id),
            }
        }
    }
}
