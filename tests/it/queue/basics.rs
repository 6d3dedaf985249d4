//! A worker process end to end: tasks in, one result each with its TTL, the documented result
//! format, terminal failures, hostile entries dead-lettered, probes and metrics.

use std::time::Duration;

use captcha_gateway::queue::{NewTask, QueueSettings, ResultStatus};
use captcha_gateway::sim::LatencyRange;
use serde_json::json;

use super::support::{WorkerProcess, keda_lag, open, raw, worker_config};
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
    let config = worker_config(sim.addr, &redis.url(), "[queue]\nresult_ttl_s = 300\n");
    let worker = WorkerProcess::start(config, &["--concurrency", "8"]).await;
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
        assert_eq!(result.worker, worker.consumer);
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
