//! Each bucket's busiest poolable targets: their callers, those the pool served, and the
//! answers their pool let expire unused. What the advice sizes pools from, and shows beside
//! its sizes. The engine counts callers and hits in a fixed table between samples
//! (`engine::TargetCount`); expiries are the configured pools' store counters, read by the pool
//! refiller. A bucket keeps the busiest [`OPEN`] while it fills, so a target that turns busy
//! late in it can still climb, and the busiest [`KEPT`] once it is closed, by callers plus
//! expiries (a pool nobody takes from is what the advice should show). Counts are never above
//! what happened: a target pushed out and back counts only its callers since.

use serde::{Deserialize, Serialize};

use crate::model::Kind;

/// Targets a closed bucket keeps.
pub const KEPT: usize = 8;
/// Targets the open bucket (and an instance's share of it) keeps.
pub const OPEN: usize = 32;

/// One target's callers within one bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetDemand {
    /// The target's id, as `GET /v1/pools` lists it.
    pub id: String,
    /// `kind:host`, at most `engine::LABEL_MAX` bytes.
    pub label: String,
    pub kind: Kind,
    pub callers: u64,
    /// Of `callers`, those served from the pool (absent in an older instance's share).
    #[serde(default)]
    pub pool_hits: u64,
    /// Answers its pool let expire unused (fleet-wide with Redis: every instance reads the
    /// same counter, so shares take the larger).
    #[serde(default)]
    pub expired: u64,
}

/// A configured pool's answers expired unused so far, as its store counts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolExpiries {
    pub id: String,
    pub label: String,
    pub kind: Kind,
    pub expired: u64,
}

/// Adds to `targets` each pool's expiries between two readings (a counter that went back, its
/// target forgotten and begun again, counts from zero).
pub(crate) fn add_expiries(
    targets: &mut Vec<TargetDemand>,
    now: &[PoolExpiries],
    then: &[PoolExpiries],
) {
    for p in now {
        let before = then.iter().find(|t| t.id == p.id).map_or(0, |t| t.expired);
        let expired = p.expired.checked_sub(before).unwrap_or(p.expired);
        if expired == 0 {
            continue;
        }
        match targets.iter_mut().find(|t| t.id == p.id) {
            Some(t) => t.expired += expired,
            None => targets.push(TargetDemand {
                id: p.id.clone(),
                label: p.label.clone(),
                kind: p.kind,
                callers: 0,
                pool_hits: 0,
                expired,
            }),
        }
    }
}

/// Adds `from` to `into` by id and keeps the busiest `keep`. `shares`: `from` is another
/// instance's share, whose expiries are the same fleet-wide counter.
pub(crate) fn merge(
    into: &mut Vec<TargetDemand>,
    from: &[TargetDemand],
    keep: usize,
    shares: bool,
) {
    for t in from {
        match into.iter_mut().find(|m| m.id == t.id) {
            Some(m) => {
                m.callers += t.callers;
                m.pool_hits += t.pool_hits;
                m.expired = if shares {
                    m.expired.max(t.expired)
                } else {
                    m.expired + t.expired
                };
            }
            None => into.push(t.clone()),
        }
    }
    trim(into, keep);
}

/// The busiest `keep` by callers plus expiries, busiest first (ties by id, so every instance
/// cuts alike).
pub(crate) fn trim(targets: &mut Vec<TargetDemand>, keep: usize) {
    let weight = |t: &TargetDemand| t.callers.saturating_add(t.expired);
    targets.sort_by(|a, b| weight(b).cmp(&weight(a)).then_with(|| a.id.cmp(&b.id)));
    targets.truncate(keep);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: &str, callers: u64) -> TargetDemand {
        TargetDemand {
            id: id.into(),
            label: format!("turnstile:{id}.example"),
            kind: Kind::Turnstile,
            callers,
            pool_hits: 0,
            expired: 0,
        }
    }

    fn wasting(id: &str, callers: u64, pool_hits: u64, expired: u64) -> TargetDemand {
        TargetDemand {
            pool_hits,
            expired,
            ..t(id, callers)
        }
    }

    #[test]
    fn shares_add_by_target_and_only_the_busiest_stay() {
        let mut sum = vec![t("a", 5), t("b", 1)];
        merge(&mut sum, &[t("b", 7), t("c", 2)], 2, true);
        assert_eq!(sum, [t("b", 8), t("a", 5)]);
    }

    #[test]
    fn expiries_are_one_fleet_counter_across_shares_and_add_within_one() {
        let mut sum = vec![wasting("a", 5, 4, 10)];
        merge(&mut sum, &[wasting("a", 3, 1, 9)], 8, true);
        assert_eq!(sum, [wasting("a", 8, 5, 10)]);
        merge(&mut sum, &[wasting("a", 0, 0, 2)], 8, false);
        assert_eq!(sum, [wasting("a", 8, 5, 12)]);
        // A pool nobody takes from outranks a target with fewer callers than it wasted.
        let mut kept = vec![t("busy", 6), wasting("idle", 0, 0, 40), t("quiet", 1)];
        trim(&mut kept, 2);
        assert_eq!(kept[0].id, "idle");
    }

    #[test]
    fn a_readings_expiries_are_the_difference_and_a_counter_that_went_back_starts_at_zero() {
        let pool = |expired| PoolExpiries {
            id: "p".into(),
            label: "turnstile:p.example".into(),
            kind: Kind::Turnstile,
            expired,
        };
        let mut targets = vec![t("p", 3)];
        add_expiries(&mut targets, &[pool(12)], &[pool(5)]);
        assert_eq!(targets, [wasting("p", 3, 0, 7)]);
        let mut fresh = Vec::new();
        add_expiries(&mut fresh, &[pool(2)], &[pool(40)]);
        assert_eq!(fresh[0].expired, 2);
        add_expiries(&mut fresh, &[pool(40)], &[pool(40)]);
        assert_eq!(fresh.len(), 1, "no target added for nothing expired");
    }
}
