//! One delivered entry, from its delivery to its end: skip it if its result exists, dead-letter
//! it if it cannot be read or was delivered too often, solve it at queue priority, then write
//! the result, schedule a retry, or dead-letter it. A lost lease ends the work silently.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::Stream;
use super::metrics::Outcome;
use super::ops::{Begin, Finished};
use crate::engine::{SolveError, SolveFailure, TaskState};
use crate::model::{Kind, now_ms};
use crate::provider::{ErrorClass, classify};
use crate::queue::entry::{Entry, MAX_TIMEOUT, Task};
use crate::queue::result::{Finish, QueueResult};
use crate::queue::worker::{Solved, solve_queued};
use crate::queue::{QueueError, ResultStatus};
use crate::wire::inphp::InPhpDialect;

/// The failure code of an entry that could not be read at all.
pub const BAD_ENTRY: &str = "bad_entry";
/// The failure code of an entry delivered more often than `max_deliveries` without an answer
/// (its workers kept dying on it).
pub const TOO_MANY_DELIVERIES: &str = "ERROR_TOO_MANY_DELIVERIES";

/// What a solve attempt came to.
enum Attempt {
    Answered(QueueResult),
    /// A terminal failure: the failed result is the task's end.
    Failed(QueueResult),
    /// Worth another attempt later (our own timeout, store or provider trouble, stopping).
    Retry(SolveFailure),
    /// Stopping: hand the entry back at once, not counted as an attempt.
    HandBack,
    /// The lease was lost while solving.
    Lost,
}

impl Stream {
    /// Processes one delivered entry to its end on this worker.
    pub(super) async fn process_entry(self: Arc<Self>, entry: Entry) {
        let held = self.hold(&entry.stream_id);
        // The task's lines (its upstream tasks' too) name the request that enqueued it.
        let span = tracing::info_span!(
            "queue_task",
            stream_id = %entry.stream_id,
            request_id = entry.request_id().as_ref().map(|r| r.as_str()),
        );
        let handled = tracing::Instrument::instrument(self.handle(&entry, &held.lost), span);
        let outcome = match handled.await {
            Ok(outcome) => outcome,
            Err(e) => {
                // Redis could not be told: the entry stays pending and is reclaimed after the
                // lease (by this worker too), where `begin` finds any result already written.
                tracing::warn!(stream_id = %entry.stream_id, error = %e, "could not end a queue entry; it will be reclaimed");
                Outcome::LeftPending
            }
        };
        if outcome == Outcome::LeaseLost && !held.lost.is_cancelled() {
            self.metrics
                .leases_lost
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.metrics.count(outcome);
        drop(held);
    }

    async fn handle(
        self: &Arc<Self>,
        entry: &Entry,
        lost: &tokio_util::sync::CancellationToken,
    ) -> Result<Outcome, QueueError> {
        let started = Instant::now();
        let task = entry.task();
        let task_id = match &task {
            Ok(t) => Some(t.id.as_str()),
            Err(u) => u.id.as_deref(),
        };
        // A gateway tenant's task has a task record to finish from its result.
        let recorded = task.as_ref().is_ok_and(|t| t.tenant.is_some());
        let deliveries = match self.begin(entry, task_id, recorded).await? {
            Begin::Lost => return Ok(Outcome::LeaseLost),
            Begin::Done if recorded => {
                // A worker wrote the result and stopped before the record: finish it now.
                let id = task_id.unwrap_or_default();
                if let Some(result) = self.queue.result(id).await? {
                    self.record_then_acknowledge(entry, &result).await;
                }
                return Ok(Outcome::AlreadyDone);
            }
            Begin::Done => return Ok(Outcome::AlreadyDone),
            Begin::Go(n) => n,
        };
        let task = match task {
            Ok(task) => task,
            Err(unreadable) => {
                tracing::warn!(stream_id = %entry.stream_id, reason = %unreadable.reason, "unreadable queue entry dead-lettered");
                let failure = SolveFailure::new(BAD_ENTRY, unreadable.reason.clone());
                let result = unreadable
                    .id
                    .as_deref()
                    .map(|id| self.failed(id, None, &failure, deliveries, started));
                return self
                    .end(entry, None, result, Some(&unreadable.reason))
                    .await;
            }
        };
        let attempts = task.attempt.saturating_add(deliveries);
        let max = self.queue.settings().max_deliveries;
        if attempts > max {
            let reason =
                format!("delivered {attempts} times without an answer (max_deliveries {max})");
            let failure = SolveFailure::new(TOO_MANY_DELIVERIES, reason.clone());
            let result = self.failed(&task.id, None, &failure, attempts, started);
            return self
                .end(entry, Some(&task), Some(result), Some(&reason))
                .await;
        }
        match self.attempt(&task, attempts, started, lost).await {
            Attempt::Answered(result) | Attempt::Failed(result) => {
                self.end(entry, Some(&task), Some(result), None).await
            }
            Attempt::Lost => Ok(Outcome::LeaseLost),
            Attempt::HandBack => self.hand_back(entry, task.attempt, Duration::ZERO).await,
            Attempt::Retry(failure) if attempts >= max => {
                let reason = format!(
                    "failed {attempts} deliveries (max_deliveries {max}), last: {}: {}",
                    failure.code, failure.message
                );
                let result = self.failed(&task.id, kind_of(&task), &failure, attempts, started);
                self.end(entry, Some(&task), Some(result), Some(&reason))
                    .await
            }
            Attempt::Retry(failure) => {
                tracing::info!(task = %task.id, attempts, code = %failure.code, "queue task failed; retrying later");
                let delay = self.backoff(attempts);
                self.hand_back(entry, attempts, delay).await
            }
        }
    }

    /// Solves the task once, at queue priority, unless its lease is lost first.
    async fn attempt(
        &self,
        task: &Task,
        attempts: u32,
        started: Instant,
        lost: &tokio_util::sync::CancellationToken,
    ) -> Attempt {
        let native =
            match crate::wire::native::parse_native_value(task.request.clone(), MAX_TIMEOUT) {
                Ok(n) => n,
                Err(v) => {
                    let failure = SolveFailure::new(v.code, v.message);
                    return Attempt::Failed(
                        self.failed(&task.id, None, &failure, attempts, started),
                    );
                }
            };
        let mut req = native.req;
        // Tenants with isolated pools solve in their own partition, as on the gateway.
        req.partition = task.partition.clone();
        let kind = req.kind();
        if let Some(gone_ms) = caller_gone_for(task) {
            // Its caller has stopped waiting: an answer now would be money spent on nobody.
            let failure = SolveFailure::new(
                crate::wire::inphp::codes::CAPTCHA_UNSOLVABLE,
                format!("the task's caller stopped waiting {gone_ms} ms before a worker took it"),
            );
            return Attempt::Failed(self.failed(&task.id, Some(kind), &failure, attempts, started));
        }
        let timeout = task
            .timeout_ms
            .map(Duration::from_millis)
            .or(native.timeout)
            .unwrap_or(self.default_timeout);
        let solving = solve_queued(&self.engine, req, started + timeout);
        let solved = tokio::select! {
            solved = solving => solved,
            () = lost.cancelled() => return Attempt::Lost,
        };
        match solved {
            Solved::Answer(handout) => Attempt::Answered(QueueResult::ready(
                &task.id,
                &handout,
                self.finish_fields(attempts, started),
            )),
            Solved::HandBack => Attempt::HandBack,
            Solved::Failed(SolveError::Failed(f)) if !retryable(&f.code) => {
                Attempt::Failed(self.failed(&task.id, Some(kind), &f, attempts, started))
            }
            Solved::Failed(SolveError::Failed(f)) => Attempt::Retry(f),
            Solved::Failed(e) => Attempt::Retry(SolveFailure::new(e.code(), e.to_string())),
        }
    }

    /// Ends the entry with `result` (and a dead letter when `dead_reason`). A task of a gateway
    /// tenant also has a gateway task record (`res.php`, `GET /v1/tasks/{id}`), finished from the
    /// result the queue kept, and only by the worker that still held the entry: the result is
    /// written under the lease with the entry kept pending, then the record, then the entry is
    /// acknowledged. A lost lease writes neither; a worker dying between them leaves the entry
    /// to a next delivery, which finishes the record from the result without solving again.
    async fn end(
        self: &Arc<Self>,
        entry: &Entry,
        task: Option<&Task>,
        result: Option<QueueResult>,
        dead_reason: Option<&str>,
    ) -> Result<Outcome, QueueError> {
        let recorded = result.is_some() && task.is_some_and(|t| t.tenant.is_some());
        let ours = if recorded { result.clone() } else { None };
        let finished = self.finish(entry, result, dead_reason, recorded).await?;
        match (finished, ours) {
            (Finished::Written, Some(result)) => self.record_then_acknowledge(entry, &result).await,
            (Finished::AlreadyThere, Some(result)) => {
                if let Some(kept) = self.queue.result(&result.id).await? {
                    self.record_then_acknowledge(entry, &kept).await;
                }
            }
            _ => {}
        }
        Ok(match finished {
            Finished::LeaseLost => Outcome::LeaseLost,
            Finished::AlreadyThere => Outcome::AlreadyDone,
            Finished::Written if dead_reason.is_some() => Outcome::DeadLettered,
            Finished::Written => Outcome::Written,
        })
    }

    /// Finishes the task record from the queue's `result` (written once: a second finish
    /// changes nothing), then acknowledges the kept entry. A record that cannot be written
    /// leaves the entry pending, so its next delivery tries again.
    async fn record_then_acknowledge(self: &Arc<Self>, entry: &Entry, result: &QueueResult) {
        if !self.finish_task_record(result).await {
            return;
        }
        if let Err(e) = self.finish(entry, None, None, false).await {
            tracing::warn!(stream_id = %entry.stream_id, error = %e, "could not acknowledge a finished entry; it will be reclaimed");
        }
    }

    /// Whether the record now holds the result (or never will: a result it cannot express).
    async fn finish_task_record(&self, result: &QueueResult) -> bool {
        let state = match (result.status, &result.error) {
            (ResultStatus::Failed, Some(e)) => {
                TaskState::Failed(SolveFailure::new(e.code.clone(), e.message.clone()))
            }
            _ => match handout_of(result) {
                Some(h) => TaskState::Ready(h),
                None => return true,
            },
        };
        match self
            .engine
            .store()
            .finish_task(&result.id, state, now_ms())
            .await
        {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(task = %result.id, error = %e, "could not finish the gateway's task record");
                false
            }
        }
    }

    async fn hand_back(
        &self,
        entry: &Entry,
        attempt: u32,
        delay: Duration,
    ) -> Result<Outcome, QueueError> {
        Ok(if self.retry(entry, attempt, delay).await? {
            Outcome::Retried
        } else {
            Outcome::LeaseLost
        })
    }

    /// Full jitter over `min(cap, base * 2^attempt)`.
    fn backoff(&self, attempt: u32) -> Duration {
        let s = self.queue.settings();
        let ceiling = s
            .retry_base
            .saturating_mul(1u32 << attempt.min(20))
            .min(s.retry_cap);
        ceiling.mul_f64(rand::rng().random_range(0.0..=1.0))
    }

    fn finish_fields(&self, attempts: u32, started: Instant) -> Finish {
        Finish {
            attempts,
            worker: self.consumer.clone(),
            finished_at: now_ms(),
            duration_ms: started.elapsed().as_millis() as u64,
        }
    }

    fn failed(
        &self,
        id: &str,
        kind: Option<Kind>,
        failure: &SolveFailure,
        attempts: u32,
        started: Instant,
    ) -> QueueResult {
        QueueResult::failed(id, kind, failure, self.finish_fields(attempts, started))
    }
}

fn kind_of(task: &Task) -> Option<Kind> {
    task.request.get("kind")?.as_str()?.parse().ok()
}

/// Whether another attempt may succeed: everything but a provider's verdict on the request
/// itself (unsolvable, bad parameters). Account trouble is not the task's fault either: another
/// account, or the same one later, may take it.
fn retryable(code: &str) -> bool {
    classify(code, InPhpDialect::CaptchaAi) != ErrorClass::Permanent
}

/// The handout a ready result carries, for the gateway's task record.
fn handout_of(result: &QueueResult) -> Option<crate::engine::Handout> {
    Some(crate::engine::Handout {
        kind: result.kind?,
        answer: crate::model::Answer {
            text: result.answer.clone()?,
            user_agent: result.user_agent.clone(),
            solved_at: result.finished_at,
            expires_at: result.expires_at?,
            upstream: None,
        },
        source: result.source?,
    })
}

/// How long ago the task's caller stopped waiting (`deadline_at`), if it has.
fn caller_gone_for(task: &Task) -> Option<u64> {
    let gone = now_ms().saturating_sub(task.deadline_at?);
    (gone > 0).then_some(gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_verdicts_on_the_request_are_final() {
        assert!(!retryable("ERROR_CAPTCHA_UNSOLVABLE"));
        assert!(!retryable("ERROR_WRONG_GOOGLEKEY"));
        assert!(retryable("ERROR_SERVER_ERROR"));
        assert!(retryable("ERROR_NO_SLOT_AVAILABLE"));
        assert!(retryable("ERROR_ZERO_BALANCE"));
        assert!(retryable("TIMEOUT"));
    }
}
