//! What a worker serves on `--listen`, in either mode (the stream, or seed 003's list):
//! `/livez`, `/readyz` (Redis answers and an account can take work), and `/metrics` (the mode's
//! own figures first, then the engine's usual ones).

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::ConfigError;
use crate::engine::Engine;
use crate::engine::store::redis::Conn;
use crate::http::Admission;
use crate::pools::{GroupBy, Pools};
use crate::serve::{Solving, StartError};
use crate::telemetry::Metrics;
use crate::telemetry::metrics::StoreUp;
use crate::upstream::Upstream;

/// A worker mode's own figures, as Prometheus text.
#[async_trait]
pub(crate) trait OwnFigures: Send + Sync + 'static {
    async fn render(&self) -> String;
}

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
    engine: Engine,
    upstream: Arc<Upstream>,
    pools: Arc<Pools>,
    own: Arc<dyn OwnFigures>,
    engine_metrics: Arc<Metrics>,
    /// Stands for the worker's `--concurrency` in the engine's admission figures.
    admission: Arc<Admission>,
}

/// Serves the probes until `stop`.
pub(crate) fn spawn(
    conn: Conn,
    solving: &Solving,
    concurrency: u32,
    own: Arc<dyn OwnFigures>,
    listener: TcpListener,
    stop: CancellationToken,
) {
    let probes = Probes {
        conn,
        engine: solving.engine.clone(),
        upstream: solving.upstream.clone(),
        pools: solving.pools.clone(),
        own,
        engine_metrics: Arc::new(Metrics::new()),
        admission: Admission::new(u64::from(concurrency)),
    };
    let router = Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(probes);
    tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
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

async fn metrics(State(p): State<Probes>) -> Response {
    let mut text = p.own.render().await;
    let engine = &p.engine;
    let figures = engine.store().figures().await.unwrap_or_default();
    let targets = p.pools.top_views(
        figures,
        engine.settings().metrics_top_targets,
        GroupBy::Label,
    );
    let store = StoreUp {
        store: engine.store().backend(),
        up: !engine.store().degraded(),
    };
    text.push_str(&p.engine_metrics.render(
        &p.admission,
        &p.upstream,
        &targets,
        store,
        engine.metrics(),
    ));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
