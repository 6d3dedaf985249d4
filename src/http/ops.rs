//! Operations endpoints: liveness, readiness, Prometheus metrics, the live status and its
//! dashboard. The last three show tenants, sites and threads, so they answer only what
//! `ops_access` lets through (the operations key, when one is set).

use std::time::Duration;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::{AppState, BearerKey, ops_access};
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

pub async fn metrics(State(state): State<AppState>, key: BearerKey) -> Response {
    if !state.ops.allows(key.as_deref()) {
        return ops_access::refusal();
    }
    let text = state.exposition.render().await;
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response()
}

/// The dashboard (`crate::status::page`): one page with its styles and script inline, drawing
/// `GET /v1/status`; the policy lets it load nothing else. Without script, a plain table of the
/// per-target figures (the rows `/metrics` shows) stands in.
///
/// Without the operations key (when one is set) the answer is 401 with the page and no figure
/// in it: a browser sends no header when it opens a page, so the page's script sends the key
/// with its own fetches (given once as `/#key=...` and kept in the tab's session storage; a
/// fragment never reaches the server or its logs).
pub async fn index(State(state): State<AppState>, key: BearerKey) -> Response {
    if !state.ops.allows(key.as_deref()) {
        let note = "<p>This gateway's figures need its operations key: open this page as \
                    <code>/#key=&lt;operations key&gt;</code>, with script on.</p>";
        let mut refused = page(crate::status::page::with_fallback(note));
        *refused.status_mut() = StatusCode::UNAUTHORIZED;
        let (name, value) = ops_access::challenge();
        refused
            .headers_mut()
            .insert(name, header::HeaderValue::from_static(value));
        return refused;
    }
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
    let fallback = format!(
        "<p>{} active of {} &middot; upstream {} of {} threads in use</p>\
         <table><tr><th>target</th><th>pooled</th><th>in flight</th><th>waiting</th><th>pool hits</th><th>new tasks</th><th>expired unused</th></tr>{rows}</table>",
        state.admission.active(),
        state.admission.max(),
        state.upstream.in_flight(),
        state.upstream.threads(),
    );
    page(crate::status::page::with_fallback(&fallback))
}

/// The dashboard's HTML with its headers.
fn page(html: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; \
                 connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'",
            ),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        html,
    )
        .into_response()
}

/// `GET /v1/status`: the live figures (docs/API.md "Status"), behind the operations key like
/// `/metrics` and `/`.
pub async fn status(State(state): State<AppState>, key: BearerKey) -> Response {
    if !state.ops.allows(key.as_deref()) {
        return ops_access::refusal();
    }
    let report = state.status.report(&state.status_sources()).await;
    ([(header::CACHE_CONTROL, "no-store")], Json(report)).into_response()
}

/// `GET /v1/advice?window_s=`: the plan advice over the last `window_s` seconds of the demand
/// log (a day when absent, at most the 14 days it keeps).
pub async fn advice(
    State(state): State<AppState>,
    key: BearerKey,
    RawQuery(query): RawQuery,
) -> Response {
    if !state.ops.allows(key.as_deref()) {
        return ops_access::refusal();
    }
    let window = match super::input::seconds_query(
        query.as_deref(),
        "window_s",
        crate::status::demand::DEFAULT_KEEP,
        Duration::from_secs(24 * 3600),
    ) {
        Ok(window) => window,
        Err(e) => return e.into_response(),
    };
    let hit_rate = match super::input::share_query(
        query.as_deref(),
        "hit_rate",
        crate::status::advice::pools::DEFAULT_HIT_RATE,
    ) {
        Ok(h) => h,
        Err(e) => return e.into_response(),
    };
    let wait_target = match super::input::optional_seconds_query(
        query.as_deref(),
        "wait_s",
        Duration::from_secs(600),
    ) {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let cap = state.upstream.effective_threads().into();
    let accounts = state
        .upstream
        .figures()
        .into_iter()
        .map(|a| crate::status::advice::AccountNow {
            name: a.name,
            provider: a.provider.to_owned(),
            cap: a.cap.into(),
        })
        .collect();
    let pools = pool_plan(&state, hit_rate);
    match state
        .status
        .advice(
            window,
            cap,
            accounts,
            pools,
            wait_target,
            crate::status::advice::replay::Limits {
                max_waiting: state.limits.max_thread_waiters.map(|m| m as u64),
                deadline_s: Some(state.limits.default_solve_timeout.as_secs_f64()),
            },
        )
        .await
    {
        Some(advice) => ([(header::CACHE_CONTROL, "no-store")], Json(advice)).into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "no_demand_log",
            "this process keeps no demand log",
        )
        .into_response(),
    }
}

/// The pools as configured here and each poolable kind's shelf life, for the advice. An `auto`
/// pool counts at its `max`: the most it keeps.
fn pool_plan(state: &AppState, hit_rate: f64) -> crate::status::advice::PoolPlan {
    use crate::model::{Kind, Reuse};
    use crate::pools::PoolSize;
    let min_remaining = state.engine.settings().min_remaining;
    let shelf_s = Kind::ALL
        .iter()
        .filter(|k| k.reuse() == (Reuse::SingleUse { poolable: true }))
        .map(|k| {
            let shelf = state.engine.lifetime(*k).saturating_sub(min_remaining);
            (*k, shelf.as_secs_f64())
        })
        .collect();
    let configured = state
        .pools
        .list()
        .iter()
        .map(|p| crate::status::advice::PoolNow {
            id: p.target.id.clone(),
            label: p.target.label.clone(),
            kind: p.target.kind,
            size: match p.spec.size {
                PoolSize::Fixed(n) => n,
                PoolSize::Auto { max, .. } => max,
            },
            mode: p.spec.size.mode(),
        })
        .collect();
    crate::status::advice::PoolPlan {
        hit_rate,
        shelf_s,
        configured,
        refill_look_s: state.pools.settings().check_every.as_secs_f64(),
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
