//! captcha-gateway: a broker between fleets of automation workers and CAPTCHA-solving providers.
//!
//! # Layout
//!
//! - [`model`]: the vocabulary (kind, request, target, answer) as plain data.
//! - [`compat`]: the 2captcha-compatible wire format (`in.php`/`res.php`), shared by the
//!   gateway's API and the simulator.
//! - [`provider`]: upstream protocol clients, error taxonomy and retry policy, per-account
//!   thread cap, batched poller.
//!
//! See `docs/ARCHITECTURE.md` for how the pieces fit and which promises each keeps.

pub mod compat;
pub mod engine;
pub mod model;
pub mod provider;
pub mod sim;
