//! The live status behind the dashboard at `/`, `GET /v1/status` and `captcha-gateway status`
//! (docs/API.md "Status"). Figures come from their owners (the store's per-target counters
//! through `Pools`, the upstream accounts, admission, the queue, and the engine's handouts in
//! [`EngineFigures`](crate::engine::EngineFigures), which `/metrics` reads too); a sampler keeps
//! a bounded ring of readings so a page opened now shows the last minutes. With Redis, each
//! instance publishes its own figures under a key that expires (`fleet.rs`) and the report adds
//! up every live instance. A coarser, longer log of the same readings (`demand`) is what the
//! plan advisor (`advice`, `GET /v1/advice`) reads.

pub mod advice;
mod build;
pub mod demand;
mod fleet;
mod instance;
pub mod page;
pub mod report;
mod ring;

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use report::StatusReport;

use crate::engine::{Admission, Engine};
use crate::pools::Pools;
use crate::queue::Queue;
use crate::redis_base::RedisTarget;
use crate::shutdown::Shutdown;
use crate::upstream::Upstream;
use demand::DemandLog;
use instance::InstanceFigures;
use ring::Ring;

/// How often the sampler reads figures and publishes them (`Settings::status_every`).
pub const DEFAULT_EVERY: Duration = Duration::from_secs(5);
/// History kept: 15 minutes at the default interval.
pub(crate) const HISTORY: usize = 180;
/// Percentiles and per-class error rates cover this much of the history.
const WINDOW: Duration = Duration::from_secs(300);
/// Bounds on what a report lists, whatever the fleet publishes.
pub(crate) const MAX_ACCOUNTS: usize = 64;
pub(crate) const MAX_ERROR_CLASSES: usize = 64;

/// What a process is in the fleet, as the report counts it (`fleet.roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `serve`: the HTTP APIs (a front end with `--queue`).
    Serve,
    /// `worker`, on the stream or in seed mode: solves what the queue holds, serves no API,
    /// `concurrency` entries at a time.
    Worker { concurrency: u64 },
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Serve => "serve",
            Role::Worker { .. } => "worker",
        }
    }
}

/// The parts a process's own figures are read from. A worker has no admission (it takes
/// `--concurrency` entries at a time instead), so its admission figures are zero; only a front
/// end with `--queue` reports the queue.
#[derive(Clone)]
pub struct Sources {
    pub engine: Engine,
    pub upstream: Arc<Upstream>,
    pub admission: Option<Arc<Admission>>,
    pub pools: Option<Arc<Pools>>,
    pub queue: Option<Arc<Queue>>,
    pub tenants: Option<Arc<crate::tenants::Tenants>>,
}

/// One per process: the history ring and the fleet's last published figures. The handouts
/// themselves are counted by the engine's [`EngineFigures`](crate::engine::EngineFigures).
pub struct Status {
    every: Duration,
    ring: Mutex<Ring>,
    /// Demand over days for the advisor; `None` for no log.
    demand: Option<Mutex<DemandLog>>,
    /// Other instances' figures as last read from Redis (empty with the embedded store).
    others: Mutex<Vec<InstanceFigures>>,
    fleet: Option<fleet::Fleet>,
    /// `redis` or `memory`, as the report names the store.
    store: &'static str,
    role: Role,
    /// `[prices]`: what the advice prices the plan at.
    prices: advice::prices::Prices,
    /// One advice computed at a time: a replay of days of demand takes a core for a second,
    /// and requests for it queue here rather than take every blocking thread.
    advising: Arc<tokio::sync::Semaphore>,
}

impl Status {
    /// `redis`: where to publish and read the fleet's figures; `None` for the embedded store.
    /// `demand_bucket`: the demand log's bucket, `None` for no log.
    pub async fn new(
        every: Duration,
        demand_bucket: Option<Duration>,
        redis: Option<&RedisTarget>,
        role: Role,
        prices: advice::prices::Prices,
    ) -> Arc<Status> {
        let every = every.max(Duration::from_millis(100));
        let fleet = match redis {
            Some(target) => fleet::Fleet::open(target, every).await,
            None => None,
        };
        Arc::new(Status {
            every,
            ring: Mutex::new(Ring::new(HISTORY, crate::model::now_ms())),
            demand: demand_bucket
                .map(|bucket| Mutex::new(DemandLog::new(bucket, demand::DEFAULT_KEEP))),
            others: Mutex::new(Vec::new()),
            fleet,
            store: if redis.is_some() { "redis" } else { "memory" },
            role,
            prices,
            advising: Arc::new(tokio::sync::Semaphore::new(1)),
        })
    }

    /// Reads figures every interval (on wall-clock multiples of it, so instances' history
    /// points line up), publishes this instance's and reads the fleet's, until shutdown.
    pub fn spawn_sampler(self: &Arc<Self>, sources: Sources, shutdown: &Shutdown) {
        let status = self.clone();
        let token = shutdown.token.clone();
        tokio::spawn(async move {
            loop {
                let every = status.every.as_millis().max(1) as u64;
                let now = crate::model::now_ms();
                let wait = every - now % every;
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                }
                status.sample(&sources).await;
            }
        });
    }

    async fn sample(&self, sources: &Sources) {
        let sample = build::sample(sources);
        if let Some(log) = &self.demand {
            let totals = build::demand_totals(sources, &sample);
            let (share, keep) = {
                let mut log = lock(log);
                log.record(sample.t_ms, totals);
                (log.open_bucket(sample.t_ms).cloned(), log.keep())
            };
            if let (Some(fleet), Some(share)) = (&self.fleet, share) {
                let instance = sources.engine.store().instance();
                if let Err(e) = fleet.publish_demand(instance, &share, keep).await {
                    tracing::debug!(error = %e, "status: demand share not written; the next sample writes it");
                }
            }
        }
        lock(&self.ring).push(sample);
        if let Some(fleet) = &self.fleet {
            let mine = self.local_figures(sources);
            let others = fleet.exchange(&mine).await;
            *lock(&self.others) = others;
        }
    }

    fn local_figures(&self, sources: &Sources) -> InstanceFigures {
        let now = build::live_counts(sources);
        build::instance_figures(sources, self.role, &now, &lock(&self.ring), WINDOW)
    }

    /// The report as of now: live gauges and totals, the ring's history, the fleet's sums.
    pub async fn report(&self, sources: &Sources) -> StatusReport {
        let store_totals = build::store_rows(sources).await;
        let mine = self.local_figures(sources);
        let others = lock(&self.others).clone();
        let ring = lock(&self.ring).clone();
        build::report(build::Inputs {
            sources,
            every: self.every,
            ring: &ring,
            rows: store_totals,
            mine,
            others,
            store: self.store,
        })
        .await
    }
}

impl Status {
    /// The plan advice over the last `window` of the demand log (`None` without a log):
    /// fleet-wide from Redis, or this process's own log without Redis or while it is away.
    /// `cap_now` and `accounts`: the plan as it is now, from the accounts configured here.
    pub async fn advice(
        &self,
        window: Duration,
        cap_now: u64,
        accounts: Vec<advice::AccountNow>,
        pools: advice::PoolPlan,
        wait_target: Option<Duration>,
        limits: advice::replay::Limits,
    ) -> Option<advice::Advice> {
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let now = crate::model::now_ms();
        let (local, bucket, starts) = {
            let log = lock(self.demand.as_ref()?);
            let starts = log.starts(now.saturating_sub(window_ms), now);
            let first = starts.first().copied().unwrap_or(now);
            let local: Vec<demand::Bucket> = log.since(first).cloned().collect();
            (local, log.bucket(), starts)
        };
        let (buckets, scope) = match &self.fleet {
            Some(fleet) => match fleet.read_demand(&starts).await {
                Ok(buckets) => (buckets, advice::Scope::Fleet),
                Err(e) => {
                    tracing::warn!(error = %e, "status: the fleet's demand is unavailable; advising from this instance's");
                    (local, advice::Scope::Instance)
                }
            },
            None => (local, advice::Scope::Instance),
        };
        let plan = advice::Plan {
            bucket,
            window,
            scope,
            now_ms: now,
            cap: cap_now,
            accounts,
            prices: self.prices.clone(),
            pools,
            wait_target,
            limits: advice::replay::Limits {
                // `max_thread_waiters` is each instance's: the fleet's callers may wait in
                // every instance that serves them.
                max_waiting: limits
                    .max_waiting
                    .map(|m| m * (1 + lock(&self.others).len() as u64)),
                ..limits
            },
        };
        // The replay of a day's demand takes a while on a busy fleet: off the async workers.
        // The turn goes with the computation: a caller who hangs up does not free it early.
        let turn = self.advising.clone().acquire_owned().await.ok()?;
        let advised = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            advice::advise(&buckets, &plan)
        })
        .await;
        let mut advice = match advised {
            Ok(advice) => advice,
            Err(e) => {
                tracing::error!(error = %e, "status: the advice could not be computed");
                return None;
            }
        };
        let workers: Vec<u64> = lock(&self.others)
            .iter()
            .filter(|i| i.role == "worker")
            .map(|i| i.concurrency.unwrap_or(0))
            .collect();
        advice.queue_workers = advice::queue_workers(&workers, advice.threads.recommended);
        Some(advice)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A worker's share of the status: it samples its engine like `serve` does and publishes its
/// figures to the fleet's keys (with Redis, which a worker always has), so the front ends'
/// reports count its answers, threads, latencies and errors, and its share of the demand log,
/// so their advice counts the solves it made. It stops publishing at shutdown; its key then
/// expires within a few intervals (its demand shares stay as long as the log keeps buckets).
pub async fn publish_worker(
    engine: Engine,
    upstream: Arc<Upstream>,
    every: Duration,
    demand_bucket: Duration,
    concurrency: u64,
    redis: &RedisTarget,
    shutdown: &Shutdown,
) {
    // A worker serves no advice: its prices are never read.
    let status = Status::new(
        every,
        Some(demand_bucket),
        Some(redis),
        Role::Worker { concurrency },
        advice::prices::Prices::default(),
    )
    .await;
    let sources = Sources {
        engine,
        upstream,
        admission: None,
        pools: None,
        queue: None,
        tenants: None,
    };
    status.spawn_sampler(sources, shutdown);
}
