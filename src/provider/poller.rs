//! The batched poller: one loop per account that checks every outstanding upstream task
//! (docs/ARCHITECTURE.md, "Adaptive polling"; docs/PROTOCOL.md "Polling budget").
//!
//! Owns: when each task is checked, grouping due tasks into `ids=` batches, the per-account
//! request budget, and ending tasks that exhaust their poll budget with
//! `ERROR_CAPTCHA_UNSOLVABLE`. Polls are driven by this schedule only, never by how often our own
//! clients ask us. Does not own: submitting, thread slots or deadlines (`account`), or how the
//! learned schedule is computed (`schedule`).
//!
//! Two schedules. The adaptive one (the default): each kind's checks follow the solve times
//! learned from this account's own answers, moved onto a shared cadence so one request answers
//! many tasks (see `schedule`). The fixed one (`adaptive = false`, or an explicit first check):
//! first check at the kind's typical ready time, then every `interval`, slower past half the
//! budget.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::error::{ErrorClass, ProviderError};
use super::requests::Endpoint;
use super::schedule::{self, ArrivalRate, Grid, SolveTimes};
use super::stats::Counters;
use super::{PollOutcome, Provider};
use crate::model::{Kind, Millis, now_ms};
use crate::wire::inphp::codes;

/// The longest interval the slow-down past half the budget may reach.
const MAX_SLOW_INTERVAL: Duration = Duration::from_secs(30);
/// `res.php` requests per task the adaptive cadence aims at: the batch cadence is as short as
/// this allows at the account's arrival rate. Below the 0.5 we promise, with room for the
/// requests of tasks that must be checked alone.
const REQUESTS_PER_TASK: f64 = 0.35;
/// The longest adaptive cadence, the one a lone task gets: it bounds the wait from ready to
/// check when no other task shares the requests. A lone task then costs at most its check budget
/// (the plan has no more entries), which stays within what providers allow per task.
const MAX_CADENCE: Duration = Duration::from_secs(2);
/// The cadence is only changed when the ideal one is this far off: every change restarts the
/// ticks, and for a moment tasks on the old and the new ticks do not share requests.
const CADENCE_SLACK: f64 = 0.15;

/// How an account's poller paces its `res.php` calls.
#[derive(Debug, Clone, PartialEq)]
pub struct PollSettings {
    /// Learn each kind's solve times from the answers and check at the times they suggest. An
    /// explicit `first_check` turns it off: whoever set one knows the solve times.
    pub adaptive: bool,
    /// Fixed schedule: delay from submit to the first check; `None` uses [`Kind::typical_ready`].
    pub first_check: Option<Duration>,
    /// Fixed schedule: delay between checks of one task. Adaptive: a cap on the batch cadence.
    pub interval: Duration,
    /// Checks per task before it is given up as unsolvable.
    pub max_polls_per_task: u32,
    /// Ids per `ids=` request.
    pub batch_size: usize,
    /// `poll` calls per second for the whole account. One call is one request, except a batch
    /// whose answer does not parse: the provider then checks its ids one by one, which it does
    /// at most a few times before it stops batching (see `InPhpProvider`).
    pub max_requests_per_second: f64,
    /// A check may run up to this much early so tasks due at nearly the same time share one
    /// request; without it, tasks submitted a few milliseconds apart would each cost a request.
    pub coalesce: Duration,
}

impl Default for PollSettings {
    fn default() -> Self {
        Self {
            // Real providers' solve times vary by provider, kind and hour: learn them.
            adaptive: true,
            // The SDK's per-kind waits (15 s reCAPTCHA v2, 10 s v3/Turnstile, 1 s images) beat
            // one figure for all kinds: 2captcha asks for 10-20 s before polling reCAPTCHA.
            first_check: None,
            // 2captcha and CaptchaAI both say "if not ready, retry in 5 s".
            interval: Duration::from_secs(5),
            // 2captcha blocks accounts past ~20 res.php calls per captcha.
            max_polls_per_task: 20,
            // docs/PROTOCOL.md "Upstream": up to 100 ids per request.
            batch_size: 100,
            // Neither provider publishes a res.php limit; 10/s is far above what batching needs
            // and far below what would look abusive (MAX_USER_TURN is >60 in.php calls in 3 s).
            max_requests_per_second: 10.0,
            // A fifth of the interval: an early check costs little, a lost batch costs a request.
            coalesce: Duration::from_secs(1),
        }
    }
}

impl PollSettings {
    /// These settings polling every `interval`, with the coalescing window kept at a fifth of it
    /// (as the default's 1 s of 5 s): a fixed window would let checks run many intervals early
    /// once the interval is short, spending the per-task budget before the task can be ready.
    pub fn with_interval(self, interval: Duration) -> Self {
        Self {
            interval,
            coalesce: interval / 5,
            ..self
        }
    }

    fn first_check_for(&self, kind: Kind) -> Duration {
        self.first_check.unwrap_or_else(|| kind.typical_ready())
    }

    /// Whether checks follow the learned schedule.
    pub(crate) fn learns(&self) -> bool {
        self.adaptive && self.first_check.is_none()
    }

    /// Checks per task, never zero (zero would end tasks unchecked).
    fn budget(&self) -> u32 {
        self.max_polls_per_task.max(1)
    }

    /// The wait before the next check once `polls_done` checks are done: doubled (up to 30 s)
    /// past half the budget, so a slow task spreads its remaining checks over more time.
    fn interval_after(&self, polls_done: u32) -> Duration {
        if polls_done.saturating_mul(2) >= self.budget() {
            self.interval
                .max((self.interval * 2).min(MAX_SLOW_INTERVAL))
        } else {
            self.interval
        }
    }

    /// How long after submit a task of `kind` may go on being checked: the time its last
    /// allowed check is due. The account keeps a slot this long for a task it stopped watching.
    /// The adaptive schedule ends at the fixed one's last check, moved to the next tick of its
    /// cadence, which is never longer than `interval`.
    pub fn horizon(&self, kind: Kind) -> Duration {
        let patience = self.patience(kind);
        if self.learns() {
            patience.saturating_add(self.interval)
        } else {
            patience
        }
    }

    /// How long a task is followed: the fixed schedule's last check, which both schedules keep
    /// (the adaptive one places its last check there).
    fn patience(&self, kind: Kind) -> Duration {
        let later = self.budget() - 1;
        let early = later / 2;
        let slow = self
            .interval
            .max((self.interval * 2).min(MAX_SLOW_INTERVAL));
        self.first_check_for(kind)
            .saturating_add(self.interval.saturating_mul(early))
            .saturating_add(slow.saturating_mul(later - early))
    }

    /// Minimum spacing of requests. A rate that is not positive would stop polling altogether,
    /// which would strand every task (docs/PROTOCOL.md item 13), so it falls back to one a second.
    fn gap(&self) -> Duration {
        let rps = self.max_requests_per_second;
        if rps.is_nan() || rps <= 0.0 {
            return Duration::from_secs(1);
        }
        Duration::try_from_secs_f64(1.0 / rps).unwrap_or(Duration::ZERO)
    }

    /// The batch cadence for `per_second` arrivals: as short as [`REQUESTS_PER_TASK`] allows,
    /// never below the request rate cap's gap nor above [`MAX_CADENCE`] (or `interval`, if
    /// shorter).
    fn cadence(&self, per_second: f64) -> Duration {
        let gap = self.gap();
        let longest = self.interval.min(MAX_CADENCE).max(gap);
        if !(per_second.is_finite() && per_second > 0.0) {
            return longest;
        }
        Duration::try_from_secs_f64(1.0 / (REQUESTS_PER_TASK * per_second))
            .unwrap_or(longest)
            .clamp(gap, longest)
    }
}

/// A task handed to the poller right after submit.
pub(crate) struct Registration {
    pub id: String,
    pub kind: Kind,
    /// Its answer carries a user agent or a JSON object: checked alone, never in a batch.
    pub extras: bool,
    /// Receives the final outcome: `Ready` or `Failed`, never `NotReady`.
    pub reply: oneshot::Sender<Settled>,
}

/// How a task ended, and the latest moment it was known not to be ready. The provider finished
/// it somewhere between that moment and our check, so lifetimes count from there: counting
/// from our check could overstate a token's remaining life by a whole poll interval (promise 2).
#[derive(Debug)]
pub(crate) struct Settled {
    pub outcome: PollOutcome,
    pub ready_after: Millis,
}

/// Starts the poller loop of one account; it ends on `shutdown` or when the account and every
/// task are gone.
pub(crate) fn spawn(
    provider: Arc<dyn Provider>,
    settings: PollSettings,
    counters: Arc<Counters>,
    shutdown: CancellationToken,
) -> mpsc::UnboundedSender<Registration> {
    let (tx, rx) = mpsc::unbounded_channel();
    let now = Instant::now();
    let poller = Poller {
        grid: Grid {
            epoch: now,
            step: settings.cadence(0.0),
        },
        provider,
        settings,
        counters,
        tasks: HashMap::new(),
        next_key: 0,
        requests: JoinSet::new(),
        in_request: HashMap::new(),
        next_request_at: now,
        paused_until: now,
        learned: HashMap::new(),
        arrivals: ArrivalRate::default(),
    };
    tokio::spawn(poller.run(rx, shutdown));
    tx
}

struct Task {
    id: String,
    kind: Kind,
    extras: bool,
    /// When it was handed to us, just after the submit was accepted: solve times count from here.
    submitted: Instant,
    /// When the last check that found it not ready was sent (at first: `submitted`).
    not_ready_at: Instant,
    due: Instant,
    polls: u32,
    /// A request about this task is out; it is not checked again until that returns.
    busy: bool,
    /// When the last check that found it not ready was sent (at first: registration, just
    /// after the submit was accepted).
    ready_after: Millis,
    reply: oneshot::Sender<Settled>,
}

type RequestResult = Result<Vec<PollOutcome>, ProviderError>;

struct Poller {
    provider: Arc<dyn Provider>,
    settings: PollSettings,
    counters: Arc<Counters>,
    tasks: HashMap<u64, Task>,
    next_key: u64,
    requests: JoinSet<RequestResult>,
    /// Which tasks each running request is about and when it was sent, by tokio task id (so a
    /// panicking provider still gives its tasks back).
    in_request: HashMap<tokio::task::Id, (Vec<u64>, Millis, Instant)>,
    next_request_at: Instant,
    paused_until: Instant,
    /// What the answers taught about each kind (adaptive schedule only); one entry per kind.
    learned: HashMap<Kind, Learned>,
    arrivals: ArrivalRate,
    /// The shared cadence checks are moved onto (adaptive schedule only).
    grid: Grid,
}

/// One kind's learned solve times and the plans last made from them.
#[derive(Default)]
struct Learned {
    times: SolveTimes,
    /// The plans (without and with a check below the learned times) and when they were made;
    /// remade after each answer and at least once a second (fading alone can take them back to
    /// exploring after a quiet spell).
    plans: Option<(Instant, [Vec<Duration>; 2])>,
}

/// One task in this many gets a check below the learned solve times (see `schedule::plan`).
const LOOK_BELOW_EVERY: u64 = 8;

/// How often a cached plan is remade even without new answers.
const PLAN_MAX_AGE: Duration = Duration::from_secs(1);

impl Poller {
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Registration>,
        shutdown: CancellationToken,
    ) {
        let mut open = true;
        loop {
            // A dropped receiver means the solve was cancelled: stop checking that task.
            self.tasks.retain(|_, t| !t.reply.is_closed());
            if !open && self.tasks.is_empty() && self.requests.is_empty() {
                return;
            }
            let now = Instant::now();
            self.launch(now);
            let wake = self.next_wake();
            tokio::select! {
                _ = shutdown.cancelled() => return,
                reg = rx.recv(), if open => match reg {
                    Some(reg) => self.add(reg),
                    None => open = false,
                },
                Some(done) = self.requests.join_next_with_id(), if !self.requests.is_empty() => {
                    let (id, result) = match done {
                        Ok((id, result)) => (id, result),
                        Err(e) => (e.id(), Err(ProviderError::transport("poll request panicked"))),
                    };
                    let (keys, asked_at, sent) = self
                        .in_request
                        .remove(&id)
                        .unwrap_or_else(|| (Vec::new(), now_ms(), Instant::now()));
                    self.apply(keys, (asked_at, sent), result);
                }
                _ = sleep_until(wake.unwrap_or(now)), if wake.is_some() => {}
            }
        }
    }

    fn add(&mut self, reg: Registration) {
        let key = self.next_key;
        self.next_key += 1;
        let now = Instant::now();
        let due = if self.settings.learns() {
            self.arrivals.add(now);
            let budget = self.settings.budget();
            self.learned_next(key, reg.kind, now, now, budget)
                .unwrap_or(now)
        } else {
            now + self.settings.first_check_for(reg.kind)
        };
        self.tasks.insert(
            key,
            Task {
                id: reg.id,
                kind: reg.kind,
                extras: reg.extras,
                submitted: now,
                not_ready_at: now,
                due,
                polls: 0,
                busy: false,
                ready_after: now_ms(),
                reply: reg.reply,
            },
        );
    }

    /// When the loop must look again: the earliest idle task's due time, but not before the
    /// budget or a provider-requested pause allows a request.
    fn next_wake(&self) -> Option<Instant> {
        let earliest = self
            .tasks
            .values()
            .filter(|t| !t.busy)
            .map(|t| t.due)
            .min()?;
        Some(earliest.max(self.next_request_at).max(self.paused_until))
    }

    /// Sends as many requests as are due and the budget allows: tasks needing extras one by
    /// one, the others in batches.
    fn launch(&mut self, now: Instant) {
        // Adaptive checks already sit on shared ticks; the window only lets tasks left on the
        // ticks of a previous cadence join, and must not pull checks far ahead of their plan.
        let coalesce = if self.settings.learns() {
            self.settings.coalesce.min(self.grid.step / 4)
        } else {
            self.settings.coalesce
        };
        let horizon = now + coalesce;
        while now >= self.next_request_at && now >= self.paused_until {
            let mut due: Vec<(Instant, u64, bool)> = self
                .tasks
                .iter()
                .filter(|(_, t)| !t.busy && t.due <= horizon)
                .map(|(k, t)| (t.due, *k, t.extras))
                .collect();
            due.sort_unstable();
            // Only a task that is really due opens a request; the window just lets others ride.
            if due.first().is_none_or(|(at, _, _)| *at > now) {
                return;
            }
            let (_, first, extras) = due[0];
            let keys: Vec<u64> = if extras {
                vec![first]
            } else {
                let size = if self.provider.supports_batch() {
                    self.settings.batch_size.max(1)
                } else {
                    1
                };
                due.iter()
                    .filter(|(_, _, extras)| !extras)
                    .take(size)
                    .map(|(_, k, _)| *k)
                    .collect()
            };
            self.send(keys, extras);
            self.next_request_at = self.next_request_at.max(now) + self.settings.gap();
        }
    }

    fn send(&mut self, keys: Vec<u64>, extras: bool) {
        let mut ids = Vec::with_capacity(keys.len());
        for key in &keys {
            if let Some(task) = self.tasks.get_mut(key) {
                task.busy = true;
                ids.push(task.id.clone());
            }
        }
        self.counters.poll_requests.fetch_add(1, Ordering::Relaxed);
        self.counters
            .ids_polled
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        let provider = self.provider.clone();
        let handle = self
            .requests
            .spawn(async move { provider.poll(&ids, extras).await });
        self.in_request
            .insert(handle.id(), (keys, now_ms(), Instant::now()));
    }

    /// The next check of task `key` of `kind` submitted at `submitted`, on the learned plan and
    /// the current cadence, with `checks_left` of its budget; `None` when its plan is used up.
    fn learned_next(
        &mut self,
        key: u64,
        kind: Kind,
        submitted: Instant,
        now: Instant,
        checks_left: u32,
    ) -> Option<Instant> {
        let ideal = self.settings.cadence(self.arrivals.per_second(now));
        let current = self.grid.step.as_secs_f64();
        if (ideal.as_secs_f64() - current).abs() > CADENCE_SLACK * current {
            // The new ticks start where the old ones would have fired next: the checks due
            // there keep their time, and no change can starve a task of its next check.
            let next_tick = self.grid.align(now + Duration::from_nanos(1));
            self.grid = Grid {
                epoch: next_tick,
                step: ideal,
            };
            self.retick(key, now);
        }
        let (budget, patience) = (self.settings.budget(), self.settings.patience(kind));
        let learned = self.learned.entry(kind).or_default();
        let stale = learned
            .plans
            .as_ref()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= PLAN_MAX_AGE);
        if stale {
            let plans = [false, true]
                .map(|below| schedule::plan(&learned.times, now, budget, patience, below));
            learned.plans = Some((now, plans));
        }
        let below = usize::from(key % LOOK_BELOW_EVERY == 0);
        let plan = learned
            .plans
            .as_ref()
            .map_or(&[][..], |(_, p)| p[below].as_slice());
        schedule::next_check(plan, submitted, now, checks_left, &self.grid)
    }

    /// Moves the next check of every waiting task but `except` onto the new cadence's ticks:
    /// left on the old ones, they would cost a request per tick of each cadence until their
    /// next check. (The cadence stays put while this runs: same moment, same rate.)
    fn retick(&mut self, except: u64, now: Instant) {
        let budget = self.settings.budget();
        let waiting: Vec<(u64, Kind, Instant, u32)> = self
            .tasks
            .iter()
            .filter(|(k, t)| **k != except && !t.busy && t.polls < budget)
            .map(|(k, t)| (*k, t.kind, t.submitted, t.polls))
            .collect();
        for (key, kind, submitted, polls) in waiting {
            if let Some(due) = self.learned_next(key, kind, submitted, now, budget - polls)
                && let Some(task) = self.tasks.get_mut(&key)
            {
                task.due = due;
            }
        }
    }

    /// Teaches the kind's solve times one answer: ready after `after`, by `by` (from submit).
    fn learn(&mut self, kind: Kind, after: Duration, by: Duration) {
        let learned = self.learned.entry(kind).or_default();
        learned.times.observe(Instant::now(), after, by);
        learned.plans = None;
    }

    fn apply(&mut self, keys: Vec<u64>, asked_at: (Millis, Instant), result: RequestResult) {
        let class = result.as_ref().map(|_| ()).map_err(|e| e.class);
        self.counters.requests.count(Endpoint::Poll, class);
        let outcomes = match result {
            Ok(outcomes) if outcomes.len() == keys.len() => outcomes,
            Ok(_) => {
                let e = ProviderError::transport("poll answered a different number of tasks");
                vec![PollOutcome::Failed(e); keys.len()]
            }
            Err(e) => {
                tracing::warn!(account = %self.provider.name(), error = %e, "poll request failed");
                vec![PollOutcome::Failed(e); keys.len()]
            }
        };
        for (key, outcome) in keys.into_iter().zip(outcomes) {
            self.settle(key, asked_at, outcome);
        }
    }

    fn settle(&mut self, key: u64, (asked_at, sent): (Millis, Instant), outcome: PollOutcome) {
        let Some(task) = self.tasks.get_mut(&key) else {
            return; // its solve was cancelled while the request was out
        };
        task.busy = false;
        task.polls += 1;
        let retry = match outcome {
            PollOutcome::NotReady => {
                task.ready_after = asked_at;
                task.not_ready_at = sent;
                None
            }
            PollOutcome::Ready { .. } => {
                if self.settings.learns() {
                    let (kind, submitted, after) = (task.kind, task.submitted, task.not_ready_at);
                    self.learn(
                        kind,
                        after.saturating_duration_since(submitted),
                        sent.saturating_duration_since(submitted),
                    );
                }
                return self.finish(key, outcome);
            }
            PollOutcome::Failed(e) => match e.class {
                ErrorClass::Permanent | ErrorClass::Account => {
                    return self.finish(key, PollOutcome::Failed(e));
                }
                // The check failed, not the task: check again next round (it still counts
                // toward the budget, as the provider counts every call).
                ErrorClass::Capacity => Some(e.retry_after.unwrap_or(self.settings.interval)),
                ErrorClass::Transient => e.retry_after,
            },
        };
        if let Some(pause) = retry {
            // The provider asked the whole account to slow down.
            self.paused_until = self.paused_until.max(Instant::now() + pause);
        }
        let budget = self.settings.budget();
        let (polls, kind, submitted) = (task.polls, task.kind, task.submitted);
        let now = Instant::now();
        let due = if polls >= budget {
            None
        } else if self.settings.learns() {
            self.learned_next(key, kind, submitted, now, budget - polls)
        } else {
            Some(now + self.settings.interval_after(polls))
        };
        match (due, self.tasks.get_mut(&key)) {
            (Some(due), Some(task)) => task.due = due,
            _ => {
                let e = ProviderError::new(
                    ErrorClass::Permanent,
                    codes::CAPTCHA_UNSOLVABLE,
                    format!("no answer after {polls} checks"),
                );
                self.finish(key, PollOutcome::Failed(e));
            }
        }
    }

    fn finish(&mut self, key: u64, outcome: PollOutcome) {
        if let Some(task) = self.tasks.remove(&key) {
            // The receiver may be gone already; then nobody is waiting and that is fine.
            let ready_after = task.ready_after;
            let _ = task.reply.send(Settled {
                outcome,
                ready_after,
            });
        }
    }
}

#[cfg(test)]
mod tests;
