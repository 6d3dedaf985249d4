//! The producer API against a real Redis: idempotent enqueue, the entry format, results read
//! and waited for without polling, the lag.

use std::time::Duration;

use captcha_gateway::queue::{NewTask, QueueError, QueueSettings};
use serde_json::{Value, json};

use super::support::{calls, keda_lag, open, raw};
use crate::support::eventually::eventually;
use crate::support::redis::RedisServer;

fn turnstile() -> Value {
    json!({"kind": "turnstile", "sitekey": "0x4AAA", "pageurl": "https://shop.example/login"})
}

fn result_json(id: &str) -> String {
    json!({"id": id, "status": "ready", "kind": "turnstile", "answer": format!("tok-{id}"),
           "source": "solved", "expires_at": 1, "attempts": 1, "worker": "w", "finished_at": 1,
           "duration_ms": 1})
    .to_string()
}

#[tokio::test]
async fn queue_enqueue_is_idempotent_per_key_and_writes_the_documented_entry() {
    let redis = RedisServer::start();
    let settings = QueueSettings {
        result_ttl: Duration::from_secs(120),
        ..QueueSettings::default()
    };
    let queue = open(&redis.url(), settings).await;
    let mut conn = raw(&redis.url()).await;

    let task = NewTask {
        request: turnstile(),
        idem: Some("order-1".into()),
        tenant: Some("acme".into()),
        ..NewTask::default()
    };
    let first = queue.enqueue(task.clone()).await.unwrap();
    assert!(!first.duplicate);
    assert_eq!(first.id.len(), 15, "a compatible 15-digit id: {}", first.id);
    let again = queue.enqueue(task.clone()).await.unwrap();
    assert_eq!(again.id, first.id);
    assert!(again.duplicate);
    let other = queue
        .enqueue(NewTask {
            request: turnstile(),
            ..NewTask::default()
        })
        .await
        .unwrap();
    assert_ne!(other.id, first.id);

    let len: u64 = redis::cmd("XLEN")
        .arg("cg:q:{captcha}:tasks")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 2, "the duplicate added nothing");
    let ttl: i64 = redis::cmd("PTTL")
        .arg("cg:q:{captcha}:idem:order-1")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        ttl > 0 && ttl <= 120_000,
        "the idempotency key expires: {ttl}"
    );

    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg("cg:q:{captcha}:tasks")
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    let field = |name: &str| {
        entries[0]
            .1
            .chunks(2)
            .find(|kv| kv[0] == name)
            .map(|kv| kv[1].clone())
    };
    assert_eq!(field("id").as_deref(), Some(first.id.as_str()));
    assert_eq!(field("tenant").as_deref(), Some("acme"));
    assert_eq!(field("idem").as_deref(), Some("order-1"));
    let request: Value = serde_json::from_str(&field("request").unwrap()).unwrap();
    assert_eq!(request, turnstile());
    assert!(field("enqueued_at").unwrap().parse::<u64>().is_ok());

    // The group exists from the first enqueue, so the lag KEDA reads counts undelivered work.
    assert_eq!(keda_lag(&mut conn, "cg:q:{captcha}:tasks").await, 2);
    assert_eq!(queue.lag().await.unwrap(), Some(2));
}

#[tokio::test]
async fn queue_enqueue_refuses_bad_tasks_with_the_native_codes() {
    let redis = RedisServer::start();
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let refused = |r: Result<_, QueueError>| match r {
        Err(QueueError::Invalid(v)) => v.code,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let bad_kind = queue
        .enqueue(NewTask {
            request: json!({"kind": "nope"}),
            ..NewTask::default()
        })
        .await;
    assert_eq!(refused(bad_kind), "bad_kind");
    let bad_id = queue
        .enqueue(NewTask {
            id: Some("{x} y".into()),
            request: turnstile(),
            ..NewTask::default()
        })
        .await;
    assert_eq!(refused(bad_id), "bad_task_id");
    let bad_timeout = queue
        .enqueue(NewTask {
            request: json!({"kind": "turnstile", "sitekey": "k", "pageurl": "https://a.example/", "timeout_s": 1e30}),
            ..NewTask::default()
        })
        .await;
    assert_eq!(refused(bad_timeout), "bad_timeout");
    assert_eq!(queue.lag().await.unwrap(), Some(0), "nothing was added");
}

#[tokio::test]
async fn queue_waiters_share_one_subscription_and_are_woken_without_polling() {
    let redis = RedisServer::start();
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let mut conn = raw(&redis.url()).await;

    // A result written before the wait is found at once.
    let _: () = redis::cmd("SET")
        .arg("cg:q:{captcha}:result:early")
        .arg(result_json("early"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let early = queue
        .wait_result("early", Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the result written before the wait");
    assert_eq!(early.answer.as_deref(), Some("tok-early"));

    let gets_before = calls(&mut conn, "get").await;
    let ids: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    let waiters: Vec<_> = ids
        .iter()
        .chain(std::iter::once(&ids[0]))
        .map(|id| {
            let (q, id) = (queue.clone(), id.clone());
            tokio::spawn(async move { q.wait_result(&id, Duration::from_secs(60)).await })
        })
        .collect();
    let n = waiters.len() as u64;
    // Every waiter has registered and made its first read.
    eventually(Duration::from_secs(20), "every waiter's first read", || {
        let mut c = conn.clone();
        async move { calls(&mut c, "get").await >= gets_before + n }
    })
    .await;
    assert_eq!(
        queue.waiting(),
        ids.len(),
        "two waiters of one id share a place"
    );
    let numsub: (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("cg:q:{captcha}:done")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        numsub.1, 1,
        "one subscription for every waiter of the process"
    );

    for id in &ids {
        let _: () = redis::cmd("SET")
            .arg(format!("cg:q:{{captcha}}:result:{id}"))
            .arg(result_json(id))
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("PUBLISH")
            .arg("cg:q:{captcha}:done")
            .arg(id)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    for (waiter, id) in waiters
        .into_iter()
        .zip(ids.iter().chain(std::iter::once(&ids[0])))
    {
        let result = waiter
            .await
            .unwrap()
            .unwrap()
            .expect("woken with its result");
        assert_eq!(result.id, *id);
        assert_eq!(result.answer, Some(format!("tok-{id}")));
    }
    // One read before waiting, one after the wake-up (and at most one more if the
    // subscription's start woke everyone): no polling loop.
    let gets = calls(&mut conn, "get").await - gets_before;
    assert!(
        gets <= 3 * n,
        "{gets} reads for {n} waiters: somebody polled"
    );
    assert_eq!(queue.waiting(), 0, "places are given back");
}

#[tokio::test]
async fn queue_wait_for_a_result_that_never_comes_ends_at_its_timeout() {
    let redis = RedisServer::start();
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let missing = queue
        .wait_result("never", Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(missing, None);
    assert_eq!(queue.waiting(), 0);
}
