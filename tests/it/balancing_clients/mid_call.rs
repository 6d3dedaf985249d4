//! A gateway `kill -9`ed while it holds calls, with the clients at their default settings (only
//! the gateways and the key) and the gateways configured as users run them against a provider.
//! Every solve carries a generated idempotency key, so a call whose connection died is sent to
//! another gateway. On one Redis that gateway resumes the same task and adopts the provider task
//! the dead one had submitted: every caller is answered, each token valid once at the
//! simulator, upstream tasks equal to callers. Without a shared store (each gateway's keys are
//! its own) the resent call is solved again: every caller is still answered, and each call the
//! dead gateway held costs one more provider task. The same 120 Python callers through the
//! shipped NGINX config give the comparison.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use captcha_gateway::sim::LatencyRange;
use captcha_gateway_client::{Client, SolveRequest};
use serde_json::Value;
use tokio::process::Command;

use super::Instance;
use crate::clients::python;
use crate::nginx::Nginx;
use crate::support::KEY;
use crate::support::eventually::eventually;
use crate::support::fleet::SimServer;
use crate::support::redis::RedisServer;

/// Callers of tests/python/mid_call.py: 60 sync, 30 asyncio, 30 through the seed's balancer.
const PYTHON_CALLERS: u64 = 120;
const RUST_CALLERS: u64 = 30;

/// Solves of 3-5 s: long enough that the kill finds calls running.
async fn simulator() -> SimServer {
    let latency = LatencyRange {
        min: Duration::from_secs(3),
        max: Duration::from_secs(5),
    };
    SimServer::start(latency, 2000).await
}

async fn gateways(sim: &SimServer, redis: Option<&RedisServer>, n: usize) -> Vec<Instance> {
    let url = redis.map(RedisServer::url);
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(Instance::as_users_run_it(sim, url.as_deref()).await);
    }
    out
}

/// Once every call is submitted upstream (and, on Redis, noted for adoption), kills
/// `gateways[victim]`; returns how many solves it was running.
async fn kill_mid_call(
    sim: &SimServer,
    redis: Option<&RedisServer>,
    gateways: &mut [Instance],
    victim: usize,
    calls: u64,
) -> u64 {
    eventually(
        Duration::from_secs(60),
        "every call submitted upstream and noted for adoption",
        || async {
            let noted = match redis {
                Some(r) => r.noted_provider_tasks().await as u64,
                None => calls,
            };
            sim.sim.stats().submits == calls && noted == calls
        },
    )
    .await;
    let http = reqwest::Client::new();
    let on_victim = crate::support::metric_sum(
        &http,
        &gateways[victim].base,
        "captcha_gateway_active_solves",
    )
    .await;
    assert!(on_victim > 0, "the balancing put calls on every gateway");
    gateways[victim].kill().await;
    on_victim
}

/// Every token valid and handed out once, by the simulator's own check.
async fn assert_all_valid(sim: &SimServer, tokens: &[String]) {
    let http = reqwest::Client::new();
    for token in tokens {
        let verdict = sim.verify(&http, token).await;
        assert_eq!(verdict["success"], true, "{verdict}");
    }
}

/// Runs tests/python/mid_call.py over `backends`, kills `gateways[1]` mid-call, and returns the
/// tokens and how many calls the dead gateway held.
async fn python_callers(
    sim: &SimServer,
    redis: &RedisServer,
    gateways: &mut [Instance],
    backends: &[String],
) -> (Vec<String>, u64) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/mid_call.py");
    let child = Command::new(python())
        .arg(script)
        .arg(KEY)
        .args(backends)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("python runs");
    let on_victim = kill_mid_call(sim, Some(redis), gateways, 1, PYTHON_CALLERS).await;
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "the script failed (its error is above)"
    );
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    let v: Value = serde_json::from_str(&last).expect("the result as JSON");
    assert_eq!(v["errors"], serde_json::json!([]), "every caller answered");
    let tokens = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().expect("a token").to_owned())
        .collect();
    (tokens, on_victim)
}

#[tokio::test]
async fn python_callers_at_default_settings_lose_no_call_to_a_gateway_killed_mid_call() {
    let redis = RedisServer::start();
    let sim = simulator().await;
    let mut gateways = gateways(&sim, Some(&redis), 3).await;
    let backends: Vec<String> = gateways.iter().map(|g| g.base.clone()).collect();
    let (tokens, on_victim) = python_callers(&sim, &redis, &mut gateways, &backends).await;
    let submits = sim.sim.stats().submits;
    println!(
        "FIGURE python clients, gateway killed mid-call: {on_victim} of {PYTHON_CALLERS} calls were on it; {} answered; upstream submits {submits}",
        tokens.len()
    );
    assert_eq!(tokens.len() as u64, PYTHON_CALLERS);
    assert_eq!(
        submits, PYTHON_CALLERS,
        "the dead gateway's provider tasks were adopted, not paid again"
    );
    assert_all_valid(&sim, &tokens).await;
}

#[tokio::test]
async fn the_same_callers_through_the_shipped_nginx_config_lose_no_call_either() {
    let redis = RedisServer::start();
    let sim = simulator().await;
    let mut gateways = gateways(&sim, Some(&redis), 3).await;
    let bases: Vec<String> = gateways.iter().map(|g| g.base.clone()).collect();
    let nginx = Nginx::start(&bases).await;
    let (tokens, on_victim) = python_callers(
        &sim,
        &redis,
        &mut gateways,
        std::slice::from_ref(&nginx.base),
    )
    .await;
    let submits = sim.sim.stats().submits;
    println!(
        "FIGURE python clients through NGINX, gateway killed mid-call: {on_victim} of {PYTHON_CALLERS} calls were on it; {} answered; upstream submits {submits}",
        tokens.len()
    );
    assert_eq!(tokens.len() as u64, PYTHON_CALLERS);
    assert_eq!(submits, PYTHON_CALLERS);
    assert_all_valid(&sim, &tokens).await;
}

/// What the Rust callers got: a token each, or the error.
struct RustRun {
    answers: Vec<Result<String, captcha_gateway_client::Error>>,
    on_victim: u64,
    submits: u64,
    sim: SimServer,
}

impl RustRun {
    fn tokens(&self) -> Vec<String> {
        self.answers
            .iter()
            .map(|a| a.as_ref().expect("every caller answered").clone())
            .collect()
    }
}

/// `RUST_CALLERS` solves through the Rust client at its defaults (generated keys on or off)
/// over two gateways, one of them killed mid-call.
async fn rust_callers(shared: bool, generated_keys: bool) -> RustRun {
    let redis = shared.then(RedisServer::start);
    let sim = simulator().await;
    let mut gateways = gateways(&sim, redis.as_ref(), 2).await;
    let client = Client::builder()
        .backends(gateways.iter().map(|g| g.base.clone()))
        .key(KEY)
        .generated_idempotency_keys(generated_keys)
        .build()
        .expect("default settings are valid");
    let calls: Vec<_> = (0..RUST_CALLERS)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let request = SolveRequest::recaptcha_v2(
                    &format!("6Le-mid-rust-{i}"),
                    "https://mid-call.example.com/",
                );
                let answer = client.solve(&request).await?;
                Ok(answer.token_text().expect("a token").to_owned())
            })
        })
        .collect();
    let on_victim = kill_mid_call(&sim, redis.as_ref(), &mut gateways, 1, RUST_CALLERS).await;
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap());
    }
    let submits = sim.sim.stats().submits;
    RustRun {
        answers,
        on_victim,
        submits,
        sim,
    }
}

#[tokio::test]
async fn rust_callers_on_one_redis_lose_no_call_and_pay_each_once() {
    let run = rust_callers(true, true).await;
    println!(
        "FIGURE rust client on Redis, gateway killed mid-call: {} of {RUST_CALLERS} on it; upstream submits {}",
        run.on_victim, run.submits
    );
    assert_eq!(run.submits, RUST_CALLERS);
    assert_all_valid(&run.sim, &run.tokens()).await;
}

#[tokio::test]
async fn rust_callers_without_a_shared_store_are_answered_and_pay_again_for_what_the_dead_one_held()
{
    let run = rust_callers(false, true).await;
    println!(
        "FIGURE rust client, embedded stores, gateway killed mid-call: {} of {RUST_CALLERS} on it; upstream submits {}",
        run.on_victim, run.submits
    );
    let tokens = run.tokens();
    assert_eq!(tokens.len() as u64, RUST_CALLERS);
    assert_eq!(
        run.submits,
        RUST_CALLERS + run.on_victim,
        "each call the dead gateway held was solved again by the one that knew nothing of it"
    );
    assert_all_valid(&run.sim, &tokens).await;
}

/// With generated keys turned off, a call that may have started is never sent again: the dead
/// gateway's callers get the transport error, the others their tokens, and nothing is paid twice.
#[tokio::test]
async fn rust_callers_with_generated_keys_off_get_the_dead_gateways_error() {
    let run = rust_callers(true, false).await;
    let failed: Vec<_> = run
        .answers
        .iter()
        .filter_map(|a| a.as_ref().err())
        .collect();
    assert_eq!(failed.len() as u64, run.on_victim, "{failed:?}");
    for e in &failed {
        assert!(
            matches!(
                e,
                captcha_gateway_client::Error::Transport { sent: true, .. }
            ),
            "{e:?}"
        );
    }
    assert_eq!(run.submits, RUST_CALLERS, "nothing was sent twice");
}
