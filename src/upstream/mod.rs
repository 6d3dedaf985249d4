//! The engine's view of the providers: implements [`Solver`](crate::engine::Solver) over every configured account
//! (docs/API.md "Accounts and failover").
//!
//! Owns: choosing the account per task (`routing`), taking failing accounts out of rotation and
//! probing them back (`breaker`), pausing empty ones (`spend`), moving a task to another account
//! when the failure was the account's and not the task's, mapping provider errors to the codes
//! callers see, report counts (`reports`), the per-account lines of `/health` ([`AccountStatus`])
//! and of `/metrics` (`metrics`). Does not own: one account's threads, submit retries and polling
//! (provider::Account), or which caller gets an answer (the engine).
//!
//! # Layout
//!
//! - `breaker`: closed / open / half-open per account, on a clock passed in.
//! - `routing`: recent solve time and success per account and kind, and the choice.
//! - `solve`: one task across accounts (the [`Solver`](crate::engine::Solver) implementation).
//! - `spend`: the balance check that pauses and resumes accounts.
//! - `reports`: `reportgood`/`reportbad` counts per account and kind.
//! - `passthrough`: pass-through tasks (kind `other`) as messages name them, and their counts
//!   by protocol and type.
//! - `metrics`: every per-account family on `/metrics`, in one place.

mod breaker;
mod metrics;
mod passthrough;
mod reports;
mod routing;
mod solve;
mod spend;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::engine::SolveFailure;
use crate::model::{Kind, SolveRequest, now_ms};
use crate::provider::AccountProvider;
use crate::provider::{Account, Priority};
use crate::telemetry::histogram::{Buckets, KindHistograms};
use solve::{failure, no_account};

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
    /// Whether a task of a type no declaration names is forwarded as sent to an account of the
    /// protocol it came in (kind `other`); off, its caller hears the type is not supported.
    pub passthrough: bool,
}

impl Default for UpstreamSettings {
    fn default() -> Self {
        Self {
            breaker: BreakerSettings::default(),
            balance_every: Duration::from_secs(60),
            // A fleet's every task goes through the gateway, so the thread budget holds.
            passthrough: true,
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
    /// The last balance a balance check read as a number (accounts billed per solve).
    balance: Mutex<Option<f64>>,
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
            balance: Mutex::new(None),
        }
    }

    pub fn name(&self) -> &str {
        self.account.name()
    }

    /// Whether `req` may go to it: its provider solves the kind (a pass-through task: speaks
    /// the protocol it came in), and its settings list the kind (or list none).
    fn takes(&self, req: &SolveRequest) -> bool {
        let kind = req.kind();
        self.provider.solves_request(req) && (self.kinds.is_empty() || self.kinds.contains(&kind))
    }

    fn balance(&self) -> Option<f64> {
        *lock(&self.balance)
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
    /// Callers on this instance waiting for one of its threads.
    pub waiting: usize,
}

/// One account's figures for the status page (`status`): its gauges and counters now.
#[derive(Debug, Clone)]
pub struct AccountFigures {
    pub name: String,
    pub provider: &'static str,
    /// As [`AccountStatus::state`].
    pub state: &'static str,
    pub threads: u32,
    /// Threads taken, fleet-wide with Redis (as of the last renewal).
    pub in_flight: u32,
    /// The effective cap now.
    pub cap: u32,
    /// Callers on this instance waiting for one of its threads.
    pub waiting: usize,
    pub stats: crate::provider::AccountStats,
}

/// Every configured account, in config order (the flags' one account when there is no
/// `[[accounts]]`).
pub struct Upstream {
    members: Vec<Arc<Member>>,
    /// Whether a type no declaration names is forwarded as sent (`passthrough`, on by default).
    passthrough: bool,
    /// Pass-through tasks sent to a provider, by protocol and type label.
    passed: passthrough::PassedThrough,
    /// Signalled when an account may have become usable (a task finished, a pause lifted).
    changed: Notify,
    /// Upstream submit to answer ready, by kind: `/metrics` and the status page read the same.
    solve_seconds: KindHistograms,
    /// Callers refused because every thread of the fleet was taken and enough waited already
    /// (`fleet_busy`), since start.
    thread_refusals: std::sync::atomic::AtomicU64,
}

impl Upstream {
    pub fn new(members: Vec<Member>) -> Self {
        Self {
            members: members.into_iter().map(Arc::new).collect(),
            passthrough: true,
            passed: passthrough::PassedThrough::default(),
            changed: Notify::new(),
            solve_seconds: KindHistograms::default(),
            thread_refusals: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// With pass-through on or off (`passthrough` in the config file).
    pub fn with_passthrough(mut self, on: bool) -> Self {
        self.passthrough = on;
        self
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

    /// Threads taken over every account, fleet-wide with Redis.
    pub fn in_flight(&self) -> u32 {
        self.members
            .iter()
            .map(|m| m.account.in_flight())
            .fold(0, u32::saturating_add)
    }

    /// The caps now over every account: threads, lowered to each plan and for a while by
    /// capacity errors.
    pub fn effective_threads(&self) -> u32 {
        self.members
            .iter()
            .map(|m| m.account.effective_threads())
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
                waiting: m.account.queued(Priority::Interactive),
            })
            .collect()
    }

    /// Whether every account that could take work has all its threads taken, fleet-wide (as of
    /// each budget's last answer): a new solve would wait for a thread wherever it ran.
    pub fn threads_exhausted(&self) -> bool {
        let mut open = self.members.iter().filter(|m| m.can_take_work()).peekable();
        open.peek().is_some()
            && open.all(|m| m.account.in_flight() >= m.account.effective_threads())
    }

    /// Counts a caller refused for want of a thread (`fleet_busy`).
    pub fn refuse_for_threads(&self) {
        self.thread_refusals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Callers refused for want of a thread since start.
    pub fn thread_refusals(&self) -> u64 {
        self.thread_refusals
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Callers on this instance waiting for an upstream thread, over every account.
    pub fn callers_waiting_for_threads(&self) -> usize {
        self.members
            .iter()
            .map(|m| m.account.queued(Priority::Interactive))
            .sum()
    }

    /// Upstream submit to answer ready, every kind, as the status page's buckets.
    pub fn solve_time_buckets(&self) -> crate::telemetry::histogram::Buckets {
        self.solve_seconds.total()
    }

    /// Per kind with a solve: the solve times' histogram and their sum in seconds.
    pub fn solve_times_by_kind(&self) -> Vec<(Kind, Buckets, f64)> {
        self.solve_seconds.by_kind()
    }

    /// Per kind (`Kind::index`): seconds upstream threads were held for it, summed over every
    /// account since start (the plan advisor's Little's law reads this).
    pub fn thread_seconds_by_kind(&self) -> [f64; Kind::ALL.len()] {
        let mut out = [0.0; Kind::ALL.len()];
        for m in &self.members {
            for (sum, ms) in out.iter_mut().zip(m.account.stats().held_ms) {
                *sum += ms as f64 / 1000.0;
            }
        }
        out
    }

    /// Every account's figures, in config order (the status page).
    pub fn figures(&self) -> Vec<AccountFigures> {
        self.members
            .iter()
            .map(|m| AccountFigures {
                name: m.name().to_owned(),
                provider: m.provider.as_str(),
                state: m.state(),
                threads: m.account.threads(),
                in_flight: m.account.in_flight(),
                cap: m.account.effective_threads(),
                waiting: m.account.queued(Priority::Interactive),
                stats: m.account.stats(),
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

    /// The account for the next try of a task of `kind`, and how its breaker admitted it: one
    /// not yet `tried` for this task, or one that did and is now half-open (its trial).
    fn choose(&self, req: &SolveRequest, tried: &[usize]) -> Option<(usize, Admit)> {
        let kind = req.kind();
        // A lost race for a half-open trial just means choosing again.
        for _ in 0..=self.members.len() {
            let now = now_ms();
            let open: Vec<(usize, Candidate)> = self
                .members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.takes(req) && !m.paused())
                .filter_map(|(i, m)| {
                    let admit = lock(&m.breaker).peek(now);
                    // An account that failed this task may take it again only as a trial.
                    let again = tried.contains(&i) && admit == Admit::Yes;
                    let scores = lock(&m.scores);
                    (admit != Admit::No && !again).then(|| {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
