//! A worker process end to end: tasks in, one result each with its TTL, the documented result
//! format, terminal failures, hostile entries dead-lettered, probes and metrics.

use std::time::Duration;

use captcha_gateway::queue::{NewTask, QueueSettings, ResultStatus};
use captcha_gateway::sim::LatencyRange;
use serde_json::json;

use super::support::{keda_lag, open, raw, worker_on};
use crate::support::fleet::SimServer;
use crate::support::redis::RedisServer;

fn fast() -> LatencyRange {
    LatencyRange {
        min: Duration::from_millis(50),
        max: Duration::from_millis(100),
    }
}

#[tokio::test]
async fn queue_worker_solves_tasks_and_writes_one_result_each_with_its_ttl() {
    let redis = RedisServer::start();
    let sim = SimServer::start(fast(), 500).await;
    let worker = worker_on(sim.addr, &redis.url(), "[queue]\nresult_ttl_s = 300\n")
        .args(&["--concurrency", "8"])
        .start()
        .await;
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let mut conn = raw(&redis.url()).await;

    let mut ids = Vec::new();
    for i in 0..20 {
        let enq = queue
            .enqueue(NewTask {
                request: json!({"kind": "turnstile", "sitekey": "0x4AAA", "pageurl": format!("https://shop.example/p{i}")}),
                ..NewTask::default()
            })
            .await
            .unwrap();
        ids.push(enq.id);
    }
    let unsolvable = queue
        .enqueue(NewTask {
            // The simulator refuses this sitekey as a provider does: a verdict on the request.
            request: json!({"kind": "recaptcha_v2", "sitekey": "", "pageurl": "https://shop.example/x"}),
            ..NewTask::default()
        })
        .await;
    assert!(
        unsolvable.is_err(),
        "an empty sitekey is refused at enqueue"
    );

    for id in &ids {
        let result = queue
            .wait_result(id, Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no result for {id}"));
        assert_eq!(result.status, ResultStatus::Ready, "{result:?}");
        assert!(result.answer.as_deref().is_some_and(|a| !a.is_empty()));
        assert_eq!(result.worker, worker.consumer());
        assert_eq!(result.attempts, 1);
        let ttl: i64 = redis::cmd("PTTL")
            .arg(format!("cg:q:{{captcha}}:result:{id}"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 0 && ttl <= 300_000, "the result expires: {ttl}");
    }
    let len: u64 = redis::cmd("XLEN")
        .arg("cg:q:{captcha}:tasks")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 0, "finished entries are acknowledged and deleted");
    assert_eq!(
        worker
            .metric("captcha_gateway_queue_processed_total{queue=\"captcha\",outcome=\"written\"}")
            .await,
        20
    );
    let ready = reqwest::get(format!("{}/readyz", worker.base))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(keda_lag(&mut conn, "cg:q:{captcha}:tasks").await, 0);
}

#[tokio::test]
async fn queue_hostile_entries_are_dead_lettered_with_reasons_and_never_stop_the_worker() {
    use super::support::{pending, request, xadd};
    let redis = RedisServer::start();
    let sim = SimServer::start(fast(), 500).await;
    let worker = worker_on(sim.addr, &redis.url(), "").start().await;
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let mut conn = raw(&redis.url()).await;
    let good = request("good");
    xadd(&mut conn, &[("request", good.as_str())]).await;
    xadd(
        &mut conn,
        &[("id", "no spaces allowed"), ("request", good.as_str())],
    )
    .await;
    xadd(&mut conn, &[("id", "h-json"), ("request", "{not json")]).await;
    xadd(
        &mut conn,
        &[
            ("id", "h-attempt"),
            ("request", good.as_str()),
            ("attempt", "-3"),
        ],
    )
    .await;
    xadd(
        &mut conn,
        &[("id", "h-kind"), ("request", r#"{"kind": "nope"}"#)],
    )
    .await;
    xadd(&mut conn, &[("id", "h-good"), ("request", good.as_str())]).await;

    let ready = queue
        .wait_result("h-good", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(ready.map(|r| r.status), Some(ResultStatus::Ready));
    for (id, code) in [
        ("h-json", "bad_entry"),
        ("h-attempt", "bad_entry"),
        ("h-kind", "bad_kind"),
    ] {
        let r = queue
            .wait_result(id, Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{id} has a failed result"));
        assert_eq!(r.status, ResultStatus::Failed);
        assert_eq!(r.error.map(|e| e.code).as_deref(), Some(code), "{id}");
    }
    let dead: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg("cg:q:{captcha}:dead")
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    let reasons: Vec<String> = dead
        .iter()
        .map(|(_, kv)| {
            kv.chunks(2)
                .find(|p| p[0] == "reason")
                .map(|p| p[1].clone())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        reasons.len(),
        4,
        "a request the API refuses is a failed result, not a dead letter: {reasons:?}"
    );
    // Entries are processed concurrently: the dead letters come in any order.
    let with = |needle: &str| reasons.iter().filter(|r| r.contains(needle)).count();
    assert_eq!(with("`id`"), 2, "{reasons:?}");
    assert_eq!(with("not JSON"), 1, "{reasons:?}");
    assert_eq!(with("`attempt`"), 1, "{reasons:?}");
    assert_eq!(pending(&mut conn).await, 0);
    let ready = reqwest::get(format!("{}/livez", worker.base))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "the worker lives on");
}

#[tokio::test]
async fn queue_sigterm_finishes_in_flight_tasks_within_the_grace_and_exits_0() {
    use super::support::pending;
    let redis = RedisServer::start();
    let slow = LatencyRange {
        min: Duration::from_millis(1500),
        max: Duration::from_millis(1500),
    };
    let sim = SimServer::start(slow, 500).await;
    let mut conn = raw(&redis.url()).await;
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let enqueue = |prefix: &'static str, n: usize| {
        let queue = queue.clone();
        async move {
            let mut ids = Vec::new();
            for i in 0..n {
                let id = format!("{prefix}-{i}");
                queue
                    .enqueue(NewTask {
                        id: Some(id.clone()),
                        request: serde_json::from_str(&super::support::request(&id)).unwrap(),
                        ..NewTask::default()
                    })
                    .await
                    .unwrap();
                ids.push(id);
            }
            ids
        }
    };
    let in_flight = "captcha_gateway_queue_in_flight";

    // A grace long enough: everything in flight is finished by this worker, then it exits 0.
    let mut patient = worker_on(sim.addr, &redis.url(), "")
        .args(&["--concurrency", "4", "--lease-s", "2", "--grace-s", "20"])
        .start()
        .await;
    let ids = enqueue("graceful", 4).await;
    // Held and submitted upstream: after the signal the account submits nothing new (a task
    // not yet submitted would wait for the cut and be handed back instead).
    crate::support::eventually::eventually(Duration::from_secs(10), "4 tasks submitted", || {
        let w = &patient;
        let sim = &sim;
        async move { w.metric(in_flight).await == 4 && sim.sim.stats().submits == 4 }
    })
    .await;
    patient.signal("TERM");
    assert!(patient.exited().await.success(), "exit 0 after SIGTERM");
    for id in &ids {
        let r = queue
            .result(id)
            .await
            .unwrap()
            .expect("finished within the grace");
        assert_eq!(r.worker, patient.consumer());
    }
    assert_eq!(pending(&mut conn).await, 0);

    // A grace too short for the solves: the tasks are handed back (or left pending), and
    // another worker finishes them.
    let mut hasty = worker_on(sim.addr, &redis.url(), "[queue]\nretry_base_s = 0.05\n")
        .args(&["--concurrency", "2", "--lease-s", "2", "--grace-s", "0.5"])
        .start()
        .await;
    let ids = enqueue("handed-back", 2).await;
    crate::support::eventually::eventually(Duration::from_secs(10), "2 tasks in flight", || {
        let w = &hasty;
        async move { w.metric(in_flight).await == 2 }
    })
    .await;
    hasty.signal("TERM");
    assert!(hasty.exited().await.success(), "exit 0 after SIGTERM");
    let next = worker_on(sim.addr, &redis.url(), "")
        .args(&["--concurrency", "2", "--lease-s", "2"])
        .start()
        .await;
    for id in &ids {
        let r = queue
            .wait_result(id, Duration::from_secs(30))
            .await
            .unwrap()
            .expect("finished by the next worker");
        assert_eq!(r.worker, next.consumer(), "{id}");
        assert_eq!(r.status, ResultStatus::Ready);
    }
}

#[test]
fn queue_worker_bad_settings_exit_2_with_one_line_naming_the_setting() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
            .arg("worker")
            .args(args)
            .env_clear()
            .env("CAPTCHAAI_API_KEY", crate::support::KEY)
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stderr)
    };
    let redis = ["--redis-url", "redis://127.0.0.1:1/0"];
    let cases: [(&[&str], &str); 7] = [
        (&[], "--redis-url"),
        (
            &[&redis[..], &["--runtime-threads", "0"]].concat(),
            "--runtime-threads",
        ),
        (
            &[&redis[..], &["--runtime-threads", "60000"]].concat(),
            "--runtime-threads",
        ),
        (&[&redis[..], &["--lease-s", "0"]].concat(), "--lease-s"),
        (
            &[&redis[..], &["--concurrency", "0"]].concat(),
            "--concurrency",
        ),
        (
            &[&redis[..], &["--max-deliveries", "100000"]].concat(),
            "--max-deliveries",
        ),
        (&[&redis[..], &["--queue", "a{b}"]].concat(), "--queue"),
    ];
    for (args, setting) in cases {
        let (code, stderr) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(setting), "{args:?}: {stderr}");
    }
}
