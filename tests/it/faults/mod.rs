//! The gateway under faults: the provider misbehaving (the simulator's injected
//! faults), the network to the provider and to Redis breaking (a TCP fault proxy in between).
//! Under each: no panic (the process keeps answering), every caller gets an answer or a clear
//! error in its protocol, nobody waiting is lost, and once load stops no upstream thread stays
//! taken. With Redis unreachable the gateway degrades and recovers by itself (promise 7).
//!
//! Every wait is bounded by a deadline and says what it waited for.
//!
//! `provider.rs`: the simulator's faults and a broken road to the provider; `redis.rs`: a
//! broken road to Redis; `proxy.rs`: the fault proxy itself. This file: what they share.

mod provider;
mod proxy;
mod redis;

use std::future::Future;
use std::time::Duration;

use captcha_gateway::sim::LatencyRange;
use futures::future::join_all;
use serde_json::{Value, json};

use crate::support::eventually::eventually_showing;
use crate::support::fleet::SimServer;
use crate::support::gateway::{GatewayProcess, SimAccountConfig, Stderr};
use crate::support::{KEY, solve};

/// What a caller asks for, in seconds: short, so every fault runs into it.
const CALLER_TIMEOUT_S: f64 = 3.0;

/// Bound on anything that should happen "soon" (a caller's answer beyond its own deadline is
/// measured separately): generous, since it only ends a hung test.
const SOON: Duration = Duration::from_secs(30);

/// Waits for `fut`, failing with `what` if `limit` passes first.
async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {limit:?}"))
}

/// A simulator with quick solves and room for every test's tasks, served in this process.
async fn simulator() -> SimServer {
    SimServer::start(
        LatencyRange {
            min: Duration::from_millis(100),
            max: Duration::from_millis(300),
        },
        200,
    )
    .await
}

/// The simulator behind `sim`, reachable at `addr` instead (a proxy in front of it).
fn behind(sim: &SimServer, addr: std::net::SocketAddr) -> SimServer {
    SimServer {
        sim: sim.sim.clone(),
        addr,
    }
}

fn body(sitekey: &str, timeout_s: f64) -> Value {
    json!({"kind": "recaptcha_v2", "sitekey": sitekey, "pageurl": "https://example.com/login", "timeout_s": timeout_s})
}

/// One native solve: status and body, the body `Null` if it was not JSON.
/// One compatible submit and its result, through `in.php` and `res.php?action=get`: the
/// submit's id, then the first answer other than `CAPCHA_NOT_READY`.
async fn solve_compat(http: &reqwest::Client, base: &str, sitekey: &str) -> String {
    let submitted = http
        .get(format!(
            "{base}/in.php?key={KEY}&method=userrecaptcha&googlekey={sitekey}&pageurl=https://example.com/login"
        ))
        .send()
        .await
        .expect("the gateway answers in.php")
        .text()
        .await
        .expect("a body");
    let Some(id) = submitted.strip_prefix("OK|") else {
        return submitted;
    };
    loop {
        let got = http
            .get(format!("{base}/res.php?key={KEY}&action=get&id={id}"))
            .send()
            .await
            .expect("the gateway answers res.php")
            .text()
            .await
            .expect("a body");
        if got != "CAPCHA_NOT_READY" {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A native answer is a token or a protocol error: 200 with a token, else a documented status
/// with `{"error": {"code", "message"}}`.
fn assert_answer_or_clear_error(status: u16, v: &Value, context: &str) {
    if status == 200 {
        assert!(
            v["token"].as_str().is_some(),
            "{context}: 200 without a token: {v}"
        );
        return;
    }
    assert!(
        [422, 502, 503, 504].contains(&status),
        "{context}: undocumented status {status}: {v}"
    );
    assert!(
        v["error"]["code"].as_str().is_some() && v["error"]["message"].as_str().is_some(),
        "{context}: {status} without a protocol error body: {v}"
    );
}

/// A compatible answer is a token or an `ERROR_...` code (never a transport failure).
fn assert_compat_answer(answer: &str, context: &str) {
    assert!(
        answer.starts_with("OK|") || answer.starts_with("ERROR_"),
        "{context}: not a compatible answer: {answer:?}"
    );
}

/// A gateway's `/metrics` page.
async fn metrics_text(http: &reqwest::Client, base: &str) -> String {
    http.get(format!("{base}/metrics"))
        .send()
        .await
        .expect("the gateway answers /metrics")
        .text()
        .await
        .expect("a body")
}

/// Sum of one metric's samples on a gateway's `/metrics`.
async fn metric(http: &reqwest::Client, base: &str, name: &str) -> f64 {
    metrics_text(http, base)
        .await
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Once load stops, no solve is held and no upstream thread stays taken.
async fn assert_slots_return(http: &reqwest::Client, base: &str, context: &str) {
    eventually_showing(SOON, &format!("{context}: in-flight back to 0"), || async {
        let in_flight = metric(http, base, "captcha_gateway_upstream_in_flight").await;
        let active = metric(http, base, "captcha_gateway_active_solves").await;
        (in_flight == 0.0 && active == 0.0, (in_flight, active))
    })
    .await;
}

async fn health(http: &reqwest::Client, base: &str) -> String {
    http.get(format!("{base}/health"))
        .send()
        .await
        .expect("the gateway answers /health")
        .json::<Value>()
        .await
        .expect("JSON health")["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Alive and solving: `/livez` answers and a patient caller gets a token.
async fn assert_serves_again(http: &reqwest::Client, base: &str, sitekey: &str, context: &str) {
    let live = http.get(format!("{base}/livez")).send().await;
    assert_eq!(
        live.map(|r| r.status().as_u16()).ok(),
        Some(200),
        "{context}: the process is alive"
    );
    let (status, v) = within(SOON, context, solve(http, base, body(sitekey, 25.0))).await;
    assert_eq!(status, 200, "{context}: solving again: {v}");
}

/// A gateway process whose log goes to a file, so the test can check it never panicked.
async fn logged_gateway(sim: &SimServer, redis_url: &str, extra_toml: &str) -> GatewayProcess {
    SimAccountConfig::new(sim.addr, redis_url)
        .top_level(extra_toml)
        .serve()
        .stderr(Stderr::LogFile)
        .start()
        .await
}

/// No thread of the gateway panicked (a panic in a spawned task leaves the process up, so only
/// its log tells).
fn assert_never_panicked(gateway: &GatewayProcess) {
    let text = gateway.log();
    let panics: Vec<&str> = text.lines().filter(|l| l.contains("panicked")).collect();
    assert!(
        panics.is_empty(),
        "the gateway panicked:\n{}",
        panics.join("\n")
    );
}

/// `n` native callers and `n` compatible ones at once; every one gets its answer or a clear
/// error, the native ones by their deadline (plus the time the HTTP exchange itself takes).
async fn load(http: &reqwest::Client, base: &str, sitekey: &str, n: usize, context: &str) {
    let native = join_all((0..n).map(|_| solve(http, base, body(sitekey, CALLER_TIMEOUT_S))));
    let compat = join_all((0..n).map(|_| solve_compat(http, base, sitekey)));
    let limit = Duration::from_secs_f64(CALLER_TIMEOUT_S) + Duration::from_secs(5);
    let native = within(
        limit,
        &format!("{context}: native callers answered"),
        native,
    )
    .await;
    for (status, v) in &native {
        assert_answer_or_clear_error(*status, v, context);
    }
    // A compatible task runs for the compatible task timeout, not the caller's; bounded anyway.
    let compat = within(
        SOON * 8,
        &format!("{context}: compat callers answered"),
        compat,
    )
    .await;
    for answer in &compat {
        assert_compat_answer(answer, context);
    }
}
