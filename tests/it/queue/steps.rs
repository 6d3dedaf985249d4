//! The worker's batched scripts (`queue::steps`) against a real Redis: a batch answers each entry
//! on its own, exactly as one call per entry would, including entries whose lease was lost.

use captcha_gateway::queue::calls::{Begin, BeginStep, FinishStep, Finished};
use captcha_gateway::queue::steps;
use captcha_gateway::queue::{QueueResult, QueueSettings, ResultStatus};
use redis::AsyncCommands;

use super::support::{calls, open, pending, raw, request, xadd};
use crate::support::redis::RedisServer;

const TASKS: &str = "cg:q:{captcha}:tasks";
const DEAD: &str = "cg:q:{captcha}:dead";

fn result_key(id: &str) -> String {
    format!("cg:q:{{captcha}}:result:{id}")
}

fn ready(id: &str) -> QueueResult {
    QueueResult {
        id: id.to_owned(),
        status: ResultStatus::Ready,
        kind: None,
        answer: Some(format!("tok-{id}")),
        source: None,
        expires_at: None,
        user_agent: None,
        error: None,
        attempts: 1,
        worker: "a".into(),
        finished_at: 1,
        duration_ms: 1,
    }
}

/// Entries as `XRANGE` and `XREADGROUP` answer them: (stream id, fields).
type Entries = Vec<(String, Vec<(String, String)>)>;

/// Delivers every new entry to `consumer`; returns their stream ids in order.
async fn deliver(conn: &mut redis::aio::MultiplexedConnection, consumer: &str) -> Vec<String> {
    // [[stream, [[id, [field, value, ...]], ...]]]
    let reply: Vec<(String, Entries)> = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("workers")
        .arg(consumer)
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg(TASKS)
        .arg(">")
        .query_async(conn)
        .await
        .unwrap();
    reply
        .into_iter()
        .flat_map(|(_, entries)| entries)
        .map(|(id, _)| id)
        .collect()
}

async fn xlen(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    redis::cmd("XLEN")
        .arg(TASKS)
        .query_async(conn)
        .await
        .unwrap()
}

/// The dead-letter stream's entries, fields as maps.
async fn dead_letters(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Vec<std::collections::HashMap<String, String>> {
    let entries: Entries = redis::cmd("XRANGE")
        .arg(DEAD)
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .unwrap();
    entries
        .into_iter()
        .map(|(_, fields)| fields.into_iter().collect())
        .collect()
}

async fn owner(conn: &mut redis::aio::MultiplexedConnection, stream_id: &str) -> Option<String> {
    let reply: redis::Value = redis::cmd("XPENDING")
        .arg(TASKS)
        .arg("workers")
        .arg(stream_id)
        .arg(stream_id)
        .arg(1)
        .query_async(conn)
        .await
        .unwrap();
    match reply {
        redis::Value::Array(rows) => rows.first().and_then(|row| match row {
            redis::Value::Array(cols) => match cols.get(1) {
                Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            },
            _ => None,
        }),
        _ => None,
    }
}

#[tokio::test]
async fn queue_steps_a_batch_answers_each_entry_alone_lost_leases_included() {
    let redis = RedisServer::start();
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let mut conn = raw(&redis.url()).await;
    queue.ensure_group().await.unwrap();
    let mut ids = Vec::new();
    for task in ["t-go", "t-lost", "t-done", "t-dead"] {
        xadd(
            &mut conn,
            &[("id", task), ("request", request(task).as_str())],
        )
        .await;
        ids.push(task);
    }
    // A bad entry (no id) is part of the batch too.
    xadd(&mut conn, &[("junk", "1")]).await;
    let delivered = deliver(&mut conn, "a").await;
    assert_eq!(delivered.len(), 5);
    // Worker "b" took the second over (a's lease ran out); the third's result is already there.
    let _: redis::Value = redis::cmd("XCLAIM")
        .arg(TASKS)
        .arg("workers")
        .arg("b")
        .arg(0)
        .arg(&delivered[1])
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = conn.set(result_key("t-done"), "{}").await.unwrap();

    let begin_steps: Vec<BeginStep> = delivered
        .iter()
        .zip(ids.iter().map(|t| Some(t.to_string())).chain([None]))
        .map(|(stream_id, task_id)| BeginStep {
            stream_id: stream_id.clone(),
            task_id,
            keep: false,
        })
        .collect();
    let begun = steps::begin(&queue, "a", &begin_steps).await.unwrap();
    assert_eq!(
        begun,
        [
            Begin::Go(1),
            Begin::Lost,
            Begin::Done,
            Begin::Go(1),
            Begin::Go(1)
        ]
    );
    // The finished one is acknowledged and gone; the lost one is still b's.
    assert_eq!(owner(&mut conn, &delivered[2]).await, None);
    assert_eq!(owner(&mut conn, &delivered[1]).await.as_deref(), Some("b"));
    assert_eq!(xlen(&mut conn).await, 4);

    let finish = |i: usize, result: Option<QueueResult>, dead: Option<&str>| FinishStep {
        stream_id: delivered[i].clone(),
        result,
        dead_reason: dead.map(str::to_owned),
        fields: vec![("id".into(), ids.get(i).unwrap_or(&"").to_string())],
        keep: false,
    };
    let finished = steps::finish(
        &queue,
        "a",
        &[
            finish(0, Some(ready("t-go")), None),
            finish(1, Some(ready("t-lost")), None),
            finish(3, Some(ready("t-dead")), Some("poison")),
            finish(4, None, Some("no id")),
            // The same entry again in one batch: already ended by the step before.
            finish(0, Some(ready("t-go")), None),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        finished,
        [
            Finished::Written,
            Finished::LeaseLost,
            Finished::Written,
            Finished::Written,
            Finished::LeaseLost
        ]
    );
    // Written once, for the entries a still owned; none for the lost lease.
    let go: Option<String> = conn.get(result_key("t-go")).await.unwrap();
    assert!(go.unwrap().contains("tok-t-go"));
    let lost: Option<String> = conn.get(result_key("t-lost")).await.unwrap();
    assert_eq!(lost, None);
    // Dead letters: the two with a reason, each with its reason and fields.
    let dead = dead_letters(&mut conn).await;
    let reasons: Vec<&str> = dead.iter().map(|e| e["reason"].as_str()).collect();
    assert_eq!(reasons, ["poison", "no id"]);
    assert_eq!(dead[0]["id"], "t-dead");
    assert_eq!(dead[0]["worker"], "a");
    // Only b's entry is left, pending and in the stream (acknowledged before deleted).
    assert_eq!(pending(&mut conn).await, 1);
    assert_eq!(xlen(&mut conn).await, 1);
    assert_eq!(owner(&mut conn, &delivered[1]).await.as_deref(), Some("b"));
}

#[tokio::test]
async fn queue_steps_an_empty_batch_sends_nothing() {
    let redis = RedisServer::start();
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let mut conn = raw(&redis.url()).await;
    assert!(steps::begin(&queue, "a", &[]).await.unwrap().is_empty());
    assert!(steps::finish(&queue, "a", &[]).await.unwrap().is_empty());
    assert_eq!(
        calls(&mut conn, "evalsha").await + calls(&mut conn, "eval").await,
        0
    );
}

/// Whether `consumer` is in the group, and the entries it holds (`XINFO CONSUMERS`).
async fn consumer_holds(
    conn: &mut redis::aio::MultiplexedConnection,
    consumer: &str,
) -> Option<i64> {
    let consumers: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(TASKS)
        .arg("workers")
        .query_async(conn)
        .await
        .unwrap();
    consumers.into_iter().find_map(|c| {
        let name: String = redis::from_redis_value_ref(c.get("name")?).ok()?;
        (name == consumer).then(|| redis::from_redis_value_ref(c.get("pending")?).ok())?
    })
}

/// A worker paused past the silence that marks it dead resumes and reads an entry exactly while
/// another worker is forgetting dead consumers: the look and the deletion are one step, so the
/// resumed worker keeps what it read. The forgetting worker's replies are held back by a proxy
/// until the read is done, which puts the read between its look (served, reply held) and
/// anything it could send after that look; with a separate `XGROUP DELCONSUMER` sent after the
/// look's reply, the consumer and its pending entry would be deleted.
#[tokio::test]
async fn queue_steps_forgetting_dead_consumers_never_drops_an_entry_read_meanwhile() {
    use crate::support::eventually::eventually;
    use crate::support::fault_proxy::{FaultProxy, Mode};
    use std::time::Duration;

    let redis = RedisServer::start();
    let mut conn = raw(&redis.url()).await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let forgetter = open(
        &format!("redis://{}/", proxy.addr),
        QueueSettings::default(),
    )
    .await;
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg(TASKS)
        .arg("workers")
        .arg("paused")
        .query_async(&mut conn)
        .await
        .unwrap();
    let stream_id = xadd(&mut conn, &[("id", "t1"), ("request", &request("forget"))]).await;
    let silent = Duration::from_millis(5);
    eventually(Duration::from_secs(10), "the paused worker silent", || {
        let mut c = conn.clone();
        async move {
            let consumers: Vec<std::collections::HashMap<String, redis::Value>> =
                redis::cmd("XINFO")
                    .arg("CONSUMERS")
                    .arg(TASKS)
                    .arg("workers")
                    .query_async(&mut c)
                    .await
                    .unwrap();
            consumers.iter().any(|c| {
                c.get("idle")
                    .and_then(|v| redis::from_redis_value_ref::<u64>(v).ok())
                    .is_some_and(|idle| idle > 20)
            })
        }
    })
    .await;

    // Once unhurried, so that the held call below is the look itself (not a script load).
    let hour = Duration::from_secs(3600);
    steps::forget_dead_consumers(&forgetter, "alive", hour)
        .await
        .unwrap();
    proxy.set(Mode::HoldReplies);
    let looks = calls(&mut conn, "xinfo|consumers").await;
    let forgetting =
        tokio::spawn(
            async move { steps::forget_dead_consumers(&forgetter, "alive", silent).await },
        );
    eventually(
        Duration::from_secs(10),
        "the forgetter's look served",
        || {
            let mut c = conn.clone();
            async move { calls(&mut c, "xinfo|consumers").await > looks }
        },
    )
    .await;
    assert_eq!(
        deliver(&mut conn, "paused").await.len(),
        1,
        "the resumed worker reads"
    );
    proxy.set(Mode::Pass);
    forgetting
        .await
        .unwrap()
        .expect("the forgetting call answers");

    assert_eq!(
        consumer_holds(&mut conn, "paused").await,
        Some(1),
        "the resumed worker still holds what it read"
    );
    assert_eq!(pending(&mut conn).await, 1);

    // Once it holds nothing and is silent again, it is forgotten; the caller never is.
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg(TASKS)
        .arg("workers")
        .arg("alive")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: i64 = redis::cmd("XACK")
        .arg(TASKS)
        .arg("workers")
        .arg(&stream_id)
        .query_async(&mut conn)
        .await
        .unwrap();
    let direct = open(&redis.url(), QueueSettings::default()).await;
    eventually(
        Duration::from_secs(10),
        "the silent consumer forgotten",
        || {
            let (q, mut c) = (&direct, conn.clone());
            async move {
                steps::forget_dead_consumers(q, "alive", silent)
                    .await
                    .unwrap();
                consumer_holds(&mut c, "paused").await.is_none()
            }
        },
    )
    .await;
    assert_eq!(consumer_holds(&mut conn, "alive").await, Some(0));
}
