//! The effective cap: additive increase, multiplicative decrease (docs/REDIS.md "Thread budget").
//!
//! Owns: the arithmetic. A capacity error halves the cap (at most once per `decrease_gap`, so a
//! burst of refusals to many tasks in flight counts as one signal); from then on the cap grows
//! back by one thread per `increase_every` until it reaches the configured threads. Growth is
//! computed from the time of the last cut, so nothing needs a timer, and the Redis scripts
//! (`lua/lib/budget.lua`) compute exactly the same figures on server time.
//! Does not own: the clock (callers pass milliseconds) or where the state lives.

use std::time::Duration;

/// How fast the cap moves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapSettings {
    /// The cap grows back by one thread per this.
    pub increase_every: Duration,
    /// Capacity errors closer together than this halve the cap once.
    pub decrease_gap: Duration,
}

impl Default for CapSettings {
    fn default() -> Self {
        Self {
            // Solves take 10-20 s: a few threads back per solve time probes the provider
            // gently without leaving a recovered plan idle for long.
            increase_every: Duration::from_secs(5),
            // About one round trip of refusals: tasks refused in the same moment are one signal.
            decrease_gap: Duration::from_secs(2),
        }
    }
}

/// The cap's state: the plan's threads when known, and the last cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapRule {
    plan: Option<u32>,
    /// The cap right after the last cut, and when (ms).
    cut: Option<(u32, u64)>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl CapRule {
    /// The cap at `now` for a budget of `threads`.
    pub fn effective(&self, threads: u32, now: u64, s: &CapSettings) -> u32 {
        let mut cap = threads;
        if let Some(plan) = self.plan {
            cap = cap.min(plan);
        }
        if let Some((after_cut, at)) = self.cut {
            let steps = now.saturating_sub(at) / ms(s.increase_every);
            let grown = u64::from(after_cut).saturating_add(steps);
            cap = cap.min(u32::try_from(grown).unwrap_or(u32::MAX));
        }
        cap
    }

    /// A capacity error at `now`: halve the cap (never below one thread) unless it was cut
    /// within the gap.
    pub fn shrink(&mut self, threads: u32, now: u64, s: &CapSettings) {
        if let Some((_, at)) = self.cut {
            if now.saturating_sub(at) < ms(s.decrease_gap) {
                return;
            }
        }
        let cap = self.effective(threads, now, s);
        self.cut = Some(((cap / 2).max(1), now));
    }

    /// The plan's threads as `threadsinfo` reports them (0 is ignored: no plan says nothing).
    pub fn calibrate(&mut self, plan: u32) {
        if plan > 0 {
            self.plan = Some(plan);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: CapSettings = CapSettings {
        increase_every: Duration::from_secs(5),
        decrease_gap: Duration::from_secs(2),
    };

    #[test]
    fn a_capacity_error_halves_the_cap_and_time_grows_it_back_one_by_one() {
        let mut rule = CapRule::default();
        assert_eq!(rule.effective(8, 0, &S), 8);
        rule.shrink(8, 1_000, &S);
        assert_eq!(rule.effective(8, 1_000, &S), 4);
        assert_eq!(rule.effective(8, 5_999, &S), 4);
        assert_eq!(rule.effective(8, 6_000, &S), 5);
        assert_eq!(rule.effective(8, 21_000, &S), 8);
        assert_eq!(rule.effective(8, 1_000_000, &S), 8, "never above threads");
    }

    #[test]
    fn refusals_in_one_moment_count_once_and_the_cap_never_reaches_zero() {
        let mut rule = CapRule::default();
        rule.shrink(8, 0, &S);
        rule.shrink(8, 1_999, &S);
        assert_eq!(rule.effective(8, 1_999, &S), 4);
        for i in 1..10 {
            rule.shrink(8, 2_000 * i, &S);
        }
        assert_eq!(rule.effective(8, 18_000, &S), 1);
    }

    #[test]
    fn the_plan_lowers_the_cap_and_a_zero_plan_is_ignored() {
        let mut rule = CapRule::default();
        rule.calibrate(0);
        assert_eq!(rule.effective(8, 0, &S), 8);
        rule.calibrate(5);
        assert_eq!(rule.effective(8, 0, &S), 5);
        assert_eq!(rule.effective(3, 0, &S), 3);
    }
}
