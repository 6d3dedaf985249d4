//! One kind's upstream solve times within a bucket, as counts in the solve-time histogram's
//! buckets (`telemetry::histogram::BOUNDS`, each 2.5 times the last): the distribution the
//! advice quotes percentiles from and the replay draws its solves from, at 60 bytes a kind a
//! bucket.

use serde::{Deserialize, Serialize};

use crate::telemetry::histogram::{self, BOUNDS, Buckets};

/// Counts per histogram bucket, the last above every bound. `u32`: a bucket of minutes never
/// holds four billion solves, and the log keeps thousands of buckets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SolveTimes([u32; BOUNDS.len() + 1]);

impl SolveTimes {
    pub const EMPTY: SolveTimes = SolveTimes([0; BOUNDS.len() + 1]);

    /// The solves between two cumulative readings (a bucket that went back counts from zero).
    pub fn between(now: &Buckets, then: &Buckets) -> SolveTimes {
        SolveTimes(std::array::from_fn(|i| {
            let n = now[i].checked_sub(then[i]).unwrap_or(now[i]);
            u32::try_from(n).unwrap_or(u32::MAX)
        }))
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|n| *n == 0)
    }

    pub fn add(&mut self, other: &SolveTimes) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_add(b);
        }
    }

    pub fn buckets(&self) -> Buckets {
        self.0.map(u64::from)
    }

    /// The `q` quantile in seconds, interpolated within its bucket; `None` with too few solves
    /// for it to mean anything (`histogram::quantile`).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        histogram::quantile(&self.buckets(), q)
    }

    /// A solve time drawn from the distribution with `u` uniform in 0..1: a bucket in
    /// proportion to its count, then a point spread evenly in log scale within it (the bounds
    /// grow geometrically). `None` without a solve.
    pub fn draw(&self, u: f64, v: f64) -> Option<f64> {
        let total: u64 = self.0.iter().map(|n| u64::from(*n)).sum();
        if total == 0 {
            return None;
        }
        let mut rank = u.clamp(0.0, 1.0) * total as f64;
        let last = self.0.iter().rposition(|n| *n > 0).unwrap_or(0);
        let i = (0..=last)
            .find(|i| {
                rank -= f64::from(self.0[*i]);
                rank < 0.0
            })
            .unwrap_or(last);
        let (lower, upper) = Self::range(i);
        Some(lower * (upper / lower).powf(v.clamp(0.0, 1.0)))
    }

    /// The mean of [`SolveTimes::draw`]: the log-uniform mean of each bucket, weighted by its
    /// count. The replay scales its draws by the measured mean over this, so the shape comes
    /// from the histogram and the mean from the summed times.
    pub fn draw_mean(&self) -> Option<f64> {
        let total: u64 = self.0.iter().map(|n| u64::from(*n)).sum();
        (total > 0).then(|| {
            let sum: f64 = (0..self.0.len())
                .filter(|i| self.0[*i] > 0)
                .map(|i| {
                    let (lower, upper) = Self::range(i);
                    f64::from(self.0[i]) * (upper - lower) / (upper / lower).ln()
                })
                .sum();
            sum / total as f64
        })
    }

    /// Bucket `i`'s range: below the first bound, from a 2.5th of it; above the last, to 2.5
    /// times it (both rare for upstream solves).
    fn range(i: usize) -> (f64, f64) {
        let upper = BOUNDS
            .get(i)
            .copied()
            .unwrap_or(BOUNDS[BOUNDS.len() - 1] * 2.5);
        (upper / 2.5, upper)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(solves: &[f64]) -> Buckets {
        let h = histogram::Histogram::default();
        for s in solves {
            h.observe(*s);
        }
        h.read()
    }

    #[test]
    fn draws_follow_the_recorded_shape_and_their_mean_is_known() {
        // Three quarters fast (1-1.2 s), a quarter slow (15-19 s).
        let mut solves = vec![1.1; 300];
        solves.extend(vec![16.0; 100]);
        let t = SolveTimes::between(&of(&solves), &Buckets::default());
        assert_eq!(t.buckets().iter().sum::<u64>(), 400);
        let p50 = t.quantile(0.5).unwrap();
        let p95 = t.quantile(0.95).unwrap();
        assert!((0.48..=1.23).contains(&p50), "{p50}");
        assert!((7.6..=19.1).contains(&p95), "{p95}");
        let n = 10_000;
        let draws: Vec<f64> = (0..n)
            .map(|i| {
                let u = (i as f64 + 0.5) / n as f64;
                t.draw(u, (i * 7919 % n) as f64 / n as f64).unwrap()
            })
            .collect();
        let slow = draws.iter().filter(|d| **d > 7.6).count();
        assert!((2400..=2600).contains(&slow), "{slow}");
        let mean = draws.iter().sum::<f64>() / n as f64;
        let expected = t.draw_mean().unwrap();
        assert!(
            (mean - expected).abs() / expected < 0.02,
            "{mean} {expected}"
        );
        assert_eq!(SolveTimes::default().draw(0.5, 0.5), None);
    }

    #[test]
    fn readings_become_differences_and_shares_add() {
        let then = of(&[2.0, 2.0]);
        let now = of(&[2.0, 2.0, 2.0, 30.0]);
        let mut d = SolveTimes::between(&now, &then);
        assert_eq!(d.buckets().iter().sum::<u64>(), 2);
        d.add(&d.clone());
        assert_eq!(d.buckets().iter().sum::<u64>(), 4);
        // A counter that went back (its owner restarted) counts from zero.
        let back = SolveTimes::between(&then, &now);
        assert_eq!(back.buckets().iter().sum::<u64>(), 2);
        // As a JSON array of the 15 counts.
        assert_eq!(
            serde_json::to_string(&SolveTimes::default()).unwrap(),
            "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]"
        );
    }
}
