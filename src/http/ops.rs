//! Operations endpoints: liveness, readiness, Prometheus metrics, and a small status page.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::AppState;
use crate::pools::GroupBy;
use crate::telemetry::metrics::CONTENT_TYPE;

pub async fn livez() -> &'static str {
    "ok"
}

/// Ready while at least one upstream account can take work; when every account is out of
/// rotation (bad keys, no money, providers down) the instance is unready so a load balancer
/// stops sending it callers. One account out is not a reason: the others take its tasks. An
/// unreachable store makes it unready only when the store is required (else it serves degraded).
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if !state.upstream.usable() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no upstream account can take work",
        );
    }
    if state.engine.store().degraded() && state.engine.settings().store_required {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "store unreachable and required",
        );
    }
    (StatusCode::OK, "ready")
}

pub async fn metrics(State(state): State<AppState>) -> Response {
    let text = state.exposition.render().await;
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response()
}

pub async fn index(State(state): State<AppState>) -> Html<String> {
    let figures = state.engine.store().figures().await.unwrap_or_default();
    let top = state.engine.settings().metrics_top_targets;
    let views = state.pools.top_views(figures, top, GroupBy::Label);
    let rows: String = views
        .iter()
        .map(|v| {
            let f = &v.figures;
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                html_escape(&f.label), f.pooled, f.in_flight, f.waiting, f.pool_hits, f.new_tasks, f.expired_unused
            )
        })
        .collect();
    Html(format!(
        "<!doctype html><meta charset=utf-8><title>captcha-gateway</title>\
         <h1>captcha-gateway</h1><p>{} active of {} &middot; upstream {} of {} threads in use</p>\
         <table><tr><th>target</th><th>pooled</th><th>in flight</th><th>waiting</th><th>pool hits</th><th>new tasks</th><th>expired unused</th></tr>{rows}</table>\
         <p><a href=/metrics>/metrics</a> &middot; <a href=/health>/health</a></p>",
        state.admission.active(),
        state.admission.max(),
        state.upstream.in_flight(),
        state.upstream.threads(),
    ))
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
