//! The provider simulator (docs/SIMULATOR.md): a fake CAPTCHA provider that speaks
//! the compatible protocol at `/in.php` and `/res.php` exactly like CaptchaAI or 2captcha, with
//! realistic latency, a plan thread limit, injected failures and tokens a site backend can check
//! at `/verify`. Users rehearse pipelines and size plans against it without spending money; our
//! tests and benchmarks run against it.
//!
//! # Layout
//!
//! - [`SimSettings`] (`settings.rs`): the knobs and their CLI text forms.
//! - [`Faults`] (`faults.rs`): injected failures, switchable while the simulator runs.
//! - `tasks.rs`: the task table (thread limit, readiness, retention, concurrency figures).
//! - `answers.rs`: what each kind's answer looks like.
//! - `tokens.rs`: minting and verifying single-use tokens.
//! - [`SimStats`] (`stats.rs`): what is counted.
//! - `taskapi.rs`: the JSON task protocol (`/createTask`, `/getTaskResult`, `/getBalance`).
//! - `handlers.rs`: the HTTP endpoints, on top of [`wire::inphp`](crate::wire::inphp) for parsing and
//!   reply bodies.
//!
//! Owns: the simulated provider's state and its clock. Does not own the wire format (compat) or
//! the process around it (the CLI's `simulate` command calls [`serve`]).

mod answers;
mod clicks;
mod error;
mod faults;
mod handlers;
mod settings;
mod stats;
mod taskapi;
mod tasks;
mod tokens;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use answers::DEFAULT_USER_AGENT;
pub use error::SettingsError;
pub use faults::{Faults, FaultsPatch, MAX_SLOW_MS};
pub use settings::{KindLatency, KindLifetime, LatencyRange, SimSettings, parse_duration};
pub use stats::SimStats;
pub(crate) use tokens::Verdict;

use crate::model::{Kind, Millis, SolveRequest};
use faults::{FaultSwitch, SubmitFault, WireFault};
use stats::{Counters, Event};
use tasks::{NewTask, Outcome, Poll, Report, TaskTable};
use tokens::{TokenMint, UsedTokens};

/// Where the simulator reads the time. The system clock in production; a manual clock in tests,
/// which move time by hand instead of sleeping.
#[derive(Debug, Clone)]
pub struct Clock {
    manual: Option<Arc<AtomicU64>>,
}

impl Clock {
    /// The wall clock.
    pub fn system() -> Clock {
        Clock { manual: None }
    }

    /// A clock that stands at `start` until [`advance`](Clock::advance)d.
    pub fn manual(start: Millis) -> Clock {
        Clock {
            manual: Some(Arc::new(AtomicU64::new(start))),
        }
    }

    /// The current time in milliseconds since the Unix epoch.
    pub fn now(&self) -> Millis {
        match &self.manual {
            Some(t) => t.load(Ordering::SeqCst),
            None => crate::model::now_ms(),
        }
    }

    /// Moves a manual clock forward; the system clock moves by itself, so there it does nothing.
    pub fn advance(&self, by: Duration) {
        if let Some(t) = &self.manual {
            t.fetch_add(by.as_millis() as Millis, Ordering::SeqCst);
        }
    }
}

/// One simulated provider account pool: its settings, tasks, tokens and counters.
#[derive(Debug)]
pub struct Simulator {
    settings: SimSettings,
    clock: Clock,
    rng: Mutex<StdRng>,
    tasks: Mutex<TaskTable>,
    mint: TokenMint,
    used_tokens: Mutex<UsedTokens>,
    counters: Counters,
    faults: FaultSwitch,
}

/// What `in.php` does with an acceptable request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Submit {
    Accepted(u64),
    /// Every thread is busy: answer the configured capacity code.
    NoCapacity,
    /// An injected failure instead of a task.
    Fault(SubmitFault),
}

impl Simulator {
    /// A simulator on the system clock. Rates outside 0..=1 are clamped; call
    /// [`SimSettings::validate`] first to report them instead.
    pub fn new(settings: SimSettings) -> Arc<Simulator> {
        Simulator::with_clock(settings, Clock::system())
    }

    /// A simulator reading time from `clock` (tests pass [`Clock::manual`]).
    pub fn with_clock(mut settings: SimSettings, clock: Clock) -> Arc<Simulator> {
        let rate = settings.unsolvable_rate;
        settings.unsolvable_rate = if rate.is_nan() {
            0.0
        } else {
            rate.clamp(0.0, 1.0)
        };
        settings.faults = settings.faults.clamped();
        let mut rng = match settings.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        // Ten or eleven digits, like real providers' ids; counting up from a random start keeps
        // them unique while two simulators rarely share ids.
        let first_id = rng.random_range(10_000_000_000..50_000_000_000u64);
        Arc::new(Simulator {
            clock,
            rng: Mutex::new(rng),
            tasks: Mutex::new(TaskTable::new(first_id)),
            // The secret is random even with a seed: a seed makes runs repeatable, it must not
            // make tokens forgeable by anyone who knows it.
            mint: TokenMint::new(rand::random()),
            used_tokens: Mutex::new(UsedTokens::default()),
            counters: Counters::default(),
            faults: FaultSwitch::new(settings.faults),
            settings,
        })
    }

    /// Everything counted so far, with the concurrency figures as of now.
    pub fn stats(&self) -> SimStats {
        let now = self.clock.now();
        let tasks = lock(&self.tasks).counts(now);
        self.counters.snapshot(tasks)
    }

    /// The settings the simulator started with (rates already clamped); the faults in effect
    /// now are [`faults`](Simulator::faults).
    pub fn settings(&self) -> &SimSettings {
        &self.settings
    }

    /// The faults injected now.
    pub fn faults(&self) -> Faults {
        self.faults.get()
    }

    /// Switches the injected faults while the simulator serves (tests turn a failure on and
    /// off). Invalid faults are refused and the current ones stay.
    pub fn set_faults(&self, faults: Faults) -> Result<(), SettingsError> {
        self.faults.set(faults)
    }

    /// What happens to one `in.php`/`res.php` reply: held back how long, then dropped or cut
    /// off, or neither. Counted here, as they are decided.
    pub(crate) fn wire_faults(&self) -> (Option<Duration>, Option<WireFault>) {
        let faults = self.faults.get();
        let (delay_draw, wire_draw) = {
            let mut rng = lock(&self.rng);
            (rng.random::<f64>(), rng.random::<f64>())
        };
        let delay = faults.delay(delay_draw);
        let wire = faults.wire_fault(wire_draw);
        if delay.is_some() {
            self.counters.count(Event::SlowReply);
        }
        match wire {
            Some(WireFault::Drop) => self.counters.count(Event::DroppedConnection),
            Some(WireFault::Malformed) => self.counters.count(Event::MalformedReply),
            None => {}
        }
        (delay, wire)
    }

    /// The clock the simulator reads; tests advance it.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Decides a submit: injected error, no capacity, or a new task whose answer is ready after
    /// a latency drawn from the kind's range.
    pub(crate) fn submit(&self, req: &SolveRequest) -> Submit {
        let kind = req.kind();
        let range = self.settings.latency_for(kind);
        let (error_draw, latency, unsolvable, nonce) = {
            let mut rng = lock(&self.rng);
            let min = range.min.as_millis() as Millis;
            let max = range.max.as_millis() as Millis;
            let error_draw: f64 = rng.random();
            let latency = rng.random_range(min..=max.max(min));
            let unsolvable = rng.random_bool(self.settings.unsolvable_rate);
            (error_draw, latency, unsolvable, rng.random::<u64>())
        };
        // One draw decides every injected submit error, so their rates add up exactly.
        if let Some(fault) = self.faults.get().submit_fault(error_draw) {
            self.counters.count(Event::InjectedError);
            return Submit::Fault(fault);
        }
        let now = self.clock.now();
        let ready_at = now.saturating_add(latency);
        let outcome = if unsolvable {
            Outcome::Unsolvable
        } else {
            let lifetime = self.settings.lifetime_for(kind);
            Outcome::Solved(answers::build(req, ready_at, lifetime, nonce, &self.mint))
        };
        let task = NewTask {
            kind,
            ready_at,
            outcome,
        };
        match lock(&self.tasks).admit(now, self.settings.threads, task) {
            Some(id) => {
                self.counters.count(Event::Submit);
                Submit::Accepted(id)
            }
            None => {
                self.counters.count(Event::CapacityRejection);
                Submit::NoCapacity
            }
        }
    }

    /// The state of each task in `ids` (`None`: an id too large to be ours), in order, read
    /// under one lock so a batch sees one moment.
    pub(crate) fn poll(&self, ids: &[Option<u64>]) -> Vec<Poll> {
        self.counters.add(Event::IdPolled, ids.len() as u64);
        let now = self.clock.now();
        let mut tasks = lock(&self.tasks);
        ids.iter()
            .map(|id| id.map_or(Poll::Unknown, |id| tasks.poll(now, id)))
            .collect()
    }

    /// When a `res.php` reply first carried the answer of `task_id` (as the gateway knows it):
    /// benchmarks measure the gateway's own handout delay from this moment, apart from how
    /// late its polling noticed the task was ready.
    pub fn delivered_at(&self, task_id: &str) -> Option<Millis> {
        let id = handlers::parse_id(task_id).ok()??;
        lock(&self.tasks).delivered_at(id)
    }

    /// Records a `reportbad` (`good == false`) or `reportgood` about task `id`.
    pub(crate) fn report(&self, id: u64, good: bool) -> Report {
        let report = lock(&self.tasks).report(self.clock.now(), id);
        if report == Report::Recorded {
            self.counters.count(if good {
                Event::ReportGood
            } else {
                Event::ReportBad
            });
        }
        report
    }

    /// A valid token of `kind` as if a task had become ready at `solved_at`, without running a
    /// task: benchmarks import these into pools and later check each handout like `/verify`.
    /// `None` for kinds whose answers are not tokens (image, text).
    pub fn mint_token(&self, kind: Kind, solved_at: Millis) -> Option<String> {
        let nonce = lock(&self.rng).random::<u64>();
        self.mint.mint(kind, solved_at, nonce)
    }

    /// Tasks holding a thread right now.
    pub(crate) fn working_threads(&self) -> u64 {
        lock(&self.tasks).working(self.clock.now())
    }

    pub(crate) fn count(&self, event: Event) {
        self.counters.count(event);
    }

    /// Checks a token presented to `/verify` and counts the outcome.
    pub(crate) fn verify(&self, token: &str) -> (Verdict, Millis) {
        let now = self.clock.now();
        let verdict = lock(&self.used_tokens)
            .verify(&self.mint, token, now, |k| self.settings.lifetime_for(k));
        self.counters.count(match verdict {
            Verdict::Ok { .. } => Event::VerifyOk,
            Verdict::Duplicate { .. } => Event::VerifyDuplicate,
            Verdict::Expired { .. } => Event::VerifyExpired,
            Verdict::Invalid => Event::VerifyInvalid,
        });
        (verdict, now)
    }
}

/// The simulator's HTTP routes: `/in.php`, `/res.php`, the JSON task API, `/verify`, `/stats`,
/// `/faults`.
pub fn router(sim: Arc<Simulator>) -> axum::Router {
    handlers::routes().merge(taskapi::routes()).with_state(sim)
}

/// Serves the simulator on `listener` until `shutdown` completes, then lets in-flight requests
/// finish.
pub async fn serve(
    sim: Arc<Simulator>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(sim))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Locks a simulator mutex. A poisoned lock is taken over rather than propagated: every critical
/// section leaves its table consistent before anything in it could panic, and a simulator that
/// stops answering would hide the bug it is meant to expose.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
