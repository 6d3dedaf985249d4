//! The two harder moments to lose a gateway mid-call, each with one keyed `/v1/solve` as the
//! balancing clients send it (a generated key, `Idempotency-Scope: request`), sent again to a
//! second gateway on the same Redis once the first is `kill -9`ed:
//!
//! - between the provider accepting the task and the gateway noting it for adoption (the
//!   provider's `in.php` reply held back when the kill comes): the provider task exists, but its
//!   id never reached the gateway, so nothing can adopt it. The retry is answered, and the price
//!   is one more provider task: none of the providers' APIs takes a caller's id for a task or
//!   lists a key's tasks, so noting the intent first would still leave no id to poll.
//! - while the answer is written to the caller (its reply held in the network when the kill
//!   comes): the answer is in the task record, so the retry is answered with it, at no price.
//!
//! docs/API.md "Idempotency keys" says what each costs.

use std::time::Duration;

use captcha_gateway::sim::{Faults, LatencyRange};
use serde_json::{Value, json};

use super::Instance;
use crate::support::KEY;
use crate::support::eventually::eventually;
use crate::support::fault_proxy::{FaultProxy, Mode};
use crate::support::fleet::SimServer;
use crate::support::metric_sum;
use crate::support::redis::RedisServer;

fn body() -> Value {
    json!({"kind": "recaptcha_v2", "sitekey": "6Le-window", "pageurl": "https://window.example/"})
}

/// `POST /v1/solve` at `base` under the idempotency `key`, as the balancing clients send it.
fn solve(http: &reqwest::Client, base: &str, key: &str) -> reqwest::RequestBuilder {
    http.post(format!("{base}/v1/solve"))
        .bearer_auth(KEY)
        .header("Idempotency-Key", key)
        .header("Idempotency-Scope", "request")
        .json(&body())
}

/// The call under `key` sent again to `base`: answered with a token the provider finds valid
/// on its first use.
async fn answered_once(http: &reqwest::Client, sim: &SimServer, base: &str, key: &str) {
    let answer: Value = solve(http, base, key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = answer["token"].as_str().expect("the retry answered");
    let verdict = sim.verify(http, token).await;
    assert_eq!(verdict["success"], true, "{verdict}");
}

/// Two gateways as users run them on one Redis, the first behind a proxy the test controls.
async fn two_gateways(sim: &SimServer, redis: &RedisServer) -> (Instance, Instance, FaultProxy) {
    let victim = Instance::as_users_run_it(sim, Some(&redis.url())).await;
    let survivor = Instance::as_users_run_it(sim, Some(&redis.url())).await;
    let addr = victim
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("a loopback address");
    let proxy = FaultProxy::start(addr).await;
    (victim, survivor, proxy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_before_the_providers_task_id_arrives_costs_one_more_task() {
    let redis = RedisServer::start();
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_secs(2)), 100).await;
    let (mut victim, survivor, proxy) = two_gateways(&sim, &redis).await;
    let http = reqwest::Client::new();
    // Every provider reply held back a minute: the task is made, its id does not come back.
    sim.sim
        .set_faults(Faults {
            slow_rate: 1.0,
            slow_ms: 60_000,
            ..Faults::default()
        })
        .unwrap();
    let first =
        tokio::spawn(solve(&http, &format!("http://{}", proxy.addr), "window-submit").send());
    eventually(
        Duration::from_secs(30),
        "the provider accepting the task",
        || async { sim.sim.stats().submits == 1 },
    )
    .await;
    assert_eq!(
        redis.noted_provider_tasks().await,
        0,
        "its id never arrived"
    );
    victim.kill().await;
    sim.sim.set_faults(Faults::default()).unwrap();
    assert!(
        first.await.unwrap().is_err(),
        "the first call's connection died"
    );

    answered_once(&http, &sim, &survivor.base, "window-submit").await;
    assert_eq!(
        sim.sim.stats().submits,
        2,
        "the price: the task whose id never arrived, and the one that answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_while_its_answer_is_on_the_wire_is_answered_again_with_it() {
    let redis = RedisServer::start();
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_secs(2)), 100).await;
    let (mut victim, survivor, proxy) = two_gateways(&sim, &redis).await;
    let http = reqwest::Client::new();
    let first =
        tokio::spawn(solve(&http, &format!("http://{}", proxy.addr), "window-answer").send());
    eventually(
        Duration::from_secs(30),
        "the call running on the first gateway",
        || async { metric_sum(&http, &victim.base, "captcha_gateway_active_solves").await == 1 },
    )
    .await;
    // The answer, once written, waits in the network for as long as the test says.
    proxy.set(Mode::HoldReplies);
    eventually(
        Duration::from_secs(30),
        "the first gateway done with the call",
        || async { metric_sum(&http, &victim.base, "captcha_gateway_active_solves").await == 0 },
    )
    .await;
    victim.kill().await;
    proxy.set(Mode::Reset);
    assert!(
        first.await.unwrap().is_err(),
        "the answer never reached the caller"
    );

    answered_once(&http, &sim, &survivor.base, "window-answer").await;
    assert_eq!(
        sim.sim.stats().submits,
        1,
        "answered from the task's record"
    );
}
