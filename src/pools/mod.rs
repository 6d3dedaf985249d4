//! Warm pools (docs/ARCHITECTURE.md, "Pools"): configured targets kept stocked
//! with ready answers, answers imported from elsewhere, and the hit-rate and waste figures.
//!
//! Owns: the `[[pools]]` settings ([`PoolSpec`]), auto sizing from demand and solve time
//! ([`AutoSizer`]), the refiller loop that tops pools up with as many concurrent refills as they
//! lack ([`spawn_refiller`]), token import rules ([`import()`]) and the per-target report
//! ([`PoolView`]).
//! Does not own: where answers go or the once/fresh promises (the engine and its store: a
//! refill's answer goes to the oldest waiter or the pool like any other), nor thread priority
//! (the provider account lets refills use spare threads only).
//!
//! # Layout
//!
//! - [`Pools`] (here): the configured pools and their live sizing state, shared by the refiller
//!   and the HTTP API.
//! - `spec`: `[[pools]]` tables to [`PoolSpec`]s. `sizing`: [`AutoSizer`].
//! - `refiller`: the loop. `import`: [`import()`] of outside answers. `view`: [`PoolView`].
//! - `retire`: [`retire_idle`], forgetting idle targets; `top`: the bounded report.

mod import;
mod metrics;
mod refiller;
mod retire;
mod shape;
mod sizing;
mod spec;
mod top;
mod view;

pub use import::{ImportError, ImportOutcome, ImportToken, MAX_IMPORT, MAX_TOKEN_LEN, import};
pub use metrics::PoolFigures;
pub use refiller::{RefillSettings, spawn_refiller};
pub use retire::retire_idle;
pub use sizing::{AutoSizer, SizingSettings};
pub use spec::{MAX_POOL_SIZE, PoolSize, PoolSpec, PoolTable, specs};
pub use top::{GroupBy, OTHER, bound};
pub use view::PoolView;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::{Engine, RefillDone, TargetFigures};
use crate::model::{Millis, Target};

/// The configured pools of this process, plus what it has imported (for the waste figure).
pub struct Pools {
    pools: Vec<Arc<Pool>>,
    settings: RefillSettings,
    /// Per target id: answers imported through this instance.
    imported: Mutex<HashMap<String, u64>>,
    /// Digests of imported tokens still alive, so one token imported twice is refused
    /// (promise 1 for answers we did not solve ourselves). Per instance: see docs/API.md.
    seen: Mutex<HashMap<[u8; 16], Millis>>,
}

/// One configured pool and its live state.
pub(crate) struct Pool {
    pub spec: PoolSpec,
    pub target: Target,
    state: Mutex<PoolState>,
    /// Its answers expired unused so far, as the store counted them at the last resize.
    expired: AtomicU64,
}

struct PoolState {
    auto: Option<AutoSizer>,
    /// Refills that failed in a row: the provider is refusing them, so back off.
    failures: u32,
    paused_until: Option<Instant>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain counters behind these locks: a panic elsewhere leaves nothing worth refusing over.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pools {
    /// Pools for `specs`, their targets computed the way the engine computes a caller's.
    pub fn new(engine: &Engine, specs: Vec<PoolSpec>, settings: RefillSettings) -> Arc<Pools> {
        let min_remaining = engine.settings().min_remaining;
        let pools = specs
            .into_iter()
            .map(|spec| {
                let kind = spec.req.kind();
                let auto = match spec.size {
                    PoolSize::Fixed(_) => None,
                    PoolSize::Auto { min, max, predict } => {
                        let auto = AutoSizer::new(
                            min,
                            max,
                            kind.typical_ready(),
                            engine.lifetime(kind).saturating_sub(min_remaining),
                            settings.sizing,
                        );
                        Some(if predict { auto.predictive() } else { auto })
                    }
                };
                Arc::new(Pool {
                    target: engine.target(&spec.req),
                    spec,
                    state: Mutex::new(PoolState {
                        auto,
                        failures: 0,
                        paused_until: None,
                    }),
                    expired: AtomicU64::new(0),
                })
            })
            .collect();
        Arc::new(Pools {
            pools,
            settings,
            imported: Mutex::default(),
            seen: Mutex::default(),
        })
    }

    pub(crate) fn list(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    pub fn settings(&self) -> &RefillSettings {
        &self.settings
    }

    /// Feeds every auto pool the figures of its target at `at` (time since the refiller began),
    /// and notes every pool's expiries for the demand log.
    pub fn resize(&self, figures: &[TargetFigures], at: Duration) {
        for pool in &self.pools {
            // A target nobody has touched yet has no figures: zero demand so far.
            let f = figures.iter().find(|f| f.id == pool.target.id);
            let (arrivals, expired) = f.map_or((0, 0), |f| (arrivals(f), f.expired_unused));
            pool.expired.store(expired, Ordering::Relaxed);
            let mut state = lock(&pool.state);
            let Some(auto) = state.auto.as_mut() else {
                continue;
            };
            auto.tick_at(at, Some(crate::model::now_ms()), arrivals, expired);
        }
    }

    /// Each configured pool's answers expired unused so far, as last read (the demand log's
    /// waste per target; counted by the store, so fleet-wide with Redis).
    pub fn expiries(&self) -> Vec<(Target, u64)> {
        self.pools
            .iter()
            .map(|p| (p.target.clone(), p.expired.load(Ordering::Relaxed)))
            .collect()
    }

    /// The size `target_id`'s pool is kept at now, and its mode; `None` if it is not configured.
    pub fn target_size(&self, target_id: &str) -> Option<(u32, &'static str)> {
        let pool = self.pools.iter().find(|p| p.target.id == target_id)?;
        Some((pool.size(), pool.spec.size.mode()))
    }

    pub(crate) fn imported(&self, target_id: &str) -> u64 {
        lock(&self.imported).get(target_id).copied().unwrap_or(0)
    }

    pub(crate) fn count_imported(&self, target_id: &str, n: u64) {
        *lock(&self.imported)
            .entry(target_id.to_owned())
            .or_default() += n;
    }

    /// Forgets imported tokens that have expired by `now` (once per import request, so a big
    /// batch does not rescan the set per token).
    pub(crate) fn prune_imports(&self, now: Millis) {
        lock(&self.seen).retain(|_, until| *until > now);
    }

    /// Records `digest` as imported until `expires_at`; false if it already was.
    pub(crate) fn first_import(&self, digest: [u8; 16], expires_at: Millis) -> bool {
        match lock(&self.seen).entry(digest) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(expires_at);
                true
            }
        }
    }

    /// Undoes [`Pools::first_import`] for a token that could not be stored after all.
    pub(crate) fn forget_import(&self, digest: &[u8; 16]) {
        lock(&self.seen).remove(digest);
    }
}

impl Pool {
    /// The size the refiller keeps this pool at now.
    pub fn size(&self) -> u32 {
        match self.spec.size {
            PoolSize::Fixed(n) => n,
            PoolSize::Auto { .. } => lock(&self.state).auto.as_ref().map_or(0, AutoSizer::size),
        }
    }

    /// Refills that failed in a row.
    #[cfg(test)]
    pub fn failures(&self) -> u32 {
        lock(&self.state).failures
    }

    /// Whether refills are held back at `now` after failures.
    pub fn paused(&self, now: Instant) -> bool {
        lock(&self.state)
            .paused_until
            .is_some_and(|until| now < until)
    }

    /// A refill ended: its solve time feeds auto sizing; failures in a row back off (1 s,
    /// doubling, at most `max_backoff`), so a refusing provider is not hammered every tick.
    pub fn record(&self, done: RefillDone, now: Instant, max_backoff: Duration) {
        let mut state = lock(&self.state);
        if done.answered {
            state.failures = 0;
            state.paused_until = None;
            if let Some(auto) = state.auto.as_mut() {
                auto.observe_solve(done.took);
            }
        } else {
            state.failures = state.failures.saturating_add(1);
            let backoff = Duration::from_secs(1)
                .saturating_mul(1u32 << (state.failures - 1).min(16))
                .min(max_backoff);
            state.paused_until = Some(now + backoff);
        }
    }
}

/// Callers of a target so far: everyone served from the pool, by a running task or a new one;
/// refills are tasks nobody asked for, so they are not callers.
pub fn arrivals(f: &TargetFigures) -> u64 {
    (f.pool_hits + f.waits_served + f.new_tasks).saturating_sub(f.refills)
}

#[cfg(test)]
mod tests;
