//! The per-target report behind `GET /v1/pools` and the pool metrics: the store's figures, the
//! configured or auto size, and the two ratios operators watch (hit rate and waste rate).

use serde::Serialize;

use super::{Pools, arrivals};
use crate::engine::TargetFigures;
use crate::model::Kind;

/// One target's figures and, for a configured pool, its size.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PoolView {
    /// The store's counters (pooled answers are the fresh ones ready now).
    #[serde(flatten)]
    pub figures: TargetFigures,
    pub kind: Option<Kind>,
    /// Answers imported through this instance.
    pub imported: u64,
    /// Callers so far (`pool_hits + waits_served + new_tasks - refills`).
    pub arrivals: u64,
    /// `pool_hits / arrivals`; `None` before the first caller.
    pub hit_rate: Option<f64>,
    /// `expired_unused / answers produced`, where produced is finished upstream tasks plus
    /// imports; `None` before the first answer.
    pub waste_rate: Option<f64>,
    /// The size the refiller keeps a configured pool at now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_size: Option<u32>,
    /// `fixed` or `auto`, for configured pools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
    /// How many targets this row sums, when it sums several (the `other` row, or targets
    /// sharing a label in `/metrics`); see `top.rs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub targets: Option<u64>,
}

pub(super) fn ratio(part: u64, whole: u64) -> Option<f64> {
    // Clamped: figures read at slightly different moments (or shared by a fleet while imports
    // are counted per instance) may briefly put the part above the whole.
    (whole > 0).then(|| (part as f64 / whole as f64).min(1.0))
}

impl Pools {
    /// One view per target with figures, plus configured pools nobody has touched yet; by label.
    pub fn views(&self, figures: Vec<TargetFigures>) -> Vec<PoolView> {
        let mut out: Vec<PoolView> = figures.into_iter().map(|f| self.view(f)).collect();
        for pool in self.list() {
            if !out.iter().any(|v| v.figures.id == pool.target.id) {
                out.push(self.view(TargetFigures {
                    id: pool.target.id.clone(),
                    label: pool.target.label.clone(),
                    ..TargetFigures::default()
                }));
            }
        }
        out.sort_by(|a, b| {
            (&a.figures.label, &a.figures.id).cmp(&(&b.figures.label, &b.figures.id))
        });
        out
    }

    fn view(&self, f: TargetFigures) -> PoolView {
        let configured = self.target_size(&f.id);
        // Labels start with the kind (`recaptcha_v2:example.com`), see `Target::of`.
        let kind = f.label.split(':').next().and_then(|k| k.parse().ok());
        let imported = self.imported(&f.id);
        let arrivals = arrivals(&f);
        let produced = f.new_tasks.saturating_sub(f.in_flight) + imported;
        PoolView {
            hit_rate: ratio(f.pool_hits, arrivals),
            waste_rate: ratio(f.expired_unused, produced),
            target_size: configured.map(|(size, _)| size),
            mode: configured.map(|(_, mode)| mode),
            kind,
            imported,
            arrivals,
            figures: f,
            targets: None,
        }
    }
}
