//! The dashboard and the alert rules on a live fleet: a `serve --queue` front end and a
//! `worker` on one Redis, both on a simulated provider account (`provider = "sim"`), the front
//! end with a tenant, the worker with a pool whose answers expire quickly. The simulator
//! injects capacity and server errors until both were seen; some callers' deadlines pass
//! before their answer. Under that load:
//! 1. every metric, label and label value that a panel, a dashboard variable, an alert or
//!    docs/OPERATIONS.md queries is in what the two processes expose (`up` excepted: Prometheus
//!    makes it itself);
//! 2. on a real Prometheus scraping both (the front end on its operations port, both with the
//!    operations key, as deploy/prometheus does), every panel query returns series, every
//!    variable has values and every alert rule evaluates without error;
//! 3. stopping the worker raises CaptchaGatewayTargetDown for it, stopping Redis raises
//!    CaptchaGatewayRedisDown for the front end, and no alert the test does not provoke is
//!    raised.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use super::assets::{
    alert_rules, as_prometheus_sees_it, dashboard, dashboard_queries, operations_queries, repo,
};
use super::prometheus::Prometheus;
use super::promql::{self, Query};
use super::scrape::{missing, samples};
use crate::support::KEY;
use crate::support::eventually::eventually;
use crate::support::fleet::SimServer;
use crate::support::gateway::Launch;
use crate::support::redis::RedisServer;

/// The worker's pool: answers live 12 s and must have 10 s left, so a pooled answer is usable
/// for 2 s and some expire unused (waste) while callers take others (hits).
const POOL_SITEKEY: &str = "0x4AAAAAAA-observability";
const POOL_PAGE: &str = "https://pool.observability.example/";
/// How long load goes on at most before a missing series fails the test: the loops end as soon
/// as everything is there (seconds on an idle machine); this only bounds a hang.
const PATIENCE: Duration = Duration::from_secs(180);

/// What both processes share: Redis, the simulated account, fast polling.
fn common(redis: &str, sim: std::net::SocketAddr) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nredis_url = \"{redis}\"\nmin_remaining_s = 10\n\
         [lifetimes]\nturnstile = 12\n\
         [[accounts]]\nname = \"sim-main\"\nprovider = \"sim\"\nbase_url = \"http://{sim}\"\nthreads = 100\n\
         [poll]\nfirst_check_s = 0.05\ninterval_s = 0.05\nmax_requests_per_second = 2000\n"
    )
}

/// The operations key both processes ask for on `/metrics`.
const OPS_KEY: &str = "ops-ObservabilityKey-0123456789";

/// One round of callers on the front end, in every protocol, good and bad; errors the
/// simulator injects are expected and ignored here.
async fn load(http: &reqwest::Client, base: &str, round: usize) {
    let pooled = json!({"kind": "turnstile", "sitekey": POOL_SITEKEY, "pageurl": POOL_PAGE});
    // Solves take 50-150 ms: this caller's deadline passes first (a solve error, `timeout`).
    let hurried = json!({"kind": "recaptcha_v2", "sitekey": "6Le-observability-hurried",
        "pageurl": format!("https://hurried.observability.example/{round}"), "timeout_s": 0.01});
    let fresh = json!({"kind": "recaptcha_v2", "sitekey": "6Le-observability",
        "pageurl": format!("https://fresh.observability.example/{round}")});
    let solve = |body: Value| async move {
        let _ = http
            .post(format!("{base}/v1/solve"))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
            .unwrap()
            .bytes()
            .await;
    };
    let compat = async {
        let submitted: Value = http
            .post(format!("{base}/in.php"))
            .form(&[
                ("key", KEY),
                ("json", "1"),
                ("method", "userrecaptcha"),
                ("googlekey", "6Le-observability-compat"),
                (
                    "pageurl",
                    &format!("https://compat.observability.example/{round}"),
                ),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let Some(id) = submitted["request"]
            .as_str()
            .filter(|_| submitted["status"] == 1)
        else {
            return;
        };
        let _ = http
            .get(format!("{base}/v1/tasks/{id}?wait=10"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .bytes()
            .await;
        for action in [
            "get",
            if round % 2 == 0 {
                "reportgood"
            } else {
                "reportbad"
            },
        ] {
            let _ = http
                .get(format!(
                    "{base}/res.php?key={KEY}&json=1&action={action}&id={id}"
                ))
                .send()
                .await
                .unwrap()
                .bytes()
                .await;
        }
    };
    // A request the gateway refuses: no site key.
    let refused = async {
        let _ = http
            .post(format!("{base}/in.php"))
            .form(&[
                ("key", KEY),
                ("method", "userrecaptcha"),
                ("pageurl", POOL_PAGE),
            ])
            .send()
            .await
            .unwrap()
            .bytes()
            .await;
    };
    tokio::join!(
        solve(pooled.clone()),
        solve(pooled.clone()),
        solve(pooled),
        solve(fresh),
        solve(hurried),
        compat,
        refused
    );
}

async fn scrape(http: &reqwest::Client, base: &str) -> String {
    let res = http
        .get(format!("{base}/metrics"))
        .bearer_auth(OPS_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{base}/metrics");
    res.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alerts_work_on_a_live_front_end_and_worker() {
    let mut redis = RedisServer::start();
    let sim = SimServer::start(
        captcha_gateway::sim::LatencyRange {
            min: Duration::from_millis(50),
            max: Duration::from_millis(150),
        },
        200,
    )
    .await;
    // Capacity and server errors only until both have been seen: each capacity error halves
    // the account's cap, which would otherwise slow every later round down.
    let calm = sim.sim.faults();
    let mut faulty = calm;
    faulty.capacity_error_rate = 0.3;
    faulty.server_error_rate = 0.1;
    sim.sim.set_faults(faulty).unwrap();
    let common = common(&redis.url(), sim.addr);
    let mut front_end = Launch::serve(format!(
        "ops_listen = \"127.0.0.1:0\"\n{common}[[tenants]]\nname = \"alpha\"\nkeys = [\"{KEY}\"]\n\
         max_concurrent = 1000\nmax_solves_per_hour = 100000\n"
    ))
    .log("warn")
    .env("CAPTCHA_GATEWAY_QUEUE", "captcha")
    .env("CAPTCHA_GATEWAY_OPS_KEY", OPS_KEY)
    .start()
    .await;
    let front = front_end.base.clone();
    // Its figures are on its operations port, not on the port callers use.
    let line = front_end.stdout_line().await;
    let front_ops = line
        .strip_prefix("operations listening on ")
        .unwrap_or_else(|| panic!("no operations listener announced: {line:?}"))
        .trim()
        .to_owned();
    front_end.drain_stdout();
    let mut worker_process = Launch::worker(format!(
        "{common}[[pools]]\nkind = \"turnstile\"\nsitekey = \"{POOL_SITEKEY}\"\n\
         pageurl = \"{POOL_PAGE}\"\nsize = 4\n"
    ))
    .args(&["--queue", "captcha"])
    .log("warn")
    .env("CAPTCHA_GATEWAY_OPS_KEY", OPS_KEY)
    .start()
    .await;
    let worker = worker_process.base.clone();

    let (exprs, variables) = dashboard_queries(&dashboard());
    let mut queries: Vec<(String, Query)> = exprs
        .iter()
        .map(|e| (format!("dashboard: {e}"), promql::read(e)))
        .chain(
            variables
                .iter()
                .map(|v| (format!("dashboard variable: {v}"), promql::read_variable(v))),
        )
        .collect();
    for query in operations_queries() {
        queries.push((format!("docs/OPERATIONS.md: {query}"), promql::read(&query)));
    }
    for rule in alert_rules() {
        let expr = rule["expr"].as_str().unwrap();
        queries.push((
            format!("alert {}: {expr}", rule["alert"].as_str().unwrap()),
            promql::read(expr),
        ));
    }
    let queried: BTreeSet<&String> = queries.iter().flat_map(|(_, q)| &q.metrics).collect();
    assert!(queried.len() > 30, "{queried:?}");

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut gaps = Vec::new();
    let started = std::time::Instant::now();
    for round in 0.. {
        load(&http, &front, round).await;
        let mut scraped = samples(&scrape(&http, &front_ops).await);
        scraped.extend(samples(&scrape(&http, &worker).await));
        let upstream_result = |class: &str| {
            scraped.iter().any(|(n, l)| {
                n == "captcha_gateway_upstream_requests_total"
                    && l.get("result").map(String::as_str) == Some(class)
            })
        };
        if upstream_result("capacity") && upstream_result("transient") {
            sim.sim.set_faults(calm).unwrap();
        }
        gaps = queries
            .iter()
            .flat_map(|(what, q)| {
                missing(q, &scraped)
                    .into_iter()
                    .map(move |m| format!("{m}  ({what})"))
            })
            .collect();
        if gaps.is_empty() || started.elapsed() > PATIENCE {
            break;
        }
    }
    assert!(
        gaps.is_empty(),
        "after {PATIENCE:?} of load, not in the scrape of the front end and the worker:\n{}",
        gaps.join("\n")
    );

    // The same queries on a real Prometheus scraping both processes: each panel's query returns
    // series, each variable has values, and every alert rule evaluates without error.
    let host = |base: &str| base.trim_start_matches("http://").to_owned();
    let prometheus = Prometheus::start(
        &[
            ("captcha-gateway", vec![host(&front_ops)]),
            ("captcha-worker", vec![host(&worker)]),
        ],
        &repo().join("deploy/prometheus/alerts.yml"),
        Some(OPS_KEY),
    )
    .await;
    let mut empty = Vec::new();
    let started = std::time::Instant::now();
    for round in 0.. {
        load(&http, &front, round).await;
        empty.clear();
        for expr in &exprs {
            if prometheus
                .query(&as_prometheus_sees_it(expr))
                .await
                .is_empty()
            {
                empty.push(format!("query {expr}"));
            }
        }
        for variable in &variables {
            let inner = variable
                .strip_prefix("label_values(")
                .and_then(|v| v.strip_suffix(')'))
                .and_then(|v| v.rsplit_once(','))
                .unwrap_or_else(|| {
                    panic!("variables are label_values(selector, label): {variable}")
                });
            let selector = as_prometheus_sees_it(inner.0);
            if prometheus
                .label_values(&selector, inner.1.trim())
                .await
                .is_empty()
            {
                empty.push(format!("variable {variable}"));
            }
        }
        if empty.is_empty() || started.elapsed() > PATIENCE {
            break;
        }
    }
    assert!(
        empty.is_empty(),
        "Prometheus has nothing for these after {PATIENCE:?} of load:\n{}",
        empty.join("\n")
    );
    let expected_rules = alert_rules().len();
    eventually(
        Duration::from_secs(60),
        "every alert rule evaluated",
        || async {
            let rules = prometheus.rules().await;
            rules.len() == expected_rules && rules.iter().all(|(_, health, _)| health != "unknown")
        },
    )
    .await;
    for (name, health, error) in prometheus.rules().await {
        assert_eq!(health, "ok", "{name}: {error}");
    }

    // The alerts follow what really happens: the worker stops, so its scrape fails
    // (CaptchaGatewayTargetDown); then Redis stops, so the front end reports
    // `store_up{store="redis"} 0` (CaptchaGatewayRedisDown). Pending is enough: `for` holds them
    // back from firing for minutes.
    let active = |name: &'static str, label: &'static str, value: String| {
        let prometheus = &prometheus;
        async move {
            prometheus
                .alerts()
                .await
                .iter()
                .any(|a| a["alertname"] == name && a[label] == value.as_str())
        }
    };
    worker_process.kill().await;
    eventually(
        Duration::from_secs(60),
        "TargetDown for the stopped worker",
        || active("CaptchaGatewayTargetDown", "instance", host(&worker)),
    )
    .await;
    redis.kill();
    eventually(
        Duration::from_secs(60),
        "RedisDown for the front end",
        || active("CaptchaGatewayRedisDown", "instance", host(&front_ops)),
    )
    .await;
    // Waste and capacity errors are provoked on purpose (answers usable for 2 s, injected
    // capacity errors), so those two may be pending; nothing else has cause to be.
    let expected = [
        "CaptchaGatewayTargetDown",
        "CaptchaGatewayRedisDown",
        "CaptchaGatewayPoolWaste",
        "CaptchaGatewayCapacityErrors",
    ];
    let wrong: Vec<Value> = prometheus
        .alerts()
        .await
        .into_iter()
        .filter(|a| !expected.contains(&a["alertname"].as_str().unwrap_or_default()))
        .collect();
    assert!(
        wrong.is_empty(),
        "alerts nothing here should raise: {wrong:?}"
    );
}
