//! Slow start on one gateway process, without NGINX: while it warms up, callers beyond the ramp
//! wait on it (and start no upstream work) instead of being refused; `max_concurrent` still
//! refuses at once.

use std::time::Duration;

use serde_json::{Value, json};

use super::scenarios::simulator_with_slow_turnstile;
use crate::balancing_clients::Instance;
use crate::support::eventually::eventually;
use crate::support::redis::RedisServer;

async fn health(http: &reqwest::Client, base: &str) -> Value {
    http.get(format!("{base}/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_warming_gateway_runs_one_solve_and_holds_the_others_without_refusing_them() {
    let redis = RedisServer::start();
    let sim = simulator_with_slow_turnstile().await;
    // An hour-long warm-up over 4 places: the limit stays at 1 for the first 15 minutes.
    let gateway = Instance::start_warming_up(&sim, &redis.url(), 4, 3600.0, "").await;
    let http = crate::support::fleet::client();
    let first = health(&http, &gateway.base).await;
    assert_eq!(first["warming_up"], true, "{first}");
    assert_eq!(first["limit_now"], 1, "{first}");

    // Four one-minute solves at once: all admitted, one runs.
    let calls: Vec<_> = (0..4)
        .map(|i| {
            let (http, base) = (http.clone(), gateway.base.clone());
            tokio::spawn(async move {
                let body = json!({"kind": "turnstile", "sitekey": format!("0x4-warm-{i}"), "pageurl": "https://example.com/"});
                crate::support::solve(&http, &base, body).await
            })
        })
        .collect();
    eventually(
        Duration::from_secs(30),
        "four admitted, one submitted upstream",
        || async {
            let h = health(&http, &gateway.base).await;
            h["active_tasks"] == 4 && sim.sim.stats().submits >= 1
        },
    )
    .await;
    assert_eq!(
        sim.sim.stats().submits,
        1,
        "the waiting ones started no upstream work"
    );
    assert!(calls.iter().all(|c| !c.is_finished()), "none was refused");
    let during = health(&http, &gateway.base).await;
    println!("FIGURE warm-up: /health with 4 admitted during the warm-up: {during}");
    assert_eq!(during["limit_now"], 1, "{during}");

    // A fifth is beyond max_concurrent: refused at once, as without slow start.
    let body =
        json!({"kind": "turnstile", "sitekey": "0x4-warm-5", "pageurl": "https://example.com/"});
    let (status, refusal) = crate::support::solve(&http, &gateway.base, body).await;
    assert_eq!(status, 503, "{refusal}");
    assert_eq!(refusal["error"]["code"], "overloaded");
    calls.iter().for_each(tokio::task::JoinHandle::abort);
}
