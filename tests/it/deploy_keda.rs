//! deploy/k8s against a real Redis: the dev Redis's own command line starts a `redis-server`, the
//! workers' `REDIS_URL` (with the Secret's password filled in) reaches it, and KEDA's queries,
//! with the ScaledObject's stream, group and targets, see queued and in-flight work and give the
//! replica counts docs/DEPLOY.md promises: up from zero on the first task, none beyond
//! `maxReplicaCount`, never zero while tasks are in flight, zero when all is done.

use redis::aio::MultiplexedConnection;
use serde_json::Value;

use crate::deploy::{GROUP, repo, section, stream};
use crate::support::redis::RedisServer;

/// The dev Redis's arguments from redis.yaml, for a test server: without the program name, and
/// without `--requirepass` (the harness pings without a password while the server starts; the
/// test sets the password right after).
fn server_args(argv: &[Value]) -> Vec<String> {
    let argv: Vec<String> = argv
        .iter()
        .map(|a| a.as_str().expect("string arguments").to_owned())
        .collect();
    let mut out = Vec::new();
    let mut rest = argv.iter().skip_while(|a| *a == "redis-server");
    while let Some(arg) = rest.next() {
        if arg == "--requirepass" {
            rest.next();
        } else {
            out.push(arg.clone());
        }
    }
    out
}

/// One trigger's number, computed the way KEDA's `redis-streams` scaler does (read from KEDA
/// v2.20.2, pkg/scalers/redis_streams_scaler.go): with `lagCount`, the group's lag from
/// `XINFO GROUPS` (Redis 7 or later, else an error), the stream's length while the group does
/// not exist, 0 while the stream does not; with only `consumerGroup`, `XPENDING`'s count.
/// `Err` is what KEDA would log for the trigger.
async fn keda_metric(conn: &mut MultiplexedConnection, t: &Value) -> Result<i64, String> {
    let stream = t["stream"].as_str().expect("a stream");
    let group = t["consumerGroup"].as_str().expect("a consumer group");
    if t.get("lagCount").is_some() {
        let info: String = redis::cmd("INFO").query_async(conn).await.unwrap();
        let major: u32 = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .and_then(|v| v.split('.').next()?.trim().parse().ok())
            .expect("INFO has redis_version");
        assert!(major >= 7, "KEDA's lag mode needs Redis 7 or later");
        let groups: Result<Vec<Vec<Value>>, _> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(stream)
            .query_async::<redis::Value>(conn)
            .await
            .map(|v| flat_maps(&v));
        let groups = match groups {
            Err(e) if e.to_string().contains("no such key") => return Ok(0),
            other => other.map_err(|e| e.to_string())?,
        };
        if let Some(g) = groups
            .iter()
            .find(|g| field(g, "name") == Some(group.into()))
        {
            // The lag KEDA scales on must be a number: `nil` (after a trim or a delete of
            // undelivered entries) would leave KEDA guessing.
            return field(g, "lag")
                .and_then(|l| l.as_i64())
                .ok_or_else(|| format!("the lag of group {group} is not a number"));
        }
        return redis::cmd("XLEN")
            .arg(stream)
            .query_async(conn)
            .await
            .map_err(|e| e.to_string());
    }
    let summary: redis::Value = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    match summary {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::Int(n)) => Ok(*n),
            other => Err(format!("XPENDING count {other:?}")),
        },
        other => Err(format!("XPENDING {other:?}")),
    }
}

/// `XINFO GROUPS`'s reply (a list of flat key-value lists) as JSON pairs.
fn flat_maps(v: &redis::Value) -> Vec<Vec<Value>> {
    let redis::Value::Array(groups) = v else {
        return Vec::new();
    };
    groups
        .iter()
        .map(|g| match g {
            redis::Value::Array(kv) => kv.iter().map(to_json).collect(),
            redis::Value::Map(kv) => kv
                .iter()
                .flat_map(|(k, v)| [to_json(k), to_json(v)])
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

fn to_json(v: &redis::Value) -> Value {
    match v {
        redis::Value::Int(n) => Value::from(*n),
        redis::Value::BulkString(b) => Value::from(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Value::from(s.clone()),
        _ => Value::Null,
    }
}

fn field(pairs: &[Value], name: &str) -> Option<Value> {
    pairs
        .chunks(2)
        .find(|kv| kv[0] == name)
        .and_then(|kv| kv.get(1).cloned())
}

/// The workers' replica count KEDA and its HPA settle on: zero unless a trigger is active
/// (above its activation value, 0 by default); else the largest `ceil(metric / target)` over the
/// triggers that answered, within `max(min, 1)..=max`.
async fn replicas(conn: &mut MultiplexedConnection, keda: &Value) -> u64 {
    let mut active = false;
    let mut want = 0u64;
    for t in keda["triggers"].as_array().expect("triggers") {
        let Ok(metric) = keda_metric(conn, t).await else {
            continue;
        };
        let target: u64 = t
            .get("lagCount")
            .or_else(|| t.get("pendingEntriesCount"))
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
            .expect("a target per replica");
        active |= metric > 0;
        want = want.max(u64::try_from(metric).unwrap_or(0).div_ceil(target));
    }
    let (min, max) = (
        keda["min"].as_u64().expect("min"),
        keda["max"].as_u64().expect("max"),
    );
    if active {
        want.clamp(min.max(1), max)
    } else {
        min
    }
}

/// A producer's entries, in the contract's format (ids `t<first>`, `t<first + 1>`, ...).
async fn enqueue(conn: &mut MultiplexedConnection, first: usize, n: usize) {
    for i in first..first + n {
        let _: String = redis::cmd("XADD")
            .arg(stream())
            .arg("*")
            .arg("id")
            .arg(format!("t{i}"))
            .arg("request")
            .arg(r#"{"kind":"turnstile","sitekey":"0x4AAA","pageurl":"https://example.com/"}"#)
            .query_async(conn)
            .await
            .unwrap();
    }
}

/// Ids of entries delivered to `consumer`, as a worker reads them.
async fn deliver(conn: &mut MultiplexedConnection, consumer: &str, count: usize) -> Vec<String> {
    let reply: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg(consumer)
        .arg("COUNT")
        .arg(count)
        .arg("STREAMS")
        .arg(stream())
        .arg(">")
        .query_async(conn)
        .await
        .unwrap();
    // [[stream, [[id, [field, value, ...]], ...]]]
    let redis::Value::Array(streams) = reply else {
        return Vec::new();
    };
    let mut ids = Vec::new();
    for s in &streams {
        let redis::Value::Array(pair) = s else {
            continue;
        };
        let Some(redis::Value::Array(entries)) = pair.get(1) else {
            continue;
        };
        for e in entries {
            if let redis::Value::Array(e) = e {
                if let Some(Value::String(id)) = e.first().map(to_json) {
                    ids.push(id);
                }
            }
        }
    }
    ids
}

/// What a worker does when a task ends: acknowledge, then delete.
async fn finish(conn: &mut MultiplexedConnection, ids: &[String]) {
    for id in ids {
        let _: i64 = redis::cmd("XACK")
            .arg(stream())
            .arg(GROUP)
            .arg(id)
            .query_async(conn)
            .await
            .unwrap();
        let _: i64 = redis::cmd("XDEL")
            .arg(stream())
            .arg(id)
            .query_async(conn)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn keda_queries_with_the_manifests_names_scale_on_queued_and_in_flight_work() {
    let facts = section(&repo(), "facts");
    let keda = &facts["keda"];
    let redis = RedisServer::start_with(
        &server_args(keda["redis_argv"].as_array().expect("redis argv"))
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let password = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
    let mut admin = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(password)
        .query_async(&mut admin)
        .await
        .unwrap();
    // The workers' URL as the kubelet expands it, pointed at this server instead of the Service.
    let url = keda["worker_redis_url"]
        .as_str()
        .expect("REDIS_URL")
        .replace("$(REDIS_PASSWORD)", password)
        .replace("captcha-redis:6379", &format!("127.0.0.1:{}", redis.port));
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("the workers' REDIS_URL, with the Secret's password, reaches the dev Redis");
    for (setting, value) in [
        ("maxmemory-policy", "noeviction"),
        ("appendonly", "yes"),
        ("appendfsync", "always"),
    ] {
        let got: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(setting)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(got.get(1).map(String::as_str), Some(value), "{setting}");
    }
    let max = keda["max"].as_u64().expect("maxReplicaCount");
    assert!(max >= 2, "the walk below needs room to scale: {max}");

    assert_eq!(replicas(&mut conn, keda).await, 0, "nothing queued: zero");
    // A producer enqueues before any worker ever ran: no group yet, KEDA counts the stream.
    enqueue(&mut conn, 0, 3).await;
    assert_eq!(replicas(&mut conn, keda).await, 1, "up from zero on work");
    // The first worker creates the group, as `worker` does at start.
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream())
        .arg(GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(replicas(&mut conn, keda).await, 1);
    enqueue(&mut conn, 3, 200).await;
    assert_eq!(
        replicas(&mut conn, keda).await,
        max,
        "never beyond maxReplicaCount"
    );
    // Workers take everything: nothing waits, everything is in flight.
    let taken = deliver(&mut conn, "w1", 500).await;
    assert_eq!(taken.len(), 203, "every entry delivered");
    let lag_only = keda["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t.get("lagCount").is_some())
        .expect("a lag trigger");
    assert_eq!(keda_metric(&mut conn, lag_only).await, Ok(0));
    assert_eq!(
        replicas(&mut conn, keda).await,
        max,
        "tasks in flight keep their workers although the lag is 0"
    );
    // All but two end; those two belong to a worker that died: someone must stay to reclaim.
    finish(&mut conn, &taken[..201]).await;
    assert_eq!(
        replicas(&mut conn, keda).await,
        1,
        "a worker stays to reclaim"
    );
    finish(&mut conn, &taken[201..]).await;
    assert_eq!(replicas(&mut conn, keda).await, 0, "all done: zero");
}
