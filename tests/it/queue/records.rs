//! One result per task for a `serve --queue` front end's tasks, which have two: the queue's
//! result and the gateway task record `res.php` reads. Only the worker still holding the entry
//! writes either, and a worker dying between the two leaves the record to the entry's next
//! delivery, which finishes it without solving again.

use std::time::Duration;

use captcha_gateway::model::{Kind, Source, now_ms};
use captcha_gateway::queue::{QueueResult, ResultStatus};
use serde_json::Value;

use super::support::{front_end, pending, raw, worker_on};
use crate::support::KEY;
use crate::support::eventually::eventually;
use crate::support::fleet::SimServer;
use crate::support::redis::RedisServer;

const TASKS: &str = "cg:q:{captcha}:tasks";

/// Submits a reCAPTCHA through the front end's `in.php`; returns the task id.
async fn submit(http: &reqwest::Client, base: &str, page: &str) -> String {
    let v: Value = http
        .post(format!("{base}/in.php"))
        .form(&[
            ("key", KEY),
            ("json", "1"),
            ("method", "userrecaptcha"),
            ("googlekey", "6Le-records"),
            ("pageurl", &format!("https://records.example/{page}")),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["status"], 1, "{v}");
    v["request"].as_str().unwrap().to_owned()
}

/// `res.php`'s answer for `id`: `(status, request)`.
async fn res(http: &reqwest::Client, base: &str, id: &str) -> (i64, String) {
    let v: Value = http
        .get(format!(
            "{base}/res.php?key={KEY}&action=get&json=1&id={id}"
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        v["status"].as_i64().unwrap_or(-1),
        v["request"].as_str().unwrap_or_default().to_owned(),
    )
}

/// The stream id of the one pending entry.
async fn pending_entry(conn: &mut redis::aio::MultiplexedConnection) -> String {
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(TASKS)
        .arg("workers")
        .arg("-")
        .arg("+")
        .arg(10)
        .query_async(conn)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows[0].0.clone()
}

/// A worker whose entry was taken from it while it solved writes nothing when its solve ends:
/// not the queue's result and not the task record `res.php` reads, so the two cannot disagree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_lost_its_lease_writes_no_task_record() {
    let redis = RedisServer::start();
    // Its provider stands still until the test moves the clock.
    let stalled = SimServer::stalled(100).await;
    let front = front_end(&stalled, &redis.url()).start().await;
    // Renewals an hour apart: the renewal cannot notice the loss before the solve ends.
    let worker = worker_on(stalled.addr, &redis.url(), "")
        .args(&["--concurrency", "1", "--lease-s", "3600"])
        .start()
        .await;
    let http = reqwest::Client::new();
    let id = submit(&http, &front.base, "lost").await;
    eventually(
        Duration::from_secs(20),
        "the worker solving the task",
        || async { stalled.sim.stats().submits == 1 },
    )
    .await;
    let mut conn = raw(&redis.url()).await;
    let stream_id = pending_entry(&mut conn).await;
    // Another consumer takes the entry over, as a reclaim after a pause would.
    let _: Vec<String> = redis::cmd("XCLAIM")
        .arg(TASKS)
        .arg("workers")
        .arg("thief")
        .arg(0)
        .arg(&stream_id)
        .arg("JUSTID")
        .query_async(&mut conn)
        .await
        .unwrap();

    stalled.sim.clock().advance(Duration::from_secs(2));
    eventually(Duration::from_secs(20), "the worker ending the task", || {
        let w = &worker;
        async move {
            w.metric("captcha_gateway_queue_processed_total{queue=\"captcha\",outcome=\"lease_lost\"}")
                .await
                == 1
        }
    })
    .await;
    assert_eq!(
        res(&http, &front.base, &id).await,
        (0, "CAPCHA_NOT_READY".to_owned()),
        "the record is still its new owner's to write"
    );
    let result: Option<String> = redis::cmd("GET")
        .arg(format!("cg:q:{{captcha}}:result:{id}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(result, None, "nor the queue's result");
}

/// A worker wrote the queue's result and died before the task record: the entry stays pending,
/// and the worker that takes it over finishes the record from that result, without a provider
/// task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_written_before_a_crash_reaches_the_task_record_without_a_second_solve() {
    let redis = RedisServer::start();
    let sim = SimServer::start(
        captcha_gateway::sim::LatencyRange::fixed(Duration::from_millis(50)),
        100,
    )
    .await;
    let front = front_end(&sim, &redis.url()).start().await;
    let http = reqwest::Client::new();
    let id = submit(&http, &front.base, "crash").await;
    let mut conn = raw(&redis.url()).await;
    // The dead worker's part: delivered to it, its result written, nothing after.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("workers")
        .arg("crashed")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(TASKS)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    let now = now_ms();
    let written = QueueResult {
        id: id.clone(),
        status: ResultStatus::Ready,
        kind: Some(Kind::RecaptchaV2),
        answer: Some("token-of-the-dead-worker".into()),
        source: Some(Source::Solved),
        expires_at: Some(now + 110_000),
        user_agent: None,
        error: None,
        attempts: 1,
        worker: "crashed".into(),
        finished_at: now,
        duration_ms: 1,
    };
    let _: () = redis::cmd("SET")
        .arg(format!("cg:q:{{captcha}}:result:{id}"))
        .arg(written.to_json())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(res(&http, &front.base, &id).await.0, 0, "pending so far");

    let _worker = worker_on(sim.addr, &redis.url(), "")
        .args(&["--concurrency", "1", "--lease-s", "1"])
        .start()
        .await;
    eventually(
        Duration::from_secs(30),
        "the record finished from the result",
        || {
            let (http, base, id) = (&http, &front.base, &id);
            async move { res(http, base, id).await == (1, "token-of-the-dead-worker".to_owned()) }
        },
    )
    .await;
    eventually(Duration::from_secs(10), "the entry acknowledged", || {
        let mut c = conn.clone();
        async move { pending(&mut c).await == 0 }
    })
    .await;
    assert_eq!(
        sim.sim.stats().submits,
        0,
        "solved once, by the worker that died"
    );
}
