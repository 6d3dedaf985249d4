//! The worker's own small HTTP server: `/livez`, `/readyz` (Redis answers and an account can
//! take work), `/metrics` (the queue's figures next to the engine's usual ones).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Worker;
use crate::http::Admission;
use crate::pools::GroupBy;
use crate::telemetry::Metrics;

#[derive(Clone)]
struct Ops {
    worker: Arc<Worker>,
    engine_metrics: Arc<Metrics>,
    admission: Arc<Admission>,
}

pub(super) fn spawn(worker: Arc<Worker>, listener: TcpListener, stop: CancellationToken) {
    let ops = Ops {
        admission: Admission::new(u64::from(worker.queue.settings().concurrency)),
        engine_metrics: Arc::new(Metrics::new()),
        worker,
    };
    let router = Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(ops);
    tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "worker HTTP server stopped");
        }
    });
}

async fn readyz(State(ops): State<Ops>) -> (StatusCode, &'static str) {
    let pong: redis::RedisResult<String> = redis::cmd("PING")
        .query_async(&mut ops.worker.queue.conn())
        .await;
    if pong.is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "redis unreachable");
    }
    if !ops.worker.upstream.usable() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no upstream account can take work",
        );
    }
    (StatusCode::OK, "ready")
}

async fn metrics(State(ops): State<Ops>) -> Response {
    let worker = &ops.worker;
    let lag = worker.queue.lag().await.ok().flatten();
    let mut text = worker.metrics.render(&worker.queue.settings().name, lag);
    let engine = &worker.engine;
    let figures = engine.store().figures().await.unwrap_or_default();
    let targets = worker.pools.top_views(
        figures,
        engine.settings().metrics_top_targets,
        GroupBy::Label,
    );
    text.push_str(
        &ops.engine_metrics
            .render(&ops.admission, &worker.upstream, &targets),
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
