//! The HTTP API (docs/API.md): the 2captcha-compatible endpoints, the native JSON API,
//! the seed 002 worker API, the pool endpoints and the operations endpoints, on one axum router.
//!
//! Owns: routing (the API port, and the operations port of `--ops-listen`), authentication of
//! gateway keys and of the operations key, admission (load shedding), turning engine
//! results into each protocol's replies. Does not own: solving (engine) or wire parsing that the
//! simulator and the provider clients share (`wire`).

mod auth;
mod conn;
mod entry;
mod error;
mod fleet_busy;
mod idempotency;
mod inphp;
mod input;
mod intake;
mod listen;
mod metrics;
mod native;
mod native_key;
mod openapi;
mod ops;
mod ops_access;
mod outcome;
mod pools;
mod request_scoped;
mod sim_guard;
mod state;
mod taskapi;
#[cfg(test)]
mod tests;
mod tls;
mod usage;
mod worker;

pub use auth::{Auth, AuthError, BearerKey, KEY_LEN, Tenant, bearer, key_tenant};
pub use conn::{ConnSettings, Connections, ConnectionsFile};
pub use entry::parse_native_body;
pub use intake::Intake;
pub use listen::{bind, serve};
pub use metrics::{AdmissionFigures, RequestMetrics};
pub use openapi::OPENAPI_JSON;
pub use ops_access::{
    OPS_KEY_ENV, OpsInput, OpsSettings, refusal as ops_refusal, settings as ops_settings,
};
pub use sim_guard::sim_guard;
pub use state::{AppShared, AppState, Limits};
pub use tls::{TlsSettings, settings as tls_settings};

use axum::Router;
use axum::routing::{any, get, post};

/// The JSON task protocol at the root (`http::taskapi`), beside `/in.php` as its clients expect.
fn taskapi_routes() -> Router<AppState> {
    Router::new()
        .route("/createTask", post(taskapi::create_task))
        .route("/getTaskResult", post(taskapi::get_task_result))
        .route("/getBalance", post(taskapi::get_balance))
        .route("/reportIncorrect", post(taskapi::report_incorrect))
        .route("/reportIncorrectRecaptcha", post(taskapi::report_incorrect))
        .route(
            "/reportIncorrectImageCaptcha",
            post(taskapi::report_incorrect),
        )
        .route("/reportCorrect", post(taskapi::report_correct))
        .route("/reportCorrectRecaptcha", post(taskapi::report_correct))
}

/// The operations endpoints that show the business (tenants, sites, threads): on the
/// operations port, and on the API port unless `--ops-listen` moved them (`ops_access`).
fn ops_routes() -> Router<AppState> {
    Router::new()
        .route("/metrics", get(ops::metrics))
        .route("/", get(ops::index))
        .route("/v1/status", get(ops::status))
        .route("/v1/advice", get(ops::advice))
}

/// Every route of the API port. Probes and `/health` stay here whatever `--ops-listen` says:
/// load balancers and seed 002's clients ask the port they send work to.
pub fn router(state: AppState) -> Router {
    let mut routes = Router::new()
        .route("/in.php", any(inphp::submit))
        .route("/res.php", any(inphp::result))
        .merge(taskapi_routes())
        .route("/v1/solve", post(native::solve))
        .route("/v1/tasks", post(native::create_task))
        .route("/v1/tasks/{id}", get(native::get_task))
        .route("/v1/usage", get(usage::usage))
        .route("/v1/pools", get(pools::list))
        .route("/v1/pools/tokens", post(pools::import_tokens))
        .route("/solve", post(worker::solve))
        .route("/health", get(worker::health))
        .route("/livez", get(ops::livez))
        .route("/readyz", get(ops::readyz))
        .route("/openapi.json", get(openapi::document));
    if state.ops.on_api_port() {
        routes = routes.merge(ops_routes());
    }
    layered(routes, state)
}

/// The operations port (`--ops-listen`): probes, `/health` and the business figures, nothing
/// that solves.
pub fn ops_router(state: AppState) -> Router {
    let routes = ops_routes()
        .route("/health", get(worker::health))
        .route("/livez", get(ops::livez))
        .route("/readyz", get(ops::readyz));
    layered(routes, state)
}

fn layered(routes: Router<AppState>, state: AppState) -> Router {
    routes
        .route_layer(outcome::CountLayer(state.clone()))
        // Outermost: the request's span and id cover everything inside.
        .layer(crate::telemetry::request_id::RequestIdLayer)
        .with_state(state)
}
