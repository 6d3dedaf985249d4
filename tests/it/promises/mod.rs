//! The fleet keeps its promises under faults: three real gateways on a
//! real Redis, the simulator as provider, a couple of hundred callers on four targets (two with
//! configured pools). Each scenario breaks something while callers are waiting and running
//! tasks, then checks the whole history (`history.rs`): no single-use token handed out twice,
//! none with less than `min_remaining` left, every caller answered within its deadline (a clear
//! error only from a gateway the scenario stopped), and upstream tasks at most one per caller
//! plus the bound the scenario states. Each prints a `FIGURES` line (docs/REDIS.md states what
//! each fault may cost).
//!
//! `redis_faults.rs`: Redis paused, restarted empty, replies lost, a Cluster failover.
//! `gateway_faults.rs`: a rolling restart, clock skew, a reusable target's leader killed.
//! `durability.rs`: Redis losing acknowledged writes (a lagging replica promoted, a host crash),
//! with durable hand-outs on and off.

mod durability;
mod gateway_faults;
mod harness;
mod history;
mod redis_faults;

use std::time::Duration;

use captcha_gateway::sim::LatencyRange;

/// Solves long enough that tasks are running when a fault starts, short enough that a scenario
/// takes seconds.
fn solve_time() -> LatencyRange {
    LatencyRange {
        min: Duration::from_millis(1_500),
        max: Duration::from_millis(3_000),
    }
}
