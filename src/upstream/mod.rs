//! The engine's view of the providers: implements [`Solver`] over every configured account
//! (docs/API.md "Accounts and failover").
//!
//! Owns: choosing the account per task (`routing`), taking failing accounts out of rotation and
//! probing them back (`breaker`), pausing empty ones (`spend`), moving a task to another account
//! when the failure was the account's and not the task's, mapping provider errors to the codes
//! callers see, report counts (`reports`), the per-account status of `/health` (`status`) and
//! metrics (`metrics`). Does not own: one account's threads, submit retries and polling
//! (provider::Account), or which caller gets an answer (the engine).
//!
//! # Layout
//!
//! - `breaker`: closed / open / half-open per account, on a clock passed in.
//! - `routing`: recent solve time and success per account and kind, and the choice.
//! - `spend`: the balance check that pauses and resumes accounts.
//! - `reports`: `reportgood`/`reportbad` counts per account and kind.
//! - `metrics`: every per-account metric line, in one place.

mod breaker;
mod metrics;
mod reports;
mod routing;
mod spend;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::compat::codes;
use crate::config::AccountProvider;
use crate::engine::{Priority, Solution, SolveFailure, Solver};
use crate::model::{Kind, SolveRequest, UpstreamRef, now_ms};
use crate::provider::{self, Account, ErrorClass, ProviderError};

pub use breaker::{Admit, Breaker, BreakerSettings, BreakerState, Verdict};
pub use routing::{Candidate, Scoreboard, pick};
pub use spend::spawn_spend_guard;

/// How the accounts are watched. Each default says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSettings {
    pub breaker: BreakerSettings,
    /// How often each account's balance is read: money runs out over hours, and a minute is
    /// well inside every provider's request limits.
    pub balance_every: Duration,
}

impl Default for UpstreamSettings {
    fn default() -> Self {
        Self {
            breaker: BreakerSettings::default(),
            balance_every: Duration::from_secs(60),
        }
    }
}

/// One account with the state routing keeps about it.
pub struct Member {
    account: Arc<Account>,
    provider: AccountProvider,
    weight: u32,
    /// Empty: every kind.
    kinds: Vec<Kind>,
    breaker: Mutex<Breaker>,
    scores: Mutex<Scoreboard>,
    /// The spend guard found no money: no new task until a balance check finds some.
    paused: AtomicBool,
    reports: reports::Reports,
}

impl Member {
    pub fn new(
        account: Arc<Account>,
        provider: AccountProvider,
        weight: u32,
        kinds: Vec<Kind>,
        breaker: BreakerSettings,
    ) -> Member {
        Member {
            account,
            provider,
            weight: weight.max(1),
            kinds,
            breaker: Mutex::new(Breaker::new(breaker)),
            scores: Mutex::new(Scoreboard::default()),
            paused: AtomicBool::new(false),
            reports: reports::Reports::default(),
        }
    }

    pub fn name(&self) -> &str {
        self.account.name()
    }

    fn takes(&self, kind: Kind) -> bool {
        self.kinds.is_empty() || self.kinds.contains(&kind)
    }

    fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// The state `/health` shows: paused wins over the breaker's.
    pub fn state(&self) -> &'static str {
        if self.paused() {
            "paused"
        } else {
            lock(&self.breaker).state(now_ms()).as_str()
        }
    }

    /// Whether it could take a task now (closed, or half-open with its trial free or running).
    fn can_take_work(&self) -> bool {
        !self.paused() && lock(&self.breaker).state(now_ms()) != BreakerState::Open
    }
}

/// One account's line in `/health`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AccountStatus {
    pub name: String,
    pub provider: &'static str,
    /// `closed`, `open`, `half-open` or `paused`.
    pub state: &'static str,
    pub threads: u32,
    pub in_flight: u32,
}

pub struct Upstream {
    members: Vec<Arc<Member>>,
}

impl Upstream {
    pub fn new(members: Vec<Member>) -> Self {
        Self {
            members: members.into_iter().map(Arc::new).collect(),
        }
    }

    pub fn members(&self) -> &[Arc<Member>] {
        &self.members
    }

    /// Plan threads over every account.
    pub fn threads(&self) -> u32 {
        self.members
            .iter()
            .map(|m| m.account.threads())
            .fold(0, u32::saturating_add)
    }

    pub fn in_flight(&self) -> u32 {
        self.members
            .iter()
            .map(|m| m.account.in_flight())
            .fold(0, u32::saturating_add)
    }

    /// False only while no account can take work (`/readyz`).
    pub fn usable(&self) -> bool {
        self.members.iter().any(|m| m.can_take_work())
    }

    pub fn status(&self) -> Vec<AccountStatus> {
        self.members
            .iter()
            .map(|m| AccountStatus {
                name: m.name().to_owned(),
                provider: m.provider.as_str(),
                state: m.state(),
                threads: m.account.threads(),
                in_flight: m.account.in_flight(),
            })
            .collect()
    }

    /// The balance of the first account that tells it (the compatible `getbalance`; summing
    /// across providers would add different currencies' worth of credit).
    pub async fn balance(&self) -> Result<String, SolveFailure> {
        let mut last = None;
        for m in &self.members {
            match m.account.balance().await {
                Ok(b) => return Ok(b),
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or_else(no_account, |e| failure(&e)))
    }

    /// Account gauges and counters, in OpenMetrics text.
    pub fn write_metrics(&self, out: &mut String) {
        metrics::write(&self.members, out);
    }

    /// The account for the next try of a task of `kind`, and how its breaker admitted it:
    /// one not yet `tried` for this task when there is one.
    fn choose(&self, kind: Kind, tried: &[usize]) -> Option<(usize, Admit)> {
        // A lost race for a half-open trial just means choosing again.
        for _ in 0..=self.members.len() {
            let now = now_ms();
            let open: Vec<(usize, Candidate)> = self
                .members
                .iter()
                .enumerate()
                .filter(|(i, m)| !tried.contains(i) && m.takes(kind) && !m.paused())
                .filter_map(|(i, m)| {
                    let admit = lock(&m.breaker).peek(now);
                    let scores = lock(&m.scores);
                    (admit != Admit::No).then(|| {
                        (
                            i,
                            Candidate {
                                weight: m.weight,
                                threads: m.account.threads(),
                                in_flight: m.account.in_flight(),
                                solve_ms: scores.solve_ms(kind),
                                success: scores.success(kind),
                                trial: admit == Admit::Trial,
                            },
                        )
                    })
                })
                .collect();
            let candidates: Vec<Candidate> = open.iter().map(|(_, c)| *c).collect();
            let (index, _) = open[pick(&candidates)?];
            match lock(&self.members[index].breaker).begin(now) {
                Admit::No => continue,
                admit => return Some((index, admit)),
            }
        }
        None
    }
}

/// Tries a task may make across accounts: every account once, then once more each (a second
/// round only after every account failed it, for blips that hit them all).
fn max_tries(accounts: usize) -> usize {
    accounts.saturating_mul(2).max(1)
}

/// Wait before a second round over accounts that all failed the task.
const ROUND_BACKOFF: Duration = Duration::from_secs(1);

/// A task at one account, finished once: dropped unfinished (its caller's future was dropped)
/// it tells the breaker nothing, so a trial is handed to the next task.
struct Attempt<'a> {
    member: &'a Member,
    admit: Admit,
    done: bool,
}

impl Attempt<'_> {
    fn finish(mut self, verdict: Verdict) {
        self.done = true;
        lock(&self.member.breaker).finish(self.admit, verdict, now_ms());
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.member.breaker).finish(self.admit, Verdict::Nothing, now_ms());
        }
    }
}

/// What an outcome says about the account that produced it.
fn verdict(result: &Result<provider::Solved, ProviderError>) -> Verdict {
    let Err(e) = result else {
        return Verdict::Works;
    };
    if e.code == provider::TIMEOUT || e.code == provider::SHUTDOWN {
        return Verdict::Nothing;
    }
    match e.class {
        ErrorClass::Account => Verdict::Broken(e.retry_after),
        ErrorClass::Transient => Verdict::Transient,
        // The provider answered about the task itself, or was merely busy.
        ErrorClass::Permanent | ErrorClass::Capacity => Verdict::Works,
    }
}

/// Whether another account may succeed where this one failed: yes for the account's problems
/// and for transient ones; no for the task's own (bad parameters, unsolvable), the deadline or
/// a shutdown.
fn worth_another_account(e: &ProviderError) -> bool {
    e.code != provider::TIMEOUT
        && e.code != provider::SHUTDOWN
        && matches!(e.class, ErrorClass::Account | ErrorClass::Transient)
}

/// A zero balance pauses the account instead of opening its breaker: only money brings it back,
/// and the spend guard sees that.
fn is_no_money(e: &ProviderError) -> bool {
    e.class == ErrorClass::Account && e.code == codes::ZERO_BALANCE
}

fn no_account() -> SolveFailure {
    SolveFailure::new(
        codes::SERVER_ERROR,
        "no provider account can take this task now",
    )
}

/// What a caller is told about an upstream failure: the provider's code for problems with the
/// request itself, a terminal code for everything the caller cannot fix. Never the provider's
/// body, which may echo our key.
fn failure(e: &ProviderError) -> SolveFailure {
    if e.code == provider::SHUTDOWN {
        return SolveFailure::shutting_down();
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

#[async_trait]
impl Solver for Upstream {
    async fn solve(
        &self,
        req: &SolveRequest,
        deadline: Instant,
        priority: Priority,
    ) -> Result<Solution, SolveFailure> {
        // Refills take only the threads no caller is waiting for (promise 5).
        let priority = match priority {
            Priority::Interactive => provider::Priority::Interactive,
            Priority::Refill => provider::Priority::Refill,
        };
        let kind = req.kind();
        let mut tried: Vec<usize> = Vec::new();
        let mut last: Option<ProviderError> = None;
        for _ in 0..max_tries(self.members.len()) {
            let (index, admit) = match self.choose(kind, &tried) {
                Some(chosen) => chosen,
                // Every account that may take it failed it once: one more round after a pause.
                None if !tried.is_empty()
                    && Instant::now() + ROUND_BACKOFF < deadline
                    && last.as_ref().is_some_and(worth_another_account) =>
                {
                    tokio::time::sleep(ROUND_BACKOFF).await;
                    tried.clear();
                    match self.choose(kind, &tried) {
                        Some(chosen) => chosen,
                        None => break,
                    }
                }
                None => break,
            };
            let member = &self.members[index];
            let attempt = Attempt {
                member,
                admit,
                done: false,
            };
            let started = Instant::now();
            let result = member.account.solve(req, deadline, priority).await;
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
                Ok(solved) => {
                    member.reports.remember(&solved.task_id, kind, now_ms());
                    return Ok(Solution {
                        text: solved.text,
                        user_agent: solved.user_agent,
                        upstream: UpstreamRef {
                            account: member.name().to_owned(),
                            task_id: solved.task_id,
                        },
                        solved_at: solved.solved_at,
                    });
                }
                Err(e) if worth_another_account(&e) && Instant::now() < deadline => {
                    tracing::debug!(account = member.name(), error = %e, "trying the task at another account");
                    tried.push(index);
                    last = Some(e);
                }
                Err(e) => return Err(failure(&e)),
            }
        }
        Err(last.as_ref().map_or_else(no_account, failure))
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
