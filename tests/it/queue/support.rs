//! Helpers of the queue tests: a queue handle on a test Redis, raw Redis commands, and the
//! lag KEDA reads.

use std::time::Duration;

use captcha_gateway::engine::store::redis::RedisSettings;
use captcha_gateway::queue::{Queue, QueueSettings};

use crate::support::KEY;
use crate::support::gateway::Launch;

/// A queue handle on `url` with `settings`' name and TTLs.
pub async fn open(url: &str, settings: QueueSettings) -> Queue {
    let target = RedisSettings::new(vec![url.to_owned()], false).target;
    Queue::open(&target, settings).await.expect("queue opens")
}

/// A plain connection for checks the queue API does not offer. No response timeout: redis-rs's
/// default (500 ms) failed checks on a loaded machine, and a hung call is ended by the test's
/// `eventually` deadline or nextest's `terminate-after`.
pub async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
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

/// A `worker` on the simulator at `sim` (a captchaai account with the test key) and the Redis
/// at `redis_url`: 2 s leases, fast polling, `extra` appended (a `[queue]` table, say).
pub fn worker_on(sim: std::net::SocketAddr, redis_url: &str, extra: &str) -> Launch {
    Launch::worker(format!(
        "provider = \"captchaai\"\nprovider_url = \"http://{sim}\"\nthreads = 500\n\
         redis_url = \"{redis_url}\"\nredis_lease_s = 2\n\
         [poll]\nfirst_check_s = 0.05\ninterval_s = 0.05\nmax_requests_per_second = 2000\n{extra}\n"
    ))
    .provider_key(KEY)
    .log("warn")
}

/// A `worker` configured as a user runs it against a provider: default lease and polling, only
/// the provider's address pointing at the simulator at `sim`.
pub fn worker_as_users_run_it(sim: std::net::SocketAddr, redis_url: &str) -> Launch {
    Launch::worker(format!(
        "provider = \"captchaai\"\nprovider_url = \"http://{sim}\"\nthreads = 500\n\
         redis_url = \"{redis_url}\"\n"
    ))
    .provider_key(KEY)
    .log("warn")
}

/// A simulator whose solves take `latency`, except `slow_kind`'s, which never finish within a
/// test (a task that always fails: every attempt times out).
pub async fn sim_with_slow_kind(
    latency: captcha_gateway::sim::LatencyRange,
    slow_kind: captcha_gateway::model::Kind,
) -> crate::support::fleet::SimServer {
    let hour = captcha_gateway::sim::LatencyRange::fixed(Duration::from_secs(3600));
    sim_with_kind_at(latency, slow_kind, hour).await
}

/// A simulator whose solves take `latency`, except `kind`'s, which take `kind_latency`.
pub async fn sim_with_kind_at(
    latency: captcha_gateway::sim::LatencyRange,
    kind: captcha_gateway::model::Kind,
    kind_latency: captcha_gateway::sim::LatencyRange,
) -> crate::support::fleet::SimServer {
    use captcha_gateway::sim::{SimSettings, Simulator};
    let mut settings = SimSettings {
        threads: 2000,
        ..SimSettings::default()
    };
    for kind in captcha_gateway::model::Kind::ALL {
        settings.latency.insert(kind, latency);
    }
    settings.latency.insert(kind, kind_latency);
    let sim = Simulator::new(settings);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(captcha_gateway::sim::serve(
        sim.clone(),
        listener,
        std::future::pending(),
    ));
    crate::support::fleet::SimServer { sim, addr }
}

/// Adds an entry the way a producer in another language would: one raw `XADD`.
pub async fn xadd(conn: &mut redis::aio::MultiplexedConnection, fields: &[(&str, &str)]) -> String {
    let mut cmd = redis::cmd("XADD");
    cmd.arg("cg:q:{captcha}:tasks").arg("*");
    for (k, v) in fields {
        cmd.arg(*k).arg(*v);
    }
    cmd.query_async(conn).await.unwrap()
}

/// A turnstile request for a page of its own (no two tasks share a target).
pub fn request(page: &str) -> String {
    serde_json::json!({"kind": "turnstile", "sitekey": "0x4AAA", "pageurl": format!("https://shop.example/{page}")})
        .to_string()
}

/// Entries pending in the group (`XPENDING` summary).
pub async fn pending(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let summary: redis::Value = redis::cmd("XPENDING")
        .arg("cg:q:{captcha}:tasks")
        .arg("workers")
        .query_async(conn)
        .await
        .unwrap();
    match summary {
        redis::Value::Array(parts) => match parts.first() {
            Some(redis::Value::Int(n)) => *n as u64,
            _ => 0,
        },
        _ => 0,
    }
}

/// KEDA's check after a scenario, with no worker left running (scale from zero): `n` entries
/// added by a producer must show as a lag that is a number and at least `n`.
pub async fn keda_sees_new_work(conn: &mut redis::aio::MultiplexedConnection, n: usize) {
    let before = keda_lag(conn, "cg:q:{captcha}:tasks").await;
    for i in 0..n {
        let id = format!("keda-{i}");
        xadd(
            conn,
            &[("id", id.as_str()), ("request", request(&id).as_str())],
        )
        .await;
    }
    let lag = keda_lag(conn, "cg:q:{captcha}:tasks").await;
    assert!(
        lag >= before + n as u64,
        "KEDA would read lag {lag} with {n} new entries queued (before: {before})"
    );
}

/// A `serve --queue` front end on the simulator (the same account as the workers'): its tasks go
/// to the queue's workers. Its output goes to the test's.
pub fn front_end(sim: &crate::support::fleet::SimServer, redis_url: &str) -> Launch {
    Launch::serve(format!(
        "provider = \"captchaai\"\nprovider_url = \"http://{}\"\nlisten = \"127.0.0.1:0\"\n\
         redis_url = \"{redis_url}\"\n",
        sim.addr
    ))
    .provider_key(KEY)
    .log("warn")
    .env("CAPTCHA_GATEWAY_QUEUE", "captcha")
}

/// Provider tasks noted in the store (their ids kept so that another instance can adopt them),
/// over every target.
pub async fn noted_provider_tasks(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("cg:{t:*}:notes")
        .query_async(conn)
        .await
        .unwrap();
    let mut n = 0;
    for k in keys {
        n += redis::cmd("HLEN")
            .arg(&k)
            .query_async::<u64>(conn)
            .await
            .unwrap();
    }
    n
}
