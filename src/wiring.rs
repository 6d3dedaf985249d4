//! Wiring: builds the solving stack from [`Settings`] (accounts, store, engine, pools and their
//! background tasks), the same for `serve`, `worker` and `bench`. Each component knows only its
//! own settings; this is the one place that knows them all. The commands (`serve`, `worker`)
//! add their own front (HTTP, queue consumer) on top.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::{ConfigError, Settings};
use crate::engine::store::redis::RedisStore;
use crate::engine::{Engine, MemoryStore, Store};
use crate::pools::{self, Pools, RefillSettings};
use crate::provider::budget::RedisBudget;
use crate::provider::{self, BudgetSettings};
use crate::shutdown::Shutdown;
use crate::sim::{self, SimSettings, Simulator};
use crate::telemetry::Metrics;
use crate::upstream::Upstream;

mod accounts;

/// How often expired task records and pooled answers are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(ConfigError),
    #[error("the store could not be opened: {0}")]
    Store(String),
    #[error("the provider could not be reached at startup: {0}")]
    Provider(String),
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// The solving half of a gateway, as `serve` and `worker` both run it: accounts, store, engine,
/// pools and their background tasks.
pub struct Solving {
    pub engine: Engine,
    pub upstream: Arc<Upstream>,
    pub pools: Arc<Pools>,
    /// The in-process simulator, when `--provider sim`.
    pub simulator: Option<(Arc<Simulator>, SocketAddr)>,
    /// Plan threads over every account.
    pub threads: u32,
}

impl Solving {
    /// Registers what the solving parts own on `/metrics`: the engine's answers and delays, the
    /// store's availability, the upstream accounts, the per-target pool figures.
    pub fn register_metrics(&self, metrics: &mut Metrics) {
        Self::register_parts(&self.engine, &self.upstream, &self.pools, metrics);
    }

    pub fn register_parts(
        engine: &Engine,
        upstream: &Arc<Upstream>,
        pools: &Arc<Pools>,
        metrics: &mut Metrics,
    ) {
        engine.register_metrics(metrics.registry());
        upstream.register_metrics(metrics.registry());
        crate::pools::PoolFigures::register(engine.clone(), pools.clone(), metrics);
    }
}

/// Builds the engine exactly as `serve` runs it, with its coverer, pool refiller and sweeper
/// (all stopped by `shutdown`).
pub async fn build_solving(
    settings: &Settings,
    shutdown: &Shutdown,
) -> Result<Solving, StartError> {
    let accounts::Built {
        upstream,
        simulator,
        threads,
    } = accounts::build(settings, shutdown).await?;
    let store = open_store(settings, shutdown).await?;
    let engine = Engine::new(
        store,
        upstream.clone(),
        settings.engine.clone(),
        shutdown.tracker.clone(),
    )
    .cut_short_by(shutdown.cut.clone());
    if let Some(redis) = &settings.redis {
        spawn_coverer(engine.clone(), redis.lease / 3, shutdown);
    }
    let pools = Pools::new(&engine, settings.pools.clone(), RefillSettings::default());
    pools::spawn_refiller(engine.clone(), pools.clone(), shutdown);
    spawn_sweeper(engine.clone(), pools.clone(), shutdown);
    Ok(Solving {
        engine,
        upstream,
        pools,
        simulator,
        threads,
    })
}

async fn start_simulator(
    settings: SimSettings,
    shutdown: &Shutdown,
) -> Result<(Arc<Simulator>, SocketAddr), StartError> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let sim = Simulator::new(settings);
    let token = shutdown.token.clone();
    let serving = sim.clone();
    tokio::spawn(async move {
        if let Err(e) = sim::serve(serving, listener, token.cancelled_owned()).await {
            tracing::error!(error = %e, "simulator stopped");
        }
    });
    Ok((sim, addr))
}

/// The in-process simulator accepts any 32-character key; a fresh one per run.
fn sim_key() -> String {
    use rand::Rng;
    let bytes: [u8; 16] = rand::rng().random();
    hex::encode(bytes)
}

/// How often providers with `threadsinfo` are asked for their plan's threads.
const CALIBRATE_EVERY: Duration = Duration::from_secs(600);

/// One account's thread budget: in this process for the embedded store, fleet-wide on Redis
/// (docs/REDIS.md "Thread budget"). Call once per account.
pub async fn open_budget(
    settings: &Settings,
    account: &str,
    threads: u32,
    shutdown: &Shutdown,
) -> Result<provider::Budget, StartError> {
    let budget = BudgetSettings {
        refill_reserve: settings.refill_reserve,
        ..BudgetSettings::new(threads)
    };
    let Some(redis) = &settings.redis else {
        return Ok(provider::budget::in_process(budget));
    };
    // Its leases are renewed through the grace period, like the tasks that hold them.
    let fleet = RedisBudget::start(
        &redis.target,
        redis.lease,
        account,
        budget,
        shutdown.cut.clone(),
    )
    .await
    .map_err(|e| StartError::Store(e.to_string()))?;
    Ok(Arc::new(fleet))
}

/// The embedded store, or Redis when configured. With `--redis-required` Redis must answer now.
async fn open_store(
    settings: &Settings,
    shutdown: &Shutdown,
) -> Result<Arc<dyn Store>, StartError> {
    let Some(redis) = &settings.redis else {
        return Ok(Arc::new(
            MemoryStore::with_target_idle(settings.engine.target_idle)
                .with_min_remaining(settings.engine.min_remaining),
        ));
    };
    let mut redis = redis.clone();
    redis.lock_ttl = settings.engine.task_timeout + Duration::from_secs(30);
    redis.retention = settings.engine.result_retention;
    redis.target_idle = settings.engine.target_idle;
    redis.min_remaining = settings.engine.min_remaining;
    redis.pending_ttl = (settings.engine.task_timeout + settings.limits.compat_task_timeout) * 2;
    // Its renewals and inbox keep running through the grace period: tasks still solving keep
    // their claims, and callers still waiting are still told of mail.
    let store = RedisStore::connect(redis, shutdown.cut.clone())
        .await
        .map_err(|e| StartError::Store(e.to_string()))?;
    // Read when Redis answered now; otherwise each reading later logs what is wrong as an error.
    if let Some(p) = store.problems().into_iter().next() {
        return Err(StartError::Config(ConfigError {
            setting: p.setting.into(),
            problem: p.problem,
            fix: p.fix,
        }));
    }
    // Local claim batches go back when the instance stops taking work, so the rest of the
    // fleet's callers get them during this one's grace period.
    let store = Arc::new(store);
    let (handing, stop) = (store.clone(), shutdown.token.clone());
    shutdown.tracker.spawn(async move {
        stop.cancelled().await;
        handing.hand_back().await;
    });
    if !store.ping().await {
        if settings.engine.store_required {
            return Err(StartError::Store(
                "Redis does not answer and --redis-required is set".into(),
            ));
        }
        tracing::warn!(
            "Redis does not answer: starting degraded (solving without the pool); reconnecting in the background"
        );
    }
    Ok(store)
}

/// Re-covers demand whose tasks died with another instance, every third of a lease.
fn spawn_coverer(engine: Engine, every: Duration, shutdown: &Shutdown) {
    let token = shutdown.token.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            engine.cover_waiting().await;
        }
    });
}

fn spawn_sweeper(engine: Engine, pools: Arc<Pools>, shutdown: &Shutdown) {
    let token = shutdown.token.clone();
    // A short `target_idle_s` (a soak) is swept often enough to retire within about its value.
    let every = SWEEP_EVERY
        .min(engine.settings().target_idle / 2)
        .max(Duration::from_millis(100));
    tokio::spawn(async move {
        let retention = engine.settings().result_retention.as_millis() as u64;
        let pending_limit = (engine.settings().task_timeout * 4).as_millis() as u64;
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            match pools::retire_idle(&engine, &pools, crate::model::now_ms()).await {
                Ok(n) if n > 0 => tracing::debug!(retired = n, "retired idle targets"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "retiring idle targets failed"),
            }
            match engine
                .store()
                .sweep(crate::model::now_ms(), retention, pending_limit)
                .await
            {
                Ok(n) if n > 0 => tracing::debug!(removed = n, "swept old task records"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "sweep failed"),
            }
        }
    });
}
