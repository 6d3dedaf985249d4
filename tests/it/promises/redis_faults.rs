//! Redis breaking under a loaded fleet: paused, restarted empty, replies lost after the command
//! ran, a Cluster master killed so its replica takes over.

use std::time::Duration;

use super::harness::{Fleet, LEASE_S, POOLED_TASKS, SOON, join, redis_cli};
use super::history::{Rules, check};
use super::solve_time;
use crate::support::eventually::eventually;
use crate::support::fault_proxy::{FaultProxy, Mode};
use crate::support::redis::{RedisCluster, RedisServer, unread_bytes};

/// Callers per wave: before the fault, during it, after it.
const WAVES: [std::ops::Range<usize>; 3] = [0..80, 80..140, 140..200];
/// Tasks running before a fault starts.
const LOADED: u64 = 30;

fn lease() -> Duration {
    Duration::from_secs_f64(LEASE_S)
}

/// Beyond one task per caller: the pools' stock, and one restock, since a restart or a
/// failover may lose pooled answers (docs/REDIS.md: a degraded instance pools nothing, and a
/// task running when Redis went away is still counted, so nothing else is spent twice).
fn rules() -> Rules {
    Rules::allowing(2 * POOLED_TASKS, "the pools' stock and one restock")
}

/// Store operations over the live gateways whose reply was lost, and those sent again.
async fn lost_replies(fleet: &Fleet) -> (u64, u64) {
    (
        fleet
            .metric("captcha_gateway_store_operations_unknown_total", &[])
            .await,
        fleet
            .metric("captcha_gateway_store_operations_retried_total", &[])
            .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_paused_for_two_leases_keeps_every_promise() {
    let redis = RedisServer::start();
    let fleet = Fleet::start(&redis.url(), solve_time(), "").await;
    let mut callers = fleet.wave(WAVES[0].clone());
    fleet.tasks_started(LOADED).await;

    redis.pause();
    callers.extend(fleet.wave(WAVES[1].clone()));
    // The fault's length (two leases), not a wait for anything.
    tokio::time::sleep(2 * lease()).await;
    redis.resume();
    callers.extend(fleet.wave(WAVES[2].clone()));

    let history = join(callers).await;
    check(&fleet, "redis_paused", &history, rules()).await;
    // The pause hit hand-outs: operations whose reply it held were resolved by sending them
    // again (an arrival, a finish or a take answered from its record).
    let (unknown, retried) = lost_replies(&fleet).await;
    println!("FIGURES redis_paused: operations with a lost reply {unknown}, sent again {retried}");
    assert!(
        unknown > 0 && retried > 0,
        "the pause hit operations in flight"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_keeps_every_promise() {
    let mut redis = RedisServer::start();
    let fleet = Fleet::start(&redis.url(), solve_time(), "").await;
    let mut callers = fleet.wave(WAVES[0].clone());
    fleet.tasks_started(LOADED).await;

    redis.restart();
    // Not DBSIZE: the gateways write again the moment it is back.
    let persistence = redis_cli(redis.port, &["info", "persistence"]);
    assert!(
        persistence.contains("rdb_last_load_keys_loaded:0"),
        "Redis came back empty: {persistence}"
    );
    callers.extend(fleet.wave(WAVES[1].clone()));
    // Load keeps coming for a lease, so the last wave meets what renewal rebuilt.
    tokio::time::sleep(lease()).await;
    callers.extend(fleet.wave(WAVES[2].clone()));

    let history = join(callers).await;
    check(&fleet, "redis_restarted_empty", &history, rules()).await;
    // Callers were waiting when it restarted (tasks were running): renewal put their waiters
    // and claims back, and their answers reached them through the rebuilt state.
    let restored = fleet
        .metric("captcha_gateway_store_leases_restored_total", &[])
        .await;
    println!("FIGURES redis_restarted_empty: waiters and claims restored {restored}");
    assert!(
        restored > 0,
        "the restart hit callers waiting for their hand-out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_replies_lost_after_the_command_ran_keep_every_promise() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let url = format!("redis://127.0.0.1:{}/", proxy.port());
    let fleet = Fleet::start(&url, solve_time(), "").await;
    let mut callers = fleet.wave(WAVES[0].clone());
    fleet.tasks_started(LOADED).await;

    proxy.set(Mode::DropReplies);
    callers.extend(fleet.wave(WAVES[1].clone()));
    // Longer than the gateway's 2 s reply timeout, so commands time out and connections are
    // opened again while replies are still being lost.
    tokio::time::sleep(Duration::from_secs(4)).await;
    proxy.set(Mode::Pass);
    assert!(proxy.swallowed() > 0, "replies were dropped");
    callers.extend(fleet.wave(WAVES[2].clone()));

    let history = join(callers).await;
    check(&fleet, "redis_replies_lost", &history, rules()).await;
    let (unknown, retried) = lost_replies(&fleet).await;
    println!(
        "FIGURES redis_replies_lost: operations with a lost reply {unknown}, sent again {retried}"
    );
    assert!(
        retried > 0,
        "operations whose reply was lost were resolved by sending them again"
    );
}

/// How many times the failover scenario may run until its kill lands on operations in flight.
/// Whether it does is a race this test does not fully steer: the wait for unread bytes on the
/// paused master can be met by background traffic (renewals, health checks) before the next
/// wave's arrivals reach it, and then no operation is cut (1 run in 4-6 on a 2-core machine).
/// Every attempt checks every promise; only "the kill hit operations in flight" may take more
/// than one.
const FAILOVER_ATTEMPTS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_killed_and_replaced_by_its_replica_keeps_every_promise() {
    for attempt in 1..=FAILOVER_ATTEMPTS {
        if cluster_failover_once().await > 0 {
            return;
        }
        println!("FIGURES cluster_failover: attempt {attempt} cut no operation in flight");
    }
    panic!("in {FAILOVER_ATTEMPTS} attempts the failover never hit operations in flight");
}

/// One failover under load, its promises checked; returns the operations whose reply it lost.
async fn cluster_failover_once() -> u64 {
    let mut cluster = RedisCluster::start_with_replicas(1);
    let fleet = Fleet::start(&cluster.urls(), solve_time(), "redis_cluster = true").await;
    let mut callers = fleet.wave(WAVES[0].clone());
    fleet.tasks_started(LOADED).await;

    // The master holding the most target keys: the one whose loss hurts most.
    let victim = cluster
        .master_ports()
        .into_iter()
        .max_by_key(|port| {
            redis_cli(*port, &["--scan", "--pattern", "cg:{t:*"])
                .lines()
                .count()
        })
        .expect("a master");
    assert!(
        !redis_cli(victim, &["--scan", "--pattern", "cg:{t:*"])
            .trim()
            .is_empty(),
        "the killed master holds target keys"
    );
    // Paused first, so the next wave's operations are sent to it and wait unanswered: the kill
    // then cuts operations certainly in flight, whatever the timing of the solves.
    cluster.pause_node(victim);
    callers.extend(fleet.wave(WAVES[1].clone()));
    eventually(SOON, "operations waiting on the paused master", || async {
        unread_bytes(victim) > 0
    })
    .await;
    cluster.kill_node(victim);
    eventually(
        SOON,
        "a replica to take over the killed master's slots",
        || async { cluster.failed_over(victim) },
    )
    .await;
    callers.extend(fleet.wave(WAVES[2].clone()));

    let history = join(callers).await;
    check(&fleet, "cluster_failover", &history, rules()).await;
    // Operations were in flight on the killed master: their outcome became unknown, and they
    // were never run again on the replica that replaced it (it may lack their first run).
    let (unknown, retried) = lost_replies(&fleet).await;
    println!(
        "FIGURES cluster_failover: operations with a lost reply {unknown}, sent again {retried}"
    );
    unknown
}
