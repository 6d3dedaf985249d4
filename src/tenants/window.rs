//! A rolling-hour counter in constant space: sixty one-minute buckets. Pure (time is an argument)
//! so tests replay any hour.
//!
//! Counting by the minute means a solve started at 10:00:59 stops counting at 11:00:00, up to a
//! minute early: a tenant never waits longer than its limit says, and the state per tenant stays
//! 60 pairs whatever its traffic.

/// Buckets in the window, one per minute.
const MINUTES: u64 = 60;

#[derive(Debug, Clone)]
pub struct HourWindow {
    /// `(minute number since the epoch, solves started in it)`, indexed by minute modulo 60.
    buckets: [(u64, u64); MINUTES as usize],
}

impl Default for HourWindow {
    fn default() -> Self {
        Self {
            buckets: [(0, 0); MINUTES as usize],
        }
    }
}

impl HourWindow {
    /// Solves counted in the hour ending at `now_s` (seconds since the epoch).
    pub fn count(&self, now_s: u64) -> u64 {
        let now = now_s / 60;
        self.live(now).map(|(_, n)| n).sum()
    }

    /// Counts one solve if fewer than `limit` were counted in the last hour; otherwise the
    /// seconds until the oldest counted minute leaves the window (at least 1).
    pub fn try_take(&mut self, now_s: u64, limit: u64) -> Result<(), u64> {
        let now = now_s / 60;
        if self.count(now_s) >= limit {
            let oldest = self.live(now).filter(|(_, n)| *n > 0).map(|(m, _)| m).min();
            let frees_at = oldest.map_or(now_s, |m| (m + MINUTES) * 60);
            return Err(frees_at.saturating_sub(now_s).max(1));
        }
        let bucket = &mut self.buckets[(now % MINUTES) as usize];
        if bucket.0 != now {
            *bucket = (now, 0);
        }
        bucket.1 += 1;
        Ok(())
    }

    /// Buckets of the 60 minutes ending with minute `now`.
    fn live(&self, now: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.buckets
            .iter()
            .copied()
            .filter(move |(m, n)| *n > 0 && *m <= now && now - *m < MINUTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_limit_holds_for_an_hour_then_frees() {
        let mut w = HourWindow::default();
        let start = 1_700_000_000 / 60 * 60; // a minute boundary
        assert_eq!(w.try_take(start + 5, 2), Ok(()));
        assert_eq!(w.try_take(start + 70, 2), Ok(()));
        // Refused: the first solve's minute leaves the window at start + 3600.
        assert_eq!(w.try_take(start + 100, 2), Err(3600 - 100));
        assert_eq!(w.count(start + 3599), 2);
        assert_eq!(w.try_take(start + 3600, 2), Ok(()));
        assert_eq!(w.count(start + 3600), 2);
        assert_eq!(w.count(start + 3 * 3600), 0);
    }

    proptest! {
        /// Over any schedule, no rolling 60-minute span (counted by minute) holds more than
        /// `limit` accepted solves, and a refusal always says to wait at least a second.
        #[test]
        fn never_more_than_the_limit_per_hour(
            limit in 1u64..6,
            steps in proptest::collection::vec(0u64..400, 1..200),
        ) {
            let mut w = HourWindow::default();
            let mut now = 1_000_000u64;
            let mut accepted: Vec<u64> = Vec::new();
            for step in steps {
                now += step;
                match w.try_take(now, limit) {
                    Ok(()) => accepted.push(now / 60),
                    Err(wait) => prop_assert!(wait >= 1),
                }
                let minute = now / 60;
                let in_hour = accepted.iter().filter(|m| minute - **m < 60).count() as u64;
                prop_assert!(in_hour <= limit);
                prop_assert_eq!(in_hour, w.count(now));
            }
        }
    }
}
