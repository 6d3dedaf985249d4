//! Wiring: builds the parts from [`Settings`] and runs them until shutdown. The one place that
//! knows every component; each component only knows its own settings.

use crate::callback::Callbacks;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::{ConfigError, Settings};
use crate::engine::store::redis::{RedisBudget, RedisStore};
use crate::engine::{Engine, MemoryStore, Store};
use crate::http::{self, Admission, AppState, Auth};
use crate::pools::{self, Pools, RefillSettings};
use crate::provider::{self, BudgetSettings};
use crate::shutdown::Shutdown;
use crate::sim::{self, SimSettings, Simulator};
use crate::telemetry::Metrics;
use crate::tenants::Tenants;
use crate::upstream::Upstream;

mod accounts;

/// How long in-flight work may take to finish after a shutdown signal (`shutdown_grace_s`): long
/// enough for a pool hit or a nearly finished solve to reach its caller, short enough for an
/// orchestrator's stop timeout (Kubernetes waits 30 s before SIGKILL). What is still running
/// near its end is handed back (see `shutdown`), not failed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
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

/// A running gateway: where it listens, and its in-process simulator when `--provider sim`.
pub struct Gateway {
    pub addr: SocketAddr,
    /// The operations listener's address, with `--ops-listen`.
    pub ops_addr: Option<SocketAddr>,
    pub simulator: Option<(Arc<Simulator>, SocketAddr)>,
    pub shutdown: Shutdown,
    /// `https` with `--tls-cert`, else `http`.
    pub scheme: &'static str,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    grace: Duration,
}

impl Gateway {
    /// Binds, builds every part and starts serving; returns once the gateway accepts requests.
    pub async fn start(settings: Settings, shutdown: Shutdown) -> Result<Gateway, StartError> {
        let listener = TcpListener::bind(settings.listen).await.map_err(|e| {
            StartError::Config(ConfigError {
                setting: "--listen".into(),
                problem: format!("cannot listen on {}: {e}", settings.listen),
                fix: "pick a free address, e.g. --listen 127.0.0.1:8080".into(),
            })
        })?;
        let addr = listener.local_addr()?;
        let ops_listener = match settings.ops.listen {
            Some(ops) => Some(TcpListener::bind(ops).await.map_err(|e| {
                StartError::Config(ConfigError {
                    setting: "--ops-listen".into(),
                    problem: format!("cannot listen on {ops}: {e}"),
                    fix: "pick a free address, e.g. --ops-listen 0.0.0.0:9090".into(),
                })
            })?),
            None => None,
        };
        let ops_addr = ops_listener
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()?;

        let Solving {
            engine,
            upstream,
            pools,
            simulator,
            threads,
        } = build_solving(&settings, &shutdown).await?;
        let accounts = upstream.members().len();
        let admission = Admission::warming_up(settings.max_concurrent, settings.warmup);
        let requests = http::RequestMetrics::default();
        let tenants = Arc::new(Tenants::new(
            &settings.tenants,
            settings
                .gateway_keys
                .iter()
                .map(|k| http::key_tenant(&k.0).0),
        ));
        let intake = open_intake(&settings).await?;
        let mut metrics = Metrics::new();
        requests.register(metrics.registry());
        let registry = metrics.registry();
        registry.register_collector(Box::new(http::AdmissionFigures(admission.clone())));
        let connections = http::Connections::new(settings.connections);
        connections.register(registry);
        crate::tenants::metrics::register(tenants.clone(), registry);
        if let http::Intake::Queued(queue) = &intake {
            crate::queue::figures::QueueDepth::register((**queue).clone(), &mut metrics);
        }
        Solving::register_parts(&engine, &upstream, &pools, &mut metrics);

        let state = AppState {
            engine,
            auth: Arc::new(Auth::with_tenants(
                settings.gateway_keys.iter().map(|k| k.0.as_str()),
                &settings.tenants,
            )),
            admission,
            upstream,
            metrics: requests,
            exposition: Arc::new(metrics),
            status: crate::status::Status::new(
                settings.status_every,
                settings.redis.as_ref().map(|r| &r.target),
                crate::status::Role::Serve,
            )
            .await,
            limits: Arc::new(settings.limits.clone()),
            pools,
            tenants,
            intake,
            request_scoped: Arc::default(),
            callbacks: Callbacks::new(
                settings.callbacks.clone(),
                shutdown.token.clone(),
                shutdown.tracker.clone(),
            )
            .map_err(|e| StartError::Io(std::io::Error::other(e.to_string())))?,
            ops: Arc::new(settings.ops.clone()),
        };
        state
            .status
            .spawn_sampler(crate::status::Sources::of(&state), &shutdown);
        let ops = ops_listener.map(|listener| (listener, http::ops_router(state.clone())));
        let auth = state.auth.clone();
        let mut router = http::router(state);
        if let Some((sim, _)) = &simulator {
            // One port for the quick start: the simulator's /verify and /stats under /sim; its
            // controls need a gateway key when the gateway has keys.
            let guarded = sim::router(sim.clone())
                .layer(axum::middleware::from_fn_with_state(auth, http::sim_guard));
            router = router.nest("/sim", guarded);
        }
        let token = shutdown.token.clone();
        let tls = settings.tls.as_ref().map(http::TlsSettings::acceptor);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let grace = settings.shutdown_grace;
        if let Some((listener, ops_router)) = ops {
            // Plain HTTP: kubelet probes and Prometheus scrape it on the pod network. It stops
            // with the API port, after the same grace.
            let token = shutdown.token.clone();
            // Its own cap (not counted in the API port's figures), so a flood of API connections
            // never keeps probes and scrapes out, and the same timeouts.
            let ops_connections = http::Connections::new(settings.connections);
            tokio::spawn(async move {
                let stop = token.cancelled_owned();
                let served =
                    http::serve(listener, ops_router, None, stop, grace, ops_connections).await;
                if let Err(e) = served {
                    tracing::error!(error = %e, "operations listener stopped");
                }
            });
        }
        let server = tokio::spawn(async move {
            http::serve(
                listener,
                router,
                tls,
                token.cancelled_owned(),
                grace,
                connections,
            )
            .await
        });
        tracing::info!(%addr, ops_addr = ?ops_addr, accounts, threads, scheme, "gateway listening");
        Ok(Gateway {
            addr,
            ops_addr,
            simulator,
            shutdown,
            scheme,
            server,
            grace,
        })
    }

    /// Serves until the shutdown token fires (or the server fails), then gives open connections
    /// and in-flight work one grace period, counted from the signal, and returns.
    pub async fn wait(mut self) -> Result<(), StartError> {
        let failed_early = tokio::select! {
            served = &mut self.server => Some(served),
            () = self.shutdown.token.cancelled() => None,
        };
        self.shutdown.token.cancel();
        let deadline = tokio::time::Instant::now() + self.grace;
        // Requests still being served count as work: a caller still waiting may be answered
        // within the grace, and is told this instance is stopping at its cut. `http::serve`
        // itself stops waiting for connections after the same grace period.
        let served = match failed_early {
            Some(served) => {
                self.shutdown.drain_until(deadline, async {}).await;
                served
            }
            None => match self.shutdown.drain_until(deadline, &mut self.server).await {
                Some(served) => served,
                None => self.server.await,
            },
        };
        served
            .map_err(|e| std::io::Error::other(e.to_string()))?
            .map_err(StartError::Io)
    }
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

    fn register_parts(
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

/// `serve`: start, announce the address on stdout (scripts and tests read it), serve.
pub async fn run(settings: Settings, shutdown: Shutdown) -> Result<(), StartError> {
    let gateway = Gateway::start(settings, shutdown).await?;
    println!(
        "captcha-gateway listening on {}://{}",
        gateway.scheme, gateway.addr
    );
    if let Some(ops) = gateway.ops_addr {
        println!("operations listening on http://{ops}");
    }
    if let Some((_, sim_addr)) = &gateway.simulator {
        println!(
            "simulator listening on http://{sim_addr} (also under http://{}/sim)",
            gateway.addr
        );
    }
    gateway.wait().await
}

/// `simulate`: the simulator as its own server.
pub async fn run_simulator(
    settings: SimSettings,
    listen: SocketAddr,
    shutdown: Shutdown,
) -> Result<(), StartError> {
    let listener = TcpListener::bind(listen).await.map_err(|e| {
        StartError::Config(ConfigError {
            setting: "--listen".into(),
            problem: format!("cannot listen on {listen}: {e}"),
            fix: "pick a free address, e.g. --listen 127.0.0.1:8081".into(),
        })
    })?;
    println!("simulator listening on http://{}", listener.local_addr()?);
    let sim = Simulator::new(settings);
    sim::serve(sim, listener, shutdown.token.cancelled_owned()).await?;
    Ok(())
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
    let fleet = RedisBudget::start(redis, account, budget, shutdown.cut.clone())
        .await
        .map_err(|e| StartError::Store(e.to_string()))?;
    Ok(Arc::new(fleet))
}

/// With `--queue`, accepted tasks go to the queue's workers (docs/QUEUE.md "Front ends").
async fn open_intake(settings: &Settings) -> Result<http::Intake, StartError> {
    let (Some(name), Some(redis)) = (&settings.enqueue_to, &settings.redis) else {
        return Ok(http::Intake::InProcess);
    };
    let queue = crate::queue::Queue::open(
        &redis.target,
        crate::queue::QueueSettings {
            name: name.clone(),
            ..crate::queue::QueueSettings::default()
        },
    )
    .await
    .map_err(|e| StartError::Store(e.to_string()))?;
    tracing::info!(queue = %name, "accepted tasks go to the queue");
    Ok(http::Intake::Queued(Arc::new(queue)))
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
    Ok(Arc::new(store))
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
