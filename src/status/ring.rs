//! The bounded history: one [`Sample`] per interval, oldest dropped first.

use std::collections::VecDeque;

use super::recorder::Reading;
use super::report::ErrorCounts;

/// Cumulative readings at one moment.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub t_ms: u64,
    /// Upstream threads taken and the effective caps, over every account (fleet-wide with Redis).
    pub threads_in_use: u64,
    pub threads_cap: u64,
    /// This instance's error counts by class.
    pub errors: ErrorCounts,
    /// This instance's recorder.
    pub reading: Reading,
}

#[derive(Debug, Clone)]
pub struct Ring {
    samples: VecDeque<Sample>,
    cap: usize,
}

impl Ring {
    pub fn new(cap: usize) -> Self {
        Self {
            samples: VecDeque::with_capacity(cap),
            cap: cap.max(2),
        }
    }

    pub fn push(&mut self, s: Sample) {
        if self.samples.len() == self.cap {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }

    pub fn iter(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter()
    }

    /// The oldest sample taken at or after `t_ms`, else the newest (a window that reaches past
    /// the start of history starts at the oldest sample; one that none reaches, at the newest).
    pub fn since(&self, t_ms: u64) -> Option<&Sample> {
        self.samples
            .iter()
            .find(|s| s.t_ms >= t_ms)
            .or_else(|| self.samples.back())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_its_cap_and_drops_the_oldest() {
        let mut r = Ring::new(3);
        for t in 1..=5 {
            r.push(Sample {
                t_ms: t,
                ..Sample::default()
            });
        }
        let ts: Vec<u64> = r.iter().map(|s| s.t_ms).collect();
        assert_eq!(ts, [3, 4, 5]);
        assert_eq!(r.since(4).map(|s| s.t_ms), Some(4));
        assert_eq!(r.since(0).map(|s| s.t_ms), Some(3));
        assert_eq!(r.since(9).map(|s| s.t_ms), Some(5));
    }
}
