//! Retiring idle targets: every distinct page a scraper visits becomes a
//! target, so per-target state must shrink again. The store forgets targets unused for
//! `target_idle` with nothing pooled, in flight or waiting ([`Housekeeping::retire`]); configured pools
//! are never retired; this instance's per-target import counts follow the store.
//!
//! [`Housekeeping::retire`]: crate::engine::Housekeeping::retire

use std::collections::HashSet;

use super::{Pools, lock};
use crate::engine::{Engine, StoreError};
use crate::model::Millis;

impl Pools {
    /// Target ids that are never retired: the configured pools'.
    pub fn configured_ids(&self) -> HashSet<String> {
        self.list().iter().map(|p| p.target.id.clone()).collect()
    }

    /// Forgets import counts of targets that are no longer live.
    pub(crate) fn keep_imported(&self, live: &HashSet<&str>) {
        lock(&self.imported).retain(|id, _| live.contains(id.as_str()));
    }

    fn has_imports(&self) -> bool {
        !lock(&self.imported).is_empty()
    }
}

/// One retirement pass at `now`: the store's idle targets, then this instance's state about
/// them. Returns how many targets the store retired.
pub async fn retire_idle(engine: &Engine, pools: &Pools, now: Millis) -> Result<usize, StoreError> {
    let retired = engine.store().retire(now, &pools.configured_ids()).await?;
    if retired > 0 && pools.has_imports() {
        let figures = engine.store().figures().await?;
        pools.keep_imported(&figures.iter().map(|f| f.id.as_str()).collect());
    }
    Ok(retired)
}
