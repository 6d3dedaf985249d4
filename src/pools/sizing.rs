//! How big an `auto` pool should be: pure arithmetic over observations, no clock, no I/O, so
//! tests drive it with explicit ticks instead of waiting real minutes.
//!
//! Little's law: to hand every caller a ready answer, the pool must cover the callers who arrive
//! while a replacement is being solved. With callers arriving at rate `lambda` and solves taking
//! `W`, the answers a pool holds (ready or in flight) are drawn down by about a Poisson number of
//! callers with mean `m = lambda x W` per solve time; an arriving caller finds one ready when
//! fewer than `size` came in the solve time before it. So `size - 1` is that number's ~97.7 %
//! quantile, about `m + z sqrt(m) + 1` (z = 2; see [`poisson_cover`]): relatively generous
//! for a quiet target, where a few extra callers in one solve time are likely, and close to `m`
//! for a busy one, where they average out.
//!
//! The arrival rate is an exponential average with a one-minute time constant, bias-corrected
//! while young (divided by the weight it has gathered, as Adam does), so it reads the mean rate
//! seen so far within seconds of the first callers instead of ramping up from zero over minutes.
//!
//! Two limits keep the size from buying answers nobody uses:
//! - *shelf life*: an answer is usable for `lifetime - min_remaining`; holding more than the
//!   callers of one shelf life would take means some expire. Below one expected caller per shelf
//!   life, pooling only wastes, so the size is 0 (then `min`).
//! - *waste*: when answers do expire unused (the target's `expired_unused` grows), the estimate
//!   was too high: a ceiling drops below the size that wasted, by what expired, and recovers
//!   slowly while nothing expires.
//!
//! A predictive pool (`predict = true`) also learns the daily and weekly shape of the target's
//! demand ([`Shape`]) and sizes for what it expects one lead time (a solve) ahead:
//! - *ahead of a rise*, for the larger of the rate measured now and the rate the shape expects
//!   when a refill started now is ready, so the pool is full when the recurring rush comes;
//! - *ahead of a fall*, answers made now must meet the callers the shape expects over their
//!   shelf life, so the pool drains before the quiet instead of expiring into it. The shape is
//!   trusted for that only while it matches what is measured now (within a factor of two): a
//!   campaign the shape has never seen is sized reactively, never starved by a quiet forecast.

use std::time::Duration;

use super::shape::{SLOT_MS, Shape};

/// The knobs of auto sizing; every default says why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizingSettings {
    /// Standard deviations of Poisson demand above its mean the size covers: about
    /// `m + coverage_z x sqrt(m)` answers with `m = rate x solve time` ([`poisson_cover`]).
    pub coverage_z: f64,
    /// Time constant of the arrival-rate average: demand measured over about this long.
    pub rate_window: Duration,
    /// The least time the young rate average counts as having watched: the callers seen in the
    /// first instants are spread over at least this long, not read as a spike.
    pub min_observed: Duration,
    /// Weight of the newest refill in the solve-time average.
    pub solve_weight: f64,
    /// Relative growth per second of the waste ceiling while nothing expires.
    pub recovery_per_s: f64,
    /// How far past one lead time a predictive pool looks for a rise: a size set now is acted
    /// on at the next resize at the latest.
    pub lookahead: Duration,
}

impl Default for SizingSettings {
    fn default() -> Self {
        Self {
            // The one-sided 97.7 % point of a normal, for a promise of 95 %: with the rate and
            // solve time known exactly, a caller would find the pool drawn down to nothing about
            // 1 time in 44. They are estimates (a minute of arrivals, the last few refills), and
            // the size they give wanders a couple of answers either side of the exact one; with
            // z = 1.65 the `steady` bench served 91-97 % of callers from the pool (median 95.4 %
            // of three runs), too close to the promise. The fixed 1.5 x the mean used before was
            // thin for quiet targets (3 for a mean of 2, where 7 are needed) and overbought for
            // busy ones (150 for 100, where 121 do). Fleets burstier than Poisson (workers in
            // lock step) wait more often.
            coverage_z: 2.0,
            // A minute: long enough to smooth per-second jitter, short enough to follow a fleet
            // being scaled up or down.
            rate_window: Duration::from_secs(60),
            // Two resize periods (the refiller resizes every 5 s). The bias correction makes a
            // young average the plain mean rate of what was seen: unbiased, but as noisy as few
            // callers make it. Unfloored, the one caller of a first 5 s sample reads as 0.2/s (a
            // pool of 7 at 15 s solves) and a shorter first interval reads higher still. Floored,
            // callers seen in the first 10 s count as spread over 10 s: a lone caller reads as
            // about 0.1/s (a pool of 6), and real demand reads half its rate after the first
            // 5 s sample and in full from the second.
            min_observed: Duration::from_secs(10),
            // About the last five refills: solve times drift with provider load, not per task.
            solve_weight: 0.2,
            // 1 % a second (at least 0.1 answer a second): back to full size within minutes of
            // the last waste, slowly enough not to re-buy the same waste at once.
            recovery_per_s: 0.01,
            // Three resize periods: the refills for a rise start between one lead time and one
            // lead time and 15 s before it, so answers wait seconds for it, not minutes.
            lookahead: Duration::from_secs(15),
        }
    }
}

/// One observation of a target's cumulative figures.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    at: Duration,
    arrivals: u64,
    expired: u64,
}

/// The size of one `auto` pool, updated by [`AutoSizer::tick`] and [`AutoSizer::observe_solve`].
#[derive(Debug, Clone, PartialEq)]
pub struct AutoSizer {
    min: u32,
    max: u32,
    shelf_life_s: f64,
    settings: SizingSettings,
    /// Callers per second, exponentially weighted from 0 at the first interval with callers:
    /// biased low by `weight` while young.
    raw_rate: f64,
    /// The weight `raw_rate` has gathered, `1 - exp(-watched / rate_window)`: 0 until the first
    /// caller, near 1 after a few windows.
    weight: f64,
    /// Seconds from a refill's start to its answer, exponentially weighted.
    solve_s: f64,
    /// The most the waste record allows.
    ceiling: f64,
    last: Option<Sample>,
    size: u32,
    /// The learned shape of demand, for a predictive pool.
    shape: Option<Box<Shape>>,
}

impl AutoSizer {
    /// `prior_solve` stands in for the solve time until a refill has been measured; `shelf_life`
    /// is how long an answer may wait in the pool (lifetime minus `min_remaining`).
    pub fn new(
        min: u32,
        max: u32,
        prior_solve: Duration,
        shelf_life: Duration,
        settings: SizingSettings,
    ) -> Self {
        Self {
            min,
            max,
            shelf_life_s: shelf_life.as_secs_f64(),
            settings,
            raw_rate: 0.0,
            weight: 0.0,
            solve_s: prior_solve.as_secs_f64(),
            ceiling: f64::from(max),
            last: None,
            size: min,
            shape: None,
        }
    }

    /// The same sizer, learning the daily and weekly shape of demand and sizing ahead of it.
    pub fn predictive(mut self) -> Self {
        self.shape = Some(Box::default());
        self
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// Measured callers per second: the exponential average divided by the weight it has
    /// gathered (at least that of `min_observed`), so a young average is not biased towards 0.
    pub fn rate(&self) -> f64 {
        if self.weight <= 0.0 {
            return 0.0;
        }
        let floor = 1.0 - (-self.settings.min_observed.as_secs_f64() / self.window_s()).exp();
        self.raw_rate / self.weight.max(floor)
    }

    fn window_s(&self) -> f64 {
        self.settings.rate_window.as_secs_f64().max(1e-3)
    }

    /// Measured (or prior) solve time.
    pub fn solve_time(&self) -> Duration {
        Duration::from_secs_f64(self.solve_s)
    }

    /// A refill's solve took `took`.
    pub fn observe_solve(&mut self, took: Duration) {
        let w = self.settings.solve_weight;
        self.solve_s += w * (took.as_secs_f64() - self.solve_s);
    }

    /// Takes the target's cumulative figures at `at` (any monotonic origin): `arrivals` callers
    /// so far, `expired` answers expired unused so far. Returns the new size. The first tick
    /// only sets the baseline.
    pub fn tick(&mut self, at: Duration, arrivals: u64, expired: u64) -> u32 {
        self.tick_at(at, None, arrivals, expired)
    }

    /// [`tick`](Self::tick) with the wall-clock time (ms since the epoch), which a predictive
    /// sizer learns the shape of demand by and forecasts from.
    pub fn tick_at(
        &mut self,
        at: Duration,
        wall_ms: Option<u64>,
        arrivals: u64,
        expired: u64,
    ) -> u32 {
        let now = Sample {
            at,
            arrivals,
            expired,
        };
        let Some(last) = self.last else {
            self.last = Some(now);
            return self.size;
        };
        let dt = at.saturating_sub(last.at).as_secs_f64();
        if dt <= 0.0 {
            return self.size;
        }
        self.last = Some(now);
        // Figures shared by a fleet can be reset (a store restart): treat a drop as no change.
        let arrived = arrivals.saturating_sub(last.arrivals) as f64;
        let wasted = expired.saturating_sub(last.expired) as f64;
        if let (Some(shape), Some(wall)) = (self.shape.as_mut(), wall_ms) {
            shape.observe(wall, arrived, dt);
        }

        // An exponential average over irregular intervals: the weight of the new interval grows
        // with its length, so a late tick counts for as long as it covers. It starts with the
        // first interval that saw a caller: the silence of a configured target before its first
        // caller (a gateway started before its fleet) is not evidence of low demand, and counting
        // it would ramp the estimate up over minutes again. Later silences count as usual.
        if self.weight > 0.0 || arrived > 0.0 {
            let alpha = 1.0 - (-dt / self.window_s()).exp();
            self.raw_rate += alpha * (arrived / dt - self.raw_rate);
            self.weight += alpha * (1.0 - self.weight);
        }

        let (min, max) = (f64::from(self.min), f64::from(self.max));
        if wasted > 0.0 {
            self.ceiling = (f64::from(self.size) - wasted).max(min);
        } else {
            let step = self.ceiling.max(10.0) * self.settings.recovery_per_s * dt;
            self.ceiling = (self.ceiling + step).min(max);
        }

        let (rate, shelf_callers, foreseen) = self.expected(wall_ms);
        let want = if shelf_callers < 1.0 {
            0.0
        } else {
            let cover = poisson_cover(rate * self.solve_s, self.settings.coverage_z);
            cover.min(shelf_callers)
        };
        // A rise the shape foresees lifts the waste ceiling: what the quiet hours wasted says
        // nothing of the rush, and the callers over these answers' shelf life are foreseen.
        if foreseen {
            self.ceiling = self.ceiling.max(want.min(max));
        }
        // Clamped to 0..=max (at most 10 000) before the conversion, so it cannot truncate.
        self.size = want.min(self.ceiling).ceil().clamp(min, max) as u32;
        self.size
    }
}

impl AutoSizer {
    /// The rate to size for, and the callers an answer made now can expect over its shelf
    /// life: measured, or (predictive, with the shape seen there) forecast as the module says.
    /// The third figure says whether a rise was foreseen.
    fn expected(&self, wall_ms: Option<u64>) -> (f64, f64, bool) {
        let rate = self.rate();
        let measured = (rate, rate * self.shelf_life_s, false);
        let (Some(shape), Some(wall)) = (self.shape.as_deref(), wall_ms) else {
            return measured;
        };
        // The shape speaks only while it matches the last rate window as measured (within
        // twice, and three callers a window, as a quiet hour's few callers make both rates
        // noisy): a campaign it remembers that did not come back, or one it never saw, is
        // sized on what is measured.
        let window_s = self.window_s();
        let slack = 3.0 / window_s;
        let differs = |a: f64, b: f64| a > 2.0 * b + slack;
        let since = wall.saturating_sub((window_s * 1000.0) as u64);
        let matches = shape
            .callers_between(since, window_s)
            .is_some_and(|c| !differs(rate, c / window_s) && !differs(c / window_s, rate));
        if !matches {
            return measured;
        }
        let ready = wall.saturating_add((self.solve_s * 1000.0) as u64);
        let over_shelf = shape.callers_between(ready, self.shelf_life_s);
        // A slot's rate is a Poisson count over its 300 s: a rise counts from two standard
        // errors below it, so a quiet slot's noise (6 callers, +-40 %) never sizes a pool and
        // a rush (600, +-4 %) nearly whole.
        let ahead = shape
            .peak_between(ready, self.settings.lookahead.as_secs_f64())
            .unwrap_or(0.0);
        let ahead = ahead - 2.0 * (ahead / (SLOT_MS / 1000) as f64).sqrt();
        if ahead > rate {
            return (ahead, over_shelf.unwrap_or(0.0).max(measured.1), true);
        }
        // A fall: answers made now meet only the callers foreseen over their shelf life.
        match over_shelf {
            Some(c) if c < measured.1 / 2.0 => (rate, c, false),
            _ => measured,
        }
    }
}

/// The fewest answers that leave one for an arriving caller with probability `Phi(z)` when the
/// callers who came within one solve time before it (each still drawing an answer from the pool)
/// are Poisson with mean `m`: that caller is served when at most `size - 1` came, so `size - 1`
/// is Poisson(m)'s `Phi(z)` quantile. That quantile by the normal approximation, with a term for
/// Poisson's skew (Cornish-Fisher, `(z^2 - 1) / 6`) and a continuity correction (the quantile
/// `k` is the integer with `k + 1/2` at the continuous point), plus one for the caller: `m + z
/// sqrt(m) + (z^2 - 1) / 6 + 1/2`, rounded up (`m + 2 sqrt(m) + 1` at the default z = 2). For
/// any `m` up to 300 this is the exact size or one more (tested); `m + z sqrt(m)` alone falls
/// one short about half the time (23 for m = 15, where P(Poisson(15) <= 22) = 0.967 < 0.977).
fn poisson_cover(m: f64, z: f64) -> f64 {
    m + z * m.sqrt() + (z * z - 1.0) / 6.0 + 0.5
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHELF: Duration = Duration::from_secs(110);

    fn sizer(min: u32, max: u32) -> AutoSizer {
        sizer_solving_in(min, max, 10)
    }

    fn sizer_solving_in(min: u32, max: u32, solve_s: u64) -> AutoSizer {
        AutoSizer::new(
            min,
            max,
            Duration::from_secs(solve_s),
            SHELF,
            SizingSettings::default(),
        )
    }

    /// Drives `s` for `secs` one-second ticks at `per_s` callers a second, `wasted_per_s` answers
    /// expiring each second, continuing from the cumulative figures in `at`.
    fn run(s: &mut AutoSizer, at: &mut (u64, u64, u64), secs: u64, per_s: u64, wasted_per_s: u64) {
        for _ in 0..secs {
            at.0 += 1;
            at.1 += per_s;
            at.2 += wasted_per_s;
            s.tick(Duration::from_secs(at.0), at.1, at.2);
        }
    }

    /// One-second ticks with these arrivals in each second.
    fn run_counts(s: &mut AutoSizer, at: &mut (u64, u64, u64), counts: &[u64]) {
        for &n in counts {
            run(s, at, 1, n, 0);
        }
    }

    /// What a settled pool is sized at below its caps, for the default z.
    fn cover(m: f64) -> u32 {
        poisson_cover(m, SizingSettings::default().coverage_z).ceil() as u32
    }

    /// The share of callers the default z promises to cover: Phi(2).
    const COVERED: f64 = 0.9772;

    /// P(Poisson(m) <= k).
    fn poisson_cdf(m: f64, k: u32) -> f64 {
        let (mut term, mut sum) = ((-m).exp(), 0.0);
        for i in 0..=k {
            sum += term;
            term *= m / f64::from(i + 1);
        }
        sum
    }

    #[test]
    fn the_size_is_the_exact_poisson_size_or_one_more() {
        for tenths in 1..=3000 {
            let m = f64::from(tenths) / 10.0;
            let size = cover(m);
            // Served when at most size - 1 came before: at least Phi(z) of callers...
            assert!(
                poisson_cdf(m, size - 1) >= COVERED,
                "m = {m}: {size} is short"
            );
            // ...and at most one answer more than needed: two fewer would fall short.
            if size > 2 {
                assert!(
                    poisson_cdf(m, size - 3) < COVERED,
                    "m = {m}: {size} is two too many"
                );
            }
        }
        // The plain normal quantile, m + z sqrt(m) = 22.7, is one short at the bench's m = 15.
        assert!(poisson_cdf(15.0, 22) < COVERED);
        assert_eq!(cover(15.0), 24);
    }

    #[test]
    fn steady_demand_sizes_the_pool_by_a_poisson_quantile() {
        let mut s = sizer(0, 100);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        assert_eq!(s.size(), 0);
        // 2 callers a second, 10 s solves: m = 20, 20 + 2 x sqrt(20) + 0.5 + 0.5 = 29.9.
        run(&mut s, &mut at, 600, 2, 0);
        assert_eq!(s.size(), 30);
        assert!((s.rate() - 2.0).abs() < 0.01, "{}", s.rate());
    }

    #[test]
    fn five_a_second_at_three_second_solves_is_a_pool_of_24() {
        let mut s = sizer_solving_in(0, 100, 3);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        run(&mut s, &mut at, 120, 5, 0);
        // 15 + 2 x sqrt(15) + 0.5 + 0.5 = 23.7 (1.5 x 15 was 22.5).
        assert_eq!(s.size(), 24);
    }

    #[test]
    fn the_rate_is_measured_within_seconds_of_the_first_callers() {
        let mut s = sizer_solving_in(0, 100, 3);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        // Ten seconds of uneven arrivals averaging 5 a second. Unbiased only because the young
        // average is divided by its weight: uncorrected it would read 5 x (1 - e^(-10/60)) = 0.77.
        run_counts(&mut s, &mut at, &[7, 3, 5, 6, 2, 8, 4, 5, 6, 4]);
        assert!((s.rate() - 5.0).abs() < 0.5, "{}", s.rate());
        assert_eq!(s.size(), 24, "at full size already");
    }

    #[test]
    fn silence_before_the_first_caller_does_not_slow_the_estimate() {
        let mut s = sizer_solving_in(0, 100, 3);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        // A gateway started ten minutes before its fleet.
        run(&mut s, &mut at, 600, 0, 0);
        assert_eq!((s.size(), s.rate()), (0, 0.0));
        run_counts(&mut s, &mut at, &[7, 3, 5, 6, 2, 8, 4, 5, 6, 4]);
        assert!((s.rate() - 5.0).abs() < 0.5, "{}", s.rate());
        // Silence after callers is demand falling, and counts.
        run(&mut s, &mut at, 60, 0, 0);
        assert!(s.rate() < 0.5 * 5.0, "{}", s.rate());
    }

    #[test]
    fn callers_of_the_first_instants_are_not_read_as_a_spike() {
        let mut s = sizer_solving_in(0, 100, 15);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        // One caller in the first second reads as about one in min_observed (10 s), not 1/s
        // (which would be a pool of 24).
        run(&mut s, &mut at, 1, 1, 0);
        assert!(s.rate() > 0.09 && s.rate() < 0.11, "{}", s.rate());
        assert_eq!(s.size(), cover(s.rate() * 15.0));
        assert_eq!(s.size(), 6);
        // Five seconds of 5/s read as half of it; from 10 s on, the mean of what was seen.
        let mut s = sizer_solving_in(0, 100, 3);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        run(&mut s, &mut at, 5, 5, 0);
        assert!((s.rate() - 2.5).abs() < 0.25, "{}", s.rate());
        run(&mut s, &mut at, 5, 5, 0);
        assert!((s.rate() - 5.0).abs() < 1e-9, "{}", s.rate());
    }

    #[test]
    fn measured_solve_times_move_the_size() {
        let mut s = sizer(0, 100);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        run(&mut s, &mut at, 600, 2, 0);
        assert_eq!(s.size(), 30);
        for _ in 0..50 {
            s.observe_solve(Duration::from_secs(20));
        }
        assert!((s.solve_time().as_secs_f64() - 20.0).abs() < 0.01);
        run(&mut s, &mut at, 1, 2, 0);
        // m = 40: 40 + 2 x sqrt(40) + 0.5 + 0.5 = 53.6.
        assert_eq!(s.size(), 54);
    }

    #[test]
    fn the_size_stays_within_min_and_max() {
        let mut s = sizer(3, 12);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        run(&mut s, &mut at, 10, 0, 0);
        assert_eq!(s.size(), 3, "min holds without demand");
        run(&mut s, &mut at, 600, 5, 0);
        assert_eq!(s.size(), 12, "max holds under heavy demand");
    }

    #[test]
    fn answers_expiring_unused_shrink_the_pool_and_it_recovers_later() {
        let mut s = sizer(0, 100);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        run(&mut s, &mut at, 600, 2, 0);
        assert_eq!(s.size(), 30);
        // Demand holds on paper but answers expire: the estimate is too high.
        run(&mut s, &mut at, 1, 2, 6);
        assert_eq!(s.size(), 24, "lowered by what expired");
        run(&mut s, &mut at, 1, 2, 4);
        assert_eq!(s.size(), 20);
        // Nothing expires any more: the ceiling climbs back to what demand asks for.
        run(&mut s, &mut at, 600, 2, 0);
        assert_eq!(s.size(), 30);
    }

    #[test]
    fn demand_that_stops_drains_the_pool_to_min() {
        let mut s = sizer(1, 100);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        run(&mut s, &mut at, 600, 2, 0);
        assert_eq!(s.size(), 30);
        // No callers: fewer than one expected per shelf life soon, so nothing is kept but min.
        run(&mut s, &mut at, 600, 0, 0);
        assert_eq!(s.size(), 1);
    }

    #[test]
    fn the_shelf_life_caps_what_callers_could_take_in_time() {
        // 100 s solves: 100 + 2 x 10 + 0.5 + 0.5 = 121 answers, but callers take only 110
        // within the 110 s an answer keeps.
        let mut s = sizer_solving_in(0, 1000, 100);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        run(&mut s, &mut at, 900, 1, 0);
        assert_eq!(s.size(), 110);
    }

    #[test]
    fn irregular_and_repeated_ticks_are_harmless() {
        let mut s = sizer(0, 100);
        s.tick(Duration::from_secs(5), 10, 0);
        assert_eq!(s.tick(Duration::from_secs(5), 99, 0), 0, "no time passed");
        assert_eq!(s.tick(Duration::from_secs(4), 99, 0), 0, "time went back");
        // Figures that went down (a reset store) count as no arrivals, not a huge number.
        s.tick(Duration::from_secs(65), 0, 0);
        assert_eq!(s.rate(), 0.0);
        // One late tick covering a minute counts as a minute of demand: 120 callers, 2/s.
        s.tick(Duration::from_secs(125), 120, 0);
        assert!((s.rate() - 2.0).abs() < 1e-9, "{}", s.rate());
    }

    const DAY_MS: u64 = 24 * 3600 * 1000;
    const HOUR_MS: u64 = 3600 * 1000;

    /// Callers at `rate(wall_ms)` a second, in 5 s ticks from `at.wall` for `secs`, arrivals
    /// spread evenly (fractions carried); `at` is (wall ms, cumulative arrivals, carry).
    fn live(s: &mut AutoSizer, at: &mut (u64, u64, f64), secs: u64, rate: impl Fn(u64) -> f64) {
        for _ in 0..secs / 5 {
            at.2 += rate(at.0) * 5.0;
            let whole = at.2.floor();
            at.2 -= whole;
            at.1 += whole as u64;
            at.0 += 5000;
            s.tick_at(Duration::from_millis(at.0), Some(at.0), at.1, 0);
        }
    }

    /// 0.02 callers a second but 2 a second from 9:00 to 17:00.
    fn office(wall: u64) -> f64 {
        if (9 * HOUR_MS..17 * HOUR_MS).contains(&(wall % DAY_MS)) {
            2.0
        } else {
            0.02
        }
    }

    /// A reactive and a predictive sizer (10 s solves, 110 s shelf life) after a day of
    /// `office` demand, driven to `until` on the second day.
    fn after_a_day(until: u64, rate: impl Fn(u64) -> f64 + Copy) -> (AutoSizer, AutoSizer) {
        let mut sizers = (sizer(0, 100), sizer(0, 100).predictive());
        for s in [&mut sizers.0, &mut sizers.1] {
            let mut at = (0, 0, 0.0);
            live(s, &mut at, DAY_MS / 1000, office);
            live(s, &mut at, (until - DAY_MS) / 1000, rate);
        }
        sizers
    }

    #[test]
    fn a_predictive_pool_is_full_when_a_recurring_rush_comes() {
        // 8:59:45 on the second day: the rush is one lead time (10 s) and a tick away.
        let (reactive, predictive) = after_a_day(DAY_MS + 9 * HOUR_MS - 15_000, office);
        // The rush's rate less two standard errors of its slot (600 callers in 300 s), for
        // 10 s solves: cover(18.4) = 28; the reactive pool still sizes the night.
        let ahead: f64 = 2.0 - 2.0 * (2.0f64 / 300.0).sqrt();
        assert_eq!(predictive.size(), cover(ahead * 10.0));
        assert!(reactive.size() <= 2, "{}", reactive.size());
    }

    #[test]
    fn a_predictive_pool_drains_before_a_recurring_quiet() {
        // 16:59:45: an answer started now is ready at 16:59:55 and keeps until 17:01:45, when
        // 0.02/s come.
        let (reactive, predictive) = after_a_day(DAY_MS + 17 * HOUR_MS - 15_000, office);
        assert_eq!(reactive.size(), cover(20.0));
        // The callers expected over its shelf life: 2/s for the 5 s left, then 0.02/s (the
        // quiet slot learned at 5 or 7 callers in its 300 s, as whole callers come).
        let expected: f64 = 2.0 * 5.0 + 0.02 * 105.0;
        assert!(
            (expected.floor() as u32..=expected.ceil() as u32).contains(&predictive.size()),
            "{}",
            predictive.size()
        );
        assert!(predictive.size() < reactive.size());
    }

    #[test]
    fn a_campaign_the_shape_never_saw_is_sized_as_a_reactive_pool_sizes_it() {
        // 20:00 on the second day, 2/s since 19:50 where the first day was quiet.
        let campaign = |wall: u64| {
            if wall >= DAY_MS + 19 * HOUR_MS + 50 * 60_000 {
                2.0
            } else {
                office(wall)
            }
        };
        let (reactive, predictive) = after_a_day(DAY_MS + 20 * HOUR_MS, campaign);
        assert_eq!(predictive.size(), reactive.size());
        assert!(reactive.size() > 20, "{}", reactive.size());
    }
}
