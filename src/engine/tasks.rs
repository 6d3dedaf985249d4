//! Asynchronous tasks (compatible `in.php`/`res.php` and native `/v1/tasks`): a caller submits,
//! gets an id, and reads the result later from any instance sharing the store.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::{Engine, SolveError, SolveFailure, TaskRecord, TaskState};
use crate::compat::codes;
use crate::model::{Reuse, SolveRequest, now_ms};

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
        let id = self.open_task(tenant, &req).await?;
        self.start_task(id.clone(), req, timeout, hold);
        Ok(id)
    }

    /// Solves an opened task ([`Engine::open_task`]) in the background and finishes its record.
    pub fn start_task(
        &self,
        task_id: String,
        req: SolveRequest,
        timeout: Duration,
        hold: impl Send + 'static,
    ) {
        let engine = self.clone();
        // In the submitting request's span: the solve's lines carry its request id.
        let span = tracing::Span::current();
        let task = async move {
            let _hold = hold;
            let state = match engine.solve(req, Instant::now() + timeout).await {
                Ok(handout) => TaskState::Ready(handout),
                Err(SolveError::Failed(f)) => TaskState::Failed(f),
                Err(SolveError::Timeout) => TaskState::Failed(SolveFailure::new(
                    codes::CAPTCHA_UNSOLVABLE,
                    "no answer before the task's deadline",
                )),
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
    pub async fn open_task(&self, tenant: &str, req: &SolveRequest) -> Result<String, SolveError> {
        let target = self.target(req);
        let id = self.fresh_task_id().await?;
        let record = TaskRecord {
            id: id.clone(),
            tenant: tenant.to_owned(),
            kind: target.kind,
            target_id: target.id.clone(),
            created_at: now_ms(),
            state: TaskState::Pending,
            finished_at: None,
            reported: false,
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
    pub async fn task(
        &self,
        tenant: &str,
        id: &str,
        wait: Duration,
    ) -> Result<Option<TaskRecord>, SolveError> {
        let record = if wait.is_zero() {
            self.store.get_task(id).await
        } else {
            self.store.wait_task(id, wait).await
        };
        Ok(record
            .map_err(|_| SolveError::Unavailable)?
            .filter(|r| r.tenant == tenant))
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
