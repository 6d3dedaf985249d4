//! Tenants at the HTTP edge: `GET /v1/usage` (the caller's own figures) and each protocol's
//! answer to a tenant limit.
//!
//! Compatible API (HTTP 200, docs/PROTOCOL.md items 4 and 12; the code is what clients act on,
//! so it is chosen for what they do with it):
//! - `max_concurrent` -> `ERROR_NO_SLOT_AVAILABLE`: the code the gateway already sends at its own
//!   capacity, and 2captcha's meaning ("the rate you set is lower than your current rate").
//!   Clients raise it at once (unicaps `ServiceTooBusy`), none retries in a tight loop.
//! - `max_solves_per_hour` -> `ERROR_ZERO_BALANCE`: "budget spent": 2captcha-flavoured clients
//!   stop and report low balance, which is what an exhausted hourly budget is; 2captcha asks
//!   clients to wait 60 s after it.
//! - a kind the tenant may not use -> `ERROR_BAD_PARAMETERS`, which every client raises as a
//!   caller mistake.
//!
//! With `json=1` the reply adds `error_text` naming the limit (clients read it when present).
//! Native API: 429 with `Retry-After` for limits, 403 for a kind, `{"error": {code, message}}`.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::ApiError;
use super::{AppState, BearerKey};
use crate::tenants::Refusal;
use crate::wire::inphp::{Mode, Reply, codes};

/// `GET /v1/usage`: the figures of the caller's own tenant in this process, never another's.
/// The operator sees every tenant in `/metrics`.
pub async fn usage(State(state): State<AppState>, key: BearerKey) -> Result<Json<Value>, ApiError> {
    let tenant = super::native_key::tenant(&state, &key)?;
    let usage = state.tenants.usage(&tenant.0);
    Ok(Json(json!({
        "tenant": usage.tenant,
        "scope": "this gateway process",
        "pools": usage.pools,
        "limits": usage.limits,
        "in_flight": usage.in_flight,
        "solves_last_hour": usage.solves_last_hour,
        "admitted_total": usage.admitted_total,
        "refused_total": usage.refused_total,
    })))
}

/// Seconds a refused caller should wait before trying again.
fn retry_after(refusal: &Refusal) -> Option<u64> {
    match refusal {
        Refusal::KindNotAllowed { .. } => None,
        // A slot frees when one of the tenant's own solves ends: soon, but unknown.
        Refusal::MaxConcurrent { .. } => Some(1),
        Refusal::MaxSolvesPerHour { retry_after_s, .. } => Some(*retry_after_s),
    }
}

/// The native API's answer to a refusal.
pub(super) fn native_refusal(refusal: &Refusal) -> ApiError {
    let (status, code) = match refusal {
        Refusal::KindNotAllowed { .. } => (StatusCode::FORBIDDEN, "kind_not_allowed"),
        Refusal::MaxConcurrent { .. } => (StatusCode::TOO_MANY_REQUESTS, "tenant_max_concurrent"),
        Refusal::MaxSolvesPerHour { .. } => {
            (StatusCode::TOO_MANY_REQUESTS, "tenant_max_solves_per_hour")
        }
    };
    ApiError {
        retry_after: retry_after(refusal),
        ..ApiError::new(status, code, refusal.message())
    }
}

/// The compatible API's answer to a refusal (see the module comment for the codes).
pub(super) fn compat_refusal(mode: Mode, refusal: &Refusal) -> Reply {
    let code = match refusal {
        Refusal::KindNotAllowed { .. } => codes::BAD_PARAMETERS,
        Refusal::MaxConcurrent { .. } => codes::NO_SLOT_AVAILABLE,
        Refusal::MaxSolvesPerHour { .. } => codes::ZERO_BALANCE,
    };
    Reply::error_because(mode, code, &refusal.message())
}

/// Seed 002's worker API: `{"error": CODE, "message"}`, 429 with `Retry-After` for limits.
pub(super) fn worker_refusal(refusal: &Refusal) -> Response {
    let (status, code) = match refusal {
        Refusal::KindNotAllowed { .. } => (StatusCode::FORBIDDEN, "KIND_NOT_ALLOWED"),
        Refusal::MaxConcurrent { .. } => (StatusCode::TOO_MANY_REQUESTS, "TENANT_MAX_CONCURRENT"),
        Refusal::MaxSolvesPerHour { .. } => {
            (StatusCode::TOO_MANY_REQUESTS, "TENANT_MAX_SOLVES_PER_HOUR")
        }
    };
    let mut res = (
        status,
        Json(json!({"error": code, "message": refusal.message()})),
    )
        .into_response();
    res.extensions_mut()
        .insert(super::outcome::ErrorCode(code.to_owned()));
    if let Some(secs) = retry_after(refusal) {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    res
}
