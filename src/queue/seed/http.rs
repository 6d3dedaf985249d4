//! The seed worker's probes and metrics on `--listen`, as the stream worker serves them:
//! `/livez`, `/readyz` (Redis answers and an account can take work), `/metrics` (this consumer's
//! counters next to the engine's usual figures).

use std::fmt::Write;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{SeedSettings, SeedStats};
use crate::engine::Engine;
use crate::engine::store::redis::{Conn, RedisTarget};
use crate::http::Admission;
use crate::pools::{GroupBy, Pools};
use crate::serve::Solving;
use crate::telemetry::Metrics;
use crate::upstream::Upstream;

#[derive(Clone)]
pub struct Probes {
    conn: Conn,
    prefix: String,
    engine: Engine,
    upstream: Arc<Upstream>,
    pools: Arc<Pools>,
    stats: Arc<SeedStats>,
    engine_metrics: Arc<Metrics>,
    admission: Arc<Admission>,
}

impl Probes {
    pub async fn new(
        target: &RedisTarget,
        settings: &SeedSettings,
        solving: &Solving,
        stats: Arc<SeedStats>,
    ) -> redis::RedisResult<Probes> {
        Ok(Probes {
            conn: Conn::open(target, target.response_timeout).await?,
            prefix: settings.prefix.clone(),
            engine: solving.engine.clone(),
            upstream: solving.upstream.clone(),
            pools: solving.pools.clone(),
            stats,
            engine_metrics: Arc::new(Metrics::new()),
            admission: Admission::new(settings.concurrency as u64),
        })
    }
}

pub fn spawn(probes: Probes, listener: TcpListener, stop: CancellationToken) {
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
    let mut text = p.stats.render(&p.prefix);
    let figures = p.engine.store().figures().await.unwrap_or_default();
    let targets = p.pools.top_views(
        figures,
        p.engine.settings().metrics_top_targets,
        GroupBy::Label,
    );
    text.push_str(&p.engine_metrics.render(&p.admission, &p.upstream, &targets));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

impl SeedStats {
    /// This consumer's counters as Prometheus text, labelled with the queue's key prefix.
    pub fn render(&self, prefix: &str) -> String {
        let rows = [
            (
                "taken_total",
                "Entries moved into this consumer's processing list.",
                &self.taken,
            ),
            (
                "solved_total",
                "Entries solved (success result written or found).",
                &self.solved,
            ),
            (
                "failed_total",
                "Solves that ended in an error result.",
                &self.failed,
            ),
            (
                "refused_total",
                "Entries with an id that could not be solved as sent (error result).",
                &self.refused,
            ),
            (
                "unreadable_total",
                "Entries without a usable id, dropped.",
                &self.unreadable,
            ),
            (
                "duplicates_total",
                "Entries whose task already had a result.",
                &self.duplicates,
            ),
            (
                "recovered_total",
                "Dead consumers' entries given back to the queue.",
                &self.recovered,
            ),
            (
                "taken_for_dead_total",
                "Times this consumer found it had been taken for dead.",
                &self.taken_for_dead,
            ),
            (
                "lost_total",
                "Entries finished after they were given back to the queue.",
                &self.lost,
            ),
            (
                "swept_total",
                "Results removed after the retention.",
                &self.swept,
            ),
            (
                "redis_errors_total",
                "Redis calls that failed (retried).",
                &self.redis_errors,
            ),
        ];
        let mut out = String::new();
        for (name, help, value) in rows {
            let _ = writeln!(
                out,
                "# HELP captcha_gateway_seed_queue_{name} {help}\n# TYPE captcha_gateway_seed_queue_{name} counter\ncaptcha_gateway_seed_queue_{name}{{queue=\"{prefix}\"}} {}",
                SeedStats::get(value)
            );
        }
        out
    }
}
