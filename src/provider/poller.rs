//! The batched poller: one loop per account that checks every outstanding upstream task
//! (DESIGN.md section 6, "poller"; PROTOCOL.md "Polling budget").
//!
//! Owns: when each task is checked (first check at the kind's typical ready time, then every
//! `interval`, slower past half the budget), grouping due tasks into `ids=` batches, the
//! per-account request budget, and ending tasks that exhaust their poll budget with
//! `ERROR_CAPTCHA_UNSOLVABLE`. Polls are driven by this schedule only, never by how often our own
//! clients ask us. Does not own: submitting, thread slots or deadlines (`account`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::account::Counters;
use super::error::{ErrorClass, ProviderError};
use super::{PollOutcome, Provider};
use crate::compat::codes;
use crate::model::{Kind, Millis, now_ms};

/// The longest interval the slow-down past half the budget may reach.
const MAX_SLOW_INTERVAL: Duration = Duration::from_secs(30);

/// How an account's poller paces its `res.php` calls.
#[derive(Debug, Clone, PartialEq)]
pub struct PollSettings {
    /// Delay from submit to the first check; `None` uses [`Kind::typical_ready`].
    pub first_check: Option<Duration>,
    /// Delay between checks of one task.
    pub interval: Duration,
    /// Checks per task before it is given up as unsolvable.
    pub max_polls_per_task: u32,
    /// Ids per `ids=` request.
    pub batch_size: usize,
    /// `poll` calls per second for the whole account. One call is one request, except a batch
    /// whose answer does not parse: the provider then checks its ids one by one, which it does
    /// at most a few times before it stops batching (see `InResProvider`).
    pub max_requests_per_second: f64,
    /// A check may run up to this much early so tasks due at nearly the same time share one
    /// request; without it, tasks submitted a few milliseconds apart would each cost a request.
    pub coalesce: Duration,
}

impl Default for PollSettings {
    fn default() -> Self {
        Self {
            // The SDK's per-kind waits (15 s reCAPTCHA v2, 10 s v3/Turnstile, 1 s images) beat
            // one figure for all kinds: 2captcha asks for 10-20 s before polling reCAPTCHA.
            first_check: None,
            // 2captcha and CaptchaAI both say "if not ready, retry in 5 s".
            interval: Duration::from_secs(5),
            // 2captcha blocks accounts past ~20 res.php calls per captcha.
            max_polls_per_task: 20,
            // DESIGN.md: up to 100 ids per request.
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
    pub fn horizon(&self, kind: Kind) -> Duration {
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
    /// which would strand every task (PROTOCOL.md item 13), so it falls back to one a second.
    fn gap(&self) -> Duration {
        let rps = self.max_requests_per_second;
        if rps.is_nan() || rps <= 0.0 {
            return Duration::from_secs(1);
        }
        Duration::try_from_secs_f64(1.0 / rps).unwrap_or(Duration::ZERO)
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
    let poller = Poller {
        provider,
        settings,
        counters,
        tasks: HashMap::new(),
        next_key: 0,
        requests: JoinSet::new(),
        in_request: HashMap::new(),
        next_request_at: Instant::now(),
        paused_until: Instant::now(),
    };
    tokio::spawn(poller.run(rx, shutdown));
    tx
}

struct Task {
    id: String,
    extras: bool,
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
    /// Which tasks each running request is about, by tokio task id (so a panicking provider
    /// still gives its tasks back).
    in_request: HashMap<tokio::task::Id, (Vec<u64>, Millis)>,
    next_request_at: Instant,
    paused_until: Instant,
}

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
                    let (keys, asked_at) = self.in_request.remove(&id).unwrap_or_default();
                    self.apply(keys, asked_at, result);
                }
                _ = sleep_until(wake.unwrap_or(now)), if wake.is_some() => {}
            }
        }
    }

    fn add(&mut self, reg: Registration) {
        let key = self.next_key;
        self.next_key += 1;
        let due = Instant::now() + self.settings.first_check_for(reg.kind);
        self.tasks.insert(
            key,
            Task {
                id: reg.id,
                extras: reg.extras,
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
        let horizon = now + self.settings.coalesce;
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
        self.in_request.insert(handle.id(), (keys, now_ms()));
    }

    fn apply(&mut self, keys: Vec<u64>, asked_at: Millis, result: RequestResult) {
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

    fn settle(&mut self, key: u64, asked_at: Millis, outcome: PollOutcome) {
        let Some(task) = self.tasks.get_mut(&key) else {
            return; // its solve was cancelled while the request was out
        };
        task.busy = false;
        task.polls += 1;
        let retry = match outcome {
            PollOutcome::NotReady => {
                task.ready_after = asked_at;
                None
            }
            PollOutcome::Ready { .. } => return self.finish(key, outcome),
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
        let polls = task.polls;
        if polls >= budget {
            let e = ProviderError::new(
                ErrorClass::Permanent,
                codes::CAPTCHA_UNSOLVABLE,
                format!("no answer after {polls} checks"),
            );
            return self.finish(key, PollOutcome::Failed(e));
        }
        task.due = Instant::now() + self.settings.interval_after(polls);
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
#[path = "poller_tests.rs"]
mod tests;
