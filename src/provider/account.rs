//! One provider account: its thread cap, submit retries and the road from request to answer
//! (docs/ARCHITECTURE.md promise 5, "Capped"; docs/PROTOCOL.md "Retry classes").
//!
//! Owns: taking a thread from the account's budget for each task and holding it until the
//! provider is done with it, retrying capacity errors (the budget hears of the refusal and may
//! lower its cap) with jittered backoff for as long as the caller's deadline allows and transient
//! errors a bounded number of times, giving the thread back while it waits and asking again in
//! its first place, giving up a task its caller no longer waits for before it was submitted,
//! asking `threadsinfo` for the plan's threads, handing submitted tasks to the account's poller,
//! and the counters the metrics module reads.
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
use crate::model::{Kind, Millis, SolveRequest, TaskParams, now_ms};
use crate::shutdown::Shutdown;

/// The code of the error a solve ends with when its deadline passes.
pub const TIMEOUT: &str = "TIMEOUT";
/// The code of the error a solve ends with when the gateway shuts down under it: before its
/// submit once the signal came, after it once the grace period is over. Nothing went wrong with
/// the task itself, so the engine hands its work back rather than failing anyone for it.
pub const SHUTDOWN: &str = "SHUTDOWN";
/// The code of the error a solve ends with when its `start_by` passed before the provider took
/// it (waiting for a thread, or out a refusal): nothing was spent, and the caller it was for is
/// gone, so the engine withdraws it rather than failing anyone for it.
pub const UNSTARTED: &str = "UNSTARTED";

/// When one task may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Who the thread is for.
    pub priority: Priority,
    /// When the task first asked for a thread: its place among the waiters, kept when it asks
    /// again after a refusal.
    pub since: Instant,
    /// Past this without the provider having taken it, the task is given up ([`UNSTARTED`]):
    /// its caller's deadline, when one caller waits for it.
    pub start_by: Instant,
    /// Past this, nothing more is waited for ([`TIMEOUT`]).
    pub deadline: Instant,
}

impl Schedule {
    /// A task asking now, which may start as long as it may end.
    pub fn new(priority: Priority, deadline: Instant) -> Schedule {
        Schedule {
            priority,
            since: Instant::now(),
            start_by: deadline,
            deadline,
        }
    }

    /// The same task, given up unless submitted by `start_by` (never later than its deadline).
    pub fn start_by(self, start_by: Instant) -> Schedule {
        Schedule {
            start_by: start_by.min(self.deadline),
            ..self
        }
    }
}

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
        let schedule = Schedule::new(priority, deadline);
        self.solve_noted(req, schedule, &|_| {}).await
    }

    /// [`solve`](Self::solve) on `schedule`, telling `submitted` the provider's task id as soon
    /// as it has one.
    pub async fn solve_noted(
        &self,
        req: &SolveRequest,
        schedule: Schedule,
        submitted: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Solved, ProviderError> {
        let result = self.solve_inner(req, None, schedule, submitted).await;
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
        let schedule = Schedule::new(priority, deadline);
        let result = self
            .solve_inner(req, Some(task_id), schedule, &|_| {})
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
            // Handed back, or never started: not the provider's failure.
            Err(e) if e.code == SHUTDOWN || e.code == UNSTARTED => {}
            Err(_) => bump(&self.counters.failed),
        }
    }

    /// Submits `req` (or, given `resumed`, takes that task as already submitted) and waits for
    /// the poller's outcome.
    async fn solve_inner(
        &self,
        req: &SolveRequest,
        resumed: Option<&str>,
        schedule: Schedule,
        submitted: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Solved, ProviderError> {
        let deadline = schedule.deadline;
        let mut slot = Slot {
            permit: None,
            hold_until: None,
        };
        let task_id = match resumed {
            Some(id) => {
                // Already at the provider: waiting for a thread has no `start_by`.
                let lease = self
                    .take_thread(&Schedule {
                        start_by: deadline,
                        ..schedule
                    })
                    .await?;
                slot.permit = Some(self.held(lease, req.kind()));
                slot.hold_until = Some(Instant::now() + self.settings.poll.horizon(req.kind()));
                id.to_owned()
            }
            None => {
                let id = self.submit(req, &schedule, &mut slot).await?;
                submitted(&id);
                id
            }
        };
        let submitted_at = now_ms();
        let (tx, rx) = oneshot::channel();
        let registration = Registration {
            id: task_id.clone(),
            kind: req.kind(),
            // A user agent or an object (GeeTest, Lemin) comes only in a single JSON answer.
            extras: req.answer_has_user_agent() || req.kind().spec().answer.is_object(),
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
                text: match req.params {
                    // A declared kind's answer as its declaration stores it, whichever
                    // protocol's form it came in.
                    TaskParams::Declared { kind, .. } => kind.spec().answer.canonical(text),
                    _ => text,
                },
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

    /// A thread for `schedule`'s task, in its first place, by its `start_by`.
    async fn take_thread(&self, schedule: &Schedule) -> Result<Lease, ProviderError> {
        let acquire = self.budget.acquire_from(schedule.priority, schedule.since);
        self.idle(schedule.start_by, &self.stop, acquire)
            .await
            .map_err(|e| unstarted_at(e, schedule))
    }

    /// `in.php` with the retry policy of the error classes. Between tries the task holds no
    /// thread (the provider has no task of it), and asks again in its first place.
    async fn submit(
        &self,
        req: &SolveRequest,
        schedule: &Schedule,
        slot: &mut Slot,
    ) -> Result<String, ProviderError> {
        let deadline = schedule.deadline;
        let mut capacity_attempts = 0u32;
        let mut transient_left = self.settings.transient_retries;
        loop {
            let lease = self.take_thread(schedule).await?;
            slot.permit = Some(self.held(lease, req.kind()));
            // From here an upstream task may exist, even if we never see its id.
            slot.hold_until = Some(Instant::now() + self.settings.poll.horizon(req.kind()));
            bump(&self.counters.submits);
            let err = match timeout_at(deadline, self.provider.submit(req)).await {
                Ok(Ok(id)) => {
                    self.counters.requests.count(Endpoint::Submit, Ok(()));
                    if let Some(lease) = slot.permit.as_ref().and_then(Held::lease) {
                        self.budget.accepted(lease);
                    }
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
            if Instant::now() + wait >= schedule.start_by {
                // No retry fits before the task must have started. Capacity is not the caller's
                // problem, so it ends as a timeout; a transient error keeps its own code.
                return Err(match err.class {
                    ErrorClass::Capacity => {
                        unstarted_at(timed_out(&format!("no capacity: {}", err.code)), schedule)
                    }
                    _ => err,
                });
            }
            tracing::debug!(account = %self.settings.name, error = %err, ?wait, "retrying submit");
            // The thread goes back while the task waits, so another task may use it; the refusal
            // tells the budget what the provider carried.
            let mut held = slot.permit.take();
            let lease = held.as_mut().and_then(Held::take_lease);
            drop(held);
            if err.class == ErrorClass::Capacity {
                bump(&self.counters.capacity_retries);
                if let Some(lease) = lease {
                    self.budget.refused(lease);
                }
            } else {
                bump(&self.counters.transient_retries);
                drop(lease);
            }
            self.idle(schedule.start_by, &self.stop, sleep(wait))
                .await
                .map_err(|e| unstarted_at(e, schedule))?;
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
            lease: Some(lease),
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

/// A wait before the submit that ended with `e`: past `start_by` but not the deadline, the task
/// was given up unstarted rather than timed out.
fn unstarted_at(e: ProviderError, schedule: &Schedule) -> ProviderError {
    if e.code == TIMEOUT && schedule.start_by < schedule.deadline {
        ProviderError::new(
            ErrorClass::Transient,
            UNSTARTED,
            "not submitted before its caller's deadline",
        )
    } else {
        e
    }
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
    /// `None` once taken to give back another way ([`Held::take_lease`]).
    lease: Option<Lease>,
    since: Instant,
    kind: Kind,
    counters: Arc<Counters>,
}

impl Held {
    fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// The lease, to be given back by the caller; the time held is still counted on drop.
    fn take_lease(&mut self) -> Option<Lease> {
        self.lease.take()
    }
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
