//! One task across accounts: the [`Solver`] implementation (docs/API.md "Accounts and
//! failover").
//!
//! Owns: trying the chosen account, telling its breaker and scoreboard how it went, moving the
//! task to another account when the failure was the account's or transient (never when it was
//! the task's own: bad parameters, unsolvable), waiting within the caller's deadline for an
//! account that is about to be probed, and the codes a caller sees. Does not own: the choice
//! itself (`routing`), breaker rules (`breaker`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{Instant, sleep_until};

use super::passthrough::described;
use super::{Admit, Member, Upstream, Verdict, lock};
use crate::engine::{Priority, Solution, SolveFailure, Solver};
use crate::model::{Dialects, Kind, SolveRequest, TaskParams, UpstreamRef, now_ms};
use crate::provider::{self, ErrorClass, ProviderError, Schedule};
use crate::wire::inphp::codes;
use crate::wire::taskapi::reply::TASK_NOT_SUPPORTED;

/// Ordinary tries a task may make across accounts: every account once, then once more each (a
/// second round only after every account failed it, for blips that hit them all). Trials of
/// half-open accounts come on top.
fn max_tries(accounts: usize) -> usize {
    accounts.saturating_mul(2).max(1)
}

/// Wait before a second round over accounts that all failed the task.
const ROUND_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait for an account to come back before looking again. Breaker changes wake
/// waiters at once; this only bounds a wake-up missed between looking and waiting.
const RECHECK: Duration = Duration::from_secs(1);

/// A task at one account, finished once: dropped unfinished (its caller's future was dropped)
/// it tells the breaker nothing, so a trial is handed to the next task.
struct Attempt<'a> {
    upstream: &'a Upstream,
    member: &'a Member,
    admit: Admit,
    done: bool,
}

impl Attempt<'_> {
    fn finish(mut self, verdict: Verdict) {
        self.done = true;
        self.settle(verdict);
    }

    fn settle(&self, verdict: Verdict) {
        lock(&self.member.breaker).finish(self.admit, verdict, now_ms());
        // Tasks waiting for an account may have one now (a closed breaker, a free trial).
        self.upstream.changed.notify_waiters();
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.settle(Verdict::Nothing);
        }
    }
}

/// What an outcome says about the account that produced it.
fn verdict(result: &Result<provider::Solved, ProviderError>) -> Verdict {
    let Err(e) = result else {
        return Verdict::Works;
    };
    if ended_unanswered(e) {
        return Verdict::Nothing;
    }
    match e.class {
        ErrorClass::Account => Verdict::Broken(e.retry_after),
        ErrorClass::Transient => Verdict::Transient,
        // The provider answered about the task itself, or was merely busy.
        ErrorClass::Permanent | ErrorClass::Capacity => Verdict::Works,
    }
}

/// Whether the task ended without the provider's say: its deadline, a shutdown, or its caller
/// gone before it was submitted.
fn ended_unanswered(e: &ProviderError) -> bool {
    [provider::TIMEOUT, provider::SHUTDOWN, provider::UNSTARTED].contains(&e.code.as_str())
}

/// Whether another account may succeed where this one failed: yes for the account's problems
/// and for transient ones; no for the task's own (bad parameters, unsolvable), the deadline or
/// a shutdown.
fn worth_another_account(e: &ProviderError) -> bool {
    !ended_unanswered(e) && matches!(e.class, ErrorClass::Account | ErrorClass::Transient)
}

/// Whether `e` is a provider refusing a pass-through task's type, which another account of the
/// same protocol may solve: the gateway cannot know which providers have a type it does not
/// declare, so each account of the protocol is asked in turn.
fn type_refused(req: &SolveRequest, e: &ProviderError) -> bool {
    matches!(req.params, TaskParams::Passthrough(_))
        && e.class == ErrorClass::Permanent
        && [TASK_NOT_SUPPORTED, codes::BAD_PARAMETERS].contains(&e.code.as_str())
}

/// A zero balance pauses the account instead of opening its breaker: only money brings it back,
/// and the spend guard sees that.
fn is_no_money(e: &ProviderError) -> bool {
    e.class == ErrorClass::Account && e.code == codes::ZERO_BALANCE
}

impl Upstream {
    /// No account here takes `kind`: the caller is told which accounts there are and at which
    /// provider, so the operator sees what to add (account names are no secret; keys never
    /// appear).
    fn unsolvable_here(&self, req: &SolveRequest) -> SolveFailure {
        let accounts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{} ({})", m.name(), m.provider))
            .collect();
        let what = match &req.params {
            TaskParams::Passthrough(pass) => format!(
                "{}: none speaks {}, or its `kinds` leave out `other`",
                described(pass),
                pass.protocol().as_str()
            ),
            params => match params.restricted() {
                Some((name, taken)) if taken == Dialects::NONE => format!(
                    "{} with `{name}` and parameters no one provider takes together",
                    req.kind()
                ),
                Some((name, taken)) => format!(
                    "{} with `{name}` as sent, which only {} accounts take: none here is one, or its `kinds` leave the kind out",
                    req.kind(),
                    taken.names().join(" or ")
                ),
                None => format!(
                    "{}: its provider does not, or its `kinds` leave it out",
                    req.kind()
                ),
            },
        };
        SolveFailure::new(
            TASK_NOT_SUPPORTED,
            format!(
                "no account here solves {what} (accounts: {})",
                accounts.join(", ")
            ),
        )
    }
}

pub(super) fn no_account() -> SolveFailure {
    SolveFailure::new(
        codes::SERVER_ERROR,
        "no provider account can take this task now",
    )
}

/// What a caller is told about an upstream failure: the provider's code for problems with the
/// request itself, a terminal code for everything the caller cannot fix. Never the provider's
/// body, which may echo our key.
pub(super) fn failure(e: &ProviderError) -> SolveFailure {
    if e.code == provider::SHUTDOWN {
        return SolveFailure::shutting_down();
    }
    if e.code == provider::UNSTARTED {
        return SolveFailure::unstarted();
    }
    match e.class {
        ErrorClass::Permanent if e.code.starts_with("ERROR_") => SolveFailure::new(
            e.code.clone(),
            format!("the provider refused the task ({})", e.code),
        ),
        ErrorClass::Permanent => {
            SolveFailure::new(codes::CAPTCHA_UNSOLVABLE, "the provider could not solve it")
        }
        ErrorClass::Account => SolveFailure::new(
            codes::SERVER_ERROR,
            "the gateway's provider accounts are unusable",
        ),
        ErrorClass::Capacity | ErrorClass::Transient => SolveFailure::new(
            codes::CAPTCHA_UNSOLVABLE,
            format!("no answer in time ({})", e.code),
        ),
    }
}

impl Upstream {
    /// With no account to take a task of `kind` now: waits, if one will be probed (or has its
    /// probe running) before `deadline`, for it or for any breaker change. Accounts already
    /// `tried` count only through their breaker (a trial), never straight away.
    /// False, at once, when none will: a key refused for longer than the caller can wait, or
    /// an account without money, fails the task now rather than at its deadline.
    async fn wait_for_account(
        &self,
        req: &SolveRequest,
        tried: &[usize],
        deadline: Instant,
    ) -> bool {
        let changed = self.changed.notified();
        let now_ms = now_ms();
        let now = Instant::now();
        // An account that failed this task counts again once its breaker lets a trial through.
        let soonest = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.takes(req) && !m.paused())
            .filter_map(|(i, m)| {
                let breaker = lock(&m.breaker);
                let closed = breaker.state(now_ms) == super::BreakerState::Closed;
                (!(closed && tried.contains(&i)))
                    .then(|| breaker.next_chance(now_ms))
                    .flatten()
            })
            .min();
        let Some(soonest) = soonest else {
            return false;
        };
        let wake = now + Duration::from_millis(soonest.saturating_sub(now_ms));
        if wake >= deadline {
            return false;
        }
        // At `soonest` a breaker half-opens; a probe already running ends with a notification.
        let wake = if wake > now { wake } else { now + RECHECK };
        tokio::select! {
            () = sleep_until(wake.min(now + RECHECK).min(deadline)) => {}
            () = changed => {}
        }
        Instant::now() < deadline
    }

    /// The answer `member` produced, counted in its figures.
    fn solution(&self, member: &Member, kind: Kind, solved: provider::Solved) -> Solution {
        member.reports.remember(&solved.task_id, kind, now_ms());
        let took_ms = solved.solved_at.saturating_sub(solved.submitted_at);
        self.solve_seconds.observe_ms(kind, took_ms);
        Solution {
            text: solved.text,
            user_agent: solved.user_agent,
            upstream: UpstreamRef {
                account: member.name().to_owned(),
                task_id: solved.task_id,
            },
            solved_at: solved.solved_at,
        }
    }

    /// Polls a provider task another instance submitted at the account that holds it. `None`
    /// when no account here by that name can take it (the caller submits afresh instead).
    async fn resume(
        &self,
        req: &SolveRequest,
        task: &UpstreamRef,
        deadline: Instant,
        priority: provider::Priority,
    ) -> Option<Result<Solution, ProviderError>> {
        let kind = req.kind();
        let member = self
            .members
            .iter()
            .find(|m| m.name() == task.account && m.takes(req) && !m.paused())?;
        let resumed = member
            .account
            .resume(req, &task.task_id, deadline, priority)
            .await;
        Some(resumed.map(|solved| self.solution(member, kind, solved)))
    }
}

fn provider_priority(priority: Priority) -> provider::Priority {
    match priority {
        Priority::Interactive => provider::Priority::Interactive,
        Priority::Queued => provider::Priority::Queued,
        Priority::Refill => provider::Priority::Refill,
    }
}

#[async_trait]
impl Solver for Upstream {
    async fn solve(
        &self,
        req: &SolveRequest,
        deadline: Instant,
        priority: Priority,
    ) -> Result<Solution, SolveFailure> {
        self.solve_tracked(req, deadline, deadline, priority, None, &|_| {})
            .await
    }

    async fn solve_tracked(
        &self,
        req: &SolveRequest,
        start_by: Instant,
        deadline: Instant,
        priority: Priority,
        resume: Option<UpstreamRef>,
        submitted: &(dyn Fn(UpstreamRef) + Send + Sync),
    ) -> Result<Solution, SolveFailure> {
        // Refills take only the threads no caller is waiting for (promise 5). The task keeps its
        // first arrival as its place among the waiters for a thread, at any account.
        let priority = provider_priority(priority);
        let schedule = Schedule::new(priority, deadline).start_by(start_by);
        if let Some(task) = resume {
            match self.resume(req, &task, deadline, priority).await {
                Some(Ok(solution)) => return Ok(solution),
                Some(Err(e)) if ended_unanswered(&e) => return Err(failure(&e)),
                // The adopted task failed, or is unknown to the account here: the work is done
                // again, as it would have been without adoption.
                Some(Err(e)) => {
                    tracing::info!(account = %task.account, error = %e, "an adopted provider task failed; submitting afresh");
                }
                None => {}
            }
        }
        let kind = req.kind();
        if let Some(refused) = self.refuses(req) {
            return Err(refused);
        }
        if let TaskParams::Passthrough(pass) = &req.params {
            self.passed.count(pass);
        }
        let mut tried: Vec<usize> = Vec::new();
        let mut last: Option<ProviderError> = None;
        let mut tries = 0;
        let mut second_round = true;
        while tries < max_tries(self.members.len()) {
            let Some((index, admit)) = self.choose(req, &tried) else {
                if self.wait_for_account(req, &tried, schedule.start_by).await {
                    continue;
                }
                // Every account that may take it failed it once: one more round after a pause.
                if second_round
                    && !tried.is_empty()
                    && Instant::now() + ROUND_BACKOFF < schedule.start_by
                    && last.as_ref().is_some_and(worth_another_account)
                {
                    second_round = false;
                    tokio::time::sleep(ROUND_BACKOFF).await;
                    tried.clear();
                    continue;
                }
                break;
            };
            // A trial is paced by the breaker (one at a time, waits doubling), not by this count:
            // a task may wait for probe after probe while its deadline allows.
            if admit != Admit::Trial {
                tries += 1;
            }
            let member = &self.members[index];
            let attempt = Attempt {
                upstream: self,
                member,
                admit,
                done: false,
            };
            let started = Instant::now();
            let noted = |task_id: &str| {
                submitted(UpstreamRef {
                    account: member.name().to_owned(),
                    task_id: task_id.to_owned(),
                });
            };
            let result = member.account.solve_noted(req, schedule, &noted).await;
            let verdict = match &result {
                Err(e) if is_no_money(e) => {
                    member.paused.store(true, Ordering::Relaxed);
                    tracing::error!(
                        account = member.name(),
                        "provider account has no money; paused until its balance is topped up"
                    );
                    Verdict::Nothing
                }
                other => verdict(other),
            };
            attempt.finish(verdict);
            match &result {
                Ok(_) => {
                    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    lock(&member.scores).solved(kind, ms);
                }
                Err(e) if matches!(verdict, Verdict::Transient | Verdict::Broken(_)) => {
                    lock(&member.scores).failed(kind);
                    if let Verdict::Broken(_) = verdict {
                        tracing::error!(account = member.name(), code = %e.code, "provider account refused; out of rotation until a probe succeeds");
                    }
                }
                Err(e) if e.code == codes::CAPTCHA_UNSOLVABLE || e.code == provider::TIMEOUT => {
                    lock(&member.scores).failed(kind);
                }
                Err(_) => {}
            }
            match result {
                Ok(solved) => return Ok(self.solution(member, kind, solved)),
                Err(e)
                    if (worth_another_account(&e) || type_refused(req, &e))
                        && Instant::now() < deadline =>
                {
                    tracing::debug!(account = member.name(), error = %e, "trying the task at another account");
                    tried.push(index);
                    last = Some(e);
                }
                Err(e) => return Err(failure(&e)),
            }
        }
        Err(last.as_ref().map_or_else(no_account, failure))
    }

    fn refuses(&self, req: &SolveRequest) -> Option<SolveFailure> {
        if let TaskParams::Passthrough(pass) = &req.params {
            if !self.passthrough {
                return Some(SolveFailure::new(
                    TASK_NOT_SUPPORTED,
                    format!(
                        "{} is a type this gateway does not declare, and pass-through is off (`passthrough = false`)",
                        described(pass)
                    ),
                ));
            }
        }
        (!self.members.iter().any(|m| m.takes(req))).then(|| self.unsolvable_here(req))
    }

    async fn report(&self, task: &UpstreamRef, good: bool) -> Result<(), SolveFailure> {
        // The account that solved it; one removed from the config since cannot be told.
        let Some(member) = self.members.iter().find(|m| m.name() == task.account) else {
            return Err(SolveFailure::new(
                codes::WRONG_CAPTCHA_ID,
                "the account that solved this task is no longer configured",
            ));
        };
        member.reports.count(&task.task_id, good, now_ms());
        member
            .account
            .report(&task.task_id, good)
            .await
            .map_err(|e| failure(&e))
    }
}
