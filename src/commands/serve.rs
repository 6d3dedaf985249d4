//! `serve` and `simulate`: the solving stack (`wiring`) behind the HTTP APIs, run until
//! shutdown; or the simulator as its own server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::callback::Callbacks;
use crate::config::{ConfigError, Settings};
use crate::engine::Admission;
use crate::http::{self, AppState, Auth};
use crate::shutdown::Shutdown;
use crate::sim::{self, SimSettings, Simulator};
use crate::telemetry::Metrics;
use crate::tenants::Tenants;
pub use crate::wiring::StartError;
use crate::wiring::{Solving, build_solving};

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
        let listener = http::bind(settings.listen).map_err(|e| {
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

        let state = AppState::new(http::AppShared {
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
                Some(settings.demand_bucket),
                settings.redis.as_ref().map(|r| &r.target),
                crate::status::Role::Serve,
                settings.prices.clone(),
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
        });
        state
            .status
            .spawn_sampler(state.status_sources(), &shutdown);
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
