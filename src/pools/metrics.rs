//! Per-target pool figures on `/metrics` (docs/API.md "Metrics"): read from the store before
//! each scrape, bounded like `/` and `GET /v1/pools` (the busiest `metrics_top_targets` labels and
//! configured pools, the rest summed under `other`), grouped by label so every series is unique.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use super::{GroupBy, PoolView, Pools};
use crate::engine::Engine;
use crate::telemetry::Metrics;
use crate::telemetry::collect::{Label, counters, gauge, gauges};
use crate::telemetry::metrics::Refresh;

/// The views of the last refresh.
pub struct PoolFigures {
    engine: Engine,
    pools: Arc<Pools>,
    views: Mutex<Vec<PoolView>>,
}

impl std::fmt::Debug for PoolFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolFigures").finish_non_exhaustive()
    }
}

impl PoolFigures {
    /// Registers the per-target families, refreshed before every scrape.
    pub fn register(engine: Engine, pools: Arc<Pools>, metrics: &mut Metrics) {
        let figures = Arc::new(PoolFigures {
            engine,
            pools,
            views: Mutex::new(Vec::new()),
        });
        metrics.refresh_before_scrape(figures.clone());
        let registry: &mut Registry = metrics.registry();
        registry.register_collector(Box::new(figures));
    }
}

#[async_trait]
impl Refresh for PoolFigures {
    async fn refresh(&self) {
        let figures = self.engine.store().figures().await.unwrap_or_default();
        let top = self.engine.settings().metrics_top_targets;
        let views = self.pools.top_views(figures, top, GroupBy::Label);
        *self.views.lock().unwrap_or_else(PoisonError::into_inner) = views;
    }
}

/// Reads one figure of a row.
type Pick = fn(&PoolView) -> u64;

fn label(v: &PoolView) -> [Label; 1] {
    [("target", v.figures.label.clone())]
}

impl Collector for PoolFigures {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        let e = &mut encoder;
        gauge(
            e,
            "targets",
            "Targets with live state (configured pools included); idle ones are retired",
            views.iter().map(|v| v.targets.unwrap_or(1)).sum(),
        )?;
        let per_target =
            |pick: fn(&PoolView) -> u64| views.iter().map(move |v| (label(v), pick(v)));
        gauges(
            e,
            "pool_ready",
            "Ready answers pooled per target",
            per_target(|v| v.figures.pooled),
        )?;
        gauges(
            e,
            "pool_target",
            "Size a configured pool is kept at (fixed, or auto from demand)",
            views
                .iter()
                .filter_map(|v| Some((label(v), u64::from(v.target_size?)))),
        )?;
        gauges(
            e,
            "target_in_flight",
            "Upstream tasks in flight per target",
            per_target(|v| v.figures.in_flight),
        )?;
        gauges(
            e,
            "target_waiting",
            "Callers waiting per target",
            per_target(|v| v.figures.waiting),
        )?;
        let counted: [(&str, &str, Pick); 7] = [
            ("pool_hits", "Callers served from the pool", |v| {
                v.figures.pool_hits
            }),
            (
                "waits_served",
                "Callers served by an already running task",
                |v| v.figures.waits_served,
            ),
            (
                "new_tasks",
                "Upstream tasks started (for callers, or refills)",
                |v| v.figures.new_tasks,
            ),
            (
                "refills",
                "Upstream tasks started to fill a pool (part of new tasks)",
                |v| v.figures.refills,
            ),
            (
                "target_arrivals",
                "Callers per target (pool hits + waits served + new tasks - refills)",
                |v| v.arrivals,
            ),
            (
                "imported",
                "Answers imported into pools through this instance",
                |v| v.imported,
            ),
            (
                "pool_expired_unused",
                "Answers that expired before anyone took them (waste)",
                |v| v.figures.expired_unused,
            ),
        ];
        for (name, help, pick) in counted {
            counters(e, name, help, per_target(pick))?;
        }
        Ok(())
    }
}
