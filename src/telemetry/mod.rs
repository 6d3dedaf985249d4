//! Telemetry: the Prometheus registry and log setup. Labels are kinds, sources, outcome codes,
//! account names, tenant names and target labels; never keys, proxies or tokens (promise 8).

pub mod bounded;
pub mod collect;
pub mod histogram;
pub mod logs;
pub mod metrics;
pub mod request_id;

pub use logs::{LogFormat, LogSettings, init_logs};
pub use metrics::Metrics;
