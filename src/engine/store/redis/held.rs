//! Local claim batches (docs/REDIS.md "Local claim batches"). A pool hit costs one script on
//! Redis, and at thousands of hits a second for one target that call is most of the work. So an
//! instance whose callers keep hitting a target's pool takes, with one of those hits, a few more
//! pooled answers at once (`hold` in `lua/lib/target.lua`): exclusively, under a short lease,
//! and never more than half of what the pool keeps. Its next callers get them from memory, in
//! order, while each still has `min_remaining` left for that caller and the hold lasts. The batch
//! then ends with the next script call for the target (or `unhold.lua` when none comes): the
//! answers not handed out go back. A batch whose instance never ends it (it died, or paused past
//! the lease) is reaped as waste, never given to anyone else, so no answer goes out twice.
//!
//! Batches are sized to the target's recent arrival rate at this instance, so one lasts about
//! [`SPAN`]; a target arriving slower than a couple of callers per span is never batched.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, futures::OwnedNotified};
use tokio::time::Instant;

use super::call::Release;
use super::mail;
use crate::model::{Answer, Millis};

/// The largest batch `redis_pool_batch` allows, and the most a reply may carry.
pub const MAX_BATCH: u32 = 256;

/// How long a batch is meant to last at the target's recent rate.
const SPAN: Duration = Duration::from_millis(100);

/// How often a target's arrival rate is measured: each window, or as soon as a burst brings
/// this many arrivals, so a sudden rush is batched within its first milliseconds.
const WINDOW: Duration = Duration::from_millis(100);
const BURST: u32 = 64;

/// How long a batch being taken is waited for before it counts as stuck (a taker on a failing
/// Redis) and each caller runs its own script: a few round trips. Waiting on a taker that is
/// merely slow is better than all callers calling Redis at once, which slows it further. The
/// taker times itself, so waiting callers need no timer each.
pub const STUCK_AFTER: Duration = Duration::from_millis(50);

/// How long this instance hands a batch's answers out, counted from when it asked for them.
/// Ten spans: a rate that halves still empties a batch in time.
pub const HOLD: Duration = Duration::from_secs(1);

/// How much longer Redis keeps a batch than the instance hands it out: the release's round trip
/// and a short stall. An instance paused past it loses the batch to waste.
pub const LEASE_SLACK: Duration = Duration::from_secs(2);

/// Targets tracked at once. A target idle for [`FORGET_AFTER`] with no batch is forgotten
/// first; past this, new targets are simply not batched.
const MAX_TARGETS: usize = 4096;
const FORGET_AFTER: Duration = Duration::from_secs(10);

/// The clock holds are timed on.
#[derive(Default)]
enum HoldClock {
    /// This process's monotonic clock.
    #[default]
    Monotonic,
    /// A store's explicit clock (tests of the scripts' promises): its milliseconds counted from
    /// `origin`, so a hold lasts as long in the time such a test moves as Redis keeps it.
    Explicit { origin: Instant, ms: Arc<AtomicU64> },
}

impl HoldClock {
    fn now(&self) -> Instant {
        match self {
            HoldClock::Monotonic => Instant::now(),
            HoldClock::Explicit { origin, ms } => {
                *origin + Duration::from_millis(ms.load(Ordering::Relaxed))
            }
        }
    }
}

/// What this instance holds, per target id.
#[derive(Default)]
pub struct Held {
    /// The most answers one batch takes; 0 turns batches off.
    max: u32,
    clock: HoldClock,
    targets: Mutex<HashMap<String, Stock>>,
    /// Set once the instance stops: no new batch is kept.
    stopping: AtomicBool,
}

struct Stock {
    batch: Option<Batch>,
    /// A script call asking for a batch is under way: others do not ask too, and callers who
    /// would run the script meanwhile wait for it to land (`landed`) and look again, unless it
    /// is `stuck` (its taker found it taking longer than [`STUCK_AFTER`]).
    claiming: bool,
    stuck: bool,
    /// The last taker found the pool empty (its caller waits for a solve): until a taker finds
    /// answers again, nobody waits for a taker, so misses go to Redis side by side as they would
    /// without batches.
    dry: bool,
    landed: Arc<Notify>,
    /// Callers told to wait since the last landing, and how many the last landing woke: the next
    /// batch is asked for them too.
    waiting: u32,
    woken: u32,
    window_start: Instant,
    window_arrivals: u32,
    /// Arrivals per second over the last window.
    rate: u32,
}

/// A batch in hand: its answers, restamped on this instance's clock, handed out in order.
pub struct Batch {
    pub id: String,
    answers: Vec<Option<Answer>>,
    next: usize,
    until: Instant,
}

impl Batch {
    /// The batch of a pool hit's reply: its mails (`A|<expires_at>|<json>`, Redis time) as read
    /// when Redis's time was `redis_now`, restamped at `at`. An unreadable mail ends it there:
    /// the answers are handed out as a prefix, so what follows goes back at release.
    pub fn read(id: String, mails: &[String], redis_now: u64, at: Millis, until: Instant) -> Self {
        let answers = mails
            .iter()
            .map_while(|m| {
                let (exp, answer) = mail::decode_answer(m)?;
                let left = i64::try_from(exp.checked_sub(redis_now)?).ok()?;
                Some(Some(mail::restamp(answer, left, at)))
            })
            .collect();
        Batch {
            id,
            answers,
            next: 0,
            until,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    pub fn until(&self) -> Instant {
        self.until
    }

    fn release(self) -> Release {
        Release {
            batch: self.id,
            served: self.next,
        }
    }

    /// The next answer, if the hold lasts and it has `min_remaining_ms` left at `now`.
    fn next_fresh(
        &mut self,
        now: Millis,
        min_remaining_ms: u64,
        instant: Instant,
    ) -> Option<Answer> {
        if instant >= self.until {
            return None;
        }
        let slot = self.answers.get_mut(self.next)?;
        if !slot.as_ref()?.fresh_at(now, min_remaining_ms) {
            return None;
        }
        self.next += 1;
        slot.take()
    }
}

/// Which look at the batches an arrival takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    First,
    Again,
    Last,
}

/// What an arrival does.
pub enum Turn {
    /// Served from a batch.
    Hit(Answer),
    /// A batch is being taken: look again when it lands.
    Await(OwnedNotified),
    /// Runs the arrive script, ending `release` first and asking for a batch of `hold`.
    Script {
        release: Option<Release>,
        hold: Option<u32>,
    },
}

impl Held {
    pub fn new(max: u32) -> Self {
        Held {
            max: max.min(MAX_BATCH),
            ..Held::default()
        }
    }

    /// Holds timed on an explicit clock: `ms`, the latest time its callers passed in.
    pub fn on_explicit_clock(max: u32, ms: Arc<AtomicU64>) -> Self {
        Held {
            clock: HoldClock::Explicit {
                origin: Instant::now(),
                ms,
            },
            ..Held::new(max)
        }
    }

    /// Now, on the clock holds are timed on.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// An arrival for a poolable target, at its first look or a later one. It counts towards
    /// the rate at its first; until its last, it is told to wait for a batch being taken rather
    /// than run its own script.
    pub fn arrive(&self, target_id: &str, now: Millis, min_remaining_ms: u64, look: Look) -> Turn {
        let mut turn = Turn::Script {
            release: None,
            hold: None,
        };
        if self.max == 0 {
            return turn;
        }
        let instant = self.clock.now();
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        let stock = match targets.get_mut(target_id) {
            Some(stock) => stock,
            None => {
                if targets.len() >= MAX_TARGETS {
                    targets.retain(|_, s| s.busy(instant));
                    if targets.len() >= MAX_TARGETS {
                        return turn;
                    }
                }
                targets.entry(target_id.to_owned()).or_insert(Stock {
                    batch: None,
                    claiming: false,
                    stuck: false,
                    dry: false,
                    landed: Arc::new(Notify::new()),
                    waiting: 0,
                    woken: 0,
                    window_start: instant,
                    window_arrivals: 0,
                    rate: 0,
                })
            }
        };
        if look == Look::First {
            stock.count(instant);
        }
        if let Some(batch) = &mut stock.batch {
            if let Some(answer) = batch.next_fresh(now, min_remaining_ms, instant) {
                return Turn::Hit(answer);
            }
        }
        if stock.claiming && !stock.stuck && !stock.dry && look != Look::Last {
            stock.waiting = stock.waiting.saturating_add(1);
            return Turn::Await(stock.landed.clone().notified_owned());
        }
        let size = self.size(stock.rate).max(stock.woken.min(self.max));
        let ask = size >= 2 && !stock.claiming && !self.stopping.load(Ordering::Relaxed);
        stock.claiming |= ask;
        turn = Turn::Script {
            release: stock.batch.take().map(Batch::release),
            hold: ask.then_some(size),
        };
        turn
    }

    /// The next answer of the batch in hand for `target_id`, counted as an arrival; `None`, with
    /// nothing counted, when there is no batch or it has nothing fresh left (the arrival then
    /// takes its [`arrive`](Self::arrive) turn).
    pub fn hit(&self, target_id: &str, now: Millis, min_remaining_ms: u64) -> Option<Answer> {
        if self.max == 0 {
            return None;
        }
        let instant = self.clock.now();
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        let stock = targets.get_mut(target_id)?;
        let answer = stock
            .batch
            .as_mut()?
            .next_fresh(now, min_remaining_ms, instant)?;
        stock.count(instant);
        Some(answer)
    }

    /// The batch asked for by the [`Turn::Script`] just returned for `target_id`: landed with
    /// [`Claim::land`], or given up when dropped, so callers waiting for it never wait on.
    pub fn claim<'a>(&'a self, target_id: &'a str) -> Claim<'a> {
        Claim {
            held: self,
            target_id,
            open: true,
        }
    }

    /// The batch asked for arrived (or none could be taken). Returns the batch's release when
    /// it cannot be kept (the instance is stopping, or the target was forgotten meanwhile).
    fn claimed(&self, target_id: &str, batch: Option<Batch>, pooled: bool) -> Option<Release> {
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        let stock = targets.get_mut(target_id);
        let keep = !self.stopping.load(Ordering::Relaxed);
        match (stock, batch) {
            (Some(stock), batch) => {
                stock.claiming = false;
                stock.stuck = false;
                stock.dry = !pooled;
                stock.woken = std::mem::take(&mut stock.waiting);
                stock.landed.notify_waiters();
                match batch {
                    Some(b) if keep && stock.batch.is_none() => {
                        stock.batch = Some(b);
                        None
                    }
                    other => other.map(Batch::release),
                }
            }
            (None, batch) => batch.map(Batch::release),
        }
    }

    /// The batch being taken for `target_id` is taking longer than [`STUCK_AFTER`]: the callers
    /// waiting for it run their own scripts, and so do those who come until it lands.
    pub fn stuck(&self, target_id: &str) {
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(stock) = targets.get_mut(target_id).filter(|s| s.claiming) {
            stock.stuck = true;
            stock.landed.notify_waiters();
        }
    }

    /// The hold of batch `id` is over: its release, if it is still in hand.
    pub fn lapse(&self, target_id: &str, id: &str) -> Option<Release> {
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        let stock = targets.get_mut(target_id)?;
        if stock.batch.as_ref()?.id != id {
            return None;
        }
        stock.batch.take().map(Batch::release)
    }

    /// The instance stops: every batch in hand is released, and none is kept from now on.
    pub fn stop(&self) -> Vec<(String, Release)> {
        self.stopping.store(true, Ordering::Relaxed);
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        targets
            .iter_mut()
            .filter_map(|(id, s)| Some((id.clone(), s.batch.take()?.release())))
            .collect()
    }

    /// Forgets targets with no batch and no callers lately (the renewer calls it each round).
    pub fn forget_idle(&self) {
        let instant = self.clock.now();
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        targets.retain(|_, s| s.busy(instant));
    }

    /// Targets tracked now.
    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        self.targets.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// A batch sized to last about [`SPAN`] at `rate` arrivals a second.
    fn size(&self, rate: u32) -> u32 {
        let per_span = u64::from(rate) * SPAN.as_millis() as u64 / 1000;
        u32::try_from(per_span).unwrap_or(u32::MAX).min(self.max)
    }
}

/// A batch being taken (see [`Held::claim`]).
pub struct Claim<'a> {
    held: &'a Held,
    target_id: &'a str,
    open: bool,
}

impl Claim<'_> {
    /// The batch arrived, or `None` when none could be taken; `pooled`: the taker's own caller
    /// got a pooled answer (else the pool is dry). Returns the batch's release when it cannot be
    /// kept (the instance is stopping, or the target was forgotten meanwhile).
    pub fn land(mut self, batch: Option<Batch>, pooled: bool) -> Option<Release> {
        self.open = false;
        self.held.claimed(self.target_id, batch, pooled)
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.open {
            self.held.claimed(self.target_id, None, true);
        }
    }
}

impl Stock {
    fn count(&mut self, instant: Instant) {
        let elapsed = instant.saturating_duration_since(self.window_start);
        if elapsed >= WINDOW || self.window_arrivals >= BURST {
            let per_s = u128::from(self.window_arrivals) * 1000 / elapsed.as_millis().max(1);
            self.rate = u32::try_from(per_s).unwrap_or(u32::MAX);
            self.window_start = instant;
            self.window_arrivals = 0;
        }
        self.window_arrivals = self.window_arrivals.saturating_add(1);
    }

    /// Holds a batch, is asking for one, or had callers lately.
    fn busy(&self, instant: Instant) -> bool {
        self.batch.is_some()
            || self.claiming
            || instant.saturating_duration_since(self.window_start) < FORGET_AFTER
    }
}

#[cfg(test)]
mod tests;
