//! Several gateway processes on one Redis: the promises hold fleet-wide, a killed instance's
//! claims expire within a lease, and a Redis outage degrades without stopping anyone.

use std::collections::HashSet;
use std::time::Duration;

use captcha_gateway::model::now_ms;
use captcha_gateway::sim::LatencyRange;
use futures::future::join_all;
use serde_json::{Value, json};

use crate::support::eventually::eventually;
use crate::support::fleet::{SimServer, client};
use crate::support::gateway::GatewayProcess;
use crate::support::redis::RedisServer;
use crate::support::{KEY, metric_sum, solve};

const MIN_REMAINING_MS: u64 = 10_000;

fn target(i: usize) -> Value {
    match i % 5 {
        t @ 0..=2 => {
            json!({"kind": "recaptcha_v2", "sitekey": format!("6Le-fleet-{t}"), "pageurl": "https://example.com/login"})
        }
        t => {
            json!({"kind": "turnstile", "sitekey": format!("0x4-fleet-{t}"), "pageurl": "https://example.com/checkout"})
        }
    }
}

#[tokio::test]
async fn three_gateways_serve_a_thousand_callers_once_fresh_and_exactly() {
    let redis = RedisServer::start();
    let sim = SimServer::start(
        LatencyRange {
            min: Duration::from_millis(200),
            max: Duration::from_millis(400),
        },
        5000,
    )
    .await;
    let mut gateways = Vec::new();
    for _ in 0..3 {
        gateways.push(GatewayProcess::start(&sim, &redis.url(), "", 0.05).await);
    }
    let http = client();
    let calls = (0..1000).map(|i| {
        let (http, base) = (&http, &gateways[i % 3].base);
        async move {
            let (status, v) = solve(http, base, target(i)).await;
            (status, v, now_ms())
        }
    });
    let results = join_all(calls).await;

    let mut tokens = HashSet::new();
    for (status, v, received_at) in &results {
        assert_eq!(*status, 200, "every caller is served: {v}");
        let token = v["token"].as_str().unwrap();
        assert!(
            tokens.insert(token.to_owned()),
            "a token was handed out twice"
        );
        let verdict = sim.verify(&http, token).await;
        assert_eq!(verdict["success"], true, "{verdict}");
        let lifetime = if v["kind"] == "turnstile" {
            300_000
        } else {
            120_000
        };
        let left = verdict["solved_at"].as_u64().unwrap() + lifetime - received_at;
        assert!(left >= MIN_REMAINING_MS, "handed out with {left} ms left");
    }
    let pool_hits = metric_sum(&http, &gateways[0].base, "captcha_gateway_pool_hits_total").await;
    let stats = sim.sim.stats();
    assert_eq!(
        stats.submits,
        1000 - pool_hits,
        "upstream tasks = callers - pool hits"
    );
    assert_eq!(
        (
            stats.verify_ok,
            stats.verify_duplicate,
            stats.verify_expired
        ),
        (1000, 0, 0)
    );
}

#[tokio::test]
async fn a_killed_gateways_claims_expire_and_its_waiting_demand_adopts_its_provider_tasks() {
    let redis = RedisServer::start();
    // Slow solves: the killed gateway's tasks must still be running when it dies.
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_secs(8)), 100).await;
    let lease = "redis_lease_s = 2";
    let mut a = GatewayProcess::start(&sim, &redis.url(), lease, 0.5).await;
    let b = GatewayProcess::start(&sim, &redis.url(), lease, 0.5).await;
    let c = GatewayProcess::start(&sim, &redis.url(), lease, 0.5).await;
    let http = client();
    let body = |timeout: f64| json!({"kind": "recaptcha_v2", "sitekey": "6Le-crash", "pageurl": "https://example.com/", "timeout_s": timeout});

    // Five callers on A give up quickly; their five tasks keep running, claimed by A.
    let early = join_all((0..5).map(|_| solve(&http, &a.base, body(0.2)))).await;
    assert!(early.iter().all(|(s, _)| *s == 504), "{early:?}");
    assert_eq!(sim.sim.stats().submits, 5);

    // Five callers on B and C are covered by A's running tasks: they wait, no new task starts.
    let waiting: Vec<_> = (0..5)
        .map(|i| {
            let base = if i % 2 == 0 {
                b.base.clone()
            } else {
                c.base.clone()
            };
            let (http, body) = (http.clone(), body(60.0));
            tokio::spawn(async move { solve(&http, &base, body).await })
        })
        .collect();
    // The waiting figure is fleet-wide: it comes from Redis.
    eventually(
        Duration::from_secs(60),
        "five callers waiting fleet-wide",
        || async { metric_sum(&http, &b.base, "captcha_gateway_target_waiting").await >= 5 },
    )
    .await;
    assert_eq!(
        sim.sim.stats().submits,
        5,
        "B's and C's callers wait for A's tasks"
    );
    eventually(Duration::from_secs(10), "A's tasks noted", || async {
        redis.noted_provider_tasks().await == 5
    })
    .await;

    a.kill().await;
    // Within a lease A's claims expire; B and C claim tasks for the callers they hold, and each
    // claim adopts (polls) one of the provider tasks A had submitted.
    for w in waiting {
        let (status, v) = w.await.unwrap();
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            sim.verify(&http, v["token"].as_str().unwrap()).await["success"],
            true
        );
    }
    assert_eq!(
        sim.sim.stats().submits,
        5,
        "A's five provider tasks answered B's and C's callers: none was submitted again"
    );
}

#[tokio::test]
async fn a_redis_outage_degrades_and_recovers_without_a_restart() {
    let mut redis = RedisServer::start();
    let sim = SimServer::start(
        LatencyRange {
            min: Duration::from_millis(50),
            max: Duration::from_millis(100),
        },
        100,
    )
    .await;
    let gw = GatewayProcess::start(&sim, &redis.url(), "redis_lease_s = 1.5", 0.05).await;
    let http = client();
    let body = |sitekey: &str, timeout: f64| json!({"kind": "recaptcha_v2", "sitekey": sitekey, "pageurl": "https://example.com/", "timeout_s": timeout});
    let health = || async {
        http.get(format!("{}/health", gw.base))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()["status"]
            .clone()
    };

    assert_eq!(
        solve(&http, &gw.base, body("6Le-outage", 30.0)).await.0,
        200
    );
    redis.kill();
    eventually(
        Duration::from_secs(60),
        "/health to say degraded",
        || async { health().await == "degraded" },
    )
    .await;
    // Solving continues without Redis, through both APIs.
    let (status, v) = solve(&http, &gw.base, body("6Le-outage", 30.0)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        sim.verify(&http, v["token"].as_str().unwrap()).await["success"],
        true
    );
    let submitted = http
        .get(format!(
            "{}/in.php?key={KEY}&method=turnstile&sitekey=0x4&pageurl=https://example.com/",
            gw.base
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let id = submitted
        .strip_prefix("OK|")
        .unwrap_or_else(|| panic!("in.php while degraded: {submitted}"));
    let done: Value = http
        .get(format!("{}/v1/tasks/{id}?wait=30", gw.base))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(
        http.get(format!("{}/readyz", gw.base))
            .send()
            .await
            .unwrap()
            .status(),
        200,
        "not required: stays ready"
    );

    redis.restart();
    eventually(
        Duration::from_secs(60),
        "/health to say healthy again",
        || async { health().await == "healthy" },
    )
    .await;
    // The pool works again: an answer whose caller gave up is pooled and taken by the next.
    let (status, _) = solve(&http, &gw.base, body("6Le-after", 0.01)).await;
    assert_eq!(status, 504);
    eventually(
        Duration::from_secs(60),
        "the given-up answer in the pool",
        || async { metric_sum(&http, &gw.base, "captcha_gateway_pool_ready").await >= 1 },
    )
    .await;
    let (status, v) = solve(&http, &gw.base, body("6Le-after", 30.0)).await;
    assert_eq!((status, v["source"].as_str()), (200, Some("pool")), "{v}");
    assert_eq!(
        http.get(format!("{}/livez", gw.base))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

/// How the gateway that solves the tasks stops.
enum Stop {
    /// `kill -9`: its run leases lapse.
    Kill,
    /// SIGTERM with a grace period shorter than the solves: it lets its run leases go.
    Terminate,
}

/// Tasks submitted for later (`in.php`, `POST /v1/tasks`) on a gateway that is killed while it
/// solves them: a read on another gateway (`res.php`, `GET /v1/tasks/{id}`) takes each task over
/// once the killed one's run lease lapsed, and answers it from the provider task the killed one
/// had submitted. The callers poll as usual and get their answers; the provider is paid once.
#[tokio::test]
async fn tasks_of_a_killed_gateway_are_taken_over_by_the_gateway_they_are_read_on() {
    tasks_are_taken_over_where_they_are_read(Stop::Kill).await;
}

/// The same for a gateway stopped (a rolling restart) before its tasks' answers came: it leaves
/// them to be taken over instead of failing them.
#[tokio::test]
async fn tasks_of_a_stopped_gateway_are_taken_over_by_the_gateway_they_are_read_on() {
    tasks_are_taken_over_where_they_are_read(Stop::Terminate).await;
}

async fn tasks_are_taken_over_where_they_are_read(stop: Stop) {
    let redis = RedisServer::start();
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_secs(4)), 100).await;
    let lease = "redis_lease_s = 2";
    let a_toml = match stop {
        Stop::Kill => lease.to_owned(),
        Stop::Terminate => format!("{lease}\nshutdown_grace_s = 1"),
    };
    let mut a = GatewayProcess::start(&sim, &redis.url(), &a_toml, 0.5).await;
    let b = GatewayProcess::start(&sim, &redis.url(), lease, 0.5).await;
    let http = client();

    let submitted: Value = http
        .post(format!("{}/in.php", a.base))
        .form(&[
            ("key", KEY),
            ("method", "userrecaptcha"),
            ("googlekey", "6Le-takeover-compat"),
            ("pageurl", "https://example.com/"),
            ("json", "1"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(submitted["status"], 1, "{submitted}");
    let compat_id = submitted["request"].as_str().unwrap().to_owned();
    let native: Value = http
        .post(format!("{}/v1/tasks", a.base))
        .bearer_auth(KEY)
        .json(&json!({"kind": "recaptcha_v2", "sitekey": "6Le-takeover-native", "pageurl": "https://example.com/"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let native_id = native["task_id"].as_str().unwrap().to_owned();
    eventually(
        Duration::from_secs(10),
        "both submitted upstream, and noted for adoption",
        || async { sim.sim.stats().submits == 2 && redis.noted_provider_tasks().await == 2 },
    )
    .await;
    match stop {
        Stop::Kill => a.kill().await,
        Stop::Terminate => {
            a.terminate();
            let exit = a.exited().await;
            assert!(exit.success(), "a clean exit after SIGTERM: {exit:?}");
        }
    }

    // Polled on B the way clients poll: res.php until it is no longer CAPCHA_NOT_READY.
    let res_url = format!(
        "{}/res.php?key={KEY}&action=get&id={compat_id}&json=1",
        b.base
    );
    let read = || async {
        let v: Value = http
            .get(&res_url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v
    };
    eventually(
        Duration::from_secs(60),
        "res.php to answer on B",
        || async { read().await["request"] != "CAPCHA_NOT_READY" },
    )
    .await;
    let compat = read().await;
    assert_eq!(compat["status"], 1, "{compat}");
    let task: Value = http
        .get(format!("{}/v1/tasks/{native_id}?wait=120", b.base))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(task["status"], "ready", "{task}");
    assert_eq!(
        sim.sim.stats().submits,
        2,
        "both answers came from the provider tasks the stopped gateway submitted"
    );
    assert_eq!(
        metric_sum(
            &http,
            &b.base,
            "captcha_gateway_upstream_tasks_adopted_total"
        )
        .await,
        2,
        "B adopted both provider tasks"
    );
    assert_eq!(
        metric_sum(&http, &b.base, "captcha_gateway_tasks_taken_over_total").await,
        2,
        "B took both tasks over"
    );
    for token in [
        compat["request"].as_str().unwrap(),
        task["result"]["token"].as_str().unwrap(),
    ] {
        assert_eq!(sim.verify(&http, token).await["success"], true);
    }
}

/// Instances that run with different leases learn of each other when they connect: the shorter
/// lease would take the longer one's instances for dead too early (and pay their tasks twice).
#[tokio::test]
async fn instances_with_different_leases_hear_of_each_other() {
    use captcha_gateway::engine::store::redis::{RedisSettings, RedisStore};
    let redis = RedisServer::start();
    let connect = |lease_s: u64| {
        let mut settings = RedisSettings::new(vec![redis.url()], false);
        settings.lease = Duration::from_secs(lease_s);
        RedisStore::connect(settings, tokio_util::sync::CancellationToken::new())
    };
    let three = connect(3).await.unwrap();
    let none: [Duration; 0] = [];
    assert_eq!(three.other_leases().await.unwrap(), none);
    let also_three = connect(3).await.unwrap();
    assert_eq!(
        also_three.other_leases().await.unwrap(),
        none,
        "the same lease is no problem"
    );
    let thirty = connect(30).await.unwrap();
    assert_eq!(
        thirty.other_leases().await.unwrap(),
        [Duration::from_secs(3)]
    );
    assert_eq!(
        three.other_leases().await.unwrap(),
        [Duration::from_secs(30)]
    );
}
