//! Which account takes a task (docs/API.md "Accounts and failover").
//!
//! Owns: what each account has recently done per kind (solve time and success rate, as
//! exponentially weighted averages: a fixed few numbers per account and kind, where old
//! samples fade), and the choice among the accounts that may take a task now. Does not own:
//! which accounts may (breaker, spend guard) or how many tasks they hold (the account).
//!
//! The choice: a half-open account's trial first (it can only rejoin by trying); else, among
//! accounts with free threads, the highest `weight x success / solve time x free share`. The
//! free share spreads load over equally good accounts and gives a new account traffic to learn
//! from. With no free thread anywhere, the same score with each account's queue as the share.

use crate::model::Kind;

/// How much one sample moves an average: about the last 20 tasks of a kind count.
const ALPHA: f64 = 0.1;
/// A success rate never reads below this, so a recovered account is still tried now and then.
const SUCCESS_FLOOR: f64 = 0.05;

#[derive(Debug, Clone, Copy, Default)]
struct Average {
    value: f64,
    samples: u32,
}

impl Average {
    fn add(&mut self, sample: f64) {
        self.value = if self.samples == 0 {
            sample
        } else {
            self.value + ALPHA * (sample - self.value)
        };
        self.samples = self.samples.saturating_add(1);
    }

    fn get(&self) -> Option<f64> {
        (self.samples > 0).then_some(self.value)
    }
}

/// What one account did lately, per kind.
#[derive(Debug, Clone, Default)]
pub struct Scoreboard {
    solve_ms: [Average; Kind::ALL.len()],
    success: [Average; Kind::ALL.len()],
}

fn slot(kind: Kind) -> usize {
    Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

impl Scoreboard {
    /// A task of `kind` was answered after `solve_ms`.
    pub fn solved(&mut self, kind: Kind, solve_ms: u64) {
        // Precision beyond 2^53 ms is irrelevant.
        #[allow(clippy::cast_precision_loss)]
        self.solve_ms[slot(kind)].add(solve_ms as f64);
        self.success[slot(kind)].add(1.0);
    }

    /// A task of `kind` failed for a reason that is the account's (not the caller's).
    pub fn failed(&mut self, kind: Kind) {
        self.success[slot(kind)].add(0.0);
    }

    /// Recent solve time (ms) of `kind`, once known.
    pub fn solve_ms(&self, kind: Kind) -> Option<f64> {
        self.solve_ms[slot(kind)].get()
    }

    /// Recent success rate of `kind` (1 until something is known).
    pub fn success(&self, kind: Kind) -> f64 {
        self.success[slot(kind)].get().unwrap_or(1.0)
    }
}

/// One account that may take the task now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub weight: u32,
    pub threads: u32,
    pub in_flight: u32,
    /// Recent solve time of the kind; `None` until the account has answered one.
    pub solve_ms: Option<f64>,
    pub success: f64,
    /// A half-open account whose trial is free.
    pub trial: bool,
}

/// The index of the candidate to use, `None` when there is none.
pub fn pick(candidates: &[Candidate]) -> Option<usize> {
    if let Some(i) = candidates.iter().position(|c| c.trial) {
        return Some(i);
    }
    // An account with no figure yet counts as typical (the mean of the known ones), or a little
    // better.
    let known: Vec<f64> = candidates.iter().filter_map(|c| c.solve_ms).collect();
    #[allow(clippy::cast_precision_loss)]
    let typical = if known.is_empty() {
        1.0
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    };
    let any_free = candidates.iter().any(|c| c.in_flight < c.threads);
    let score = |c: &Candidate| {
        let threads = f64::from(c.threads.max(1));
        let share = if any_free {
            f64::from(c.threads.saturating_sub(c.in_flight)) / threads
        } else {
            threads / (threads + f64::from(c.in_flight))
        };
        // Unknown reads slightly better than typical, so a new account gets tried and measured.
        let solve = c.solve_ms.unwrap_or(typical * 0.9).max(1.0);
        f64::from(c.weight) * c.success.max(SUCCESS_FLOOR) * share / solve
    };
    candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| !any_free || c.in_flight < c.threads)
        .max_by(|(_, a), (_, b)| score(a).total_cmp(&score(b)))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(weight: u32, in_flight: u32, solve_ms: Option<f64>, success: f64) -> Candidate {
        Candidate {
            weight,
            threads: 10,
            in_flight,
            solve_ms,
            success,
            trial: false,
        }
    }

    #[test]
    fn faster_and_more_reliable_accounts_win_other_things_equal() {
        let fast = account(1, 0, Some(2_000.0), 1.0);
        let slow = account(1, 0, Some(8_000.0), 1.0);
        assert_eq!(pick(&[slow, fast]), Some(1));
        let flaky = account(1, 0, Some(2_000.0), 0.2);
        assert_eq!(pick(&[flaky, slow]), Some(1));
        assert_eq!(pick(&[]), None);
    }

    #[test]
    fn weight_and_free_threads_share_the_load() {
        let a = account(1, 0, Some(5_000.0), 1.0);
        let b = account(3, 0, Some(5_000.0), 1.0);
        assert_eq!(pick(&[a, b]), Some(1), "weight 3 first");
        // Until it holds enough that a's free share outweighs b's weight.
        let b_busy = account(3, 8, Some(5_000.0), 1.0);
        assert_eq!(pick(&[a, b_busy]), Some(0));
        let b_full = account(100, 10, Some(5_000.0), 1.0);
        let a_nearly = account(1, 9, Some(50_000.0), 0.1);
        assert_eq!(pick(&[b_full, a_nearly]), Some(1), "free threads first");
    }

    #[test]
    fn with_every_thread_taken_the_shortest_queue_relative_to_size_wins() {
        let a = account(1, 30, Some(5_000.0), 1.0);
        let b = account(1, 12, Some(5_000.0), 1.0);
        assert_eq!(pick(&[a, b]), Some(1));
    }

    #[test]
    fn a_trial_goes_first_and_new_accounts_count_as_typical() {
        let known = account(1, 0, Some(5_000.0), 1.0);
        let new = account(1, 0, None, 1.0);
        let trial = Candidate {
            trial: true,
            ..account(1, 0, None, 0.0)
        };
        assert_eq!(pick(&[known, new, trial]), Some(2));
        let busy_known = account(1, 5, Some(5_000.0), 1.0);
        assert_eq!(
            pick(&[busy_known, new]),
            Some(1),
            "the new one is not starved"
        );
    }

    #[test]
    fn averages_follow_recent_samples_and_stay_bounded() {
        let mut board = Scoreboard::default();
        assert_eq!(
            (board.solve_ms(Kind::Image), board.success(Kind::Image)),
            (None, 1.0)
        );
        board.solved(Kind::Image, 1_000);
        assert_eq!(board.solve_ms(Kind::Image), Some(1_000.0));
        for _ in 0..100 {
            board.solved(Kind::Image, 9_000);
            board.failed(Kind::Turnstile);
        }
        let drifted = board.solve_ms(Kind::Image).unwrap();
        assert!((8_990.0..=9_000.0).contains(&drifted), "{drifted}");
        assert!(board.success(Kind::Turnstile) < 0.01);
        assert_eq!(board.success(Kind::Image), 1.0, "kinds are apart");
    }
}
