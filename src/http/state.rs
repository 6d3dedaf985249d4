//! What every handler shares.

use std::sync::Arc;
use std::time::Duration;

use super::RequestMetrics;
use super::request_scoped::RequestScoped;
use super::{Auth, Intake};
use crate::callback::Callbacks;
use crate::engine::Admission;
use crate::engine::Engine;
use crate::pools::Pools;
use crate::telemetry::Metrics;
use crate::upstream::Upstream;

/// Request-facing limits; every default in `impl Default` with its reason.
#[derive(Debug, Clone)]
pub struct Limits {
    /// How long a compatible-API task keeps trying before it ends `ERROR_CAPTCHA_UNSOLVABLE`.
    pub compat_task_timeout: Duration,
    /// `/v1/solve` and `/solve` without a `timeout_s`.
    pub default_solve_timeout: Duration,
    /// The longest `timeout_s` or `wait` a caller may ask for.
    pub max_solve_timeout: Duration,
    /// The largest request body read; larger images get `ERROR_TOO_BIG_CAPTCHA_FILESIZE`.
    pub max_body_bytes: usize,
    /// With every account's threads taken fleet-wide, how many of this instance's callers may
    /// wait for one before new solves are refused with 429 `fleet_busy`; `None`: they all wait.
    pub max_thread_waiters: Option<usize>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // The official CaptchaAI SDK polls for 180 s before giving up.
            compat_task_timeout: Duration::from_secs(180),
            // unicaps' reCAPTCHA v2 timeout is 300 s, 2captcha-python's 120 s default: the middle.
            default_solve_timeout: Duration::from_secs(180),
            // 2captcha-python's recaptchaTimeout.
            max_solve_timeout: Duration::from_secs(600),
            // A 1 MiB image is 1.4 MB as base64, plus multipart overhead.
            max_body_bytes: 4 * 1024 * 1024,
            // Waiting in the fleet's FIFO serves callers better than a refusal they must retry
            // (docs/DEPLOY.md "Load balancing"): off unless configured.
            max_thread_waiters: None,
        }
    }
}

/// The handlers' state: one pointer, so the clone axum makes for every extractor and
/// middleware of every request is one reference count, not one per part (two dozen atomic
/// increments and decrements per clone were ~4 % of a pool hit's CPU; docs/BENCHMARKS.md).
#[derive(Clone)]
pub struct AppState(Arc<AppShared>);

impl AppState {
    pub fn new(shared: AppShared) -> Self {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppShared;

    fn deref(&self) -> &AppShared {
        &self.0
    }
}

/// What every handler shares, behind [`AppState`].
pub struct AppShared {
    pub engine: Engine,
    pub auth: Arc<Auth>,
    pub admission: Arc<Admission>,
    pub upstream: Arc<Upstream>,
    /// `captcha_gateway_requests_total`, fed by the handlers.
    pub metrics: RequestMetrics,
    /// The `/metrics` registry every owner registered with.
    pub exposition: Arc<Metrics>,
    /// The dashboard's figures and history (`crate::status`).
    pub status: Arc<crate::status::Status>,
    pub limits: Arc<Limits>,
    /// Configured pools, their sizes and import bookkeeping.
    pub pools: Arc<Pools>,
    /// Per-tenant limits and usage (`[[tenants]]`).
    pub tenants: Arc<crate::tenants::Tenants>,
    /// Result callbacks (`pingback`, `callback_url`): the allow-list and delivery.
    pub callbacks: Arc<Callbacks>,
    /// Solve accepted work here, or hand it to the queue (`serve --queue`).
    pub intake: Intake,
    /// Callers waiting on solves under request-scoped keys (`Idempotency-Scope: request`).
    pub request_scoped: Arc<RequestScoped>,
    /// Where `/metrics`, `/v1/status` and `/` are served and the key they ask for.
    pub ops: Arc<super::OpsSettings>,
}

impl AppState {
    /// What the status page reads this process's figures from.
    pub fn status_sources(&self) -> crate::status::Sources {
        crate::status::Sources {
            engine: self.engine.clone(),
            upstream: self.upstream.clone(),
            admission: Some(self.admission.clone()),
            pools: Some(self.pools.clone()),
            queue: match &self.intake {
                Intake::Queued(q) => Some(q.clone()),
                Intake::InProcess => None,
            },
            tenants: Some(self.tenants.clone()),
        }
    }
}
