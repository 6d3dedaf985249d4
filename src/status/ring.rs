//! The bounded history: one [`Sample`] per interval, oldest dropped first.

use std::collections::VecDeque;

use super::report::ErrorCounts;
use crate::engine::EngineReading;
use crate::telemetry::histogram::Buckets;

/// This instance's cumulative figures at one moment: the engine's handouts and the accounts' solve
/// times.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    pub engine: EngineReading,
    /// Upstream submit to answer ready, from the accounts (`Upstream::solve_time_buckets`).
    pub solve: Buckets,
}

/// Cumulative readings at one moment.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub t_ms: u64,
    /// Upstream threads taken and the effective caps, over every account (fleet-wide with Redis).
    pub threads_in_use: u64,
    pub threads_cap: u64,
    /// This instance's error counts by class.
    pub errors: ErrorCounts,
    /// This instance's engine and account figures.
    pub reading: Reading,
}

#[derive(Debug, Clone)]
pub struct Ring {
    samples: VecDeque<Sample>,
    cap: usize,
    /// When counting began (every counter was zero then).
    started_ms: u64,
    /// Whether a sample was ever dropped: until then the ring reaches back to `started_ms`.
    dropped: bool,
}

/// Where a window starts: a sample, or the start of counting (every counter zero).
#[derive(Debug, Clone, Copy)]
pub enum Start<'a> {
    Sample(&'a Sample),
    Zero(u64),
}

impl Start<'_> {
    pub fn t_ms(&self) -> u64 {
        match self {
            Start::Sample(s) => s.t_ms,
            Start::Zero(t) => *t,
        }
    }
}

impl Ring {
    pub fn new(cap: usize, started_ms: u64) -> Self {
        Self {
            samples: VecDeque::with_capacity(cap),
            cap: cap.max(2),
            started_ms,
            dropped: false,
        }
    }

    pub fn push(&mut self, s: Sample) {
        if self.samples.len() == self.cap {
            self.samples.pop_front();
            self.dropped = true;
        }
        self.samples.push_back(s);
    }

    /// The start of a window reaching back to `t_ms`: the start of counting when the process is
    /// younger than the window and no sample was dropped (so nothing counted before the first
    /// sample is left out), else as [`Ring::since`].
    pub fn window_start(&self, t_ms: u64) -> Start<'_> {
        let first_later = self.samples.front().is_none_or(|s| s.t_ms >= t_ms);
        if !self.dropped && first_later && self.started_ms >= t_ms {
            return Start::Zero(self.started_ms);
        }
        match self.since(t_ms) {
            Some(s) => Start::Sample(s),
            None => Start::Zero(self.started_ms),
        }
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
        let mut r = Ring::new(3, 0);
        assert!(matches!(r.window_start(0), Start::Zero(0)));
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
        // Samples were dropped: a window can no longer reach the start of counting.
        assert_eq!(r.window_start(0).t_ms(), 3);
    }

    #[test]
    fn a_young_ring_reaches_back_to_the_start_of_counting() {
        let mut r = Ring::new(10, 1_000);
        r.push(Sample {
            t_ms: 1_500,
            ..Sample::default()
        });
        assert!(matches!(r.window_start(500), Start::Zero(1_000)));
        // A window shorter than the uptime starts at a sample.
        assert_eq!(r.window_start(1_200).t_ms(), 1_500);
    }
}
