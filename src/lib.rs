//! captcha-gateway: a broker between fleets of automation workers and CAPTCHA-solving providers.
//!
//! # Layout
//!
//! - [`model`]: the vocabulary (kind, request, target, answer) as plain data.
//! - [`compat`]: the 2captcha-compatible wire format (`in.php`/`res.php`), shared by the
//!   gateway's API and the simulator.
//! - [`provider`]: upstream protocol clients, error taxonomy and retry policy, per-account
//!   thread cap, batched poller.
//! - [`engine`]: solve orchestration and the promises (once, fresh, exact demand, coalesced),
//!   over the [`engine::Store`] seam: the embedded store, or Redis (Lua scripts in `lua/`) for a
//!   fleet.
//! - [`pools`]: warm pools (configured, auto-sized, refilled on spare threads), token import,
//!   hit-rate and waste figures.
//! - [`upstream`]: the engine's view of the provider accounts.
//! - [`queue`]: the task queue on Redis Streams (producer API, `worker`), docs/QUEUE.md.
//! - [`callback`]: result callbacks (`pingback`, `callback_url`) to allow-listed hosts only.
//! - [`http`]: the compatible, native, seed-worker and operations endpoints.
//! - [`tenants`]: `[[tenants]]`: per-tenant keys, limits, isolation and usage.
//! - [`taskapi`]: the JSON task protocol (`createTask`/`getTaskResult`), shared by the gateway,
//!   the simulator and the upstream client.
//! - [`sim`]: the provider simulator (a product feature; tests and benchmarks run against it).
//! - [`bench`]: the `bench` load scenarios (gateway, simulator and Redis under load, with a
//!   report).
//! - [`status`]: the live figures behind the dashboard at `/`, `GET /v1/status` and the
//!   `status` command, fleet-wide with Redis.
//! - [`telemetry`]: metrics and logs. [`config`], [`cli`], [`serve`], [`shutdown`]: the process.
//!
//! See `docs/ARCHITECTURE.md` for how the pieces fit and which promises each keeps.

pub mod bench;
pub mod callback;
pub mod cli;
pub mod commands;
pub mod compat;
pub mod config;
pub mod engine;
pub mod http;
pub mod model;
pub mod pools;
pub mod provider;
pub mod queue;
pub mod secret;
pub mod setting;
pub mod shutdown;
pub mod sim;
pub mod status;
pub mod taskapi;
pub mod telemetry;
pub mod tenants;
pub mod upstream;
pub mod wiring;

/// The tests' one bounded wait, shared with the integration tests (`tests/it/support`).
#[cfg(test)]
#[path = "../tests/it/support/eventually.rs"]
mod eventually;
