//! Faults in which Redis loses writes it had acknowledged, under a loaded fleet: a Cluster
//! master killed while its replica lags behind it, and a host crash of a server with an
//! append-only file (`kill -9`, then the files cut back to what was synced). With durable
//! hand-outs on (`redis_handout_replicas`, `redis_handout_fsync`, as the shipped deployments
//! run) no token is handed out twice; with them off, the scenarios show the exposure
//! docs/REDIS.md describes: the tokens handed out in the lost window are handed out again. Each
//! scenario also asserts that the fault hit hand-outs (pool hits inside the window Redis lost).

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};

use captcha_gateway::model::now_ms;
use tokio::task::JoinHandle;

use super::harness::{Fleet, Handout, SOON, join, pooled_on, redis_cli};
use super::history::{Figures, Rules, check};
use super::solve_time;
use crate::support::eventually::eventually;
use crate::support::host_crash;
use crate::support::redis::{RedisCluster, RedisServer, valkey_server};

/// Answers live a minute here: long enough that a token handed out before the fault is still
/// fresh when a second caller could get it afterwards, so the exposure is not hidden by expiry.
const LIFETIME_S: u64 = 60;

/// What a scenario may spend beyond a task per caller: the pools' stock restocked after the
/// loss, and a second task for each waiting caller the gateways let go to be solved alone
/// while hand-outs could not be confirmed (its first task's answer waits in Redis for the next
/// caller that can take it).
async fn rules(fleet: &Fleet, twice_expected: bool) -> Rules {
    let released = fleet
        .metric("captcha_gateway_store_callers_released_total", &[])
        .await;
    Rules {
        stopped: HashSet::new(),
        extra_tasks: 4 * super::harness::POOLED_TASKS + released,
        extra_why: "the pools' stock restocked after the loss, and callers let go to be solved \
                    alone while hand-outs were not confirmed",
        twice_expected,
    }
}

/// Callers on the pooled targets only (targets 0 and 1), numbered from `from`.
fn pooled_wave(fleet: &Fleet, from: usize, n: usize) -> Vec<JoinHandle<Handout>> {
    (from..)
        .filter(|c| c % 4 < 2)
        .take(n)
        .map(|c| {
            fleet.caller(
                c,
                super::harness::target(c),
                None,
                super::harness::CALLER_TIMEOUT_S,
            )
        })
        .collect()
}

/// Three gateways with pools on `redis_url` (`toml` added to their settings), answers living
/// [`LIFETIME_S`], and sixty callers under way with tasks running.
async fn loaded_fleet(redis_url: &str, toml: &str) -> (Fleet, Vec<JoinHandle<Handout>>) {
    let wrappers: &[&[&str]] = &[&[], &[], &[]];
    let fleet = Fleet::start_lived(redis_url, solve_time(), toml, true, wrappers, LIFETIME_S).await;
    let callers = fleet.wave(0..60);
    fleet.tasks_started(20).await;
    (fleet, callers)
}

async fn cluster_master_killed_while_its_replica_lags(durable: bool) -> Figures {
    let mut cluster = RedisCluster::start_with_replicas(1);
    let toml = match durable {
        true => "redis_cluster = true\nredis_handout_replicas = 1\nredis_handout_wait_s = 0.5",
        false => "redis_cluster = true",
    };
    let (fleet, mut callers) = loaded_fleet(&cluster.urls(), toml).await;

    // The master whose pools are stocked: taking from them is what the replica will miss.
    eventually(SOON, "a master holding pooled answers", || async {
        cluster
            .master_ports()
            .into_iter()
            .any(|p| pooled_on(p) >= 2)
    })
    .await;
    let victim = cluster
        .master_ports()
        .into_iter()
        .max_by_key(|p| pooled_on(*p))
        .expect("a master");
    let replica = cluster
        .replica_of(victim)
        .expect("the master has a replica");

    // The replica falls behind: it sleeps, and the master drops its link, so nothing written
    // from now on reaches it.
    let sleeper = Command::new("redis-cli")
        .args(["-p", &replica.to_string(), "debug", "sleep", "4"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    eventually(SOON, "the replica asleep", || async {
        let pong = Command::new("timeout")
            .args(["0.3", "redis-cli", "-p", &replica.to_string(), "ping"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("PONG"))
            .unwrap_or(false);
        !pong
    })
    .await;
    redis_cli(victim, &["client", "kill", "type", "replica"]);
    assert!(
        redis_cli(victim, &["info", "replication"]).contains("connected_slaves:0"),
        "the master has no replica left"
    );

    // Hand-outs in the window the replica will never see.
    let hits = fleet.pool_hits().await;
    let withheld = fleet
        .metric("captcha_gateway_store_handouts_withheld_total", &[])
        .await;
    callers.extend(pooled_wave(&fleet, 60, 20));
    eventually(
        SOON,
        "hand-outs from the pools while the replica lags",
        || async {
            match durable {
                true => {
                    fleet
                        .metric("captcha_gateway_store_handouts_withheld_total", &[])
                        .await
                        > withheld
                }
                false => fleet.pool_hits().await >= hits + 2,
            }
        },
    )
    .await;
    let in_window = fleet.pool_hits().await - hits;

    cluster.kill_node(victim);
    eventually(SOON, "the lagging replica to take over", || async {
        cluster.failed_over(victim)
    })
    .await;
    let _ = sleeper.wait_with_output();
    callers.extend(fleet.wave(100..200));

    let history = join(callers).await;
    let name = if durable {
        "cluster_lag_durable"
    } else {
        "cluster_lag_plain"
    };
    let rules = rules(&fleet, !durable).await;
    let figures = check(&fleet, name, &history, rules).await;
    println!("FIGURES {name}: pool hits in the lost window {in_window}");
    if !durable {
        assert!(in_window > 0, "the fault hit hand-outs");
    }
    figures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_killed_while_its_replica_lags_hands_no_token_twice_with_handout_replicas()
{
    let figures = cluster_master_killed_while_its_replica_lags(true).await;
    assert_eq!(figures.twice, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_handout_replicas_a_lagging_replicas_failover_hands_tokens_out_again() {
    let figures = cluster_master_killed_while_its_replica_lags(false).await;
    assert!(
        figures.twice > 0,
        "the tokens handed out in the lost window are handed out again: {figures}"
    );
}

/// A server as the shipped deployments run it (`appendonly yes`), its syncs recorded: `program`
/// is `redis-server` (7.0 here, without `WAITAOF`) or [`valkey_server`] (which speaks it).
fn aof_server(program: &Path, fsync: &str, log: &Path) -> RedisServer {
    RedisServer::start_program(
        program.to_owned(),
        &["--appendonly", "yes", "--appendfsync", fsync],
        host_crash::env(log),
    )
}

/// How a scenario's server goes down.
#[derive(Clone, Copy, PartialEq)]
enum Crash {
    /// `kill -9` of the process: the files keep everything the kernel was given.
    Process,
    /// The host: the files keep what was synced before the kill and nothing after.
    Host,
}

/// One host-crash scenario: the server `program` syncing its file `fsync`, the gateways with
/// `toml`, going down as `crash` says.
async fn aof_server_crashes(
    program: &Path,
    fsync: &str,
    toml: &str,
    crash: Crash,
    name: &str,
) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("syncs.log");
    let mut redis = aof_server(program, fsync, &log);
    let (fleet, mut callers) = loaded_fleet(&redis.url(), toml).await;
    eventually(SOON, "pools stocked", || async {
        pooled_on(redis.port) >= super::harness::POOLED_TASKS as usize
    })
    .await;
    // Synced once stocked, so what a crash keeps holds every answer the window below takes.
    let stocked = now_ms();
    eventually(SOON, "a sync after the pools were stocked", || async {
        host_crash::synced_since(&log, stocked)
    })
    .await;

    // A sync was just made, so under `everysec` the next is about a second away: the hand-outs
    // below come after the last sync a host crash keeps, unless each waited for its own.
    let hits = fleet.pool_hits().await;
    callers.extend(pooled_wave(&fleet, 60, 20));
    eventually(SOON, "hand-outs from the pools", || async {
        fleet.pool_hits().await >= hits + 2
    })
    .await;
    let in_window = fleet.pool_hits().await - hits;

    redis.kill();
    let cut = match crash {
        Crash::Process => 0,
        Crash::Host => host_crash::cut_to_synced(&log, None),
    };
    redis.restart();
    callers.extend(fleet.wave(100..200));

    let history = join(callers).await;
    // Every hand-out is on disk before it leaves when the server syncs each write or the
    // gateway waits for the sync.
    let on_disk = fsync == "always" || toml.contains("redis_handout_fsync = true");
    let rules = rules(&fleet, !on_disk).await;
    let figures = check(&fleet, name, &history, rules).await;
    println!("FIGURES {name}: pool hits in the window {in_window}, bytes a host crash cut {cut}");
    assert!(in_window > 0, "the fault hit hand-outs");
    figures
}

/// As shipped (compose.yaml, deploy/k8s/redis.yaml): `appendfsync always` and
/// `redis_handout_fsync`. The process killed mid-load and started again from its file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_with_its_aof_as_shipped_killed_and_restarted_keeps_every_promise() {
    let figures = aof_server_crashes(
        Path::new("redis-server"),
        "always",
        "redis_handout_fsync = true",
        Crash::Process,
        "aof_killed_restarted",
    )
    .await;
    assert_eq!(figures.twice, 0);
}

/// The host crashes under the shipped settings on a server that speaks `WAITAOF` (Valkey 8, as
/// the shipped `redis:7-alpine` is 7.2+): `appendfsync always` and `redis_handout_fsync`, so each
/// hand-out's pipeline carries `WAITAOF` and its reply is read. The server's policy is what
/// keeps the hand-outs here: `redis_handout_fsync` is the start check that refuses any other
/// (tests/it/redis_server.rs). Until it refused `everysec` on servers with `WAITAOF`, this
/// scenario under `everysec` handed 8 tokens out twice: Valkey 8.0 (as Redis 7.4.0-7.4.2,
/// redis/redis#13793) confirms a write with `WAITAOF` before its sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_crash_hands_no_token_twice_with_handout_fsync() {
    let figures = aof_server_crashes(
        &valkey_server(),
        "always",
        "redis_handout_fsync = true",
        Crash::Host,
        "host_crash_fsync",
    )
    .await;
    assert_eq!(figures.twice, 0, "{figures}");
}

/// The exposure without it, on the server the setting now refuses (`everysec`): the files keep
/// what was synced, up to a second less than Redis acknowledged, and the pool takes the crash
/// lost are handed out again. Its A/B partner, the same server with the gateway's
/// `redis_handout_fsync` on, does not start (tests/it/redis_server.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_crash_under_everysec_without_handout_fsync_hands_tokens_out_again() {
    let figures = aof_server_crashes(
        &valkey_server(),
        "everysec",
        "",
        Crash::Host,
        "host_crash_everysec",
    )
    .await;
    assert!(
        figures.twice > 0,
        "the pool takes the crash lost are handed out again: {figures}"
    );
}
