//! A provider answering "no slot" (`ERROR_NO_SLOT_AVAILABLE`) to a share of submits, as CaptchaAI
//! does whenever the key's threads are busy and 2captcha when its workers are short: open-loop
//! demand of 100 callers on distinct targets against a 30-thread plan, the gateway configured as
//! for the real provider (the plan's threads, no knowledge of the simulator's speed). Every
//! caller is answered within its deadline (a refused task keeps its place in the wait for a
//! thread, and refusals that say nothing about the plan's size do not shrink the cap), and once
//! the callers are answered nothing stays in flight.

use std::time::Duration;

use captcha_gateway::sim::{Faults, LatencyRange, SimSettings};
use futures::future::join_all;
use serde_json::{Value, json};

use crate::support::eventually::eventually_showing;
use crate::support::fleet::{SimServer, client};
use crate::support::gateway::{GatewayProcess, Launch, Stderr};
use crate::support::redis::RedisServer;
use crate::support::{KEY, metric_sum, solve};

/// The plan's threads, at the provider and in the gateway's config alike.
const PLAN: u32 = 30;
/// Callers at once, each on its own target: more than three times the plan.
const CALLERS: usize = 100;
/// Once the last caller is answered, the gateway's threads are all back within this. Generous:
/// it only ends a hung test (a thread held to a task's poll horizon would take minutes).
const SETTLE: Duration = Duration::from_secs(30);

/// A simulator with a `PLAN`-thread plan solving in `latency`, refusing submits as `faults` say,
/// and leaving `unsolvable` of its tasks unsolved.
async fn provider(latency: LatencyRange, faults: Faults, unsolvable: f64) -> SimServer {
    let settings = SimSettings {
        threads: PLAN,
        faults,
        unsolvable_rate: unsolvable,
        ..SimSettings::default()
    };
    SimServer::with_settings(settings, latency).await
}

/// `serve` as an operator configures it for CaptchaAI with a `PLAN`-thread plan, pointed at
/// `sim`; on Redis (the fleet-wide thread budget) when `redis_url` is given. The warm-up is off:
/// the test measures a running gateway, not a fresh process's slow start.
async fn gateway(sim: &SimServer, redis_url: Option<&str>) -> GatewayProcess {
    let redis = redis_url.map_or(String::new(), |url| format!("redis_url = \"{url}\"\n"));
    let toml = format!(
        "provider = \"captchaai\"\nprovider_url = \"http://{}\"\nlisten = \"127.0.0.1:0\"\n\
         threads = {PLAN}\nwarmup_s = 0\n{redis}",
        sim.addr
    );
    Launch::serve(toml)
        .provider_key(KEY)
        .log("warn")
        .stderr(Stderr::LogFile)
        .start()
        .await
}

/// `CALLERS` native callers at once, each on its own target and waiting `timeout_s`: each one's
/// status and body.
async fn callers(gw: &GatewayProcess, timeout_s: f64) -> Vec<(u16, Value)> {
    let http = client();
    join_all((0..CALLERS).map(|i| {
        let body = json!({
            "kind": "recaptcha_v2",
            "sitekey": format!("6Le-no-slot-{i}"),
            "pageurl": "https://example.com/login",
            "timeout_s": timeout_s,
        });
        let (http, base) = (http.clone(), gw.base.clone());
        async move { solve(&http, &base, body).await }
    }))
    .await
}

/// Once every caller has its answer, no thread of the gateway stays taken: nothing is left in
/// flight, not even a task its caller no longer waits for.
async fn nothing_left_in_flight(gw: &GatewayProcess) {
    let http = client();
    eventually_showing(SETTLE, "the gateway's threads all back", || async {
        let in_flight = metric_sum(&http, &gw.base, "captcha_gateway_upstream_in_flight").await;
        (in_flight == 0, in_flight)
    })
    .await;
}

/// How the answers went: solved with a token, refused as unsolvable, and anything else.
fn tally(replies: &[(u16, Value)]) -> (usize, usize, Vec<String>) {
    let mut solved = 0;
    let mut unsolvable = 0;
    let mut other = Vec::new();
    for (status, v) in replies {
        match status {
            200 if v["token"].as_str().is_some() => solved += 1,
            422 if v["error"]["code"] == "ERROR_CAPTCHA_UNSOLVABLE" => unsolvable += 1,
            _ => other.push(format!("{status} {v}")),
        }
    }
    (solved, unsolvable, other)
}

/// The minimal case: 1-2 s solves, a fifth of submits refused "no slot", callers waiting 40 s.
async fn every_caller_is_answered_through_refusals(redis_url: Option<&str>) {
    let faults = Faults {
        capacity_error_rate: 0.2,
        ..Faults::default()
    };
    let latency = LatencyRange {
        min: Duration::from_secs(1),
        max: Duration::from_secs(2),
    };
    let sim = provider(latency, faults, 0.0).await;
    let gw = gateway(&sim, redis_url).await;
    let replies = callers(&gw, 40.0).await;
    let (solved, _, other) = tally(&replies);
    let stats = sim.sim.stats();
    assert!(
        other.is_empty(),
        "{solved} of {CALLERS} solved; the rest: {other:?}; provider: {stats:?}"
    );
    assert_eq!(solved, CALLERS);
    // The provider did refuse: the test ran into what it is about.
    assert!(stats.injected_errors >= 5, "{stats:?}");
    nothing_left_in_flight(&gw).await;
}

#[tokio::test]
async fn refused_tasks_keep_their_place_and_every_caller_is_answered_in_time() {
    every_caller_is_answered_through_refusals(None).await;
}

#[tokio::test]
async fn with_a_fleet_wide_budget_refused_tasks_keep_their_place_and_every_caller_is_answered() {
    let redis = RedisServer::start();
    every_caller_is_answered_through_refusals(Some(&redis.url())).await;
}

/// A provider on a bad day: a tenth of submits refused "no slot", a tenth `ERROR_SERVER_ERROR`,
/// a tenth an HTML error page, a tenth a plain-text error although JSON was asked for, and 5 %
/// of tasks unsolvable; 1-3 s solves, callers waiting 90 s. Each caller gets a token or the
/// clear unsolvable error, never a timeout.
#[tokio::test]
async fn a_misbehaving_provider_answers_every_caller_with_a_token_or_a_clear_error() {
    let faults = Faults {
        capacity_error_rate: 0.1,
        server_error_rate: 0.1,
        html_error_rate: 0.1,
        plain_error_rate: 0.1,
        ..Faults::default()
    };
    let latency = LatencyRange {
        min: Duration::from_secs(1),
        max: Duration::from_secs(3),
    };
    let sim = provider(latency, faults, 0.05).await;
    let gw = gateway(&sim, None).await;
    let replies = callers(&gw, 90.0).await;
    let (solved, unsolvable, other) = tally(&replies);
    let stats = sim.sim.stats();
    assert!(
        other.is_empty(),
        "{solved} solved, {unsolvable} unsolvable; the rest: {other:?}; provider: {stats:?}"
    );
    // An unsolvable answer is the provider's verdict on a task, or a caller whose every submit
    // it refused within the bounded transient retries (3: 0.3^4, about one caller in a hundred
    // here), told as the clear unsolvable error ("no answer in time (<code>)").
    let never_accepted = (CALLERS as u64).saturating_sub(stats.submits);
    assert_eq!(
        unsolvable as u64,
        stats.unsolvable + never_accepted,
        "{stats:?}"
    );
    assert!(stats.injected_errors >= 20, "{stats:?}");
    nothing_left_in_flight(&gw).await;
}
