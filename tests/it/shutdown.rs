//! Shutdown ends within its grace period even while callers hold solves open (open connections
//! are not awaited without a limit before the grace period applies).
//!
//! The caller that held shutdown open is one waiting for a task of *another* instance sharing
//! the store (a reusable answer being solved elsewhere): the instance's own tasks were always
//! bounded by the grace period, such a caller was not. Each test holds such a caller on a ten-minute solve,
//! shuts its gateway down with a one-second grace period, and requires it to end before a
//! generous deadline; a hang fails with a message instead of a threshold on how long shutdown
//! took.

use std::time::Duration;

use captcha_gateway::model::Kind;
use captcha_gateway::sim::LatencyRange;
use serde_json::{Value, json};

use captcha_gateway::engine::store::redis::RedisSettings;

use crate::support::eventually::eventually;
use crate::support::gateway::{Launch, Stderr};
use crate::support::redis::RedisServer;
use crate::support::{KEY, TestGateway, fast_settings};

/// Far beyond the grace period: reaching it means shutdown waited on the held solve.
const HANG: Duration = Duration::from_secs(60);

/// A reusable answer that takes ten minutes: a second caller of the same question, on any
/// instance sharing the store, waits for the first caller's task instead of starting its own.
fn long_question() -> Value {
    json!({"kind": "text", "text": "What is the answer to the ultimate question?", "timeout_s": 600})
}

const TEN_MINUTES: LatencyRange = LatencyRange {
    min: Duration::from_secs(600),
    max: Duration::from_secs(600),
};

/// A gateway on `redis` whose simulator takes ten minutes for text, with a one-second grace.
fn slow_settings(redis: &RedisServer) -> captcha_gateway::config::Settings {
    let mut settings = fast_settings();
    settings.shutdown_grace = Duration::from_secs(1);
    settings.sim.latency.insert(Kind::Text, TEN_MINUTES);
    settings.redis = Some(RedisSettings::new(vec![redis.url()], false));
    // Slow polls, so the poller's check budget outlasts the test instead of giving up early.
    settings.poll.first_check = Some(Duration::from_secs(5));
    settings.poll = settings.poll.clone().with_interval(Duration::from_secs(5));
    settings
}

/// Sends `long_question` to `base` in the background.
fn ask(
    http: &reqwest::Client,
    base: &str,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let request = http
        .post(format!("{base}/v1/solve"))
        .bearer_auth(KEY)
        .json(&long_question());
    tokio::spawn(async move { request.send().await })
}

async fn active_solves(http: &reqwest::Client, base: &str) -> u64 {
    let health: Value = http
        .get(format!("{base}/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    health["active_tasks"].as_u64().unwrap()
}

/// The held caller must be let go (its connection closes, or it gets an error) without success.
async fn assert_let_go(caller: tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>) {
    let answer = tokio::time::timeout(HANG, caller)
        .await
        .unwrap_or_else(|_| panic!("the held caller still had no answer {HANG:?} after shutdown"))
        .unwrap();
    assert!(
        answer.is_err() || !answer.as_ref().unwrap().status().is_success(),
        "a ten-minute solve cannot have succeeded: {answer:?}"
    );
}

#[tokio::test]
async fn the_serve_future_ends_within_the_grace_period_while_a_caller_waits_on_another_instance() {
    let redis = RedisServer::start();
    let other = TestGateway::with(slow_settings(&redis)).await;
    let leaving = TestGateway::with(slow_settings(&redis)).await;
    let first = ask(&other.http, &other.url(""));
    eventually(
        HANG,
        "the other instance's task is running upstream",
        || async { other.stat("current_concurrent").await == 1 },
    )
    .await;
    let held = ask(&leaving.http, &leaving.url(""));
    eventually(HANG, "the leaving instance holds a caller", || async {
        active_solves(&leaving.http, &leaving.url("")).await == 1
    })
    .await;
    assert_eq!(
        leaving.stat("current_concurrent").await,
        0,
        "the caller waits on the other instance's task, not one of its own"
    );

    let TestGateway { gateway, .. } = leaving;
    gateway.shutdown.token.cancel();
    tokio::time::timeout(HANG, gateway.wait())
        .await
        .unwrap_or_else(|_| {
            panic!("the gateway was still shutting down {HANG:?} after the signal (grace 1 s)")
        })
        .expect("a clean stop");
    assert_let_go(held).await;
    if first.is_finished() {
        let r = first.await.unwrap();
        let s = r.as_ref().map(|r| r.status()).ok();
        panic!(
            "the other instance's caller is untouched: {s:?} {:?}",
            r.map(|r| r.url().clone())
        );
    }
}

#[tokio::test]
async fn the_process_exits_within_the_grace_period_on_sigterm_while_a_caller_waits() {
    let redis = RedisServer::start();
    let other = TestGateway::with(slow_settings(&redis)).await;
    let mut gateway = Launch::serve(format!(
        "provider = \"sim\"\nlisten = \"127.0.0.1:0\"\nshutdown_grace_s = 1\nredis_url = \"{}\"\n\
         [sim.latency]\ntext = \"600s..600s\"\n[poll]\nfirst_check_s = 5\ninterval_s = 5\n",
        redis.url()
    ))
    .stderr(Stderr::Null)
    .start()
    .await;
    let base = gateway.base.clone();
    let http = reqwest::Client::new();
    let _first = ask(&other.http, &other.url(""));
    eventually(
        HANG,
        "the other instance's task is running upstream",
        || async { other.stat("current_concurrent").await == 1 },
    )
    .await;
    let held = ask(&http, &base);
    eventually(HANG, "the process holds a caller", || async {
        active_solves(&http, &base).await == 1
    })
    .await;

    gateway.terminate();
    let status = tokio::time::timeout(HANG, gateway.exited())
        .await
        .unwrap_or_else(|_| {
            panic!("the gateway process still ran {HANG:?} after SIGTERM (grace 1 s)")
        });
    assert!(status.success(), "a clean exit after SIGTERM: {status:?}");
    assert_let_go(held).await;
}
