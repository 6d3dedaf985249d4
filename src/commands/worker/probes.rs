//! What a worker serves on `--listen`, in either mode (the stream, or seed 003's list):
//! `/livez`, `/readyz` (Redis answers and an account can take work), and `/metrics` (the mode's
//! own figures first, then the engine's usual ones), which asks for the operations key when one
//! is set, as a gateway's does (`http::OpsSettings`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::engine::Admission;
use crate::http::{AdmissionFigures, BearerKey, ConnSettings, Connections, OpsSettings};
use crate::redis_base::Conn;
use crate::setting::ConfigError;
use crate::telemetry::Metrics;
use crate::telemetry::metrics::CONTENT_TYPE;
use crate::upstream::Upstream;
use crate::wiring::{Solving, StartError};

/// How long a probe or scrape still running at shutdown may finish: each answers in milliseconds.
const PROBE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Binds `--listen`, or says which setting to change.
pub(crate) async fn bind(listen: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(listen).await.map_err(|e| {
        StartError::Config(ConfigError {
            setting: "--listen".into(),
            problem: format!("cannot listen on {listen}: {e}"),
            fix: "pick a free address, e.g. --listen 0.0.0.0:9090".into(),
        })
    })
}

#[derive(Clone)]
struct Probes {
    conn: Conn,
    upstream: Arc<Upstream>,
    metrics: Arc<Metrics>,
    ops: Arc<OpsSettings>,
}

/// Where and how a worker serves its probes: the bound `--listen`, the connection limits every
/// listener keeps, and the operations key `/metrics` asks for.
pub(crate) struct Listening<'a> {
    pub listener: TcpListener,
    pub connections: ConnSettings,
    pub ops: &'a OpsSettings,
}

/// Serves the probes until `stop`, on the gateway's listener so a slow or idle client is cut
/// and connections are capped as there; `register_own` adds the mode's own figures to the
/// engine's.
pub(crate) fn spawn(
    conn: Conn,
    solving: &Solving,
    concurrency: u32,
    register_own: impl FnOnce(&mut Metrics),
    listening: Listening<'_>,
    stop: CancellationToken,
) {
    let Listening {
        listener,
        connections,
        ops,
    } = listening;
    let mut metrics = Metrics::new();
    register_own(&mut metrics);
    let connections = Connections::new(connections);
    connections.register(metrics.registry());
    // The worker's `--concurrency` stands for the admission limit.
    let admission = AdmissionFigures(Admission::new(u64::from(concurrency)));
    metrics.registry().register_collector(Box::new(admission));
    solving.register_metrics(&mut metrics);
    let probes = Probes {
        conn,
        upstream: solving.upstream.clone(),
        metrics: Arc::new(metrics),
        ops: Arc::new(ops.clone()),
    };
    let router = Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(serve_metrics))
        .layer(crate::telemetry::request_id::RequestIdLayer)
        .with_state(probes);
    tokio::spawn(async move {
        let stopped = stop.cancelled_owned();
        let served =
            crate::http::serve(listener, router, None, stopped, PROBE_GRACE, connections).await;
        if let Err(e) = served {
            tracing::error!(error = %e, "worker HTTP server stopped");
        }
    });
}

async fn readyz(State(p): State<Probes>) -> (StatusCode, &'static str) {
    let mut conn = p.conn.clone();
    let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut conn).await;
    if pong.is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "redis unreachable");
    }
    if !p.upstream.usable() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no upstream account can take work",
        );
    }
    (StatusCode::OK, "ready")
}

async fn serve_metrics(State(p): State<Probes>, key: BearerKey) -> Response {
    if !p.ops.allows(key.as_deref()) {
        return crate::http::ops_refusal();
    }
    let text = p.metrics.render().await;
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response()
}
