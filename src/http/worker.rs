//! Seed 002's worker API, so its client-side least-connections balancer and NGINX configs work
//! unchanged: `POST /solve` and `GET /health` with `load_pct`.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::error::ApiError;
use super::{AppState, BearerKey, idempotency};
use crate::engine::{Handout, SolveError};
use crate::wire::inphp::{Params, parse_submit};

/// At or above this load `/health` says `overloaded` with a 503 (seed 002).
const OVERLOAD: f64 = 0.9;

fn error(status: StatusCode, code: &str) -> Response {
    let mut res = (status, Json(json!({"error": code}))).into_response();
    res.extensions_mut()
        .insert(super::outcome::ErrorCode(code.to_owned()));
    res
}

/// `{sitekey, pageurl, method, proxy, proxytype}` -> `{solution, captcha_id}` or `{error}`.
/// As in the seed, solving errors come with HTTP 200 and only capacity is a 503.
/// With an `Idempotency-Key` (docs/API.md "Idempotency keys"; the shipped NGINX config names
/// every `/solve`), a repeat on any instance joins the key's task, and a stopping instance answers
/// 503 `SHUTTING_DOWN` + `Retry-After` so the call may move.
pub async fn solve(
    State(state): State<AppState>,
    key: BearerKey,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // A bearer key wins over a `key` in the body, so a wrong one is refused before the body is
    // read; without one, the key may be in the body, which is then read (bounded).
    if key.as_deref().is_some() {
        if let Err(e) = state.auth.tenant(key.as_deref()) {
            return error(StatusCode::UNAUTHORIZED, e.code());
        }
    }
    let Ok(body) = super::input::read_limited(body, state.limits.max_body_bytes).await else {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            crate::wire::inphp::codes::TOO_BIG_CAPTCHA_FILESIZE,
        );
    };
    let mut params = Params::read(None, Some("application/json"), body.clone()).await;
    let tenant = match state.auth.tenant(key.as_deref().or(params.get(&["key"]))) {
        Ok(t) => t,
        Err(e) => return error(StatusCode::UNAUTHORIZED, e.code()),
    };
    if params.get(&["method"]).is_none() {
        params.set("method", "userrecaptcha");
    }
    let mut req = match parse_submit(&params) {
        Ok(r) => r,
        Err(v) => return error(StatusCode::OK, v.code),
    };
    let idem = match idempotency::read(&headers, &tenant.0, &body) {
        Ok(idem) => idem,
        Err(e) => return refused(&e),
    };
    // Slices of hyper's read buffer, like the body: not held while the solve waits.
    drop((body, headers));
    let deadline = Instant::now() + state.limits.default_solve_timeout;
    if let Some(idem) = idem {
        // Boxed, as in `native::solve`: the rarer path does not size every waiting caller's
        // future.
        return match Box::pin(state.solve_keyed(&tenant.0, &idem, req, deadline)).await {
            Ok(Err(SolveError::ShuttingDown)) => {
                let mut res = error(StatusCode::SERVICE_UNAVAILABLE, "SHUTTING_DOWN");
                res.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                res
            }
            Ok(result) => answer(result),
            Err(e) => refused(&e),
        };
    }
    if super::fleet_busy::refused(&state) {
        let mut res = error(StatusCode::TOO_MANY_REQUESTS, "FLEET_BUSY");
        res.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(super::fleet_busy::RETRY_AFTER_S),
        );
        return res;
    }
    let Some(_permit) = state.admission.admit().await else {
        let mut res = error(StatusCode::SERVICE_UNAVAILABLE, "WORKER_AT_CAPACITY");
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return res;
    };
    let _pass = match state.tenants.admit(&tenant.0, &mut req) {
        Ok(pass) => pass,
        Err(refusal) => return super::usage::worker_refusal(&refusal),
    };
    answer(state.solve_now(&tenant.0, req, deadline).await)
}

/// A solve's outcome in the seed's shape: errors come with HTTP 200.
fn answer(result: Result<Handout, SolveError>) -> Response {
    match result {
        Ok(h) => Json(json!({
            "solution": h.kind.spec().answer.token_parts(&h.answer.text).0,
            "captcha_id": h.answer.upstream.map(|u| u.task_id),
            "user_agent": h.answer.user_agent,
        }))
        .into_response(),
        Err(e) => error(StatusCode::OK, e.code()),
    }
}

/// A keyed call refused before any solve, in the seed's shape: its status, its code in capitals
/// (`overloaded` is the seed's `WORKER_AT_CAPACITY`), and its `Retry-After`.
fn refused(e: &ApiError) -> Response {
    let code = match e.code.as_str() {
        "overloaded" => "WORKER_AT_CAPACITY".to_owned(),
        other => other.to_ascii_uppercase(),
    };
    let mut res = error(e.status, &code);
    if let Some(secs) = e.retry_after {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    res
}

pub async fn health(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let load = state.admission.load();
    let overloaded = load >= OVERLOAD;
    // Degraded still serves (without the pool), so it is no reason to send callers elsewhere.
    let degraded = state.engine.store().degraded();
    let status = match (overloaded, degraded) {
        (true, _) => "overloaded",
        (false, true) => "degraded",
        (false, false) => "healthy",
    };
    let body = json!({
        "status": status,
        "active_tasks": state.admission.active(),
        "max_concurrent": state.admission.max(),
        // Slow start: solves beyond `limit_now` wait for the ramp rather than being refused.
        "warming_up": state.admission.warming_up_now(),
        "limit_now": state.admission.limit_now(),
        "load_pct": (load * 1000.0).round() / 10.0,
        // Per account: name, provider, state (closed/open/half-open/paused), threads, in flight.
        "accounts": state.upstream.status(),
    });
    let status = if overloaded {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (status, Json(body))
}
