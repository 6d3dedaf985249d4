//! The simulator served under `/sim` on a gateway's own port (`serve --provider sim`): on a
//! gateway with keys, what changes its state (the fault switch, its provider API, which holds
//! its plan threads, the same threads the gateway solves with) needs a gateway key as
//! `Authorization: Bearer`, so nobody who can merely reach the port turns failures on or fills
//! the plan. What only reads stays open: `/verify` is what a site backend calls (it spends the
//! token it checks, which only the token's holder knows), `GET /stats` and `GET /faults` show
//! simulator counters, no tenant's data. Without gateway keys (loopback only) all of it is open.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Auth;
use super::error::ApiError;

/// Lets a request through to the simulator, or refuses it with 401 in the native API's shape.
pub async fn sim_guard(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    if auth.is_open() || reads_only(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    match auth.tenant(super::auth::bearer(req.headers())) {
        Ok(_) => next.run(req).await,
        Err(e) => ApiError::new(
            StatusCode::UNAUTHORIZED,
            e.code(),
            "the simulator's controls on a gateway with keys need a gateway key as \
             `Authorization: Bearer <key>`",
        )
        .into_response(),
    }
}

/// The routes open without a key (paths as the nested simulator router sees them).
fn reads_only(method: &Method, path: &str) -> bool {
    let read = method == Method::GET || method == Method::HEAD;
    path == "/verify" || (read && matches!(path, "/stats" | "/faults"))
}
