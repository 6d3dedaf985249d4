//! Keyed calls through the Rust client (client/): a call whose gateway started it and then
//! could not answer (the connection was reset, the gateway shut down) is sent to another
//! gateway with its `Idempotency-Key`, and the fleet gives it one answer. With the connection
//! lost, the retry joins the task already running (one upstream task); with a shutdown, the
//! stopping gateway cut its task and the retry starts the one that answers.

use std::time::Duration;

use captcha_gateway::sim::LatencyRange;
use captcha_gateway_client::{Client, SolveRequest};
use serde_json::Value;

use crate::support::eventually::eventually;
use crate::support::fault_proxy::{FaultProxy, Mode};
use crate::support::fleet::{GatewayProcess, SimServer};
use crate::support::redis::RedisServer;
use crate::support::{KEY, verify_at};

async fn simulator(min_ms: u64, max_ms: u64) -> SimServer {
    let latency = LatencyRange {
        min: Duration::from_millis(min_ms),
        max: Duration::from_millis(max_ms),
    };
    SimServer::start(latency, 100).await
}

fn client(backends: impl IntoIterator<Item = String>) -> Client {
    Client::builder()
        .backends(backends)
        .key(KEY)
        .retry_backoff(Duration::from_millis(10), Duration::from_millis(50))
        .probe_interval(None)
        .build()
        .expect("valid settings")
}

/// The index of the gateway holding an admitted solve, once one does.
async fn gateway_running_it(gateways: &[&GatewayProcess]) -> usize {
    let http = reqwest::Client::new();
    let bases: Vec<String> = gateways.iter().map(|g| g.base.clone()).collect();
    let found = std::sync::Arc::new(std::sync::Mutex::new(None));
    eventually(
        Duration::from_secs(30),
        "a gateway running the call",
        || {
            let (http, bases, found) = (http.clone(), bases.clone(), found.clone());
            async move {
                for (i, base) in bases.iter().enumerate() {
                    let health: Value = match http.get(format!("{base}/health")).send().await {
                        Ok(res) => res.json().await.unwrap_or_default(),
                        Err(_) => continue,
                    };
                    if health["active_tasks"].as_u64().unwrap_or(0) > 0 {
                        *found.lock().unwrap() = Some(i);
                        return true;
                    }
                }
                false
            }
        },
    )
    .await;
    let running = found.lock().unwrap().expect("found");
    running
}

#[tokio::test]
async fn a_keyed_call_whose_connection_was_reset_joins_its_task_on_another_gateway() {
    let redis = RedisServer::start();
    let sim = simulator(1500, 2000).await;
    // The poller's 20 checks must cover the solve time.
    let a = GatewayProcess::start(&sim, &redis.url(), "", 0.25).await;
    let b = GatewayProcess::start(&sim, &redis.url(), "", 0.25).await;
    let mut proxies = Vec::new();
    for g in [&a, &b] {
        let addr = g.base.trim_start_matches("http://").parse().unwrap();
        proxies.push(FaultProxy::start(addr).await);
    }
    let client = client(proxies.iter().map(|p| format!("http://{}", p.addr)));
    let request = SolveRequest::recaptcha_v2("6Le-keyed-reset", "https://keyed.example.com/")
        .idempotency_key("reset-1");
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.solve(&request).await }
    });

    // Once the upstream task runs, the road to its gateway breaks: the caller's connection is
    // reset after the request was sent, and the gateway keeps solving.
    let running = gateway_running_it(&[&a, &b]).await;
    eventually(Duration::from_secs(10), "the upstream submit", || async {
        sim.sim.stats().submits == 1
    })
    .await;
    proxies[running].set(Mode::Reset);

    let answer = call.await.unwrap().expect("the keyed call is answered");
    let token = answer.token_text().expect("a token");
    assert_eq!(
        sim.sim.stats().submits,
        1,
        "the retry joined the running task"
    );
    let verdict = verify_at(
        &reqwest::Client::new(),
        &format!("http://{}", sim.addr),
        token,
    )
    .await;
    assert_eq!(verdict["success"], true, "{verdict}");
    let states = client.backends();
    let other = &states[1 - running];
    assert!(other.served > 0, "the other gateway answered: {states:?}");
}

#[tokio::test]
async fn a_keyed_call_on_a_gateway_that_shuts_down_is_answered_by_another() {
    let redis = RedisServer::start();
    // Longer than the grace period: the stopping gateway cuts its task short.
    let sim = simulator(6000, 7000).await;
    let grace = "shutdown_grace_s = 2";
    let a = GatewayProcess::start(&sim, &redis.url(), grace, 0.5).await;
    let b = GatewayProcess::start(&sim, &redis.url(), grace, 0.5).await;
    let client = client([a.base.clone(), b.base.clone()]);
    let request = SolveRequest::recaptcha_v2("6Le-keyed-stop", "https://keyed.example.com/")
        .idempotency_key("stop-1");
    let call = tokio::spawn({
        let client = client.clone();
        let request = request.clone();
        async move { client.solve(&request).await }
    });
    let gateways = [&a, &b];
    let running = gateway_running_it(&gateways).await;
    eventually(Duration::from_secs(10), "the upstream submit", || async {
        sim.sim.stats().submits == 1
    })
    .await;
    gateways[running].terminate();

    let answer = call.await.unwrap().expect("the keyed call is answered");
    let token = answer.token_text().expect("a token").to_owned();
    let verdict = verify_at(
        &reqwest::Client::new(),
        &format!("http://{}", sim.addr),
        &token,
    )
    .await;
    assert_eq!(verdict["success"], true, "{verdict}");
    let states = client.backends();
    assert!(states[1 - running].served > 0, "{states:?}");
    // The stopped gateway's task was cut; the one that answered is the key's task now, and a
    // repeat gets its answer without another solve.
    let submits = sim.sim.stats().submits;
    assert_eq!(
        submits, 2,
        "one task cut by the shutdown, one that answered"
    );
    let again = client.solve(&request).await.expect("a repeat");
    assert_eq!(again.token_text(), Some(token.as_str()));
    assert_eq!(sim.sim.stats().submits, submits);
}
