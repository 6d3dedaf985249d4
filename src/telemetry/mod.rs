//! Telemetry: Prometheus metrics and log setup. Labels are kinds, sources, outcome codes,
//! account names and target labels; never keys, proxies or tokens (promise 8).

pub mod logs;
pub(crate) mod metrics;

pub use logs::{LogFormat, LogSettings, init_logs};
pub use metrics::Metrics;
