//! A fixed-bucket latency histogram on atomics: cheap to feed from the request path, and its
//! bucket counts add up across samples and instances, so a window's percentiles are the
//! difference of two cumulative readings.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::Kind;

/// Upper bounds in seconds: 5 ms (a pool hit) to about 12 minutes (a slow reCAPTCHA), each 2.5
/// times the last; one more bucket holds the rest (`+Inf` on `/metrics`).
pub const BOUNDS: [f64; 14] = bounds();

const fn bounds() -> [f64; 14] {
    let mut out = [0.0; 14];
    let (mut bound, mut i) = (0.005, 0);
    while i < out.len() {
        out[i] = bound;
        bound *= 2.5;
        i += 1;
    }
    out
}

/// Counts per bucket (the last is above every bound).
pub type Buckets = [u64; BOUNDS.len() + 1];

#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BOUNDS.len() + 1],
    /// The sum of every observation, in microseconds (what Prometheus's `_sum` needs).
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, seconds: f64) {
        let i = BOUNDS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BOUNDS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        // Saturating float-to-int: a negative or NaN delay adds nothing.
        let us = (seconds * 1e6) as u64;
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn read(&self) -> Buckets {
        std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed))
    }

    /// The sum of every observation, in seconds.
    pub fn sum(&self) -> f64 {
        self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
    }
}

/// One [`Histogram`] per kind: fed on the request path without a lock or a label lookup, read by
/// `/metrics` (every kind with a sample) and by the status page (all kinds added up) alike.
#[derive(Debug, Default)]
pub struct KindHistograms([Histogram; Kind::ALL.len()]);

impl KindHistograms {
    pub fn observe(&self, kind: Kind, seconds: f64) {
        self.0[kind.index()].observe(seconds);
    }

    /// Observes a delay given in milliseconds.
    pub fn observe_ms(&self, kind: Kind, ms: u64) {
        self.observe(kind, ms as f64 / 1000.0);
    }

    /// Each kind's buckets and sum, kinds without a sample left out.
    pub fn by_kind(&self) -> Vec<(Kind, Buckets, f64)> {
        Kind::ALL
            .iter()
            .zip(&self.0)
            .map(|(kind, h)| (*kind, h.read(), h.sum()))
            .filter(|(_, b, _)| b.iter().any(|n| *n > 0))
            .collect()
    }

    /// Every kind's buckets added up.
    pub fn total(&self) -> Buckets {
        let mut out = Buckets::default();
        for h in &self.0 {
            add(&mut out, &h.read());
        }
        out
    }
}

/// `later - earlier`, bucket by bucket.
pub fn since(later: &Buckets, earlier: &Buckets) -> Buckets {
    std::array::from_fn(|i| later[i].saturating_sub(earlier[i]))
}

/// Adds `b` into `a`.
pub fn add(a: &mut Buckets, b: &[u64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// The `q` quantile (0..1) in seconds, interpolated inside its bucket. `None` until there are
/// enough samples for it to mean anything: a p99 of ten answers is the slowest of them dressed
/// up, and one answer interpolated across its bucket would show a spread it does not have. So
/// p50 needs 2 samples, p90 10, p99 100 ([`samples_for`]). Answers in the open last bucket read
/// as its lower bound.
pub fn quantile(buckets: &[u64], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 || total < samples_for(q) {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut seen = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n == 0 {
            continue;
        }
        if (seen + n) as f64 >= rank {
            let lower = if i == 0 { 0.0 } else { BOUNDS[i - 1] };
            let Some(&upper) = BOUNDS.get(i) else {
                return Some(lower);
            };
            let into = ((rank - seen as f64) / n as f64).clamp(0.0, 1.0);
            return Some(lower + (upper - lower) * into);
        }
        seen += n;
    }
    BOUNDS.last().copied()
}

/// The fewest samples for which the `q` quantile is not simply the largest one: `1 / (1 - q)`.
pub fn samples_for(q: f64) -> u64 {
    let q = q.clamp(0.0, 0.999_999);
    (1.0 / (1.0 - q) - 1e-9).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_fall_in_the_bucket_that_holds_their_rank() {
        let h = Histogram::default();
        for _ in 0..90 {
            h.observe(0.004); // first bucket
        }
        for _ in 0..10 {
            h.observe(2.0); // (1.22, 3.05]
        }
        let b = h.read();
        let p50 = quantile(&b, 0.5).unwrap();
        assert!(p50 > 0.0 && p50 <= 0.005, "p50 {p50}");
        let p99 = quantile(&b, 0.99).unwrap();
        assert!(p99 > 1.220703125 && p99 <= 3.0517578125, "p99 {p99}");
        assert_eq!(quantile(&[0; 15], 0.5), None);
    }

    #[test]
    fn a_window_is_the_difference_of_two_readings() {
        let h = Histogram::default();
        h.observe(0.1);
        let before = h.read();
        h.observe(10.0);
        h.observe(10.0);
        let window = since(&h.read(), &before);
        assert_eq!(window.iter().sum::<u64>(), 2);
        let p50 = quantile(&window, 0.5).unwrap();
        assert!(p50 > 7.62939453125 && p50 <= 19.073486328125, "p50 {p50}");
    }

    #[test]
    fn too_few_samples_have_no_tail() {
        assert_eq!(
            [0.5, 0.9, 0.99].map(samples_for),
            [2, 10, 100],
            "a quantile needs 1 / (1 - q) samples"
        );
        let h = Histogram::default();
        h.observe(5.0);
        let one = h.read();
        assert_eq!(
            [0.5, 0.9, 0.99].map(|q| quantile(&one, q)),
            [None, None, None],
            "one answer is not a distribution"
        );
        for _ in 0..9 {
            h.observe(5.0);
        }
        let ten = h.read();
        assert!(quantile(&ten, 0.5).is_some() && quantile(&ten, 0.9).is_some());
        assert_eq!(quantile(&ten, 0.99), None, "ten answers have no p99");
    }

    #[test]
    fn kinds_are_kept_apart_and_add_up() {
        let h = KindHistograms::default();
        h.observe(Kind::Turnstile, 0.5);
        h.observe_ms(Kind::Image, 2_000);
        h.observe_ms(Kind::Image, 1_000);
        let by_kind = h.by_kind();
        assert_eq!(
            by_kind
                .iter()
                .map(|(k, b, _)| (*k, b.iter().sum::<u64>()))
                .collect::<Vec<_>>(),
            [(Kind::Turnstile, 1), (Kind::Image, 2)]
        );
        assert!((by_kind[1].2 - 3.0).abs() < 1e-6, "sum {}", by_kind[1].2);
        assert_eq!(h.total().iter().sum::<u64>(), 3);
    }
}
