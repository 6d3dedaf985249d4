//! Active health: every `probe_interval`, `GET /health` on each gateway, fed to the balancer
//! like a call's outcome.
//!
//! Probes find a dead gateway before callers do (three failed probes eject it, so no call is
//! spent on it) and, once its cool-down ends, the first probe decides: still dead, it is
//! ejected again at once for twice as long; answering, it is back. `/health` answers 503
//! `overloaded` at 90 % load (docs/API.md), and some seed-002 workers answer 200 with a high
//! `load_pct`: either way the gateway is full, which counts like a refusal at admission.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use captcha_gateway_balance::Outcome;
use serde_json::Value;

use crate::fleet::Fleet;

/// At or above this `load_pct` a gateway is full: the gateway's own `overloaded` threshold.
const FULL_PCT: f64 = 90.0;

/// Probes until the fleet is dropped (the client holds the only strong reference).
pub(crate) async fn run(
    fleet: Weak<Fleet>,
    http: reqwest::Client,
    interval: Duration,
    timeout: Duration,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(addresses) = fleet.upgrade().map(|f| f.addresses()) else {
            return;
        };
        // All of a round at once: a hung gateway delays the round by `timeout`, not by
        // `timeout` per gateway.
        let mut round = tokio::task::JoinSet::new();
        for address in addresses {
            let http = http.clone();
            round.spawn(async move {
                let result = probe(&http, &address, timeout).await;
                (address, result)
            });
        }
        let results = round.join_all().await;
        let Some(fleet) = fleet.upgrade() else {
            return;
        };
        for (address, (outcome, sent_at, load)) in results {
            fleet.probed(&address, outcome, sent_at, load);
        }
    }
}

/// One probe: its outcome, when it was sent, and the `load_pct` it read.
async fn probe(
    http: &reqwest::Client,
    address: &str,
    timeout: Duration,
) -> (Outcome, Instant, Option<f64>) {
    let sent_at = Instant::now();
    let res = match http
        .get(format!("{address}/health"))
        .timeout(timeout)
        .send()
        .await
    {
        Ok(res) => res,
        Err(e) if e.is_timeout() => return (Outcome::ServerError, sent_at, None),
        Err(_) => return (Outcome::ConnectFailed, sent_at, None),
    };
    let status = res.status().as_u16();
    let load = res
        .json::<Value>()
        .await
        .ok()
        .and_then(|v| v.get("load_pct").and_then(Value::as_f64))
        .filter(|pct| pct.is_finite() && *pct >= 0.0);
    let outcome = match status {
        200..=299 if load.is_some_and(|pct| pct >= FULL_PCT) => Outcome::Shed,
        200..=299 => Outcome::Success,
        503 => Outcome::Shed,
        _ => Outcome::ServerError,
    };
    (outcome, sent_at, load)
}

/// Starts the probe task; it ends by itself when the fleet is dropped.
pub(crate) fn spawn(
    runtime: &tokio::runtime::Handle,
    fleet: &Arc<Fleet>,
    http: reqwest::Client,
    interval: Duration,
    timeout: Duration,
) {
    runtime.spawn(run(Arc::downgrade(fleet), http, interval, timeout));
}
