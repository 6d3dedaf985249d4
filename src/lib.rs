//! captcha-gateway: a broker between fleets of automation workers and CAPTCHA-solving providers.
//!
//! # Layout, bottom up
//!
//! Each module imports only from its own layer or below (docs/ARCHITECTURE.md "Layers",
//! enforced by `tests/it/layers.rs`).
//!
//! - vocabulary: [`model`] (kind, request, target, answer), [`secret`], [`setting`] (the one
//!   settings error), [`shutdown`].
//! - [`wire`]: the protocols, one folder each (`in.php`/`res.php`, the JSON task protocol, the
//!   native body), shared by the gateway's API, the simulator and the provider clients; [`lua`],
//!   every script run on Redis; [`redis_base`], the connection and the scripts' reply reader.
//! - [`telemetry`]: metrics, logs, request ids, histograms.
//! - [`provider`] (protocol clients, thread budget, batched poller) and [`sim`] (the provider
//!   simulator, a product feature).
//! - [`engine`]: solve orchestration and the promises over the [`engine::Store`] seam (embedded,
//!   or Redis with Lua scripts in `lua/`), admission, the handout figures.
//! - around the engine: [`pools`], [`upstream`] (the engine's view of the accounts),
//!   [`tenants`], [`callback`], [`queue`] (Redis Streams and seed 003's list, docs/QUEUE.md).
//! - [`status`]: the live figures behind the dashboard and `GET /v1/status`.
//! - [`http`]: the compatible, native, seed-worker and operations endpoints.
//! - settings: [`cli`] (flags), [`config`] (composes every module's settings).
//! - [`wiring`]: builds the solving stack for every command.
//! - [`commands`] (`serve`, `worker`, `submit`, `status`) and [`bench`].
//!
//! See `docs/ARCHITECTURE.md` for how the pieces fit and which promises each keeps.

pub mod bench;
pub mod callback;
pub mod cli;
pub mod commands;
pub mod config;
pub mod engine;
#[doc(hidden)]
pub mod eventually;
pub mod http;
pub mod lua;
pub mod model;
pub mod pools;
pub mod provider;
pub mod queue;
pub mod redis_base;
pub mod secret;
pub mod setting;
pub mod shutdown;
pub mod sim;
pub mod status;
pub mod telemetry;
pub mod tenants;
pub mod upstream;
pub mod wire;
pub mod wiring;
