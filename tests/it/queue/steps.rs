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
