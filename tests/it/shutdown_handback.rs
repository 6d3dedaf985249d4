//! A rolling restart costs callers on other instances nothing: a stopping instance must not fail
//! its running tasks, or the store would hand each failure to a waiting caller, often one on
//! another instance.
//!
//! Two gateways on one Redis. A caller on A starts a task and leaves; a caller on B then waits
//! for that task of A's instead of starting its own. A is stopped with SIGTERM. B's caller must
//! get a valid token: from A's task when the grace period lets it finish, or, when the grace is
//! too short, from the claim B's coverer starts once A hands its claim back, which adopts (polls)
//! the provider task A had submitted instead of paying for the work again.

use std::time::Duration;

use captcha_gateway::model::now_ms;
use captcha_gateway::sim::LatencyRange;
use serde_json::{Value, json};

use crate::support::eventually::eventually;
use crate::support::fleet::{SimServer, client};
use crate::support::gateway::GatewayProcess;
use crate::support::redis::RedisServer;
use crate::support::{KEY, metric_sum, solve};

/// Ends a hang; never a measure of how long anything took.
const HANG: Duration = Duration::from_secs(90);

/// Solves take this long: the task A starts is still running when A is stopped.
const SOLVE: Duration = Duration::from_secs(6);

fn question(timeout_s: f64) -> Value {
    json!({"kind": "recaptcha_v2", "sitekey": "6Le-handback", "pageurl": "https://example.com/", "timeout_s": timeout_s})
}

/// What B's caller got, and when A was signalled (ms since epoch).
struct Run {
    status: u16,
    reply: Value,
    verdict: Value,
    signalled_at: u64,
    submits: u64,
}

/// Runs the scenario with A's `shutdown_grace_s`; asserts A exits cleanly.
async fn stop_a_while_b_waits_on_its_task(grace_s: f64) -> Run {
    let redis = RedisServer::start();
    let sim = SimServer::start(LatencyRange::fixed(SOLVE), 100).await;
    // A short lease: B's coverer looks for uncovered demand every second.
    let a_toml = format!("redis_lease_s = 3\nshutdown_grace_s = {grace_s}");
    let mut a = GatewayProcess::start(&sim, &redis.url(), &a_toml, 0.5).await;
    let b = GatewayProcess::start(&sim, &redis.url(), "redis_lease_s = 3", 0.5).await;
    let http = client();
    let waiting = || async { metric_sum(&http, &b.base, "captcha_gateway_target_waiting").await };

    // A's caller starts the one task and leaves; the task runs on, claimed by A.
    let (status, reply) = solve(&http, &a.base, question(0.2)).await;
    assert_eq!(status, 504, "{reply}");
    eventually(HANG, "A's caller's wait to be given up", || async {
        waiting().await == 0
    })
    .await;
    // B's caller is covered by A's task: it waits, no second task starts.
    let caller = tokio::spawn({
        let (http, base) = (http.clone(), b.base.clone());
        async move { solve(&http, &base, question(60.0)).await }
    });
    eventually(HANG, "B's caller waiting fleet-wide", || async {
        waiting().await == 1
    })
    .await;
    assert_eq!(sim.sim.stats().submits, 1, "B's caller waits on A's task");
    assert!(!caller.is_finished());

    let signalled_at = now_ms();
    a.terminate();
    let exit = tokio::time::timeout(HANG, a.exited())
        .await
        .expect("A exits after its grace period");
    assert!(exit.success(), "a clean exit after SIGTERM: {exit:?}");

    let (status, reply) = tokio::time::timeout(HANG, caller)
        .await
        .expect("B's caller is answered")
        .unwrap();
    let verdict = match reply["token"].as_str() {
        Some(token) => sim.verify(&http, token).await,
        None => Value::Null,
    };
    Run {
        status,
        reply,
        verdict,
        signalled_at,
        submits: sim.sim.stats().submits,
    }
}

#[tokio::test]
async fn a_task_that_ends_within_the_grace_answers_the_caller_on_another_instance() {
    let run = stop_a_while_b_waits_on_its_task(60.0).await;
    assert_eq!(run.status, 200, "no error for B's caller: {}", run.reply);
    assert_eq!(run.verdict["success"], true, "{}", run.verdict);
    assert_eq!(
        run.submits, 1,
        "A's task answered B's caller; B never needed one of its own"
    );
    let solved_at = run.verdict["solved_at"].as_u64().unwrap();
    assert!(
        solved_at >= run.signalled_at,
        "the answer came from the task A kept polling after the signal ({solved_at} < {})",
        run.signalled_at
    );
}

#[tokio::test]
async fn a_task_cut_short_is_handed_back_and_the_callers_instance_covers_it() {
    let run = stop_a_while_b_waits_on_its_task(1.0).await;
    assert_eq!(run.status, 200, "no error for B's caller: {}", run.reply);
    assert_eq!(run.verdict["success"], true, "{}", run.verdict);
    assert_eq!(
        run.submits, 1,
        "A's task was cut short; B's coverer adopted its provider task instead of submitting"
    );
}

#[tokio::test]
async fn a_caller_still_waiting_on_the_stopping_instance_is_told_so() {
    let redis = RedisServer::start();
    // Nothing ends within the grace: the caller's task is still running at the cut.
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_secs(600)), 100).await;
    let toml = "redis_lease_s = 3\nshutdown_grace_s = 4";
    // Slow checks, so the poller's budget outlasts the test instead of giving the task up.
    let mut a = GatewayProcess::start(&sim, &redis.url(), toml, 2.0).await;
    let http = client();
    let request = http
        .post(format!("{}/v1/solve", a.base))
        .bearer_auth(KEY)
        .json(&question(60.0));
    let caller = tokio::spawn(async move { request.send().await });
    eventually(HANG, "the caller's task to be submitted", || async {
        sim.sim.stats().submits == 1
    })
    .await;

    a.terminate();
    let reply = tokio::time::timeout(HANG, caller)
        .await
        .expect("the caller is answered")
        .unwrap()
        .expect("a reply, not a dropped connection");
    assert_eq!(reply.status().as_u16(), 503);
    assert!(reply.headers().contains_key("retry-after"));
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["error"]["code"], "shutting_down", "{body}");
    let exit = tokio::time::timeout(HANG, a.exited())
        .await
        .expect("A exits after its grace period");
    assert!(exit.success(), "a clean exit after SIGTERM: {exit:?}");
}
