//! 429 `fleet_busy` (docs/DEPLOY.md "Load balancing"): two gateways on one Redis share a plan of
//! one thread. A caller waits for the thread rather than being refused; once this instance has
//! `max_thread_waiters` callers waiting with the fleet's thread taken, the next solve is refused
//! with 429 and `Retry-After`, starts nothing, and is served when retried after the others.

use std::time::Duration;

use captcha_gateway::sim::LatencyRange;
use serde_json::{Value, json};

use crate::support::KEY;
use crate::support::eventually::eventually;
use crate::support::fleet::{SimServer, client};
use crate::support::gateway::SimAccountConfig;
use crate::support::redis::RedisServer;

fn body(n: usize) -> Value {
    json!({"kind": "recaptcha_v2", "sitekey": format!("6Le-busy-{n}"), "pageurl": "https://busy.example.com/"})
}

async fn solve(http: &reqwest::Client, base: &str, n: usize) -> (u16, Option<String>, Value) {
    let res = http
        .post(format!("{base}/v1/solve"))
        .bearer_auth(KEY)
        .json(&body(n))
        .send()
        .await
        .expect("the gateway answers");
    let status = res.status().as_u16();
    let retry_after = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, retry_after, res.json().await.unwrap_or(Value::Null))
}

/// This gateway's callers waiting for a thread and the fleet's threads it knows are taken,
/// from its `/health`.
async fn waiting_and_taken(http: &reqwest::Client, base: &str) -> (u64, u64) {
    let health: Value = http
        .get(format!("{base}/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let account = &health["accounts"][0];
    (
        account["waiting"].as_u64().expect("waiting"),
        account["in_flight"].as_u64().expect("in_flight"),
    )
}

#[tokio::test]
async fn a_gateway_refuses_with_429_once_callers_wait_for_the_fleets_only_thread() {
    let redis = RedisServer::start();
    // The simulator's time moves only when the test moves it: the first solve holds the fleet's
    // thread until the third caller has been refused, however slow the machine (a solve of a
    // few real seconds once ended first, under load).
    let sim = SimServer::stalled(100).await;
    let extra = "max_thread_waiters = 1";
    // One thread for the whole fleet; checks every second, so the poller's 20 checks outlast
    // the wait for the refusal.
    let config = SimAccountConfig::new(sim.addr, &redis.url())
        .threads(1)
        .top_level(extra)
        .poll_interval(1.0);
    let a = config.serve().start().await;
    let b = config.serve().start().await;
    let http = client();

    let first = tokio::spawn({
        let (http, base) = (http.clone(), a.base.clone());
        async move { solve(&http, &base, 1).await }
    });
    eventually(
        Duration::from_secs(10),
        "the first solve's submit",
        || async { sim.sim.stats().submits == 1 },
    )
    .await;
    // The second caller is not refused: it waits, on the other gateway, for the fleet's thread.
    // A caller counts as waiting as soon as it asks; the gateway learns that the fleet's thread
    // is taken from Redis's answer to that ask, which the refusal needs too.
    let second = tokio::spawn({
        let (http, base) = (http.clone(), b.base.clone());
        async move { solve(&http, &base, 2).await }
    });
    eventually(
        Duration::from_secs(10),
        "the second caller to wait, told the fleet's thread is taken",
        || async { waiting_and_taken(&http, &b.base).await == (1, 1) },
    )
    .await;

    // The third, on the gateway where one already waits: refused, nothing started.
    let (status, retry_after, refused) = solve(&http, &b.base, 3).await;
    println!("FIGURE fleet_busy: third caller got {status} Retry-After {retry_after:?} {refused}");
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["error"]["code"], "fleet_busy");
    assert_eq!(retry_after.as_deref(), Some("5"));

    // Time moves on: the first answer comes, then the second caller gets the thread and its own.
    sim.sim.clock().advance(Duration::from_secs(1));
    eventually(
        Duration::from_secs(60),
        "the second caller's submit",
        || async { sim.sim.stats().submits == 2 },
    )
    .await;
    sim.sim.clock().advance(Duration::from_secs(1));
    for (n, call) in [first, second].into_iter().enumerate() {
        let (status, _, answer) = call.await.unwrap();
        assert_eq!(status, 200, "caller {}: {answer}", n + 1);
        let token = answer["token"].as_str().expect("a token");
        let verdict = sim.verify(&http, token).await;
        assert_eq!(verdict["success"], true, "{verdict}");
    }
    assert_eq!(
        sim.sim.stats().submits,
        2,
        "the refused call started nothing"
    );
    // Retried once the others are done, it is served.
    let retry = tokio::spawn({
        let (http, base) = (http.clone(), b.base.clone());
        async move { solve(&http, &base, 3).await }
    });
    eventually(
        Duration::from_secs(60),
        "the retried call's submit",
        || async { sim.sim.stats().submits == 3 },
    )
    .await;
    sim.sim.clock().advance(Duration::from_secs(1));
    let (status, _, answer) = retry.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(sim.sim.stats().submits, 3);
}

#[tokio::test]
async fn without_max_thread_waiters_every_caller_waits_for_the_thread() {
    let redis = RedisServer::start();
    let latency = LatencyRange {
        min: Duration::from_millis(300),
        max: Duration::from_millis(500),
    };
    let sim = SimServer::start(latency, 100).await;
    let config = SimAccountConfig::new(sim.addr, &redis.url()).threads(1);
    let a = config.serve().start().await;
    let b = config.serve().start().await;
    let http = client();
    let bases = [a.base.clone(), b.base.clone()];
    let calls = (0..6).map(|n| {
        let (http, base) = (http.clone(), bases[n % 2].clone());
        tokio::spawn(async move { solve(&http, &base, 100 + n).await })
    });
    for call in futures::future::join_all(calls).await {
        let (status, _, answer) = call.unwrap();
        assert_eq!(status, 200, "{answer}");
    }
    assert_eq!(sim.sim.stats().submits, 6);
}
