//! The effective cap: a refusal that proves the plan smaller lowers it to what the provider
//! carried, time grows it back (docs/REDIS.md "Thread budget").
//!
//! Owns: the arithmetic, and what a capacity refusal says about the plan. A refusal is the
//! plan's size only when it comes with as many of our tasks in flight as the provider recently
//! took and more than half the cap: then the cap drops to the tasks the provider held when it
//! refused (never below one thread, so work still moves). A refusal with fewer in flight than
//! the provider accepted a moment ago, or far below the cap, says the provider is short for a
//! moment (its workers busy, another client on the key): the task backs off and nothing else
//! changes. Cuts come at most once per `decrease_gap`; from then on the cap grows back by one
//! thread per `increase_every` until it reaches the configured threads. Growth is computed from
//! the time of the last cut, so nothing needs a timer, and the Redis scripts
//! (`lua/lib/budget.lua`) compute exactly the same figures on server time.
//! Does not own: the clock (callers pass milliseconds), where the state lives, or counting what
//! is in flight (the budgets do, each where its leases are).

use std::time::Duration;

/// How fast the cap moves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapSettings {
    /// The cap grows back by one thread per this.
    pub increase_every: Duration,
    /// Capacity errors closer together than this cut the cap once.
    pub decrease_gap: Duration,
    /// How long a submit the provider accepted counts as proof of what it carries.
    pub evidence_window: Duration,
}

impl Default for CapSettings {
    fn default() -> Self {
        Self {
            // Solves take 10-20 s: a few threads back per solve time probes the provider
            // gently without leaving a recovered plan idle for long.
            increase_every: Duration::from_secs(5),
            // About one round trip of refusals: tasks refused in the same moment are one signal.
            decrease_gap: Duration::from_secs(2),
            // A couple of solve times: a busy fleet is accepted at its level many times within
            // it, and a plan that really shrank (another client took threads of the key) is
            // believed within half a minute.
            evidence_window: Duration::from_secs(30),
        }
    }
}

/// The most tasks the provider was seen to carry: a submit it accepted with `others` of ours
/// already in flight, at `at` (ms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accepted {
    others: u32,
    at: u64,
}

impl Accepted {
    /// A submit accepted at `now` with `others` tasks in flight besides it. Keeps the higher
    /// level while it is recent, so one quiet moment does not forget what a busy one proved.
    pub fn record(&mut self, others: u32, now: u64, s: &CapSettings) {
        if others >= self.others || now.saturating_sub(self.at) >= ms(s.evidence_window) {
            *self = Accepted { others, at: now };
        }
    }

    /// The level proven at `now`: 0 once the last proof is older than the window.
    pub fn proven(&self, now: u64, s: &CapSettings) -> u32 {
        if now.saturating_sub(self.at) < ms(s.evidence_window) {
            self.others
        } else {
            0
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

/// Whether a refusal with `others` of our tasks in flight besides the refused one, under a cap
/// of `cap`, after the provider recently took a task with `proven` others in flight, is the
/// plan's size rather than a momentary shortage.
pub fn refusal_is_plan(others: u32, proven: u32, cap: u32) -> bool {
    others > proven && u64::from(others) * 2 >= u64::from(cap)
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

    /// A capacity refusal at `now` with `others` tasks in flight besides the refused one, the
    /// provider having recently taken one with `proven` others: lowers the cap to `others`
    /// (never below one) when that is the plan's size ([`refusal_is_plan`]) and the cap was not
    /// cut within the gap. Returns whether it cut.
    pub fn refused(
        &mut self,
        threads: u32,
        now: u64,
        s: &CapSettings,
        others: u32,
        proven: u32,
    ) -> bool {
        if let Some((_, at)) = self.cut {
            if now.saturating_sub(at) < ms(s.decrease_gap) {
                return false;
            }
        }
        let cap = self.effective(threads, now, s);
        let to = others.max(1);
        if !refusal_is_plan(others, proven, cap) || to >= cap {
            return false;
        }
        self.cut = Some((to, now));
        true
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
        evidence_window: Duration::from_secs(30),
    };

    #[test]
    fn a_refusal_at_the_plan_lowers_the_cap_to_what_ran_and_time_grows_it_back() {
        let mut rule = CapRule::default();
        assert_eq!(rule.effective(8, 0, &S), 8);
        // Five of ours ran when the sixth was refused, and nothing proved more.
        assert!(rule.refused(8, 1_000, &S, 5, 0));
        assert_eq!(rule.effective(8, 1_000, &S), 5);
        assert_eq!(rule.effective(8, 5_999, &S), 5);
        assert_eq!(rule.effective(8, 6_000, &S), 6);
        assert_eq!(rule.effective(8, 16_000, &S), 8);
        assert_eq!(rule.effective(8, 1_000_000, &S), 8, "never above threads");
    }

    #[test]
    fn refusals_in_one_moment_count_once_and_the_cap_never_reaches_zero() {
        let mut rule = CapRule::default();
        assert!(rule.refused(2, 0, &S, 1, 0));
        assert!(!rule.refused(2, 1_999, &S, 0, 0), "inside the gap");
        assert_eq!(rule.effective(2, 1_999, &S), 1);
        // A refusal with nothing else in flight still leaves one thread to make progress.
        let mut lone = CapRule::default();
        assert!(
            !lone.refused(1, 0, &S, 0, 0),
            "a cap of one is as low as it goes"
        );
        assert_eq!(lone.effective(1, 0, &S), 1);
    }

    #[test]
    fn a_refusal_below_what_the_provider_just_took_or_far_below_the_cap_is_a_moment() {
        let mut rule = CapRule::default();
        // The provider took a task with 29 others in flight: a refusal at 29 is its shortage.
        assert!(!rule.refused(30, 0, &S, 29, 29));
        assert!(!rule.refused(30, 3_000, &S, 20, 29));
        // Ten in flight of thirty: far below the cap, whatever was proven.
        assert!(!rule.refused(30, 6_000, &S, 10, 0));
        assert_eq!(rule.effective(30, 6_000, &S), 30);
        // Beyond what was proven, and above half the cap: the plan is smaller.
        assert!(rule.refused(30, 9_000, &S, 22, 20));
        assert_eq!(rule.effective(30, 9_000, &S), 22);
    }

    #[test]
    fn proof_of_what_the_provider_carried_lasts_its_window_and_keeps_the_highest() {
        let mut seen = Accepted::default();
        seen.record(12, 1_000, &S);
        seen.record(4, 2_000, &S);
        assert_eq!(
            seen.proven(2_000, &S),
            12,
            "a quieter moment does not lower it"
        );
        assert_eq!(seen.proven(30_999, &S), 12);
        assert_eq!(seen.proven(31_000, &S), 0, "too old to prove anything");
        seen.record(4, 31_000, &S);
        assert_eq!(seen.proven(31_000, &S), 4);
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
