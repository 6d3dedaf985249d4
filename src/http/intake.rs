//! Where accepted work goes: solved in this process, or, with `serve --queue`, handed to the
//! queue's workers (docs/QUEUE.md "Front ends"). Either way the caller's task record lives in
//! the store, so `res.php`, `GET /v1/tasks/{id}`, `getTaskResult` and reports read it the same.

use std::sync::Arc;
use std::time::Duration;

use futures::future::Either;
use tokio::time::Instant;

use super::AppState;
use super::error::ApiError;
use crate::engine::{Handout, Permit, SolveError, SolveFailure, TaskState};
use crate::model::SolveRequest;
use crate::queue::{NewTask, Queue};
use crate::tenants::TenantPass;
use crate::wire::inphp::codes;

/// How this gateway runs the tasks it accepts.
#[derive(Clone, Default)]
pub enum Intake {
    /// Solved by this process's engine.
    #[default]
    InProcess,
    /// Put on the queue; workers solve them and finish the task records.
    Queued(Arc<Queue>),
}

impl AppState {
    /// Accepts an asynchronous task for `tenant`; returns its id at once. `hold` lives until the
    /// task ends (or its timeout passes), wherever it is solved.
    pub(super) async fn submit_task(
        &self,
        tenant: &str,
        req: SolveRequest,
        timeout: Duration,
        hold: impl Send + 'static,
    ) -> Result<String, SolveError> {
        let in_process = self.in_process().then_some(timeout);
        let id = self.engine.open_task(tenant, &req, in_process).await?;
        self.start_opened(tenant, id, req, timeout, hold, None)
            .await
    }

    /// Whether tasks are solved in this process (not handed to a queue).
    pub(super) fn in_process(&self) -> bool {
        matches!(self.intake, Intake::InProcess)
    }

    /// Solves a task already opened with `Engine::open_task`, here or through the queue (under
    /// the queue's idempotency key `idem` when given). Returns the task's id: with the queue, a
    /// key it already holds names the earlier task instead, and nothing is added.
    pub(super) async fn start_opened(
        &self,
        tenant: &str,
        id: String,
        req: SolveRequest,
        timeout: Duration,
        hold: impl Send + 'static,
        idem: Option<String>,
    ) -> Result<String, SolveError> {
        let Intake::Queued(queue) = &self.intake else {
            self.engine.start_task(id.clone(), req, timeout, hold);
            return Ok(id);
        };
        let id = self
            .enqueue_opened(queue, tenant, id, &req, timeout, idem)
            .await?;
        // The admission permit and the tenant's pass count the task until it ends, as when it
        // is solved here, so `max_concurrent` and `threadsinfo` mean the same with a queue.
        // Not tracked for shutdown: holding a count is no work to finish.
        let (engine, tenant, task_id) = (self.engine.clone(), tenant.to_owned(), id.clone());
        tokio::spawn(async move {
            let _hold = hold;
            let _ = engine.task(&tenant, &task_id, timeout).await;
        });
        Ok(id)
    }

    /// Puts an opened task on `queue` (see [`AppState::start_opened`]); returns its id.
    async fn enqueue_opened(
        &self,
        queue: &Queue,
        tenant: &str,
        id: String,
        req: &SolveRequest,
        timeout: Duration,
        idem: Option<String>,
    ) -> Result<String, SolveError> {
        let mut task = NewTask {
            id: Some(id.clone()),
            request: crate::wire::native::native_body(req),
            tenant: Some(tenant.to_owned()),
            partition: req.partition.clone(),
            timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            deadline_at: Some(
                crate::model::now_ms()
                    .saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            ),
            request_id: crate::telemetry::request_id::RequestId::current()
                .map(|r| r.as_str().to_owned()),
            ..NewTask::default()
        };
        task.idem = idem;
        match queue.enqueue(task).await {
            Ok(enqueued) if enqueued.duplicate => Ok(enqueued.id),
            Ok(_) => Ok(id),
            Err(e) => {
                tracing::warn!(error = %e, "could not put a task on the queue");
                let failure = SolveFailure::new(codes::SERVER_ERROR, "the queue is unavailable");
                self.engine.fail_task(&id, failure).await;
                Err(SolveError::Unavailable)
            }
        }
    }

    /// Admits a native call that may start work: the fleet's threads, a slot of this instance
    /// (waited for), then the tenant's limits (which may rewrite `req`'s partition). Both held
    /// until the work ends.
    pub(super) async fn admit_native(
        &self,
        tenant: &str,
        req: &mut SolveRequest,
    ) -> Result<(Permit, TenantPass), ApiError> {
        super::fleet_busy::check_native(self)?;
        let permit = self
            .admission
            .admit()
            .await
            .ok_or_else(ApiError::overloaded)?;
        let pass = self
            .tenants
            .admit(tenant, req)
            .map_err(|r| super::usage::native_refusal(&r))?;
        Ok((permit, pass))
    }

    /// Solves `req` for a caller waiting on the response (`/v1/solve`, `/solve`): in this
    /// process, or through the queue while waiting on the task record (woken, not polled).
    ///
    /// Not an `async fn`: that layer would hold its own copy of `req` in every waiting caller's
    /// future (docs/BENCHMARKS.md "Capacity").
    pub(super) fn solve_now<'a>(
        &'a self,
        tenant: &'a str,
        req: SolveRequest,
        deadline: Instant,
    ) -> impl Future<Output = Result<Handout, SolveError>> + Send + 'a {
        if matches!(self.intake, Intake::InProcess) {
            return Either::Left(self.engine.solve(req, deadline));
        }
        // Boxed: the queue's submit is the larger future, and unboxed it would size every
        // in-process caller's future too (docs/BENCHMARKS.md "Hot path and capacity").
        Either::Right(Box::pin(self.through_queue(tenant, req, deadline)))
    }

    /// One waiter per task: the caller's own (its handler holds the permit and pass already).
    async fn through_queue(
        &self,
        tenant: &str,
        req: SolveRequest,
        deadline: Instant,
    ) -> Result<Handout, SolveError> {
        let Intake::Queued(queue) = &self.intake else {
            return self.engine.solve(req, deadline).await;
        };
        let timeout = deadline.saturating_duration_since(Instant::now());
        let id = self.engine.open_task(tenant, &req, None).await?;
        let id = self
            .enqueue_opened(queue, tenant, id, &req, timeout, None)
            .await?;
        self.wait_answer(tenant, &id, deadline).await
    }

    /// Waits for a task's answer until `deadline`, woken when it finishes.
    pub(super) async fn wait_answer(
        &self,
        tenant: &str,
        id: &str,
        deadline: Instant,
    ) -> Result<Handout, SolveError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SolveError::Timeout);
            }
            let record = self.engine.task(tenant, id, left).await?;
            match record.map(|r| r.state) {
                Some(TaskState::Ready(handout)) => return Ok(handout),
                Some(TaskState::Failed(failure)) => return Err(SolveError::Failed(failure)),
                // The task is left to another instance (`Engine::task`); so is its caller.
                Some(TaskState::Pending) if self.engine.is_cut() => {
                    return Err(SolveError::ShuttingDown);
                }
                Some(TaskState::Pending) => continue,
                None => {
                    return Err(SolveError::Failed(SolveFailure::new(
                        codes::SERVER_ERROR,
                        "the task's record is gone",
                    )));
                }
            }
        }
    }
}
