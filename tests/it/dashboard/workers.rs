//! `serve --queue` with `captcha-gateway worker` processes (the Kubernetes layout): the answers
//! happen on the workers, which publish their figures to the same fleet keys as `serve`, so the
//! front end's status shows them, counts the processes by role, and forgets a stopped worker
//! once its key expires.

use std::time::Duration;

use serde_json::{Value, json};

use crate::queue::support::worker_on;
use crate::support::eventually::eventually;
use crate::support::fleet::SimServer;
use crate::support::redis::RedisServer;
use crate::support::{KEY, metric_sum};

async fn status(http: &reqwest::Client, base: &str) -> Value {
    get(http, base, "/v1/status").await
}

async fn get(http: &reqwest::Client, base: &str, path: &str) -> Value {
    let res = http.get(format!("{base}{path}")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

fn answers(s: &Value) -> u64 {
    let t = &s["answers"]["total"];
    ["pool", "solved", "shared"]
        .iter()
        .map(|k| t[k].as_u64().unwrap_or(0))
        .sum()
}

/// Upstream tasks the report's accounts finished (solved, failed or timed out).
fn upstream_tasks(s: &Value) -> u64 {
    s["accounts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| ["solved", "failed", "timeouts"].map(|k| a[k].as_u64().unwrap_or(0)))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_ends_status_shows_its_workers_answers_and_forgets_a_stopped_worker() {
    let redis = RedisServer::start();
    let latency = captcha_gateway::sim::LatencyRange {
        min: Duration::from_millis(50),
        max: Duration::from_millis(150),
    };
    let sim = SimServer::start(latency, 100).await;
    let front = crate::queue::support::front_end(&sim, &redis.url())
        .start()
        .await;
    let base = front.base.clone();
    let mut worker = worker_on(sim.addr, &redis.url(), "").start().await;
    let http = reqwest::Client::new();
    let tasks = 4;
    for i in 0..tasks {
        let res = http
            .post(format!("{base}/v1/tasks"))
            .bearer_auth(KEY)
            .json(&json!({"kind": "turnstile", "sitekey": "0x4A-dash2",
                          "pageurl": format!("https://worker{i}.example/")}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 202);
    }

    // The worker's own /metrics against the front end's report: the same answers, handouts and
    // upstream tasks, and both processes counted by role.
    eventually(
        Duration::from_secs(60),
        "the front end's status adds up the worker",
        || async {
            let worker_answers = worker.metric("captcha_gateway_answers_total").await;
            let handouts =
                metric_sum(&http, &worker.base, "captcha_gateway_handout_seconds_count").await;
            let upstream =
                metric_sum(&http, &worker.base, "captcha_gateway_upstream_tasks_total").await;
            let s = status(&http, &base).await;
            worker_answers >= tasks
                && answers(&s) == worker_answers
                && s["latency"]["handout"]["count"] == handouts
                && upstream_tasks(&s) == upstream
                && s["fleet"]["instances"] == 2
                && s["fleet"]["roles"] == json!({"serve": 1, "worker": 1})
                && s["fleet"]["role"] == "serve"
        },
    )
    .await;

    // The status command says it the same way.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args(["status", "--url", &base])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.ends_with("1 front end, 1 worker")),
        "{text}"
    );

    // A stopped worker stops publishing; once its key expires the front end is alone again,
    // and the answers the worker handed out leave the sum with it.
    worker.signal("TERM");
    assert!(worker.exited().await.success());
    eventually(
        Duration::from_secs(60),
        "the stopped worker drops out",
        || async {
            let s = status(&http, &base).await;
            s["fleet"]["instances"] == 1
                && s["fleet"]["roles"] == json!({"serve": 1})
                && answers(&s) == 0
        },
    )
    .await;
    // With no worker left, the advice has no workers to size.
    let a = get(&http, &base, "/v1/advice").await;
    assert_eq!(a["queue_workers"], Value::Null, "{a}");
}

/// Seed mode (`worker --seed-queue`) publishes the same way: tasks pushed by seed 003's producer
/// show up in a `serve` instance's report on the same Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_mode_worker_is_counted_with_its_answers() {
    let redis = RedisServer::start();
    let latency = captcha_gateway::sim::LatencyRange {
        min: Duration::from_millis(50),
        max: Duration::from_millis(150),
    };
    let sim = SimServer::start(latency, 100).await;
    let front = crate::queue::support::front_end(&sim, &redis.url())
        .start()
        .await;
    let base = front.base.clone();
    let worker = worker_on(sim.addr, &redis.url(), "")
        .args(&["--seed-queue", "--concurrency", "4"])
        .start()
        .await;
    let tasks = 3;
    let producer = tokio::process::Command::new(crate::clients::python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/seed_producer.py"
        ))
        .args([&redis.url(), &tasks.to_string(), "150"])
        .output()
        .await
        .expect("python runs");
    assert!(
        producer.status.success(),
        "{}",
        String::from_utf8_lossy(&producer.stderr)
    );
    let http = reqwest::Client::new();
    eventually(
        Duration::from_secs(60),
        "the front end's status adds up the seed worker",
        || async {
            let worker_answers = worker.metric("captcha_gateway_answers_total").await;
            let s = status(&http, &base).await;
            worker_answers >= tasks
                && answers(&s) == worker_answers
                && s["fleet"]["roles"] == json!({"serve": 1, "worker": 1})
        },
    )
    .await;

    // The front end's advice sizes the workers KEDA should allow from the worker's published
    // `--concurrency` and the fleet's recommended threads, which count the worker's solves.
    eventually(
        Duration::from_secs(30),
        "the front end's advice counts the seed worker's solves",
        || async {
            let a = get(&http, &base, "/v1/advice").await;
            let solves: u64 = a["kinds"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k["solves"].as_u64().unwrap())
                .sum();
            solves >= tasks
        },
    )
    .await;
    let a = get(&http, &base, "/v1/advice").await;
    let w = &a["queue_workers"];
    assert_eq!(
        (w["workers_now"].as_u64(), w["concurrency"].as_u64()),
        (Some(1), Some(4)),
        "{a}"
    );
    let threads = a["threads"]["recommended"].as_u64().unwrap();
    assert!(threads >= 1, "{a}");
    assert_eq!(
        w["max_replica_count"].as_u64(),
        Some(threads.div_ceil(4).max(1)),
        "{a}"
    );
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args(["advise", "--url", &base])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "queue workers: maxReplicaCount {} (1 running now)",
            threads.div_ceil(4).max(1)
        )),
        "{text}"
    );
}
