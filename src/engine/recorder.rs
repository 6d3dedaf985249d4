//! What the engine tells the status page about each handout, whichever API or queue worker
//! asked (`Engine::solve_at`, where `/metrics` counts them too): its source, how long the caller
//! waited, how old the answer was, and which error a caller got instead. These are this
//! instance's own figures; the fleet adds them up (`status`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{Handout, SolveError};
use crate::model::{BySource, Source, now_ms};
use crate::telemetry::histogram::{Buckets, Histogram};

/// Caller error codes kept apart; any further code is counted under [`OTHER_CODE`], so a
/// provider inventing codes cannot grow the map.
const MAX_CODES: usize = 16;
pub const OTHER_CODE: &str = "other";

#[derive(Debug, Default)]
pub struct Recorder {
    /// Request to answer, every answer.
    handout: Histogram,
    /// Answer ready upstream to handed to the caller (its age at handout, pool time included).
    ready_to_caller: Histogram,
    /// Answers by source: pool, solved, shared.
    answers: [AtomicU64; 3],
    errors: Mutex<BTreeMap<String, u64>>,
}

/// A cumulative reading of a [`Recorder`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    pub answers: BySource<u64>,
    pub errors: BTreeMap<String, u64>,
    pub handout: Buckets,
    /// Upstream submit to answer ready, from the accounts (`Upstream::solve_time_buckets`).
    pub solve: Buckets,
    pub ready_to_caller: Buckets,
}

impl Recorder {
    pub fn handout(&self, result: &Result<Handout, SolveError>, took: Duration) {
        match result {
            Ok(h) => {
                let i = match h.source {
                    Source::Pool => 0,
                    Source::Solved => 1,
                    Source::Shared => 2,
                };
                self.answers[i].fetch_add(1, Ordering::Relaxed);
                self.handout.observe(took.as_secs_f64());
                let age_ms = now_ms().saturating_sub(h.answer.solved_at);
                self.ready_to_caller.observe(age_ms as f64 / 1000.0);
            }
            Err(e) => {
                let code = match e {
                    SolveError::Timeout => "timeout",
                    e => e.code(),
                };
                let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
                let key = if errors.contains_key(code) || errors.len() < MAX_CODES {
                    code
                } else {
                    OTHER_CODE
                };
                *errors.entry(key.to_owned()).or_default() += 1;
            }
        }
    }

    pub fn read(&self) -> Reading {
        Reading {
            answers: BySource {
                pool: self.answers[0].load(Ordering::Relaxed),
                solved: self.answers[1].load(Ordering::Relaxed),
                shared: self.answers[2].load(Ordering::Relaxed),
            },
            errors: self
                .errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            handout: self.handout.read(),
            solve: Buckets::default(),
            ready_to_caller: self.ready_to_caller.read(),
        }
    }
}
