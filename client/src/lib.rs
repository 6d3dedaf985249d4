//! A client for a fleet of captcha-gateway instances, without a proxy in between: the native
//! JSON API (docs/API.md), balanced over the gateways by [`captcha_gateway_balance`], with
//! failover, ejection and timed re-admission (docs/CLIENTS.md).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use captcha_gateway_client::{Client, SolveRequest};
//!
//! let client = Client::builder()
//!     .backends(["http://10.0.0.11:8080", "http://10.0.0.12:8080", "http://10.0.0.13:8080"])
//!     .key("gateway-key")
//!     .build()?;
//! let answer = client
//!     .solve(&SolveRequest::recaptcha_v2("6Le-site-key", "https://example.com/login"))
//!     .await?;
//! println!("{:?}", answer.token_text());
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! - `client`: the API calls and the retry loop.
//! - `judge`: what an attempt's ending means for the gateway's health and for a retry.
//! - `fleet`: the balancer under one lock, with the counts a caller can read.
//! - `probe`: active `/health` probes feeding the balancer.
//! - `native`: request and answer bodies. `config`: settings and their checks.

mod client;
mod config;
mod error;
mod fleet;
mod judge;
mod native;
mod probe;

pub use captcha_gateway_balance::{EjectionPolicy, Strategy};
pub use client::{Client, ClientBuilder};
pub use config::ConfigError;
pub use error::Error;
pub use fleet::BackendState;
pub use native::{Kind, Solution, SolveRequest, TaskRef, TaskState};
