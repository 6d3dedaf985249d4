//! The JSON of `GET /v1/status` (docs/API.md "Status"): what the dashboard draws and
//! `captcha-gateway status` prints. Only figures: account names and target labels as `/metrics`
//! shows them, never a key, a token, a proxy or a tenant's own data.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::model::BySource;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// When this report was made (Unix ms).
    pub at_ms: u64,
    pub version: String,
    /// Seconds between two history points.
    pub interval_s: f64,
    /// Seconds the percentiles and `per_min` error figures cover: up to 300, since start while
    /// this instance is younger.
    pub window_s: f64,
    pub fleet: FleetInfo,
    pub answers: Answers,
    /// Oldest first; one point per interval, rates per second over it.
    pub history: Vec<Point>,
    pub admission: AdmissionRow,
    pub pools: Vec<PoolRow>,
    /// Targets with live state, configured pools included (before rows were grouped).
    pub targets: u64,
    pub accounts: Vec<AccountRow>,
    /// `None` unless `serve --queue` hands tasks to a queue.
    pub queue: Option<QueueRow>,
    pub latency: Latency,
    pub errors: Vec<ErrorRow>,
    /// The Redis servers under the store (version, eviction policy, persistence, replicas), how
    /// hand-outs are confirmed, and operations the store could not be sure of; `None` with the
    /// embedded store.
    #[serde(default)]
    pub redis: Option<crate::engine::store::redis::ServerReport>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetInfo {
    /// `memory` (this instance alone) or `redis` (the whole fleet).
    pub store: String,
    /// Instances whose figures are in this report (live ones, with Redis).
    pub instances: u64,
    /// Those instances by role: `serve` (the HTTP APIs; a front end with `--queue`), `worker`
    /// (`captcha-gateway worker`, stream or seed mode), `other` (a role this version does not know).
    pub roles: BTreeMap<String, u64>,
    /// This instance's role (`serve`).
    pub role: String,
    /// This instance's random per-boot id.
    pub instance: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Answers {
    /// Since each instance started, summed over the fleet (as `answers_total` on `/metrics`).
    pub total: BySource<u64>,
    /// Per second over the last minute of history (less right after start), fleet-wide.
    pub per_s: BySource<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// End of the interval (Unix ms).
    pub t_ms: u64,
    /// Its length in seconds.
    pub secs: f64,
    pub pool: f64,
    pub solved: f64,
    pub shared: f64,
    /// Every error class together, per second.
    pub errors: f64,
    /// Upstream threads taken and the effective caps at the end of the interval, over every
    /// account.
    pub threads_in_use: u64,
    pub threads_cap: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdmissionRow {
    /// Solves and tasks held now, summed over the fleet.
    pub active: u64,
    pub max_concurrent: u64,
    pub running_limit: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolRow {
    /// `kind:host`, or `other` for the targets summed into one row (as in `/metrics`).
    pub target: String,
    /// Answers ready now.
    pub ready: u64,
    /// The size a configured pool is kept at now; `None` for an unconfigured target.
    pub target_size: Option<u32>,
    /// `fixed` or `auto` for a configured pool.
    pub mode: Option<String>,
    pub in_flight: u64,
    pub waiting: u64,
    pub arrivals: u64,
    pub pool_hits: u64,
    /// Answers that expired before anyone took them (waste).
    pub expired_unused: u64,
    pub hit_rate: Option<f64>,
    pub waste_rate: Option<f64>,
    /// How many targets the row sums, when more than one.
    pub targets: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountRow {
    /// The configured name.
    pub name: String,
    pub provider: String,
    /// `closed`, `open`, `half-open` or `paused`.
    pub state: String,
    /// Threads taken now (fleet-wide with Redis, as of the last lease renewal).
    pub threads_in_use: u64,
    /// The effective cap now: plan threads, lowered for a while by capacity errors.
    pub threads_cap: u64,
    /// Plan threads.
    pub threads: u64,
    /// Upstream counters summed over the fleet.
    pub submits: u64,
    pub solved: u64,
    pub failed: u64,
    pub timeouts: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueRow {
    pub name: String,
    /// Entries no worker has read yet; `None` when Redis cannot say.
    pub lag: Option<u64>,
    /// Entries in the dead-letter stream; `None` when Redis cannot say.
    pub dead_letters: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Caller's request to the answer handed out (every API and queue entry).
    pub handout: Percentiles,
    /// Upstream submit (accepted by the provider) to answer ready, every upstream task.
    pub solve: Percentiles,
    /// Answer ready upstream to handed out (its age, time in a pool included).
    pub ready_to_caller: Percentiles,
}

/// Over the last `window_s`; seconds, `None` without samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorRow {
    /// `upstream_capacity`, `upstream_transient`, `upstream_permanent`, `upstream_account`
    /// (submit errors), `task_failed`, `task_timeout` (upstream tasks), or `caller_<code>` (a
    /// solve that ended without an answer for its caller).
    pub class: String,
    /// Since start, summed over the fleet.
    pub total: u64,
    /// Per minute over the last `window_s`.
    pub per_min: f64,
}

/// Error totals by class, cumulative.
pub type ErrorCounts = BTreeMap<String, u64>;
