//! The threads each account needs, and what it costs: the same derivation as the fleet's
//! (`super`), over each account's own share of every bucket (`status::demand::AccountDemand`).
//! The accounts' recommendations add up to more than the fleet's, as separate plans each need
//! their own headroom for bursts.

use serde::{Deserialize, Serialize};

use super::prices::{Cost, Prices, cost};
use crate::model::Kind;
use crate::status::demand::Bucket;

/// An account configured here, as it is now.
#[derive(Debug, Clone, PartialEq)]
pub struct AccountNow {
    pub name: String,
    pub provider: String,
    /// Its effective cap now.
    pub cap: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AccountAdvice {
    pub name: String,
    pub provider: String,
    /// Its cap now (as the last bucket saw it, for an account only other instances have).
    pub cap: u64,
    pub observed_peak_in_use: u64,
    /// Its threads in use on average over its busiest bucket, and the callers waiting for one
    /// of them at once then.
    pub littles_law_at_peak: f64,
    pub waiting_at_peak: u64,
    pub recommended: u64,
    /// Solves it returned in the window.
    pub solves: u64,
    /// Per month under the configured prices; `None` when its provider has none.
    pub cost: Option<Cost>,
}

/// Each account with work in `buckets` or configured here: configured ones first, in their
/// order, then the others by name.
pub fn advise(
    buckets: &[&Bucket],
    span: f64,
    now: &[AccountNow],
    prices: &Prices,
    covered_s: f64,
) -> Vec<AccountAdvice> {
    let mut names: Vec<(String, String)> = now
        .iter()
        .map(|a| (a.name.clone(), a.provider.clone()))
        .collect();
    let mut others: Vec<(String, String)> = Vec::new();
    for a in buckets.iter().flat_map(|b| &b.accounts) {
        if !names.iter().chain(&others).any(|(n, _)| *n == a.name) {
            others.push((a.name.clone(), a.provider.clone()));
        }
    }
    others.sort();
    names.extend(others);
    names
        .into_iter()
        .map(|(name, provider)| {
            let (mut peak, mut waiting, mut demand, mut observed, mut last_cap) =
                (0.0_f64, 0, 0.0_f64, 0, 0);
            let mut solved: Vec<(Kind, u64)> = Vec::new();
            for a in buckets
                .iter()
                .flat_map(|b| b.accounts.iter().find(|a| a.name == name))
            {
                let in_use = a.thread_seconds / span;
                let wanted = in_use + a.waiting_peak as f64;
                if wanted > demand {
                    (demand, peak, waiting) = (wanted, in_use, a.waiting_peak);
                }
                observed = observed.max(a.in_use_peak);
                last_cap = a.cap;
                for (kind, n) in &a.solved {
                    match solved.iter_mut().find(|(k, _)| k == kind) {
                        Some((_, m)) => *m += n,
                        None => solved.push((*kind, *n)),
                    }
                }
            }
            solved.sort_by_key(|(k, _)| k.index());
            let cap = now
                .iter()
                .find(|a| a.name == name)
                .map_or(last_cap, |a| a.cap);
            let recommended = ((demand + 2.0 * demand.sqrt()).ceil() as u64).max(observed);
            AccountAdvice {
                cost: cost(prices, &provider, cap, recommended, &solved, covered_s),
                solves: solved.iter().map(|(_, n)| n).sum(),
                name,
                provider,
                cap,
                observed_peak_in_use: observed,
                littles_law_at_peak: peak,
                waiting_at_peak: waiting,
                recommended,
            }
        })
        .collect()
}
