//! Integration tests: one binary (one link for the whole suite), modules by capability. Every test
//! starts its own gateway and simulator on free loopback ports; nothing is shared between tests.

mod support;

mod balancing_clients;
mod bench;
mod budget;
mod budget_scripts;
mod burst;
mod callbacks;
mod cli;
mod clients;
mod compat_api;
mod conformance;
mod contract;
mod dashboard;
mod deploy;
mod deploy_keda;
mod docs;
mod failover;
mod faults;
mod fleet;
mod fleet_busy;
mod hostile;
mod hostile_input;
mod idempotency;
mod leader;
mod logs;
mod metrics_series;
mod native_api;
mod nginx;
mod observability;
mod pools;
mod promises;
mod queue;
mod redis_tls;
mod retire;
mod scripts;
mod secrets;
mod shutdown;
mod shutdown_handback;
mod slow_clients;
mod taskapi;
mod tenants;
mod tls;
mod upstream;
