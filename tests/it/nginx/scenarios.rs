//! One fault per test behind the shipped NGINX config: a frozen instance, a killed and restarted
//! one (with slow start), one killed while it solves, one at capacity. Each prints `FIGURE`
//! lines with what it measured (docs/DEPLOY.md "Load balancing" quotes them).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use captcha_gateway::model::Kind;
use captcha_gateway::sim::{LatencyRange, SimSettings, Simulator};

use super::{Nginx, Outcome, run_calls, solve, solves_at};
use crate::balancing_clients::{Instance, simulator};
use crate::support::eventually::eventually;
use crate::support::fleet::SimServer;
use crate::support::redis::RedisServer;

async fn three(
    sim: &SimServer,
    redis: &RedisServer,
    max: [u32; 3],
    warmup_s: f64,
) -> Vec<Instance> {
    let mut gateways = Vec::new();
    for m in max {
        gateways.push(Instance::start_warming_up(sim, &redis.url(), m, warmup_s, "").await);
    }
    gateways
}

fn bases(gateways: &[Instance]) -> Vec<String> {
    gateways.iter().map(|g| g.base.clone()).collect()
}

async fn shares(http: &reqwest::Client, gateways: &[Instance]) -> Vec<u64> {
    let mut out = Vec::new();
    for g in gateways {
        out.push(solves_at(http, &g.base).await);
    }
    out
}

fn assert_all_solved(outcomes: &[Outcome], what: &str) {
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.token().is_none()).collect();
    assert!(
        failed.is_empty(),
        "{what}: {} failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
}

#[tokio::test]
async fn nginx_least_conn_sends_new_calls_away_from_a_frozen_gateway() {
    const CALLERS: usize = 12;
    const CALLS: usize = 120;
    let redis = RedisServer::start();
    let sim = simulator().await;
    let gateways = three(&sim, &redis, [2000; 3], 0.0).await;
    let nginx = Nginx::start(&bases(&gateways)).await;
    let http = crate::support::fleet::client();

    // Frozen: it accepts connections (the kernel does) but answers nothing, like a stuck process.
    gateways[1].signal("STOP");
    let done = Arc::new(AtomicUsize::new(0));
    let run = tokio::spawn({
        let (http, base, done) = (http.clone(), nginx.base.clone(), done.clone());
        async move { run_calls(&http, &base, 0, CALLS, CALLERS, done).await }
    });
    // Each caller holds one call at a time, so at most CALLERS calls can be stuck on it; the
    // rest finish only if NGINX sends them elsewhere.
    eventually(
        Duration::from_secs(60),
        "every call not stuck on the frozen one",
        || {
            let done = done.clone();
            async move { done.load(Ordering::Acquire) >= CALLS - CALLERS }
        },
    )
    .await;
    gateways[1].signal("CONT");
    let outcomes = run.await.unwrap();
    assert_eq!(outcomes.len(), CALLS);
    assert_all_solved(&outcomes, "after the thaw");

    let share = shares(&http, &gateways).await;
    println!(
        "FIGURE nginx frozen gateway: per-instance solves {share:?} of {CALLS} ({CALLERS} callers; the frozen one's are the calls it held until it thawed)"
    );
    assert_eq!(share.iter().sum::<u64>(), CALLS as u64);
    // least_conn sends a call to the frozen one only while it holds no more open calls than the
    // others (about a third of the callers); round-robin would have sent it a third of the calls.
    assert!(
        share[1] <= (CALLERS / 2) as u64,
        "least_conn kept sending to it: {share:?}"
    );
    assert_eq!(
        sim.sim.stats().submits,
        CALLS as u64,
        "one upstream task per call"
    );
}

#[tokio::test]
async fn nginx_loses_no_caller_when_a_gateway_is_killed_or_restarts_warming_up() {
    const CALLERS: usize = 15;
    const ROUND: usize = 30;
    let redis = RedisServer::start();
    let sim = simulator().await;
    // A warm-up longer than NGINX's fail_timeout (10 s), and a limit small enough for the ramp
    // to matter: the restarted one is still warming up when NGINX lets it back.
    let mut gateways = three(&sim, &redis, [30; 3], 30.0).await;
    let nginx = Nginx::start(&bases(&gateways)).await;
    let http = crate::support::fleet::client();
    let done = Arc::new(AtomicUsize::new(0));
    let mut outcomes = Vec::new();
    let mut calls = 0;

    outcomes.extend(run_calls(&http, &nginx.base, calls, ROUND, CALLERS, done.clone()).await);
    calls += ROUND;
    let before_kill = shares(&http, &gateways).await;
    assert!(
        before_kill.iter().all(|&n| n > 0),
        "an idle fleet is used evenly: {before_kill:?}"
    );

    // Killed between rounds, while callers keep coming: its port now refuses, which NGINX moves.
    gateways[1].kill().await;
    for _ in 0..2 {
        outcomes.extend(run_calls(&http, &nginx.base, calls, ROUND, CALLERS, done.clone()).await);
        calls += ROUND;
    }
    assert_all_solved(&outcomes, "with one killed");

    gateways[1].restart().await;
    let restarted = Instant::now();
    let health: serde_json::Value = http
        .get(format!("{}/health", gateways[1].base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    println!(
        "FIGURE nginx restart: /health right after the restart: warming_up={} limit_now={} of {}",
        health["warming_up"], health["limit_now"], health["max_concurrent"]
    );
    // Rounds go on until NGINX gives it calls again (after fail_timeout); none may fail.
    let mut rounds_until_back = 0;
    while solves_at(&http, &gateways[1].base).await == 0 {
        assert!(
            rounds_until_back < 400,
            "the restarted gateway never got calls again"
        );
        outcomes.extend(run_calls(&http, &nginx.base, calls, ROUND, CALLERS, done.clone()).await);
        calls += ROUND;
        rounds_until_back += 1;
    }
    let readmitted_after = restarted.elapsed();
    let health: serde_json::Value = http
        .get(format!("{}/health", gateways[1].base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    println!(
        "FIGURE nginx restart: /health when NGINX let it back: warming_up={} limit_now={} of {}",
        health["warming_up"], health["limit_now"], health["max_concurrent"]
    );
    outcomes.extend(run_calls(&http, &nginx.base, calls, ROUND, CALLERS, done.clone()).await);
    calls += ROUND;
    assert_all_solved(&outcomes, "around the restart");

    let after = shares(&http, &gateways).await;
    let failed = outcomes.iter().filter(|o| o.token().is_none()).count();
    println!(
        "FIGURE nginx kill and restart: {calls} calls, {failed} failed; solves before the kill {before_kill:?}, restarted one after {after:?}; re-admitted {readmitted_after:?} after the restart ({rounds_until_back} rounds)"
    );
    assert_eq!(outcomes.len(), calls);
    assert_eq!(
        sim.sim.stats().submits,
        calls as u64,
        "one upstream task per call, none twice"
    );
    let tokens = outcomes.iter().filter_map(Outcome::token);
    for token in tokens {
        let v = sim.verify(&http, token).await;
        assert_eq!(v["success"], true, "{v}");
    }
}

/// A simulator whose turnstile solves take a minute (to keep an instance busy) and every other
/// kind 50-100 ms.
pub(super) async fn simulator_with_slow_turnstile() -> SimServer {
    simulator_with_turnstile_taking(Duration::from_secs(60)).await
}

/// A simulator whose turnstile solves take `turnstile` and every other kind 50-100 ms.
async fn simulator_with_turnstile_taking(turnstile: Duration) -> SimServer {
    let mut settings = SimSettings {
        threads: 5000,
        ..SimSettings::default()
    };
    for kind in Kind::ALL {
        settings.latency.insert(
            kind,
            LatencyRange {
                min: Duration::from_millis(50),
                max: Duration::from_millis(100),
            },
        );
    }
    settings
        .latency
        .insert(Kind::Turnstile, LatencyRange::fixed(turnstile));
    let sim = Simulator::new(settings);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(captcha_gateway::sim::serve(
        sim.clone(),
        listener,
        std::future::pending(),
    ));
    SimServer { sim, addr }
}

/// Holds `n` turnstile solves on `base` directly (not through NGINX) until the tasks are dropped.
fn hold_busy(http: &reqwest::Client, base: &str, n: usize) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|i| {
            let (http, base) = (http.clone(), base.to_owned());
            tokio::spawn(async move {
                let body = serde_json::json!({"kind": "turnstile", "sitekey": format!("0x4-busy-{i}"), "pageurl": "https://example.com/"});
                let _ = crate::support::solve(&http, &base, body).await;
            })
        })
        .collect()
}

/// A solve on an instance that dies is moved by NGINX under its idempotency key (NGINX names
/// every solve); the instance it lands on joins the key's task, takes it over once the dead
/// one's lease lapsed, and adopts the provider task the dead one had submitted: the caller gets
/// its answer and the provider is paid once.
#[tokio::test]
async fn nginx_moves_a_solve_a_killed_gateway_had_started_and_the_provider_solves_it_once() {
    let redis = RedisServer::start();
    // Long enough that the kill comes while the provider still works on them.
    let sim = simulator_with_turnstile_taking(Duration::from_secs(5)).await;
    // Checks every 50-100 ms for 7.5 s (the shared settings give up after 1.5 s).
    let mut gateways = Vec::new();
    for _ in 0..3 {
        let polls = "max_polls_per_task = 100";
        gateways.push(Instance::start_warming_up(&sim, &redis.url(), 2000, 0.0, polls).await);
    }
    let nginx = Nginx::start(&bases(&gateways)).await;
    let http = crate::support::fleet::client();

    // Six five-second solves through NGINX, each on its own connection: two per instance.
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let (http, base) = (http.clone(), nginx.base.clone());
            tokio::spawn(async move {
                let body = serde_json::json!({"kind": "turnstile", "sitekey": format!("0x4-started-{i}"), "pageurl": "https://example.com/", "timeout_s": 180});
                crate::support::solve(&http, &base, body).await
            })
        })
        .collect();
    eventually(
        Duration::from_secs(30),
        "all six submitted upstream, and noted for adoption",
        || async { sim.sim.stats().submits == 6 && redis.noted_provider_tasks().await == 6 },
    )
    .await;
    let on_victim =
        crate::support::metric_sum(&http, &gateways[1].base, "captcha_gateway_active_solves").await
            as usize;
    assert!(on_victim > 0, "least_conn spread the six over the three");
    gateways[1].kill().await;
    let mut outcomes = Vec::new();
    for call in calls {
        outcomes.push(call.await.unwrap());
    }
    let statuses: Vec<u16> = outcomes.iter().map(|(s, _)| *s).collect();
    let submits = sim.sim.stats().submits;
    println!(
        "FIGURE nginx kill during solves: {on_victim} of 6 calls were running on the killed gateway; the callers got {statuses:?}; upstream submits {submits} for 6 calls"
    );
    assert!(statuses.iter().all(|&s| s == 200), "{outcomes:?}");
    assert_eq!(
        submits, 6,
        "the killed gateway's provider tasks were adopted, not submitted again"
    );
    for (_, body) in &outcomes {
        let token = body["token"].as_str().expect("a token");
        let v = sim.verify(&http, token).await;
        assert_eq!(
            v["success"], true,
            "each answer is valid and handed out once: {v}"
        );
    }
}

#[tokio::test]
async fn nginx_moves_what_a_full_gateway_refused_and_callers_never_see_it() {
    let redis = RedisServer::start();
    let sim = simulator_with_slow_turnstile().await;
    let gateways = three(&sim, &redis, [2, 2000, 2000], 0.0).await;
    let http = crate::support::fleet::client();
    // The first is full with two long solves sent to it directly.
    let busy = hold_busy(&http, &gateways[0].base, 2);
    eventually(
        Duration::from_secs(30),
        "the first gateway to be full",
        || async {
            crate::support::metric_sum(&http, &gateways[0].base, "captcha_gateway_active_solves")
                .await
                == 2
                && sim.sim.stats().submits == 2
        },
    )
    .await;
    let nginx = Nginx::start(&bases(&gateways)).await;
    let full = gateways[0].base.as_str();
    let requests_before = overloaded_refusals(&http, full, "solve").await;

    // POSTs one after another: NGINX's counts are level, so its round-robin tie-break reaches the
    // full one. A solve it refuses (503) is safe to move under its idempotency key: NGINX sends
    // it to another instance, and the caller sees only the answer.
    let mut outcomes = Vec::new();
    for n in 0..9 {
        outcomes.push(solve(&http, &nginx.base, n).await);
    }
    let reached_full_one = overloaded_refusals(&http, full, "solve").await - requests_before;
    assert_all_solved(&outcomes, "with no caller retry");
    assert!(reached_full_one > 0, "NGINX never picked the full gateway");

    // Tasks for later too: a `POST /v1/tasks` the full one refused is moved under its name, and
    // each caller gets its task id at once.
    let mut accepted = Vec::new();
    for n in 0..9 {
        let res = http
            .post(format!("{}/v1/tasks", nginx.base))
            .bearer_auth(crate::support::KEY)
            .json(&serde_json::json!({"kind": "recaptcha_v2", "sitekey": format!("6Le-task-{n}"), "pageurl": "https://example.com/"}))
            .send()
            .await
            .unwrap();
        accepted.push(res.status().as_u16());
    }
    let tasks_moved = overloaded_refusals(&http, full, "create_task").await;
    assert!(accepted.iter().all(|&s| s == 202), "{accepted:?}");
    assert!(
        tasks_moved > 0,
        "NGINX never picked the full gateway for a task"
    );
    eventually(Duration::from_secs(30), "the nine tasks solved", || async {
        sim.sim.stats().submits == 9 + 9 + 2
    })
    .await;

    // A GET it refuses (its /health says overloaded) moves too.
    let direct = http
        .get(format!("{}/health", gateways[0].base))
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 503);
    let mut statuses = Vec::new();
    for _ in 0..9 {
        statuses.push(
            http.get(format!("{}/health", nginx.base))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    let share = shares(&http, &gateways).await;
    println!(
        "FIGURE nginx full gateway: 9 /v1/solve all answered 200 ({reached_full_one} refused by the full gateway and moved by NGINX), 9 POST /v1/tasks all 202 ({tasks_moved} moved), served by {share:?}; GET /health through NGINX {statuses:?}"
    );
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(share[0], 0, "the full one solved nothing new");
    // Refusals did no work: one upstream task per call plus the two holding it busy.
    assert_eq!(sim.sim.stats().submits, 9 + 9 + 2);
    busy.iter().for_each(tokio::task::JoinHandle::abort);
}

/// The `overloaded` refusals of `endpoint` that the gateway at `base` counted.
async fn overloaded_refusals(http: &reqwest::Client, base: &str, endpoint: &str) -> u64 {
    let endpoint = format!("endpoint=\"{endpoint}\"");
    let labels = [endpoint.as_str(), "outcome=\"overloaded\""];
    crate::support::metric_sum_where(http, base, "captcha_gateway_requests_total", &labels).await
}

/// Active solves on each gateway, from their own `/metrics`.
async fn active(http: &reqwest::Client, gateways: &[Instance]) -> Vec<u64> {
    let mut out = Vec::new();
    for g in gateways {
        out.push(crate::support::metric_sum(http, &g.base, "captcha_gateway_active_solves").await);
    }
    out
}

#[tokio::test]
async fn nginx_sends_nothing_to_a_gateway_it_filled_while_another_has_room() {
    let redis = RedisServer::start();
    let sim = simulator_with_slow_turnstile().await;
    let gateways = three(&sim, &redis, [2, 2000, 2000], 0.0).await;
    let nginx = Nginx::start(&bases(&gateways)).await;
    let http = crate::support::fleet::client();
    // Nine one-minute solves through NGINX: least_conn would give the first its three, but
    // max_conns (its max_concurrent, 2) stops at two; the others take the rest.
    let busy = hold_busy(&http, &nginx.base, 9);
    eventually(Duration::from_secs(30), "nine solves running", || async {
        active(&http, &gateways).await.iter().sum::<u64>() == 9
    })
    .await;
    let running = active(&http, &gateways).await;
    assert_eq!(running[0], 2, "the first is full: {running:?}");

    // Nine quick POSTs: every one is served at once, none refused, no caller retries.
    let mut outcomes = Vec::new();
    for n in 0..9 {
        outcomes.push(solve(&http, &nginx.base, n).await);
    }
    let share = shares(&http, &gateways).await;
    println!(
        "FIGURE nginx max_conns: with the first gateway full (running {running:?}), 9 POSTs got {:?}, served by {share:?}",
        outcomes.iter().map(|o| o.status).collect::<Vec<_>>()
    );
    assert_all_solved(&outcomes, "with no caller retry");
    assert_eq!(share[0], 0, "the full one was sent nothing");
    assert_eq!(sim.sim.stats().submits, 9 + 9);
    busy.iter().for_each(tokio::task::JoinHandle::abort);
}

#[tokio::test]
async fn nginx_answers_overloaded_itself_when_every_gateway_is_full() {
    let redis = RedisServer::start();
    let sim = simulator_with_slow_turnstile().await;
    let gateways = three(&sim, &redis, [1, 1, 1], 0.0).await;
    let nginx = Nginx::start(&bases(&gateways)).await;
    let http = crate::support::fleet::client();
    let busy = hold_busy(&http, &nginx.base, 3);
    eventually(Duration::from_secs(30), "every gateway full", || async {
        active(&http, &gateways).await == [1, 1, 1] && sim.sim.stats().submits == 3
    })
    .await;
    let refused = solve(&http, &nginx.base, 0).await;
    println!("FIGURE nginx max_conns, every gateway full: {refused:?}");
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.body["error"]["code"], "overloaded", "{refused:?}");
    assert_eq!(refused.retry_after.as_deref(), Some("1"));
    assert_eq!(
        sim.sim.stats().submits,
        3,
        "the refused call reached no gateway"
    );
    // A caller leaving does not free its slot: NGINX named its solve, so the solve runs on
    // (another call with the name may join it) and keeps its instance's slot until it ends.
    busy.iter().for_each(tokio::task::JoinHandle::abort);
}
