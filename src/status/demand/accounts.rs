//! Each provider account's share of a bucket's demand: the time its threads were held, what it
//! solved by kind (what a provider that bills per solve charges for), its threads in use at
//! their busiest and the callers that waited for one of them. The advisor sizes and prices each
//! account from these (`status::advice`).
//!
//! Bounded by the configuration: one entry per configured account (at most 64) that had work
//! in the bucket.

use serde::{Deserialize, Serialize};

use crate::model::Kind;

/// One account's cumulative counts since the process started, and its gauges now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AccountTotals {
    pub name: String,
    pub provider: String,
    pub thread_seconds: f64,
    pub solved: [u64; Kind::ALL.len()],
    /// Threads taken now (fleet-wide with Redis) and the account's cap now.
    pub in_use: u64,
    pub cap: u64,
    /// This process's callers waiting for one of its threads now.
    pub waiting: u64,
}

/// One account's demand within one bucket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountDemand {
    pub name: String,
    pub provider: String,
    /// Seconds its threads were held, summed.
    pub thread_seconds: f64,
    /// Solves that returned an answer, per kind with any.
    pub solved: Vec<(Kind, u64)>,
    /// The most of its threads in use at one sample (a fleet-wide figure with Redis).
    pub in_use_peak: u64,
    pub cap: u64,
    /// The most callers waiting for one of its threads at one sample; summed over instances.
    pub waiting_peak: u64,
}

impl AccountDemand {
    /// What happened between two readings of one account (`then` absent: from zero; a counter
    /// that went back counts from zero).
    pub(super) fn between(now: &AccountTotals, then: Option<&AccountTotals>) -> AccountDemand {
        let zero = AccountTotals::default();
        let then = then.unwrap_or(&zero);
        let thread_seconds = if now.thread_seconds >= then.thread_seconds {
            now.thread_seconds - then.thread_seconds
        } else {
            now.thread_seconds
        };
        let solved = Kind::ALL
            .iter()
            .map(|k| {
                let (a, b) = (now.solved[k.index()], then.solved[k.index()]);
                (*k, a.checked_sub(b).unwrap_or(a))
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        AccountDemand {
            name: now.name.clone(),
            provider: now.provider.clone(),
            thread_seconds,
            solved,
            in_use_peak: now.in_use,
            cap: now.cap,
            waiting_peak: now.waiting,
        }
    }

    pub(super) fn is_quiet(&self) -> bool {
        self.thread_seconds == 0.0
            && self.solved.is_empty()
            && self.in_use_peak == 0
            && self.waiting_peak == 0
    }

    /// Solves of every kind.
    pub fn solves(&self) -> u64 {
        self.solved.iter().map(|(_, n)| n).sum()
    }

    /// Adds `other` (the same account): counts add, threads in use are one fleet-wide reading
    /// (the larger), and waiting callers add across instances' shares (`shares`) but within one
    /// instance's samples take the larger.
    fn add(&mut self, other: &AccountDemand, shares: bool) {
        self.thread_seconds += other.thread_seconds;
        for (kind, n) in &other.solved {
            match self.solved.iter_mut().find(|(k, _)| k == kind) {
                Some((_, m)) => *m += n,
                None => self.solved.push((*kind, *n)),
            }
        }
        self.in_use_peak = self.in_use_peak.max(other.in_use_peak);
        self.cap = self.cap.max(other.cap);
        self.waiting_peak = if shares {
            self.waiting_peak + other.waiting_peak
        } else {
            self.waiting_peak.max(other.waiting_peak)
        };
    }
}

/// Adds each of `other` to its account in `list` (by name), or appends it.
pub(super) fn merge(list: &mut Vec<AccountDemand>, other: &[AccountDemand], shares: bool) {
    for o in other {
        match list.iter_mut().find(|a| a.name == o.name) {
            Some(a) => a.add(o, shares),
            None => list.push(o.clone()),
        }
    }
}

/// Every account's demand between two readings, quiet ones left out.
pub(super) fn between(now: &[AccountTotals], then: &[AccountTotals]) -> Vec<AccountDemand> {
    now.iter()
        .map(|n| AccountDemand::between(n, then.iter().find(|t| t.name == n.name)))
        .filter(|d| !d.is_quiet())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(name: &str, seconds: f64, solved: u64, in_use: u64, waiting: u64) -> AccountTotals {
        let mut t = AccountTotals {
            name: name.into(),
            provider: "captchaai".into(),
            thread_seconds: seconds,
            in_use,
            cap: 10,
            waiting,
            ..AccountTotals::default()
        };
        t.solved[Kind::Turnstile.index()] = solved;
        t
    }

    #[test]
    fn samples_of_one_instance_keep_peaks_and_shares_of_a_fleet_add_waiting() {
        let then = [totals("a", 10.0, 5, 0, 0)];
        let first = between(
            &[totals("a", 16.0, 8, 4, 2), totals("b", 0.0, 0, 0, 0)],
            &then,
        );
        assert_eq!(first.len(), 1, "a quiet account is not kept: {first:?}");
        assert_eq!(first[0].solved, [(Kind::Turnstile, 3)]);
        let second = between(&[totals("a", 20.0, 9, 6, 1)], &[totals("a", 16.0, 8, 4, 2)]);
        let mut bucket = first.clone();
        merge(&mut bucket, &second, false);
        let a = &bucket[0];
        assert!((a.thread_seconds - 10.0).abs() < 1e-9);
        assert_eq!((a.solves(), a.in_use_peak, a.waiting_peak), (4, 6, 2));
        let mut fleet = bucket.clone();
        merge(&mut fleet, &bucket, true);
        assert_eq!((fleet[0].solves(), fleet[0].in_use_peak), (8, 6));
        assert_eq!(
            fleet[0].waiting_peak, 4,
            "each instance's waiting callers add"
        );
    }

    #[test]
    fn an_account_first_seen_or_restarted_counts_from_zero() {
        let d = between(&[totals("new", 3.0, 2, 1, 0)], &[]);
        assert_eq!(d[0].solves(), 2);
        let d = between(&[totals("a", 1.0, 1, 0, 0)], &[totals("a", 50.0, 40, 0, 0)]);
        assert!((d[0].thread_seconds - 1.0).abs() < 1e-9);
        assert_eq!(d[0].solves(), 1);
    }
}
