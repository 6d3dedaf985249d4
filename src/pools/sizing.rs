//! How big an `auto` pool should be: pure arithmetic over observations, no clock, no I/O, so
//! tests drive it with explicit ticks instead of waiting real minutes.
//!
//! Little's law: to hand every caller a ready answer, the pool must cover the callers who arrive
//! while a replacement is being solved, `size = arrival rate x solve time`, times a headroom
//! for bursts. Two limits keep that from buying answers nobody uses:
//! - *shelf life*: an answer is usable for `lifetime - min_remaining`; holding more than the
//!   callers of one shelf life would take means some expire. Below one expected caller per shelf
//!   life, pooling only wastes, so the size is 0 (then `min`).
//! - *waste*: when answers do expire unused (the target's `expired_unused` grows), the estimate
//!   was too high: a ceiling drops below the size that wasted, by what expired, and recovers
//!   slowly while nothing expires.

use std::time::Duration;

/// The knobs of auto sizing; every default says why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizingSettings {
    /// Multiplier on Little's law for bursts and solve-time spread.
    pub headroom: f64,
    /// Time constant of the arrival-rate average: demand measured over about this long.
    pub rate_window: Duration,
    /// Weight of the newest refill in the solve-time average.
    pub solve_weight: f64,
    /// Relative growth per second of the waste ceiling while nothing expires.
    pub recovery_per_s: f64,
}

impl Default for SizingSettings {
    fn default() -> Self {
        Self {
            // Half again the mean: covers the burst of a fleet's synchronized workers without
            // doubling the pool (and its waste when demand drops).
            headroom: 1.5,
            // A minute: long enough to smooth per-second jitter, short enough to follow a fleet
            // being scaled up or down.
            rate_window: Duration::from_secs(60),
            // About the last five refills: solve times drift with provider load, not per task.
            solve_weight: 0.2,
            // 1 % a second (at least 0.1 answer a second): back to full size within minutes of
            // the last waste, slowly enough not to re-buy the same waste at once.
            recovery_per_s: 0.01,
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
    /// Callers per second, exponentially weighted.
    rate: f64,
    /// Seconds from a refill's start to its answer, exponentially weighted.
    solve_s: f64,
    /// The most the waste record allows.
    ceiling: f64,
    last: Option<Sample>,
    size: u32,
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
            rate: 0.0,
            solve_s: prior_solve.as_secs_f64(),
            ceiling: f64::from(max),
            last: None,
            size: min,
        }
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// Measured callers per second.
    pub fn rate(&self) -> f64 {
        self.rate
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

        // An exponential average over irregular intervals: the weight of the new interval grows
        // with its length, so a late tick counts for as long as it covers.
        let alpha = 1.0 - (-dt / self.settings.rate_window.as_secs_f64().max(1e-3)).exp();
        self.rate += alpha * (arrived / dt - self.rate);

        let (min, max) = (f64::from(self.min), f64::from(self.max));
        if wasted > 0.0 {
            self.ceiling = (f64::from(self.size) - wasted).max(min);
        } else {
            let step = self.ceiling.max(10.0) * self.settings.recovery_per_s * dt;
            self.ceiling = (self.ceiling + step).min(max);
        }

        let want = if self.rate * self.shelf_life_s < 1.0 {
            0.0
        } else {
            self.rate * (self.solve_s * self.settings.headroom).min(self.shelf_life_s)
        };
        // Clamped to 0..=max (at most 10 000) before the conversion, so it cannot truncate.
        self.size = want.min(self.ceiling).ceil().clamp(min, max) as u32;
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHELF: Duration = Duration::from_secs(110);

    fn sizer(min: u32, max: u32) -> AutoSizer {
        AutoSizer::new(
            min,
            max,
            Duration::from_secs(10),
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

    #[test]
    fn steady_demand_grows_the_pool_to_littles_law_with_headroom() {
        let mut s = sizer(0, 100);
        let mut at = (0, 0, 0);
        s.tick(Duration::ZERO, 0, 0);
        assert_eq!(s.size(), 0);
        // 2 callers a second, 10 s solves: 2 x 10 x 1.5 = 30 once the average has settled.
        run(&mut s, &mut at, 30, 2, 0);
        let early = s.size();
        assert!(early > 0 && early < 30, "{early}");
        run(&mut s, &mut at, 600, 2, 0);
        assert_eq!(s.size(), 30);
        assert!((s.rate() - 2.0).abs() < 0.01, "{}", s.rate());
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
        assert_eq!(s.size(), 60);
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
        // 100 s solves x 1.5 would be 150 s of demand, but answers only keep 110 s.
        let mut s = AutoSizer::new(
            0,
            1000,
            Duration::from_secs(100),
            SHELF,
            SizingSettings::default(),
        );
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
    }
}
