//! Helpers of the queue tests: a queue handle on a test Redis, raw Redis commands, and the
//! lag KEDA reads.

use std::time::Duration;

use captcha_gateway::engine::store::redis::RedisSettings;
use captcha_gateway::queue::{Queue, QueueSettings};

/// A queue handle on `url` with `settings`' name and TTLs.
pub async fn open(url: &str, settings: QueueSettings) -> Queue {
    let target = RedisSettings::new(vec![url.to_owned()], false).target;
    Queue::open(&target, settings).await.expect("queue opens")
}

/// A plain connection for checks the queue API does not offer.
pub async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("redis answers")
}

/// Calls of `command` Redis has served (`INFO commandstats`).
pub async fn calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// What KEDA's `redis-streams` trigger reads with `lagCount`: the group's lag from
/// `XINFO GROUPS`. Asserts it is a number (KEDA cannot scale on nil) and returns it.
pub async fn keda_lag(conn: &mut redis::aio::MultiplexedConnection, stream: &str) -> u64 {
    let groups: redis::Value = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query_async(conn)
        .await
        .expect("XINFO GROUPS answers: the stream exists");
    let redis::Value::Array(groups) = groups else {
        panic!("XINFO GROUPS: {groups:?}");
    };
    for group in groups {
        let redis::Value::Array(fields) = group else {
            continue;
        };
        let get = |name: &str| {
            fields
                .chunks(2)
                .find(|kv| matches!(&kv[0], redis::Value::BulkString(b) if b == name.as_bytes()))
                .map(|kv| kv[1].clone())
        };
        if get("name") == Some(redis::Value::BulkString(b"workers".to_vec())) {
            match get("lag") {
                Some(redis::Value::Int(n)) => return n as u64,
                other => panic!("the group's lag is not a number: {other:?}"),
            }
        }
    }
    panic!("no `workers` group on {stream}");
}
