//! `serve --queue`: a front end that hands every accepted task to the queue's workers. Callers of
//! every protocol (compatible, JSON task protocol, native, seed worker API) get their answers as
//! without a queue, while the front end itself never spends an upstream task.

use serde_json::{Value, json};

use super::support::worker_on;
use crate::support::fleet::SimServer;
use crate::support::redis::RedisServer;
use crate::support::{KEY, verify_at};

fn latency() -> captcha_gateway::sim::LatencyRange {
    captcha_gateway::sim::LatencyRange {
        min: std::time::Duration::from_millis(50),
        max: std::time::Duration::from_millis(150),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_front_end_answers_every_protocol_through_the_workers() {
    let redis = RedisServer::start();
    let sim = SimServer::start(latency(), 100).await;
    let front = crate::queue::support::front_end(&sim, &redis.url())
        .start()
        .await;
    let base = front.base.clone();
    let worker = worker_on(sim.addr, &redis.url(), "").start().await;
    let http = reqwest::Client::new();
    let sim_base = format!("http://{}", sim.addr);
    let mut tokens = Vec::new();

    // Compatible: in.php, then the native long-poll on the same task, then res.php.
    let submitted: Value = json_of(http.post(format!("{base}/in.php")).form(&[
        ("key", KEY),
        ("json", "1"),
        ("method", "userrecaptcha"),
        ("googlekey", "6Le-front-compat"),
        ("pageurl", "https://front.example/compat"),
    ]))
    .await;
    assert_eq!(submitted["status"], 1, "{submitted}");
    let id = submitted["request"].as_str().unwrap().to_owned();
    assert!(id.bytes().all(|b| b.is_ascii_digit()), "{id}");
    let waited = wait_task(&http, &base, &id).await;
    assert_eq!(waited["status"], "ready", "{waited}");
    let res: Value = json_of(http.get(format!(
        "{base}/res.php?key={KEY}&action=get&json=1&id={id}"
    )))
    .await;
    assert_eq!(res["status"], 1, "{res}");
    assert_eq!(res["request"], waited["result"]["token"]);
    tokens.push(res["request"].as_str().unwrap().to_owned());

    // Native: POST /v1/tasks + GET wait, and the synchronous /v1/solve.
    let body = json!({"kind": "turnstile", "sitekey": "0x4A-front", "pageurl": "https://front.example/native"});
    let created: Value = json_of(
        http.post(format!("{base}/v1/tasks"))
            .bearer_auth(KEY)
            .json(&body),
    )
    .await;
    let id = created["task_id"].as_str().expect("a task id").to_owned();
    let waited = wait_task(&http, &base, &id).await;
    assert_eq!(waited["status"], "ready", "{waited}");
    tokens.push(waited["result"]["token"].as_str().unwrap().to_owned());
    let solved: Value = json_of(
        http.post(format!("{base}/v1/solve"))
            .bearer_auth(KEY)
            .json(&body),
    )
    .await;
    tokens.push(solved["token"].as_str().expect("a token").to_owned());

    // The JSON task protocol.
    let created: Value = json_of(http.post(format!("{base}/createTask")).json(
        &json!({"clientKey": KEY, "task": {"type": "RecaptchaV2TaskProxyless",
            "websiteURL": "https://front.example/taskapi", "websiteKey": "6Le-front-taskapi"}}),
    ))
    .await;
    assert_eq!(created["errorId"], 0, "{created}");
    let id = created["taskId"].to_string().trim_matches('"').to_owned();
    wait_task(&http, &base, &id).await;
    let got: Value = json_of(
        http.post(format!("{base}/getTaskResult"))
            .json(&json!({"clientKey": KEY, "taskId": created["taskId"]})),
    )
    .await;
    assert_eq!(got["status"], "ready", "{got}");
    tokens.push(
        got["solution"]["gRecaptchaResponse"]
            .as_str()
            .unwrap()
            .to_owned(),
    );

    // Seed 002's worker API.
    let solved: Value = json_of(
        http.post(format!("{base}/solve"))
            .bearer_auth(KEY)
            .json(&json!({"sitekey": "6Le-front-seed", "pageurl": "https://front.example/seed"})),
    )
    .await;
    tokens.push(solved["solution"].as_str().expect("a solution").to_owned());

    for token in &tokens {
        let v = verify_at(&http, &sim_base, token).await;
        assert_eq!(v["success"], true, "{token}: {v}");
    }
    // The workers solved all five; the front end never went upstream.
    let front = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let submits: Vec<&str> = front
        .lines()
        .filter(|l| l.starts_with("captcha_gateway_upstream_requests_total{"))
        .filter(|l| l.contains("endpoint=\"submit\""))
        .collect();
    assert!(!submits.is_empty(), "{front}");
    assert!(submits.iter().all(|l| l.ends_with(" 0")), "{front}");
    let metrics = http
        .get(format!("{}/metrics", worker.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let written = metrics
        .lines()
        .find(|l| {
            l.starts_with("captcha_gateway_queue_processed_total{") && l.contains("\"written\"")
        })
        .unwrap_or_else(|| panic!("no written count in {metrics}"));
    assert!(written.ends_with(" 5"), "{written}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_the_front_end_cannot_queue_fails_in_its_callers_protocol() {
    let mut redis = RedisServer::start();
    let sim = SimServer::start(latency(), 100).await;
    let front = crate::queue::support::front_end(&sim, &redis.url())
        .start()
        .await;
    let base = front.base.clone();
    let http = reqwest::Client::new();
    redis.kill();
    let reply = http
        .get(format!(
            "{base}/in.php?key={KEY}&method=userrecaptcha&googlekey=6Le-x&pageurl=https://x.example/"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    assert!(
        reply.text().await.unwrap().starts_with("ERROR_"),
        "a compatible caller hears an error code"
    );
    let reply = http
        .post(format!("{base}/v1/tasks"))
        .bearer_auth(KEY)
        .json(&json!({"kind": "turnstile", "sitekey": "0x4A", "pageurl": "https://x.example/"}))
        .send()
        .await
        .unwrap();
    assert!(reply.status().is_server_error(), "{}", reply.status());
}

#[test]
fn a_queued_front_end_without_redis_is_refused_with_one_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args(["serve", "--provider", "sim", "--queue"])
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--queue") && err.contains("--redis-url"),
        "{err}"
    );
}

async fn wait_task(http: &reqwest::Client, base: &str, id: &str) -> Value {
    let v: Value = json_of(
        http.get(format!("{base}/v1/tasks/{id}?wait=60"))
            .bearer_auth(KEY),
    )
    .await;
    assert_ne!(v["status"], "pending", "task {id} still pending: {v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_caller_stopped_waiting_in_the_queue_is_failed_without_a_solve() {
    let redis = RedisServer::start();
    let sim = SimServer::start(latency(), 100).await;
    let queue = super::support::open(&redis.url(), Default::default()).await;
    let mut conn = super::support::raw(&redis.url()).await;
    let now = captcha_gateway::model::now_ms();
    let request =
        r#"{"kind": "turnstile", "sitekey": "0x4A-late", "pageurl": "https://late.example/"}"#;
    // Two entries as a front end writes them: one whose caller gave up 9 s ago, one still waited on.
    for (id, deadline_at) in [("late-1", now - 9_000), ("fresh-1", now + 60_000)] {
        let _: String = redis::cmd("XADD")
            .arg(queue.keys().tasks())
            .arg("*")
            .arg(&["id", id, "request", request])
            .arg(&["deadline_at", &deadline_at.to_string()])
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let _worker = worker_on(sim.addr, &redis.url(), "").start().await;
    let wait = std::time::Duration::from_secs(60);
    let late = queue
        .wait_result("late-1", wait)
        .await
        .unwrap()
        .expect("a result");
    assert_eq!(late.status, captcha_gateway::queue::ResultStatus::Failed);
    let error = late.error.expect("an error");
    assert_eq!(error.code, "ERROR_CAPTCHA_UNSOLVABLE", "{}", error.message);
    assert!(
        error.message.contains("stopped waiting"),
        "{}",
        error.message
    );
    let fresh = queue
        .wait_result("fresh-1", wait)
        .await
        .unwrap()
        .expect("a result");
    assert_eq!(fresh.status, captcha_gateway::queue::ResultStatus::Ready);
    assert_eq!(
        sim.sim.stats().submits,
        1,
        "only the task still waited on was solved"
    );
}

/// A front end's caller waiting on a task a worker runs is woken when it ends, not polling: the
/// task record is read a handful of times per task, as many for a long wait as for a short one
/// (the count is `INFO commandstats`' `HGETALL` calls, every record read there is; the figures
/// are in docs/BENCHMARKS.md "Front ends woken, not polled").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_ends_caller_is_woken_with_a_few_record_reads_however_long_the_solve() {
    use captcha_gateway::model::Kind;
    use captcha_gateway::sim::LatencyRange;
    use std::time::Duration;
    let redis = RedisServer::start();
    let fast = LatencyRange::fixed(Duration::from_secs(1));
    let slow = LatencyRange::fixed(Duration::from_secs(6));
    let sim = super::support::sim_with_kind_at(fast, Kind::RecaptchaV2, slow).await;
    let front = crate::queue::support::front_end(&sim, &redis.url())
        .start()
        .await;
    // As users run it: it learns when each kind is ready, so the two waits differ as the solves.
    let _worker = super::support::worker_as_users_run_it(sim.addr, &redis.url())
        .start()
        .await;
    let http = reqwest::Client::new();
    let mut conn = super::support::raw(&redis.url()).await;
    let mut reads = Vec::new();
    for body in [
        json!({"kind": "turnstile", "sitekey": "0x4A-woken", "pageurl": "https://woken.example/1"}),
        json!({"kind": "recaptcha_v2", "sitekey": "6Le-woken", "pageurl": "https://woken.example/6"}),
    ] {
        let before = super::support::calls(&mut conn, "hgetall").await;
        let started = std::time::Instant::now();
        let solved: Value = json_of(
            http.post(format!("{}/v1/solve", front.base))
                .bearer_auth(KEY)
                .json(&body),
        )
        .await;
        assert!(solved["token"].is_string(), "{solved}");
        reads.push(super::support::calls(&mut conn, "hgetall").await - before);
        println!(
            "{}: {:?} waited, {:?} record reads",
            body["kind"],
            started.elapsed(),
            reads.last()
        );
    }
    assert!(
        reads.iter().all(|n| (1..=6).contains(n)),
        "record reads per task (1 s, 6 s solves): {reads:?}"
    );
}

/// The wake itself: a front end's waiting caller is answered within a second of the worker's
/// result being written (the record's `finished_at`, on this machine's clock), where a lost
/// wake-up would leave it to the safety-net read every 10 s, seconds late. The 1 s allows for a
/// loaded 2-core machine; a wake costs one Pub/Sub message and one record read. With
/// `task_finish.lua`'s `PUBLISH` removed this fails: answered 8.0 s after the result (shown
/// once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_ends_caller_is_answered_within_a_second_of_the_workers_result() {
    use captcha_gateway::model::now_ms;
    use captcha_gateway::sim::LatencyRange;
    use std::time::Duration;
    let redis = RedisServer::start();
    let latency = LatencyRange::fixed(Duration::from_secs(1));
    let sim = crate::support::fleet::SimServer::start(latency, 100).await;
    let front = crate::queue::support::front_end(&sim, &redis.url())
        .start()
        .await;
    let _worker = super::support::worker_as_users_run_it(sim.addr, &redis.url())
        .start()
        .await;
    let body =
        json!({"kind": "turnstile", "sitekey": "0x4A-wake", "pageurl": "https://wake.example/"});
    let solved: Value = json_of(
        reqwest::Client::new()
            .post(format!("{}/v1/solve", front.base))
            .bearer_auth(KEY)
            .json(&body),
    )
    .await;
    let answered = now_ms();
    assert!(solved["token"].is_string(), "{solved}");
    let mut conn = super::support::raw(&redis.url()).await;
    let late = answered.saturating_sub(latest_finish(&mut conn).await);
    assert!(
        late <= 1_000,
        "{late} ms from the worker's result to the caller's answer"
    );
}

/// The latest `finished_at` over every task record in the store.
async fn latest_finish(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("cg:{k:*}:task")
        .query_async(conn)
        .await
        .unwrap();
    let mut latest = 0;
    for key in keys {
        let at: Option<u64> = redis::cmd("HGET")
            .arg(&key)
            .arg("finished_at")
            .query_async(conn)
            .await
            .unwrap();
        latest = latest.max(at.unwrap_or(0));
    }
    assert!(latest > 0, "a finished task record");
    latest
}

/// The JSON body of the answer to `request`.
async fn json_of(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}
