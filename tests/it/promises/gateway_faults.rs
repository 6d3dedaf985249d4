//! Gateways going away or disagreeing about the time under load: a rolling restart, clocks
//! skewed both ways, the leader of a reusable target killed.

use std::collections::HashSet;
use std::time::Duration;

use captcha_gateway::sim::LatencyRange;
use serde_json::json;

use super::harness::{
    CALLER_TIMEOUT_S, Fleet, HTTP_SLACK, LEASE_S, POOLED_TASKS, SOON, join, pooled_on, redis_cli,
};
use super::history::{Rules, check};
use super::solve_time;
use crate::support::eventually::eventually;
use crate::support::redis::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_every_gateway_keeps_every_promise() {
    let redis = RedisServer::start();
    // A grace period longer than a solve: what a stopping instance started can finish.
    let mut fleet = Fleet::start(&redis.url(), solve_time(), "shutdown_grace_s = 5").await;
    // Stocked first, so the first wave takes pooled answers while the restarts begin.
    eventually(SOON, "pools stocked", || async {
        pooled_on(redis.port) >= POOLED_TASKS as usize
    })
    .await;
    let mut callers = fleet.wave(0..60);
    fleet.tasks_started(20).await;

    for (old, wave) in [(0, 60..110), (1, 110..160), (2, 160..210)] {
        let status = fleet.terminate(old).await;
        assert!(status.success(), "gateway {old} exits cleanly: {status}");
        fleet.add(&[]).await;
        callers.extend(fleet.wave(wave));
    }

    let history = join(callers).await;
    let rules = Rules {
        stopped: HashSet::from([0, 1, 2]),
        extra_tasks: POOLED_TASKS,
        extra_why: "the pools' stock",
        twice_expected: false,
    };
    let figures = check(&fleet, "rolling_restart", &history, rules).await;
    assert!(
        figures.from_pool > 0,
        "callers took pooled answers while the gateways restarted"
    );
}

/// libfaketime's preload library, or a failure saying how to get it: a skipped test is a
/// failing test. The library is preloaded through `env`, which execs the gateway: the `faketime`
/// command forks and waits instead, so killing it would leave the gateway running.
fn libfaketime() -> String {
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "dpkg -L libfaketime 2>/dev/null | grep '/libfaketime.so.1$'",
        ])
        .output()
        .expect("sh runs");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        out.status.success() && !path.is_empty(),
        "libfaketime is not installed: `apt-get install faketime` (scripts/test installs it)"
    );
    path
}

/// A wrapper running the gateway with its clock shifted by `offset` (libfaketime's syntax).
fn shifted(preload: &str, offset: &str) -> [String; 3] {
    [
        "/usr/bin/env".to_owned(),
        format!("LD_PRELOAD={preload}"),
        format!("FAKETIME={offset}"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_five_seconds_ahead_and_behind_keep_every_promise() {
    let preload = libfaketime();
    let redis = RedisServer::start();
    let (ahead, behind) = (shifted(&preload, "+5s"), shifted(&preload, "-5s"));
    let ahead: &[&str] = &ahead.each_ref().map(String::as_str);
    let behind: &[&str] = &behind.each_ref().map(String::as_str);
    let fleet =
        Fleet::start_wrapped(&redis.url(), solve_time(), "", true, &[ahead, &[], behind]).await;
    let mut callers = fleet.wave(0..100);
    fleet.tasks_started(30).await;
    // Stocked pools, so the second wave takes answers another gateway's clock stamped.
    eventually(SOON, "the pools stocked", || async {
        pooled_on(redis.port) >= POOLED_TASKS as usize
    })
    .await;
    callers.extend(fleet.wave(100..200));

    let history = join(callers).await;
    let rules = Rules::allowing(POOLED_TASKS, "the pools' stock");
    let figures = check(&fleet, "clock_skew", &history, rules).await;
    assert!(
        figures.from_pool > 0,
        "skewed gateways handed out pooled answers"
    );
}

/// The control for the skew scenario: libfaketime itself does not break a gateway (every
/// clock shifted alike leaves nothing to disagree about), so a failure there is the skew's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_all_five_seconds_behind_alike_keep_every_promise() {
    let preload = libfaketime();
    let redis = RedisServer::start();
    let behind = shifted(&preload, "-5s");
    let behind: &[&str] = &behind.each_ref().map(String::as_str);
    let fleet = Fleet::start_wrapped(
        &redis.url(),
        solve_time(),
        "",
        true,
        &[behind, behind, behind],
    )
    .await;
    let history = join(fleet.wave(0..60)).await;
    let rules = Rules::allowing(POOLED_TASKS, "the pools' stock");
    check(&fleet, "clock_all_behind_control", &history, rules).await;
}

/// A reusable target: a Cloudflare challenge for one host, proxy and user agent.
fn clearance() -> serde_json::Value {
    json!({"kind": "cloudflare_challenge", "pageurl": "https://example.com/", "proxy": "u:p@127.0.0.1:3128", "user_agent": "UA/1"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reusable_targets_leader_killed_hands_over_within_a_lease() {
    const SOLVE: Duration = Duration::from_secs(6);
    let redis = RedisServer::start();
    let mut fleet = Fleet::start_wrapped(
        &redis.url(),
        LatencyRange::fixed(SOLVE),
        "",
        false,
        &[&[], &[], &[]],
    )
    .await;

    // The first caller, on gateway 0, leads: its task is the only one.
    let mut callers = vec![fleet.caller(0, clearance(), Some(0), CALLER_TIMEOUT_S)];
    fleet.tasks_started(1).await;
    // Sixty callers on gateways 1 and 2 follow it.
    callers
        .extend((1..=60).map(|c| fleet.caller(c, clearance(), Some(1 + c % 2), CALLER_TIMEOUT_S)));
    let conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let followers = redis_cli(redis.port, &["--scan", "--pattern", "cg:{t:*}:followed"]);
    let followers = followers.trim().to_owned();
    assert!(!followers.is_empty(), "the target has a followers set");
    eventually(SOON, "sixty followers registered in Redis", || {
        let (conn, key) = (conn.clone(), followers.clone());
        async move {
            let mut conn = conn;
            // The leader's own waiter is in the set too.
            redis::cmd("ZCARD")
                .arg(key)
                .query_async::<usize>(&mut conn)
                .await
                .unwrap_or(0)
                > 60
        }
    })
    .await;
    assert_eq!(fleet.submits(), 1, "followers start no task of their own");

    fleet.kill(0).await;
    // Later arrivals must be answered within about a lease: a new leader's whole solve, plus
    // the lease for the dead leader's lock to lapse and a coverer's tick (a third of a lease)
    // for a follower's instance to notice.
    let takeover = Duration::from_secs_f64(LEASE_S * 4.0 / 3.0);
    let later_s = (takeover + SOLVE + HTTP_SLACK).as_secs_f64();
    callers.extend((61..=120).map(|c| fleet.caller(c, clearance(), Some(1 + c % 2), later_s)));

    let history = join(callers).await;
    let rules = Rules {
        stopped: HashSet::from([0]),
        extra_tasks: 0,
        extra_why: "a reusable target needs one task per leader",
        twice_expected: false,
    };
    check(&fleet, "reusable_leader_killed", &history, rules).await;
    assert!(
        fleet.submits() <= 2,
        "{} upstream tasks: one for the dead leader, one for its successor",
        fleet.submits()
    );
}
