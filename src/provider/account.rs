//! One provider account: its thread cap, submit retries and the road from request to answer
//! (docs/ARCHITECTURE.md promise 5, "Capped"; docs/PROTOCOL.md "Retry classes").
//!
//! Owns: taking a thread from the account's budget for each task and holding it until the
//! provider is done with it, retrying capacity errors (the budget's cap shrinks, the task waits
//! for a thread again) with jittered backoff for as long as the caller's deadline allows and
//! transient errors a bounded number of times, asking `threadsinfo` for the plan's threads,
//! handing submitted tasks to the account's poller, and the counters the metrics module reads.
//! Does not own: choosing an account (the engine), or how threads are shared and ordered (the
//! budget: `budget`, fleet-wide in the Redis store).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng as _;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;

use super::budget::{Budget, BudgetStats, Lease, Priority};
use super::error::{ErrorClass, ProviderError};
use super::poller::{self, PollSettings, Registration, Settled};
use super::requests::Endpoint;
use super::stats::{AccountStats, Counters, bump};
use super::{PollOutcome, Provider, ThreadsInfo};
use crate::model::{Kind, Millis, SolveRequest, now_ms};
use crate::shutdown::Shutdown;

/// The code of the error a solve ends with when its deadline passes.
pub const TIMEOUT: &str = "TIMEOUT";
/// The code of the error a solve ends with when the gateway shuts down under it: before its
/// submit once the signal came, after it once the grace period is over. Nothing went wrong with
/// the task itself, so the engine hands its work back rather than failing anyone for it.
pub const SHUTDOWN: &str = "SHUTDOWN";

/// How one account behaves. Each default says why it is that value.
#[derive(Debug, Clone, PartialEq)]
pub struct AccountSettings {
    /// Safe for logs and metric labels; never the key.
    pub name: String,
    /// Upstream tasks in flight at once. The plan's thread count (`threadsinfo`); 0 pauses the
    /// account (every solve waits for its deadline).
    pub threads: u32,
    /// First capacity backoff ceiling; doubles per attempt (full jitter: a random wait up to it).
    pub capacity_backoff_base: Duration,
    /// The ceiling the doubling stops at.
    pub capacity_backoff_max: Duration,
    /// Retries of a submit after transient failures (server errors, HTML, timeouts).
    pub transient_retries: u32,
    /// Wait before each transient retry (plus up to a fifth of it as jitter).
    pub transient_backoff: Duration,
    /// How the account's poller paces its checks.
    pub poll: PollSettings,
    /// How often `threadsinfo` is asked for the plan's threads (at start, then this often), for
    /// providers that answer it; `None` never asks.
    pub calibrate_every: Option<Duration>,
}

impl Default for AccountSettings {
    fn default() -> Self {
        Self {
            name: "default".to_owned(),
            // The smallest plan commonly sold; a real deployment sets the plan's figure.
            threads: 5,
            // Threads free up within seconds as solves finish: start retrying quickly...
            capacity_backoff_base: Duration::from_secs(1),
            // ...but never wait so long that a freed thread idles (solves take 10-20 s).
            capacity_backoff_max: Duration::from_secs(10),
            // Unknown bodies and 5xx are rare and short; three tries ride out a blip without
            // hammering a server that is really down (the captchaai SDK retries 5 times).
            transient_retries: 3,
            // CaptchaAI: "if you received anything that doesn't look like the answer or error
            // code - make a 5 seconds timeout and then retry".
            transient_backoff: Duration::from_secs(5),
            poll: PollSettings::default(),
            // Serve turns it on for providers with `threadsinfo`; plans change rarely, so every
            // ten minutes is plenty.
            calibrate_every: None,
        }
    }
}

/// A solved upstream task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Solved {
    pub task_id: String,
    pub text: String,
    pub user_agent: Option<String>,
    pub price: Option<String>,
    /// When we learned it was ready: answer lifetimes count from here (promise 2).
    pub solved_at: Millis,
    /// When the provider accepted the task (the submit that succeeded).
    pub submitted_at: Millis,
}

/// One account at one provider.
pub struct Account {
    provider: Arc<dyn Provider>,
    settings: AccountSettings,
    budget: Budget,
    counters: Arc<Counters>,
    poller: mpsc::UnboundedSender<Registration>,
    /// The signal: nothing new is submitted (a task not yet submitted ends with `SHUTDOWN`).
    stop: CancellationToken,
    /// The grace period is over: tasks already submitted stop being waited for.
    cut: CancellationToken,
}

impl fmt::Debug for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Account")
            .field("name", &self.settings.name)
            .field("threads", &self.settings.threads)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Account {
    /// Starts the account and its poller task. On `shutdown`'s signal the account submits
    /// nothing new but its poller goes on checking the tasks already submitted, so they can
    /// still end with an answer; both stop at `shutdown`'s cut.
    /// `budget` is the account's thread budget (`provider::budget::in_process`, or the Redis
    /// store's fleet-wide one), sized for `settings.threads`.
    pub fn start(
        provider: Arc<dyn Provider>,
        settings: AccountSettings,
        budget: Budget,
        shutdown: &Shutdown,
    ) -> Arc<Account> {
        let counters = Arc::new(Counters::default());
        let poller = poller::spawn(
            provider.clone(),
            settings.poll.clone(),
            counters.clone(),
            shutdown.cut.clone(),
        );
        if let Some(every) = settings.calibrate_every {
            spawn_calibration(provider.clone(), budget.clone(), every, shutdown);
        }
        Arc::new(Account {
            provider,
            budget,
            settings,
            counters,
            poller,
            stop: shutdown.token.clone(),
            cut: shutdown.cut.clone(),
        })
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    pub fn threads(&self) -> u32 {
        self.settings.threads
    }

    /// Threads taken: tasks waiting on submit or on their answer, plus threads still held for
    /// tasks whose callers left before the provider finished them. Fleet-wide with Redis.
    pub fn in_flight(&self) -> u32 {
        self.budget.in_use()
    }

    /// The effective cap: the threads, lowered to the plan and, for a while, by capacity errors.
    pub fn effective_threads(&self) -> u32 {
        self.budget.cap()
    }

    /// Callers of `priority` waiting for one of the account's threads.
    pub fn queued(&self, priority: Priority) -> usize {
        self.budget.queued(priority)
    }

    pub fn budget_stats(&self) -> BudgetStats {
        self.budget.stats()
    }

    /// Solves `req` at this account, or fails with the provider's error, or with a transient
    /// `TIMEOUT` once `deadline` passes. Capacity errors never surface while time remains.
    /// A [`Priority::Refill`] waits for a thread until no interactive caller is queued for one.
    pub async fn solve(
        &self,
        req: &SolveRequest,
        deadline: Instant,
        priority: Priority,
    ) -> Result<Solved, ProviderError> {
        self.solve_noted(req, deadline, priority, &|_| {}).await
    }

    /// [`solve`](Self::solve), telling `submitted` the provider's task id as soon as it has one.
    pub async fn solve_noted(
        &self,
        req: &SolveRequest,
        deadline: Instant,
        priority: Priority,
        submitted: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Solved, ProviderError> {
        let result = self
            .solve_inner(req, None, deadline, priority, submitted)
            .await;
        self.count_outcome(req.kind(), &result);
        result
    }

    /// Polls `task_id`, a task this account's key submitted elsewhere (a gateway instance that
    /// died or stopped), to its end, on one of this account's threads (the provider is still
    /// working on it), instead of submitting the same work again.
    pub async fn resume(
        &self,
        req: &SolveRequest,
        task_id: &str,
        deadline: Instant,
        priority: Priority,
    ) -> Result<Solved, ProviderError> {
        bump(&self.counters.adopted);
        let result = self
            .solve_inner(req, Some(task_id), deadline, priority, &|_| {})
            .await;
        self.count_outcome(req.kind(), &result);
        result
    }

    fn count_outcome(&self, kind: Kind, result: &Result<Solved, ProviderError>) {
        match result {
            Ok(_) => {
                bump(&self.counters.solved);
                bump(&self.counters.solved_by_kind[kind.index()]);
            }
            Err(e) if e.code == TIMEOUT => bump(&self.counters.timeouts),
            // Handed back, not failed: the task is someone else's to finish.
            Err(e) if e.code == SHUTDOWN => {}
            Err(_) => bump(&self.counters.failed),
        }
    }

    /// Submits `req` (or, given `resumed`, takes that task as already submitted) and waits for
    /// the poller's outcome.
    async fn solve_inner(
        &self,
        req: &SolveRequest,
        resumed: Option<&str>,
        deadline: Instant,
        priority: Priority,
        submitted: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Solved, ProviderError> {
        let lease = self
            .idle(deadline, &self.stop, self.budget.acquire(priority))
            .await?;
        let mut slot = Slot {
            permit: Some(self.held(lease, req.kind())),
            hold_until: None,
        };
        let task_id = match resumed {
            Some(id) => {
                slot.hold_until = Some(Instant::now() + self.settings.poll.horizon(req.kind()));
                id.to_owned()
            }
            None => {
                let id = self.submit(req, deadline, priority, &mut slot).await?;
                submitted(&id);
                id
            }
        };
        let submitted_at = now_ms();
        let (tx, rx) = oneshot::channel();
        let registration = Registration {
            id: task_id.clone(),
            kind: req.kind(),
            extras: req.answer_has_user_agent() || req.kind() == Kind::GeetestV3,
            reply: tx,
        };
        self.poller
            .send(registration)
            .map_err(|_| shutting_down())?;
        // On a timeout or shutdown here, `slot` stays armed: the provider is still working on
        // the task, so its thread stays taken until the task's poll horizon. Only the cut ends
        // this wait: a task submitted before the signal may still answer within the grace.
        let Settled {
            outcome,
            ready_after,
        } = self
            .idle(deadline, &self.cut, rx)
            .await?
            .map_err(|_| shutting_down())?;
        slot.hold_until = None;
        match outcome {
            PollOutcome::Ready {
                text,
                user_agent,
                price,
            } => Ok(Solved {
                task_id,
                text,
                user_agent,
                price,
                solved_at: ready_after,
                submitted_at,
            }),
            PollOutcome::Failed(e) => Err(e),
            PollOutcome::NotReady => Err(ProviderError::new(
                ErrorClass::Transient,
                "BAD_RESPONSE",
                "poller ended a task without an outcome",
            )),
        }
    }

    /// `in.php` with the retry policy of the error classes.
    async fn submit(
        &self,
        req: &SolveRequest,
        deadline: Instant,
        priority: Priority,
        slot: &mut Slot,
    ) -> Result<String, ProviderError> {
        let mut capacity_attempts = 0u32;
        let mut transient_left = self.settings.transient_retries;
        loop {
            // From here an upstream task may exist, even if we never see its id.
            slot.hold_until = Some(Instant::now() + self.settings.poll.horizon(req.kind()));
            bump(&self.counters.submits);
            let err = match timeout_at(deadline, self.provider.submit(req)).await {
                Ok(Ok(id)) => {
                    self.counters.requests.count(Endpoint::Submit, Ok(()));
                    return Ok(id);
                }
                Ok(Err(e)) => e,
                Err(_) => {
                    // Sent, never answered: counted like a transport timeout.
                    let class = Err(ErrorClass::Transient);
                    self.counters.requests.count(Endpoint::Submit, class);
                    return Err(timed_out("deadline passed during submit"));
                }
            };
            self.counters
                .requests
                .count(Endpoint::Submit, Err(err.class));
            // The provider said no (or was unreachable): no task holds a thread.
            slot.hold_until = None;
            bump(&self.counters.submit_errors[class_index(err.class)]);
            let wait = match err.class {
                ErrorClass::Capacity => {
                    let wait = self.capacity_backoff(capacity_attempts);
                    capacity_attempts = capacity_attempts.saturating_add(1);
                    wait.max(err.retry_after.unwrap_or_default())
                }
                ErrorClass::Transient if transient_left > 0 => {
                    transient_left -= 1;
                    err.retry_after.unwrap_or_else(|| self.transient_backoff())
                }
                _ => return Err(err),
            };
            if Instant::now() + wait >= deadline {
                // No retry fits before the deadline. Capacity is not the caller's problem, so it
                // ends as a timeout; a transient error keeps its own code.
                return Err(match err.class {
                    ErrorClass::Capacity => timed_out(&format!("no capacity: {}", err.code)),
                    _ => err,
                });
            }
            tracing::debug!(account = %self.settings.name, error = %err, ?wait, "retrying submit");
            if err.class == ErrorClass::Capacity {
                bump(&self.counters.capacity_retries);
                // The provider is fuller than the budget thought: shrink the cap and give the
                // thread back while waiting, then queue for one again under the smaller cap, so
                // the refusal becomes waiting rather than a failure.
                self.budget.capacity_error();
                slot.permit = None;
                self.idle(deadline, &self.stop, sleep(wait)).await?;
                let lease = self
                    .idle(deadline, &self.stop, self.budget.acquire(priority))
                    .await?;
                slot.permit = Some(self.held(lease, req.kind()));
            } else {
                bump(&self.counters.transient_retries);
                self.idle(deadline, &self.stop, sleep(wait)).await?;
            }
        }
    }

    /// Full jitter: a uniform wait up to `base * 2^attempt`, capped at the maximum, so many
    /// callers hitting a full plan at once spread their retries.
    fn capacity_backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .settings
            .capacity_backoff_base
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.settings.capacity_backoff_max);
        let ceiling_ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rand::rng().random_range(0..=ceiling_ms))
    }

    fn transient_backoff(&self) -> Duration {
        let base = self.settings.transient_backoff;
        let jitter_ms = u64::try_from(base.as_millis() / 5).unwrap_or(0);
        base + Duration::from_millis(rand::rng().random_range(0..=jitter_ms))
    }

    /// Waits for `fut` unless the deadline passes or `shutdown` (the signal or the cut) fires
    /// first.
    async fn idle<F: Future>(
        &self,
        deadline: Instant,
        shutdown: &CancellationToken,
        fut: F,
    ) -> Result<F::Output, ProviderError> {
        tokio::select! {
            out = fut => Ok(out),
            _ = sleep_until(deadline) => Err(timed_out("deadline passed")),
            _ = shutdown.cancelled() => Err(shutting_down()),
        }
    }

    pub async fn report(&self, task_id: &str, good: bool) -> Result<(), ProviderError> {
        let result = self.provider.report(task_id, good).await;
        let class = result.as_ref().map(|_| ()).map_err(|e| e.class);
        self.counters.requests.count(Endpoint::Report, class);
        result
    }

    pub async fn balance(&self) -> Result<String, ProviderError> {
        let result = self.provider.balance().await;
        let class = result.as_ref().map(|_| ()).map_err(|e| e.class);
        self.counters.requests.count(Endpoint::Balance, class);
        result
    }

    pub async fn threads_info(&self) -> Result<ThreadsInfo, ProviderError> {
        self.provider.threads_info().await
    }

    fn held(&self, lease: Lease, kind: Kind) -> Held {
        Held {
            _lease: lease,
            since: Instant::now(),
            kind,
            counters: Arc::clone(&self.counters),
        }
    }

    pub fn stats(&self) -> AccountStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        AccountStats {
            submits: get(&c.submits),
            submit_errors_capacity: get(&c.submit_errors[class_index(ErrorClass::Capacity)]),
            submit_errors_transient: get(&c.submit_errors[class_index(ErrorClass::Transient)]),
            submit_errors_permanent: get(&c.submit_errors[class_index(ErrorClass::Permanent)]),
            submit_errors_account: get(&c.submit_errors[class_index(ErrorClass::Account)]),
            capacity_retries: get(&c.capacity_retries),
            transient_retries: get(&c.transient_retries),
            poll_requests: get(&c.poll_requests),
            ids_polled: get(&c.ids_polled),
            solved: get(&c.solved),
            failed: get(&c.failed),
            timeouts: get(&c.timeouts),
            adopted: get(&c.adopted),
            requests: c.requests.table(),
            held_ms: std::array::from_fn(|i| get(&c.held_ms[i])),
            solved_by_kind: std::array::from_fn(|i| get(&c.solved_by_kind[i])),
        }
    }
}

fn class_index(class: ErrorClass) -> usize {
    match class {
        ErrorClass::Capacity => 0,
        ErrorClass::Transient => 1,
        ErrorClass::Permanent => 2,
        ErrorClass::Account => 3,
    }
}

fn timed_out(detail: &str) -> ProviderError {
    ProviderError::new(ErrorClass::Transient, TIMEOUT, detail)
}

fn shutting_down() -> ProviderError {
    ProviderError::new(ErrorClass::Transient, SHUTDOWN, "gateway shutting down")
}

/// One thread of the account. Dropped while armed (`hold_until` set: an upstream task may still
/// be running, its caller gone), it keeps the thread taken until `hold_until`, when the poller
/// would have given the task up anyway; otherwise it frees the thread at once.
struct Slot {
    permit: Option<Held>,
    hold_until: Option<Instant>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let (Some(permit), Some(until)) = (self.permit.take(), self.hold_until) else {
            return;
        };
        if until <= Instant::now() {
            return;
        }
        // Without a runtime (process teardown) nothing will submit again: just let it go.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                sleep_until(until).await;
                drop(permit);
            });
        }
    }
}

/// A thread taken for a task of `kind`: given back, it adds the time it was held to the
/// account's figure, so the advisor counts what the plan really carried (submit, provider's
/// work, the poll that saw it, and a departed caller's task held to its horizon), not the
/// shorter submit-to-ready estimate of the solve-time histogram.
struct Held {
    _lease: Lease,
    since: Instant,
    kind: Kind,
    counters: Arc<Counters>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.counters.held_ms[self.kind.index()].fetch_add(ms, Ordering::Relaxed);
    }
}

/// Asks `threadsinfo` at start and every `every` after, and lowers the budget to the plan. A
/// provider without it (2captcha) answers an error: logged once at debug, and asked again later.
fn spawn_calibration(
    provider: Arc<dyn Provider>,
    budget: Budget,
    every: Duration,
    shutdown: &Shutdown,
) {
    let cut = shutdown.cut.clone();
    tokio::spawn(async move {
        loop {
            match provider.threads_info().await {
                Ok(info) => budget.calibrate(info.threads),
                Err(e) => tracing::debug!(account = provider.name(), error = %e, "threadsinfo"),
            }
            tokio::select! {
                _ = sleep(every) => {}
                _ = cut.cancelled() => return,
            }
        }
    });
}

#[cfg(test)]
mod tests;
