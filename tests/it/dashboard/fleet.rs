//! With Redis, every instance's status adds up the live fleet: figures only one instance holds
//! (its admission limit, its callers' latencies) appear in the other's report, and a stopped
//! instance drops out once its published figures expire.

use std::net::SocketAddr;
use std::time::Duration;

use captcha_gateway::cli::ServeArgs;
use captcha_gateway::config::{self, Secret, Settings};
use captcha_gateway::provider::AccountProvider;
use serde_json::json;

use super::status;
use crate::support::eventually::eventually;
use crate::support::redis::RedisServer;
use crate::support::{TestGateway, fast_settings, solve};

fn fleet_settings(redis: &RedisServer, max_concurrent: u64) -> Settings {
    let args = ServeArgs {
        listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        provider: Some(AccountProvider::Sim),
        redis_url: Some(Secret(redis.url())),
        max_concurrent: Some(max_concurrent),
        ..ServeArgs::default()
    };
    let from_redis = config::load_serve(&args, &|_| None).expect("test settings are valid");
    let mut settings = fast_settings();
    settings.redis = from_redis.redis;
    settings.max_concurrent = max_concurrent;
    settings.status_every = Duration::from_millis(300);
    settings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_status_adds_up_a_redis_fleet_and_forgets_a_stopped_instance() {
    let redis = RedisServer::start();
    let a = TestGateway::with(fleet_settings(&redis, 100)).await;
    let b = TestGateway::with(fleet_settings(&redis, 200)).await;
    // Answers handed out by b only.
    let solves = 3;
    for i in 0..solves {
        let body = json!({"kind": "turnstile", "sitekey": "0x4AAA",
                          "pageurl": format!("https://fleet{i}.example/")});
        assert_eq!(solve(&b.http, &b.url(""), body).await.0, 200);
    }
    eventually(Duration::from_secs(30), "a's report adds up b", || async {
        let s = status(&a).await;
        s["fleet"]["store"] == "redis"
            && s["fleet"]["instances"] == 2
            && s["admission"]["max_concurrent"] == 300
            && s["latency"]["handout"]["count"] == solves
    })
    .await;
    let s = status(&a).await;
    assert_ne!(
        s["fleet"]["instance"],
        status(&b).await["fleet"]["instance"],
        "each instance names itself"
    );

    b.gateway.shutdown.token.cancel();
    eventually(
        Duration::from_secs(30),
        "b drops out of a's report",
        || async {
            let s = status(&a).await;
            s["fleet"]["instances"] == 1 && s["admission"]["max_concurrent"] == 100
        },
    )
    .await;
}

/// `serve --queue`: the report shows the queue's lag (tasks no worker has read, here all of
/// them: no worker runs) and its dead letters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_shows_the_queues_lag_and_dead_letters() {
    let redis = RedisServer::start();
    let mut settings = fleet_settings(&redis, 100);
    settings.enqueue_to = Some("dashq".into());
    let gw = TestGateway::with(settings).await;
    let tasks = 3;
    for i in 0..tasks {
        let res = gw
            .http
            .post(gw.url("/v1/tasks"))
            .bearer_auth(crate::support::KEY)
            .json(&json!({"kind": "turnstile", "sitekey": "0x4AAA",
                          "pageurl": format!("https://queued{i}.example/")}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 202);
    }
    // What a worker writes when it gives up on an entry.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: String = redis::cmd("XADD")
        .arg("cg:q:{dashq}:dead")
        .arg("*")
        .arg("reason")
        .arg("test")
        .query_async(&mut conn)
        .await
        .unwrap();
    let q = &status(&gw).await["queue"];
    assert_eq!(q["name"], "dashq");
    assert_eq!(q["lag"], tasks);
    assert_eq!(q["dead_letters"], 1);
}
