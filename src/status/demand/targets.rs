//! Each bucket's busiest poolable targets and their callers: what the advice sizes pools from.
//! The engine counts them in a fixed table between samples (`engine::TargetCount`); a bucket
//! keeps the busiest [`OPEN`] while it fills, so a target that turns busy late in it can still
//! climb, and the busiest [`KEPT`] once it is closed. Counts are never above what arrived: a
//! target pushed out and back counts only its callers since.

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
}

/// Adds `from` to `into` by id and keeps the busiest `keep`.
pub(crate) fn merge(into: &mut Vec<TargetDemand>, from: &[TargetDemand], keep: usize) {
    for t in from {
        match into.iter_mut().find(|m| m.id == t.id) {
            Some(m) => m.callers += t.callers,
            None => into.push(t.clone()),
        }
    }
    trim(into, keep);
}

/// The busiest `keep`, busiest first (ties by id, so every instance cuts alike).
pub(crate) fn trim(targets: &mut Vec<TargetDemand>, keep: usize) {
    targets.sort_by(|a, b| b.callers.cmp(&a.callers).then_with(|| a.id.cmp(&b.id)));
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
        }
    }

    #[test]
    fn shares_add_by_target_and_only_the_busiest_stay() {
        let mut sum = vec![t("a", 5), t("b", 1)];
        merge(&mut sum, &[t("b", 7), t("c", 2)], 2);
        assert_eq!(sum, [t("b", 8), t("a", 5)]);
    }
}
