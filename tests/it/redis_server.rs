//! What the gateway checks of the Redis it is given, from outside, on real servers: an evicting
//! `maxmemory-policy` is refused at start (one line naming the setting, exit 2) unless allowed,
//! a durability setting the server cannot honour is refused the same way, and `/v1/status`
//! reports the server's persistence, replicas and policy.

use std::io::Write;
use std::path::PathBuf;

use serde_json::Value;

use crate::cli::assert_config_error;
use crate::support::fleet::client;
use crate::support::gateway::{Launch, Stderr};
use crate::support::redis::{RedisServer, valkey_server};

fn sim_on(redis: &RedisServer) -> Vec<String> {
    [
        "serve",
        "--provider",
        "sim",
        "--listen",
        "127.0.0.1:0",
        "--redis-url",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([redis.url()])
    .collect()
}

fn config(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

/// `serve --config` with `toml`, for a test that expects it to refuse: the one line it printed.
fn refused_with(redis: &RedisServer, toml: &str, names: &str) {
    let file = config(toml);
    let mut args = sim_on(redis);
    args.extend(["--config".into(), file.path().to_str().unwrap().into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_config_error(&args, &[], names);
}

/// `/v1/status` of a gateway started with `toml` on `redis`.
async fn status_with(redis: &RedisServer, toml: &str) -> Value {
    let gateway = Launch::serve(format!(
        "provider = \"sim\"\nlisten = \"127.0.0.1:0\"\nredis_url = \"{}\"\n{toml}",
        redis.url()
    ))
    .stderr(Stderr::Null)
    .start()
    .await;
    client()
        .get(gateway.url("/v1/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_evicting_redis_is_refused_at_start_unless_allowed() {
    let redis =
        RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"]);
    let args = sim_on(&redis);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_config_error(&args, &[], "redis_allow_eviction");

    let status = status_with(&redis, "redis_allow_eviction = true\n").await;
    let server = &status["redis"]["server"];
    assert_eq!(server["maxmemory_policy"], "volatile-lru", "{status}");
    assert_eq!(server["maxmemory"], 64 * 1024 * 1024);
    assert_eq!(status["redis"]["problems"], serde_json::json!([]));
}

#[tokio::test]
async fn handout_fsync_needs_a_server_that_can_confirm_it() {
    let no_aof = RedisServer::start();
    refused_with(
        &no_aof,
        "redis_handout_fsync = true\n",
        "redis_handout_fsync",
    );
    // Under `everysec` nothing the gateway can ask makes an acknowledged write one on disk:
    // Redis 7.0 has no WAITAOF, and Valkey 8.0's (as Redis 7.4.0-7.4.2's) can answer before the
    // sync (tests/it/promises/durability.rs shows the tokens a host crash then hands out twice).
    for program in [PathBuf::from("redis-server"), valkey_server()] {
        let everysec = RedisServer::start_program(
            program,
            &["--appendonly", "yes", "--appendfsync", "everysec"],
            Vec::new(),
        );
        refused_with(
            &everysec,
            "redis_handout_fsync = true\n",
            "redis_handout_fsync",
        );
    }

    let always = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let status = status_with(
        &always,
        "redis_handout_fsync = true\nredis_handout_replicas = 0\n",
    )
    .await;
    let redis = &status["redis"];
    assert_eq!(redis["handout_fsync"], true, "{status}");
    assert_eq!(redis["handouts_confirmed"], true);
    assert_eq!(redis["server"]["aof_enabled"], true);
    assert_eq!(redis["server"]["appendfsync"], "always");
}

#[tokio::test]
async fn status_reports_persistence_replicas_and_the_embedded_store_reports_none() {
    let master = RedisServer::start_with(&["--save", "900 1"]);
    let port = master.port.to_string();
    let _replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    crate::support::eventually::eventually(
        std::time::Duration::from_secs(20),
        "the replica to connect",
        || async {
            crate::support::redis::cli(master.port, &["info", "replication"])
                .contains("connected_slaves:1")
        },
    )
    .await;
    let status = status_with(&master, "").await;
    let server = &status["redis"]["server"];
    assert_eq!(server["replicas"], 1, "{status}");
    assert_eq!(server["aof_enabled"], false);
    assert_eq!(server["rdb_save"], "900 1");
    assert_eq!(server["maxmemory_policy"], "noeviction");
    assert_eq!(status["redis"]["handout_replicas"], 0);

    let gateway = Launch::serve("provider = \"sim\"\nlisten = \"127.0.0.1:0\"\n")
        .stderr(Stderr::Null)
        .start()
        .await;
    let embedded: Value = client()
        .get(gateway.url("/v1/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(embedded["redis"], Value::Null);
}
