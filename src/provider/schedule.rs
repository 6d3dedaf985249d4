//! When to check an upstream task, learned from the checks themselves (docs/ARCHITECTURE.md,
//! "Adaptive polling").
//!
//! Owns: the solve-time distribution of one account and kind ([`SolveTimes`]), the check plan
//! built from it ([`plan`]), the account's arrival rate ([`ArrivalRate`]) and the shared batch
//! cadence that makes one `res.php` request answer many tasks ([`Grid`], [`next_check`]).
//! Does not own: sending checks, the request rate cap or the provider's "retry later" pauses
//! (the poller).
//!
//! Every answer tells us something: the task became ready after the last check that found it
//! not ready and no later than the check that returned it. These intervals are all we know (the
//! provider never says when a task finished), so the distribution is a histogram where each
//! interval adds one unit of weight over the time it covers, half of it shared in proportion to
//! what is already learned there (one self-consistency step of the usual estimate for
//! interval-censored data) and half evenly. Only even sharing would pull the first check ever
//! earlier: once it comes after most solves, those answers say only "ready some time since
//! submit". Only proportional sharing would keep any gap it once learned: times nobody checks
//! get no weight, so no checks. Weights fade with a half-life,
//! so a provider that gets slower is followed within minutes, and the histogram has a fixed
//! number of bins, so memory stays the same after a week as after a minute.

use std::time::Duration;

use tokio::time::Instant;

/// The upper edge of the first bin after the `[0, FIRST_EDGE)` one; edges then grow by `RATIO`,
/// so each bin is about 5 % of the solve time it covers: finer than the checks we can afford.
const FIRST_EDGE_S: f64 = 0.05;
const RATIO: f64 = 1.05;
/// Up to 0.05 s * 1.05^199, about 13 minutes: longer than any task is followed.
const BINS: usize = 200;
/// How fast old answers stop counting. A minute is many answers on a busy account and still
/// lets a provider that changed speed take over the schedule within a few minutes.
pub(crate) const HALF_LIFE: Duration = Duration::from_secs(60);
/// Answers (after fading) needed before the learned plan replaces the exploring one.
pub(crate) const MIN_EVIDENCE: f64 = 10.0;
/// The first check of the exploring plan: images are often ready after a second, and one early
/// check costs one id in a batch.
pub(crate) const EXPLORE_FIRST: Duration = Duration::from_secs(1);
/// The learned checks stop at this quantile; slower answers are caught by the reserve.
const TAIL_QUANTILE: f64 = 0.995;
/// The most checks one plan holds.
const MAX_PLANNED_CHECKS: u32 = 1000;
/// The first reserve check comes this share of the learned tail after it.
const RESERVE_FIRST_STEP: f64 = 0.15;
/// The learned checks start at this quantile: below it is mostly weight spread from answers that
/// were ready by their first check, which says little about when.
const LOW_QUANTILE: f64 = 0.01;
/// The part of each answer's weight spread evenly over its interval (see the module docs).
const EVEN_SHARE: f64 = 0.5;
/// Between the fastest and the slowest learned solve, no stretch is planned as if its density
/// were below this share of the average there: a gap in what was learned still gets checks, so
/// it can be learned again.
const DENSITY_FLOOR: f64 = 0.1;
/// Budgets below this spend no check below the learned solve times.
const MIN_BUDGET_TO_LOOK_BELOW: u32 = 8;
/// The arrival rate's time constant: long enough to smooth a burst, short enough to follow load.
const ARRIVAL_TAU_S: f64 = 30.0;

fn edge(k: usize) -> f64 {
    if k == 0 {
        0.0
    } else {
        FIRST_EDGE_S * RATIO.powi(i32::try_from(k - 1).unwrap_or(i32::MAX))
    }
}

fn bin_of(t: f64) -> usize {
    if t < FIRST_EDGE_S {
        return 0;
    }
    // Floating point may put `t` one bin off near an edge; the loops below only need a bin
    // whose range contains or touches `t`, and the clamp keeps it in the table.
    let k = ((t / FIRST_EDGE_S).ln() / RATIO.ln()).floor() + 1.0;
    if k.is_finite() && k >= 0.0 {
        (k as usize).min(BINS - 1)
    } else {
        BINS - 1
    }
}

fn fade(since: Duration) -> f64 {
    0.5f64.powf(since.as_secs_f64() / HALF_LIFE.as_secs_f64())
}

/// The learned distribution of the time from submit to ready, for one account and kind.
#[derive(Debug, Clone)]
pub(crate) struct SolveTimes {
    weight: Vec<f64>,
    total: f64,
    /// When the weights were last faded; `None` before the first answer.
    as_of: Option<Instant>,
}

impl Default for SolveTimes {
    fn default() -> Self {
        Self {
            weight: vec![0.0; BINS],
            total: 0.0,
            as_of: None,
        }
    }
}

impl SolveTimes {
    /// Records an answer that was not ready `after` submit and ready `by` (both measured from
    /// submit). A reversed or empty interval counts as a point at `by`.
    pub fn observe(&mut self, now: Instant, after: Duration, by: Duration) {
        self.fade_to(now);
        let top = edge(BINS);
        let hi = by.as_secs_f64().min(top);
        let lo = after.as_secs_f64().min(hi);
        if hi - lo < 1e-3 {
            self.weight[bin_of(hi)] += 1.0;
            self.total += 1.0;
            return;
        }
        // Each bin's part of the interval: as a share of its length, and of its learned weight.
        let parts: Vec<(usize, f64, f64)> = (bin_of(lo)..=bin_of(hi))
            .filter_map(|k| {
                let overlap = hi.min(edge(k + 1)) - lo.max(edge(k));
                (overlap > 0.0).then(|| {
                    let known = self.weight[k] * overlap / (edge(k + 1) - edge(k));
                    (k, overlap / (hi - lo), known)
                })
            })
            .collect();
        let known: f64 = parts.iter().map(|p| p.2).sum();
        for (k, even, learned) in parts {
            self.weight[k] += if known > 1e-9 {
                EVEN_SHARE * even + (1.0 - EVEN_SHARE) * learned / known
            } else {
                even
            };
        }
        self.total += 1.0;
    }

    /// How many answers the distribution rests on at `now`, after fading.
    pub fn evidence(&self, now: Instant) -> f64 {
        match self.as_of {
            Some(at) => self.total * fade(now.saturating_duration_since(at)),
            None => 0.0,
        }
    }

    /// The `q`-quantile of the solve time (weight spread evenly inside each bin); `None`
    /// before the first answer.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.total <= 0.0 {
            return None;
        }
        let want = self.total * q.clamp(0.0, 1.0);
        let mut below = 0.0;
        for (k, w) in self.weight.iter().enumerate() {
            if *w > 0.0 && below + w >= want {
                let inside = ((want - below) / w).clamp(0.0, 1.0);
                let t = edge(k) + inside * (edge(k + 1) - edge(k));
                return Some(Duration::from_secs_f64(t));
            }
            below += w;
        }
        // Rounding left `want` a hair above the sum: the top of the last bin with weight.
        let last = self
            .weight
            .iter()
            .rposition(|w| *w > 0.0)
            .unwrap_or(BINS - 1);
        Some(Duration::from_secs_f64(edge(last + 1)))
    }

    fn fade_to(&mut self, now: Instant) {
        if let Some(at) = self.as_of {
            let f = fade(now.saturating_duration_since(at));
            self.weight.iter_mut().for_each(|w| *w *= f);
            self.total *= f;
            // Long idle: nothing meaningful is left, and denormals would only slow us down.
            if self.total < 1e-6 {
                *self = Self::default();
            }
        }
        self.as_of = Some(now);
    }

    /// Check offsets where each check covers an equal share of the square root of the density
    /// between `start` and `end` (never thinner than [`DENSITY_FLOOR`] of the average there): `n` checks spaced so that the expected wait from ready to check is
    /// smallest (a spacing proportional to 1/sqrt(density) minimises it for a fixed number of
    /// checks; spacing at plain quantiles would starve the tail).
    fn spread(&self, n: u32, start: f64, end: f64) -> Vec<f64> {
        let first = bin_of(start);
        let floor = if end > start {
            DENSITY_FLOOR * self.total / (end - start)
        } else {
            0.0
        };
        let mut pieces = Vec::new();
        for (k, w) in self.weight.iter().enumerate().skip(first) {
            let (a, b) = (edge(k).max(start), edge(k + 1).min(end));
            if a >= end {
                break;
            }
            if b > a {
                // sqrt(density) * length, with the density of the whole bin.
                let density = (w / (edge(k + 1) - edge(k))).max(floor);
                pieces.push((a, b, density.sqrt() * (b - a)));
            }
        }
        let total: f64 = pieces.iter().map(|p| p.2).sum();
        if total <= 0.0 || n == 0 {
            return vec![end];
        }
        let mut out = Vec::with_capacity(n as usize);
        let (mut i, mut below) = (0usize, 0.0);
        for j in 1..=n {
            let want = total * f64::from(j) / f64::from(n);
            while i + 1 < pieces.len() && below + pieces[i].2 < want {
                below += pieces[i].2;
                i += 1;
            }
            let (a, b, g) = pieces[i];
            let inside = if g > 0.0 {
                ((want - below) / g).clamp(0.0, 1.0)
            } else {
                1.0
            };
            out.push(a + inside * (b - a));
        }
        out
    }
}

/// The offsets from submit at which a task is checked: at most `budget` of them, strictly
/// increasing, the last one at `patience` (how long a task is followed before it is given up).
///
/// With little evidence it explores: checks from [`EXPLORE_FIRST`] growing geometrically to
/// `patience`, so early answers are caught and slow ones still are, with checks left over.
/// Once learned: about four fifths of the budget placed over the learned solve times (see
/// [`SolveTimes::spread`]) and the rest, the reserve, growing geometrically from there to
/// `patience` (the first one soon after), for answers slower than anything seen lately. With `look_below` (the poller asks
/// for it for a few tasks), one of the learned checks moves to half the first one: were the
/// provider to get faster, the learned checks alone would only ever say "ready by the first
/// check", and the first check would never move earlier.
pub(crate) fn plan(
    times: &SolveTimes,
    now: Instant,
    budget: u32,
    patience: Duration,
    look_below: bool,
) -> Vec<Duration> {
    // A budget past this is a configuration no provider would accept; planning it all would
    // only allocate. The poller still stops at the configured budget.
    let budget = budget.clamp(1, MAX_PLANNED_CHECKS);
    // Clamped so every offset converts back to a `Duration` (a saturated patience would not).
    let end = patience.as_secs_f64().clamp(1e-3, 1e9);
    let reserve = (budget / 5).max(1);
    let learned = times.evidence(now) >= MIN_EVIDENCE && budget > reserve + 1;
    let range = times
        .quantile(LOW_QUANTILE)
        .zip(times.quantile(TAIL_QUANTILE));
    let mut offsets = match range {
        Some((low, tail)) if learned => {
            let tail = tail.as_secs_f64().min(end);
            let low = low.as_secs_f64().min(tail);
            let below = u32::from(look_below && budget >= MIN_BUDGET_TO_LOOK_BELOW);
            let mut main = times.spread(budget - reserve - below, low, tail);
            let last = main.last().copied().unwrap_or(tail);
            if below == 1 {
                main.push(main.first().copied().unwrap_or(tail) / 2.0);
            }
            // The first reserve check comes soon after the learned ones: the few answers just
            // past the learned tail should not wait for the long steps toward `patience`.
            let soon = (last * (1.0 + RESERVE_FIRST_STEP)).min(end);
            main.extend(geometric(soon, end, reserve));
            main
        }
        _ => geometric(EXPLORE_FIRST.as_secs_f64().min(end), end, budget),
    };
    offsets.retain(|t| t.is_finite());
    offsets.iter_mut().for_each(|t| *t = t.clamp(1e-3, end));
    offsets.sort_by(f64::total_cmp);
    offsets.dedup_by(|a, b| *a - *b < 1e-3);
    // The last check is at `patience` whatever the rounding did (the slot horizon relies on it).
    if offsets.last().is_none_or(|t| end - t >= 1e-3) {
        if offsets.len() >= budget as usize {
            offsets.pop();
        }
        offsets.push(end);
    }
    offsets.into_iter().map(Duration::from_secs_f64).collect()
}

/// `n` points from `first` to `last` (both included) with a constant ratio; `[last]` for one.
fn geometric(first: f64, last: f64, n: u32) -> Vec<f64> {
    if n <= 1 || first <= 0.0 || first >= last {
        return vec![last];
    }
    let ratio = (last / first).powf(1.0 / f64::from(n - 1));
    (0..n)
        .map(|i| first * ratio.powi(i32::try_from(i).unwrap_or(i32::MAX)))
        .collect()
}

/// The account's shared batch cadence: checks are moved to the next tick, so tasks due at
/// nearly the same time are asked about in one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Grid {
    pub epoch: Instant,
    pub step: Duration,
}

impl Grid {
    /// The first tick at or after `t`.
    pub fn align(&self, t: Instant) -> Instant {
        let since = t.saturating_duration_since(self.epoch);
        let step = self.step.as_nanos().max(1);
        let ticks = since.as_nanos().div_ceil(step);
        let offset = u64::try_from(ticks.saturating_mul(step)).unwrap_or(u64::MAX);
        // Past the clock's range (absurd patience): the moment itself, never a panic.
        self.epoch
            .checked_add(Duration::from_nanos(offset))
            .unwrap_or(t)
    }
}

/// When a task submitted at `submitted` is next checked, after `now`, with `checks_left` of its
/// budget: the first planned check whose tick is still ahead. When more planned checks are
/// ahead than the budget has left (the plan changed while the task ran), the earliest are
/// skipped so the last check still falls at the end of the plan. `None`: nothing left to check.
pub(crate) fn next_check(
    plan: &[Duration],
    submitted: Instant,
    now: Instant,
    checks_left: u32,
    grid: &Grid,
) -> Option<Instant> {
    if checks_left == 0 {
        return None;
    }
    let ahead: Vec<Instant> = plan
        .iter()
        .filter_map(|offset| submitted.checked_add(*offset))
        .map(|t| grid.align(t))
        .filter(|t| *t > now)
        .collect();
    let skip = ahead.len().saturating_sub(checks_left as usize);
    ahead.get(skip).copied()
}

/// Tasks registered per second at one account, fading with [`ARRIVAL_TAU_S`].
#[derive(Debug, Clone, Default)]
pub(crate) struct ArrivalRate {
    count: f64,
    as_of: Option<Instant>,
    /// The first arrival: until a few time constants have passed, the faded count has not
    /// filled up yet and is divided by what it could have reached instead.
    since: Option<Instant>,
}

/// The shortest history the rate is read over, so the first arrivals do not read as a flood.
const ARRIVAL_MIN_SPAN_S: f64 = 5.0;

impl ArrivalRate {
    pub fn add(&mut self, now: Instant) {
        self.count = self.count_at(now) + 1.0;
        self.as_of = Some(now);
        self.since.get_or_insert(now);
    }

    pub fn per_second(&self, now: Instant) -> f64 {
        let span = self
            .since
            .map_or(0.0, |at| now.saturating_duration_since(at).as_secs_f64());
        let span = span.max(ARRIVAL_MIN_SPAN_S);
        self.count_at(now) / (ARRIVAL_TAU_S * (1.0 - (-span / ARRIVAL_TAU_S).exp()))
    }

    fn count_at(&self, now: Instant) -> f64 {
        match self.as_of {
            Some(at) => {
                self.count
                    * (-now.saturating_duration_since(at).as_secs_f64() / ARRIVAL_TAU_S).exp()
            }
            None => 0.0,
        }
    }
}

#[cfg(test)]
mod tests;
