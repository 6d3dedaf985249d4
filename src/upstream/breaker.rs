//! The circuit breaker of one account (docs/API.md "Accounts and failover").
//!
//! Owns: whether an account may take a task now. Closed: yes. Open (after an account error, or
//! `transient_trip` transient failures in a row): no, until its wait is over. Half-open: one
//! task at a time, the trial; its success closes the breaker, its failure opens it again for
//! twice as long (up to `open_max`). Does not own: the clock (every call passes the time in,
//! so tests drive it by hand), or what a failure is (`mod.rs` classifies outcomes).

use std::time::Duration;

use crate::model::Millis;

/// How quickly an account leaves and rejoins rotation. Each default says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerSettings {
    /// First wait after opening: long enough not to hammer a revoked key, short enough that a
    /// key fixed by its owner is back within a minute.
    pub open_for: Duration,
    /// First wait after transient failures opened it: an HTML page or a 5xx is usually a front
    /// end restarting, back within seconds; with one account, every caller waits this out.
    pub transient_open_for: Duration,
    /// The doubling stops here: a provider down for an hour is probed every five minutes.
    pub open_max: Duration,
    /// Transient failures (HTML pages, 5xx, unreadable bodies) in a row that open the breaker:
    /// one or two are a blip the account's own retries ride out, three mean the front end is down.
    pub transient_trip: u32,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            open_for: Duration::from_secs(30),
            transient_open_for: Duration::from_secs(5),
            open_max: Duration::from_secs(300),
            transient_trip: 3,
        }
    }
}

/// The breaker's state as `/health` and `/metrics` show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        }
    }
}

/// What one finished task says about its account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The provider did its job (an answer, or a verdict on the task such as unsolvable).
    Works,
    /// A server error, HTML page or unreadable reply.
    Transient,
    /// Bad key, banned IP, no money: the provider's own wait, if it gave one.
    Broken(Option<Duration>),
    /// Nothing learned (the caller's deadline, a shutdown).
    Nothing,
}

/// Whether a task may start at the account now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Yes,
    /// Yes, as the half-open trial: its verdict decides the breaker.
    Trial,
    No,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inner {
    Closed { transient_streak: u32 },
    Open { until: Millis },
    HalfOpen { trial_running: bool },
}

#[derive(Debug)]
pub struct Breaker {
    settings: BreakerSettings,
    inner: Inner,
    /// Opens since the last close: each doubles the next wait.
    reopens: u32,
    /// Times it opened since start (a counter for `/metrics`).
    pub opened_total: u64,
}

impl Breaker {
    pub fn new(settings: BreakerSettings) -> Breaker {
        Breaker {
            settings,
            inner: Inner::Closed {
                transient_streak: 0,
            },
            reopens: 0,
            opened_total: 0,
        }
    }

    /// The state at `now` (an open breaker whose wait is over reads as half-open).
    pub fn state(&self, now: Millis) -> BreakerState {
        match self.inner {
            Inner::Closed { .. } => BreakerState::Closed,
            Inner::Open { until } if now >= until => BreakerState::HalfOpen,
            Inner::Open { .. } => BreakerState::Open,
            Inner::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// What [`begin`](Breaker::begin) would answer at `now`, without committing to it.
    pub fn peek(&self, now: Millis) -> Admit {
        match self.inner {
            Inner::Closed { .. } => Admit::Yes,
            Inner::Open { until } if now >= until => Admit::Trial,
            Inner::Open { .. } => Admit::No,
            Inner::HalfOpen {
                trial_running: false,
            } => Admit::Trial,
            Inner::HalfOpen {
                trial_running: true,
            } => Admit::No,
        }
    }

    /// When a task may next start here: `now` unless open, else when the wait ends. (A running
    /// trial reads as `now`: its end may free the account any moment.)
    pub fn next_chance(&self, now: Millis) -> Option<Millis> {
        match self.inner {
            Inner::Open { until } => Some(until.max(now)),
            Inner::Closed { .. } | Inner::HalfOpen { .. } => Some(now),
        }
    }

    /// Starts a task at `now`: `Trial` marks the half-open trial as running.
    pub fn begin(&mut self, now: Millis) -> Admit {
        let admit = self.peek(now);
        if admit == Admit::Trial {
            self.inner = Inner::HalfOpen {
                trial_running: true,
            };
        }
        admit
    }

    /// A task started with `admitted` ended with `verdict` at `now`.
    pub fn finish(&mut self, admitted: Admit, verdict: Verdict, now: Millis) {
        let trial = admitted == Admit::Trial;
        match verdict {
            Verdict::Broken(wait) => self.open(now, self.settings.open_for, wait),
            Verdict::Works => match self.inner {
                // Any success proves the account works, trial or not.
                Inner::Closed { .. } | Inner::HalfOpen { .. } => self.close(),
                // A task started before the breaker opened: the wait stands.
                Inner::Open { .. } => {}
            },
            Verdict::Transient => match self.inner {
                Inner::Closed { transient_streak } => {
                    let streak = transient_streak.saturating_add(1);
                    if streak >= self.settings.transient_trip.max(1) {
                        self.open(now, self.settings.transient_open_for, None);
                    } else {
                        self.inner = Inner::Closed {
                            transient_streak: streak,
                        };
                    }
                }
                Inner::HalfOpen { .. } if trial => {
                    self.open(now, self.settings.transient_open_for, None)
                }
                Inner::HalfOpen { .. } | Inner::Open { .. } => {}
            },
            Verdict::Nothing => {
                if trial
                    && self.inner
                        == (Inner::HalfOpen {
                            trial_running: true,
                        })
                {
                    // The trial told nothing: the next task is the trial.
                    self.inner = Inner::HalfOpen {
                        trial_running: false,
                    };
                }
            }
        }
    }

    /// Takes the account out of rotation now (a balance check found the key refused).
    pub fn trip(&mut self, now: Millis, wait: Option<Duration>) {
        self.open(now, self.settings.open_for, wait);
    }

    /// Opens for `first` (doubled per reopen since the last close, up to `open_max`), or the
    /// provider's own longer wait.
    fn open(&mut self, now: Millis, first: Duration, provider_wait: Option<Duration>) {
        let after = |wait: Duration| {
            now.saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
        };
        let until = match self.inner {
            // More errors while open (late tasks, balance checks) keep the wait it has; only the
            // provider's own longer wait moves it.
            Inner::Open { until } => until.max(provider_wait.map_or(0, after)),
            _ => {
                let doubled = first
                    .saturating_mul(1u32 << self.reopens.min(16))
                    .min(self.settings.open_max);
                self.opened_total += 1;
                self.reopens = self.reopens.saturating_add(1);
                after(doubled.max(provider_wait.unwrap_or_default()))
            }
        };
        self.inner = Inner::Open { until };
    }

    fn close(&mut self) {
        self.inner = Inner::Closed {
            transient_streak: 0,
        };
        self.reopens = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Breaker {
        Breaker::new(BreakerSettings {
            open_for: Duration::from_secs(10),
            transient_open_for: Duration::from_secs(10),
            open_max: Duration::from_secs(35),
            transient_trip: 3,
        })
    }

    #[test]
    fn a_transient_trip_waits_less_than_an_account_error() {
        let mut b = Breaker::new(BreakerSettings {
            transient_open_for: Duration::from_secs(2),
            ..BreakerSettings::default()
        });
        for _ in 0..3 {
            b.finish(Admit::Yes, Verdict::Transient, 0);
        }
        assert_eq!((b.peek(1_999), b.peek(2_000)), (Admit::No, Admit::Trial));
        assert_eq!(b.begin(2_000), Admit::Trial);
        b.finish(Admit::Trial, Verdict::Works, 2_100);
        b.finish(Admit::Yes, Verdict::Broken(None), 3_000);
        assert_eq!(
            b.peek(3_000 + 29_999),
            Admit::No,
            "a broken account waits open_for"
        );
        assert_eq!(b.peek(33_000), Admit::Trial);
    }

    #[test]
    fn an_account_error_opens_at_once_and_a_trial_closes_it() {
        let mut b = breaker();
        assert_eq!(b.begin(0), Admit::Yes);
        b.finish(Admit::Yes, Verdict::Broken(None), 1_000);
        assert_eq!(
            (b.state(1_000), b.peek(10_999)),
            (BreakerState::Open, Admit::No)
        );
        assert_eq!(b.state(11_000), BreakerState::HalfOpen);
        assert_eq!(b.begin(11_000), Admit::Trial);
        assert_eq!(b.begin(11_001), Admit::No, "one trial at a time");
        b.finish(Admit::Trial, Verdict::Works, 12_000);
        assert_eq!(
            (b.state(12_000), b.begin(12_000)),
            (BreakerState::Closed, Admit::Yes)
        );
        assert_eq!(b.opened_total, 1);
    }

    #[test]
    fn a_failed_trial_doubles_the_wait_up_to_the_cap() {
        let mut b = breaker();
        b.finish(Admit::Yes, Verdict::Broken(None), 0);
        let mut now = 0;
        for expected_wait in [20_000, 35_000, 35_000] {
            now += 10_000.max(expected_wait / 2);
            // Wait for the breaker to half-open, then fail the trial.
            while b.peek(now) != Admit::Trial {
                now += 1_000;
            }
            assert_eq!(b.begin(now), Admit::Trial);
            b.finish(Admit::Trial, Verdict::Transient, now);
            assert_eq!(
                b.peek(now + expected_wait - 1),
                Admit::No,
                "{expected_wait}"
            );
            assert_eq!(b.peek(now + expected_wait), Admit::Trial, "{expected_wait}");
        }
        assert_eq!(b.opened_total, 4);
    }

    #[test]
    fn the_providers_own_wait_wins_when_longer() {
        let mut b = breaker();
        b.finish(
            Admit::Yes,
            Verdict::Broken(Some(Duration::from_secs(300))),
            0,
        );
        assert_eq!(b.peek(299_999), Admit::No);
        assert_eq!(b.peek(300_000), Admit::Trial);
    }

    #[test]
    fn transient_failures_open_it_only_in_a_row() {
        let mut b = breaker();
        b.finish(Admit::Yes, Verdict::Transient, 0);
        b.finish(Admit::Yes, Verdict::Transient, 0);
        b.finish(Admit::Yes, Verdict::Works, 0);
        b.finish(Admit::Yes, Verdict::Transient, 0);
        b.finish(Admit::Yes, Verdict::Transient, 0);
        assert_eq!(b.state(0), BreakerState::Closed, "the streak was broken");
        b.finish(Admit::Yes, Verdict::Transient, 0);
        assert_eq!(b.state(0), BreakerState::Open);
    }

    #[test]
    fn late_results_of_old_tasks_neither_close_nor_extend_needlessly() {
        let mut b = breaker();
        b.finish(Admit::Yes, Verdict::Broken(None), 0);
        // A task submitted before the error answers while the breaker is open.
        b.finish(Admit::Yes, Verdict::Works, 1_000);
        b.finish(Admit::Yes, Verdict::Transient, 2_000);
        assert_eq!(
            (b.state(9_999), b.peek(10_000)),
            (BreakerState::Open, Admit::Trial)
        );
        // A trial that learned nothing (its caller's deadline) hands the trial to the next task.
        assert_eq!(b.begin(10_000), Admit::Trial);
        b.finish(Admit::Trial, Verdict::Nothing, 10_500);
        assert_eq!(b.begin(10_600), Admit::Trial);
    }

    #[test]
    fn a_balance_check_can_trip_it_without_stretching_the_wait() {
        let mut b = breaker();
        b.trip(5_000, None);
        assert_eq!((b.state(5_000), b.opened_total), (BreakerState::Open, 1));
        // Checks every few seconds while open would otherwise keep it open for ever.
        b.trip(9_000, None);
        b.finish(Admit::Yes, Verdict::Broken(None), 14_000);
        assert_eq!(b.opened_total, 1, "already open: one opening");
        assert_eq!(b.peek(15_000), Admit::Trial, "the first wait stands");
        b.trip(15_000, Some(Duration::from_secs(300)));
        assert_eq!(b.peek(314_999), Admit::No, "the provider's own wait counts");
    }
}
