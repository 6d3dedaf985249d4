//! Passive health: when an instance is ejected and when it is let back.
//!
//! Owns one instance's failure streak and ejection state, driven only by outcomes (of calls,
//! or of a caller's own health probes through `Balancer::record`) and by the `now` the caller
//! passes in. Which outcomes are failures is
//! [`crate::outcome`]'s; skipping ejected instances when choosing is [`crate::Balancer`]'s.
//!
//! The rules, in the spirit of NGINX's `max_fails`/`fail_timeout` (balance/README.md,
//! "Ejection") with the exponential back-off of outlier detection:
//!
//! - after [`EjectionPolicy::consecutive_failures`] failures in a row the instance is ejected
//!   for [`EjectionPolicy::base_ejection`];
//! - when the cool-down ends it is let back *half-open*: it gets calls again, and its first
//!   failure ejects it again at once, for twice as long as the previous time (up to
//!   [`EjectionPolicy::max_ejection`]);
//! - a success ends the streak and the doubling: the next ejection is a first one again;
//! - outcomes of calls sent before the latest ejection ended are ignored (see
//!   [`Health::record`]).

use std::time::{Duration, Instant};

use crate::Outcome;

/// When to eject an instance and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EjectionPolicy {
    /// Failures in a row that eject an instance. 0 is taken as 1.
    pub consecutive_failures: u32,
    /// How long a first ejection lasts.
    pub base_ejection: Duration,
    /// The longest an ejection lasts, however often the instance failed again on its return.
    pub max_ejection: Duration,
}

impl Default for EjectionPolicy {
    /// Three failures and ten seconds are what we tell NGINX (`max_fails=3 fail_timeout=10s`,
    /// balance/README.md "Ejection"), so a client balancer and the proxy judge an
    /// instance alike: one failure is noise, three in a row are a pattern, and ten seconds is
    /// about a pod restart. Five minutes caps the doubling: long enough that a dead instance
    /// costs one failed call per five minutes, short enough that a repaired one is used again
    /// soon without any probe.
    fn default() -> Self {
        Self {
            consecutive_failures: 3,
            base_ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(5 * 60),
        }
    }
}

impl EjectionPolicy {
    /// The length of an ejection that follows `previous` ejections without a success between:
    /// the base, doubled each time, never above the cap.
    pub fn cool_down(&self, previous: u32) -> Duration {
        2u32.checked_pow(previous)
            .and_then(|factor| self.base_ejection.checked_mul(factor))
            .unwrap_or(self.max_ejection)
            .min(self.max_ejection)
    }
}

/// One instance's health, as far as the outcomes of its calls tell.
#[derive(Clone, Debug, Default)]
pub(crate) struct Health {
    /// Failures in a row since the last success or ejection.
    failures: u32,
    /// Ejections since the last success: sets the next cool-down, and while it is above zero
    /// the instance is on probation (half-open) whenever it is not ejected.
    ejections: u32,
    /// When the latest ejection ends (or ended: it is kept afterwards to tell stale outcomes).
    ejection_end: Option<Instant>,
}

impl Health {
    /// Whether the instance is ejected at `now`.
    #[cfg(test)]
    fn is_ejected(&self, now: Instant) -> bool {
        self.ejected_until(now).is_some()
    }

    /// When the current ejection ends, or `None` if the instance is not ejected at `now`.
    pub(crate) fn ejected_until(&self, now: Instant) -> Option<Instant> {
        self.ejection_end.filter(|&end| now < end)
    }

    /// Failures in a row that have not (yet) led to an ejection.
    pub(crate) fn consecutive_failures(&self) -> u32 {
        self.failures
    }

    /// Takes the outcome of a call sent at `sent_at` and finished at `now`. Returns whether
    /// this ejected the instance.
    ///
    /// A call sent before the latest ejection ended tells nothing new, so its outcome is
    /// ignored: a failure describes the incident that ejection already answered (counting the
    /// other calls in flight at the time would double the cool-down once per call), a failure
    /// of a call sent *during* the ejection (the all-ejected fallback) would stretch an
    /// ejection the fallback is waiting out, and a success of a long call that started before
    /// the trouble would end the back-off of an instance that is still failing new calls.
    pub(crate) fn record(
        &mut self,
        outcome: Outcome,
        sent_at: Instant,
        now: Instant,
        policy: &EjectionPolicy,
    ) -> bool {
        if self.ejection_end.is_some_and(|end| sent_at < end) {
            return false;
        }
        if outcome.is_instance_success() {
            self.failures = 0;
            self.ejections = 0;
            return false;
        }
        if !outcome.is_instance_failure() {
            return false;
        }
        self.failures = self.failures.saturating_add(1);
        let on_probation = self.ejections > 0;
        if !on_probation && self.failures < policy.consecutive_failures.max(1) {
            return false;
        }
        let cool_down = policy.cool_down(self.ejections);
        self.ejection_end = Some(later(now, cool_down));
        self.ejections = self.ejections.saturating_add(1);
        self.failures = 0;
        true
    }
}

/// `now + duration`, saturating at about a century for durations no clock can add (a policy
/// with `Duration::MAX`): the instance is ejected for good rather than a panic.
fn later(now: Instant, duration: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(duration)
        .or_else(|| now.checked_add(CENTURY))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn policy() -> EjectionPolicy {
        EjectionPolicy::default()
    }

    /// Records `outcome` for a call sent and finished at `at`.
    fn record(health: &mut Health, outcome: Outcome, at: Instant) -> bool {
        health.record(outcome, at, at, &policy())
    }

    #[test]
    fn ejects_after_the_third_failure_in_a_row_not_before() {
        let t0 = Instant::now();
        let mut health = Health::default();
        assert!(!record(&mut health, Outcome::ConnectFailed, t0));
        assert!(!record(&mut health, Outcome::ServerError, t0));
        assert!(!health.is_ejected(t0));
        assert!(record(&mut health, Outcome::Shed, t0));
        assert_eq!(health.ejected_until(t0), Some(t0 + 10 * SEC));
    }

    #[test]
    fn a_success_breaks_the_streak() {
        let t0 = Instant::now();
        let mut health = Health::default();
        record(&mut health, Outcome::ServerError, t0);
        record(&mut health, Outcome::ServerError, t0);
        record(&mut health, Outcome::Success, t0);
        assert!(!record(&mut health, Outcome::ServerError, t0));
        assert!(!record(&mut health, Outcome::ServerError, t0));
        assert_eq!(health.consecutive_failures(), 2);
        assert!(!health.is_ejected(t0));
    }

    #[test]
    fn fleet_limited_neither_counts_nor_breaks_the_streak() {
        let t0 = Instant::now();
        let mut health = Health::default();
        for _ in 0..10 {
            assert!(!record(&mut health, Outcome::FleetLimited, t0));
        }
        assert_eq!(health.consecutive_failures(), 0);
        record(&mut health, Outcome::ServerError, t0);
        record(&mut health, Outcome::FleetLimited, t0);
        record(&mut health, Outcome::ServerError, t0);
        record(&mut health, Outcome::FleetLimited, t0);
        assert!(record(&mut health, Outcome::ServerError, t0));
    }

    #[test]
    fn let_back_after_the_cool_down_and_one_failure_ejects_again_for_twice_as_long() {
        let t0 = Instant::now();
        let mut health = Health::default();
        for _ in 0..3 {
            record(&mut health, Outcome::ConnectFailed, t0);
        }
        assert!(health.is_ejected(t0 + 10 * SEC - Duration::from_nanos(1)));
        let back = t0 + 10 * SEC;
        assert!(!health.is_ejected(back));
        assert!(record(&mut health, Outcome::ConnectFailed, back));
        assert_eq!(health.ejected_until(back), Some(back + 20 * SEC));
        let back = back + 20 * SEC;
        assert!(record(&mut health, Outcome::ConnectFailed, back));
        assert_eq!(health.ejected_until(back), Some(back + 40 * SEC));
    }

    #[test]
    fn the_doubling_stops_at_the_cap_and_a_success_resets_it() {
        let t0 = Instant::now();
        let mut health = Health::default();
        for _ in 0..3 {
            record(&mut health, Outcome::ServerError, t0);
        }
        let mut now = t0;
        // 10, 20, 40, 80, 160, then 300 (not 320) and 300 again.
        for expected in [20, 40, 80, 160, 300, 300] {
            now = health.ejected_until(now).expect("ejected");
            assert!(record(&mut health, Outcome::ServerError, now));
            assert_eq!(health.ejected_until(now), Some(now + expected * SEC));
        }
        now = health.ejected_until(now).expect("ejected");
        record(&mut health, Outcome::Success, now);
        // Back to a first ejection: three failures, ten seconds.
        assert!(!record(&mut health, Outcome::ServerError, now));
        assert!(!record(&mut health, Outcome::ServerError, now));
        assert!(record(&mut health, Outcome::ServerError, now));
        assert_eq!(health.ejected_until(now), Some(now + 10 * SEC));
    }

    #[test]
    fn outcomes_of_calls_sent_before_the_ejection_ended_are_ignored() {
        let t0 = Instant::now();
        let p = policy();
        let mut health = Health::default();
        for _ in 0..3 {
            health.record(Outcome::ServerError, t0, t0, &p);
        }
        let end = t0 + 10 * SEC;
        // Calls that were in flight when it was ejected fail later: no longer ejection.
        assert!(!health.record(Outcome::ServerError, t0, t0 + SEC, &p));
        assert_eq!(health.ejected_until(t0 + SEC), Some(end));
        // A call sent during the ejection fails after it ended: still on probation, not ejected.
        assert!(!health.record(Outcome::ServerError, t0 + SEC, end + SEC, &p));
        assert!(!health.is_ejected(end + SEC));
        // A long call from before the ejection succeeds: the back-off is not reset, so the
        // next failure still ejects at once, for twice as long.
        assert!(!health.record(Outcome::Success, t0, end + SEC, &p));
        assert!(health.record(Outcome::ServerError, end + SEC, end + 2 * SEC, &p));
        assert_eq!(
            health.ejected_until(end + 2 * SEC),
            Some(end + 2 * SEC + 20 * SEC)
        );
    }

    #[test]
    fn cool_down_saturates_instead_of_overflowing() {
        let p = EjectionPolicy {
            consecutive_failures: 1,
            base_ejection: Duration::MAX,
            max_ejection: Duration::MAX,
        };
        assert_eq!(p.cool_down(0), Duration::MAX);
        assert_eq!(p.cool_down(40), Duration::MAX);
        assert_eq!(policy().cool_down(u32::MAX), 300 * SEC);
        let t0 = Instant::now();
        let mut health = Health::default();
        assert!(health.record(Outcome::ServerError, t0, t0, &p));
        assert!(health.is_ejected(t0 + 50 * 365 * 24 * 3600 * SEC));
    }

    #[test]
    fn zero_consecutive_failures_means_one() {
        let p = EjectionPolicy {
            consecutive_failures: 0,
            ..policy()
        };
        let t0 = Instant::now();
        let mut health = Health::default();
        assert!(health.record(Outcome::Shed, t0, t0, &p));
    }
}
