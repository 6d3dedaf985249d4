//! `captcha-gateway worker --seed-queue` processes (the real binary) against the simulator and a
//! producer written seed 003's way (`tests/python/seed_producer.py`: `rpush` of entries, `hget`
//! of `captcha:results` once a second), unchanged: every task gets exactly one success result in
//! the seed's shape whose token verifies at the simulator, also while workers are `kill -9`ed
//! and replaced.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::Duration;

use captcha_gateway::sim::LatencyRange;
use redis::AsyncCommands;
use serde_json::Value;

use super::support::{noted_provider_tasks, raw, worker_as_users_run_it, worker_on};
use crate::support::eventually::eventually;
use crate::support::fleet::SimServer;
use crate::support::gateway::GatewayProcess;
use crate::support::redis::RedisServer;
use crate::support::verify_at;

const WAIT: Duration = Duration::from_secs(60);
/// Entries one seed worker solves at once (`--concurrency` of [`seed_worker`]).
const CONCURRENCY: u64 = 16;

/// The crash test's latencies: 50-500 ms, long enough that the kill finds tasks in flight.
fn latency() -> LatencyRange {
    LatencyRange {
        min: Duration::from_millis(50),
        max: Duration::from_millis(500),
    }
}

async fn seed_worker(sim: &SimServer, redis: &RedisServer) -> GatewayProcess {
    worker_on(sim.addr, &redis.url(), "")
        .args(&[
            "--seed-queue",
            "--concurrency",
            &CONCURRENCY.to_string(),
            "--lease-s",
            "2",
        ])
        .start()
        .await
}

/// Starts the producer: it pushes `count` tasks and collects their results.
fn producer(redis: &RedisServer, count: usize) -> tokio::process::Child {
    tokio::process::Command::new(crate::clients::python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/seed_producer.py"
        ))
        .args([&redis.url(), &count.to_string(), "150"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python runs")
}

/// The producer's report: every id it pushed has a success result of the seed's shape, from one
/// of `workers`; returns the tokens.
async fn all_succeeded(producer: tokio::process::Child, workers: &HashSet<String>) -> Vec<String> {
    let out = producer.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids = report["ids"].as_array().unwrap();
    let mut tokens = Vec::new();
    for id in ids {
        let r = &report["results"][id.as_str().unwrap()];
        assert_eq!(r["status"], "success", "{id}: {r}");
        let fields: HashSet<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            fields,
            HashSet::from(["status", "token", "duration", "worker"]),
            "{r}"
        );
        assert!(workers.contains(r["worker"].as_str().unwrap()), "{r}");
        tokens.push(r["token"].as_str().unwrap().to_owned());
    }
    tokens
}

/// Each token verifies once at the simulator, and none was handed out twice.
async fn all_verify(sim: &SimServer, tokens: &[String]) {
    let http = reqwest::Client::new();
    let base = format!("http://{}", sim.addr);
    let distinct: HashSet<&String> = tokens.iter().collect();
    assert_eq!(distinct.len(), tokens.len(), "a token handed out twice");
    for token in tokens {
        let v = verify_at(&http, &base, token).await;
        assert_eq!(v["success"], true, "{token}: {v}");
    }
}

/// Nothing left behind: queue and processing lists empty, the published length 0.
async fn drained(redis: &RedisServer) {
    let c = raw(&redis.url()).await;
    eventually(WAIT, "the queue and every processing list empty", || {
        let mut c = c.clone();
        async move {
            let lists: Vec<String> = c.keys("captcha:processing:*").await.unwrap();
            let queued: u64 = c.llen("captcha:queue").await.unwrap();
            let len: Option<String> = c.get("captcha:queue_length").await.unwrap();
            lists.is_empty() && queued == 0 && len.as_deref() == Some("0")
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_producer_works_unchanged_against_three_seed_workers() {
    let redis = RedisServer::start();
    let sim = SimServer::start(latency(), 500).await;
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(seed_worker(&sim, &redis).await);
    }
    let names: HashSet<String> = workers.iter().map(|w| w.consumer().to_owned()).collect();
    let tokens = all_succeeded(producer(&redis, 90), &names).await;
    assert_eq!(tokens.len(), 90);
    all_verify(&sim, &tokens).await;
    assert_eq!(sim.sim.stats().submits, 90, "one upstream task per entry");
    let mut c = raw(&redis.url()).await;
    let results: u64 = c.hlen("captcha:results").await.unwrap();
    assert_eq!(results, 90, "exactly one result per task, nothing else");
    // The results are indexed for the retention sweep.
    let indexed: u64 = c.zcard("captcha:results:index").await.unwrap();
    assert_eq!(indexed, 90);
    // Counted just after each result is written.
    eventually(WAIT, "90 solves counted over the workers", || async {
        let mut sum = 0;
        for w in &workers {
            sum += w.metric("captcha_gateway_seed_queue_solved_total").await;
        }
        sum == 90
    })
    .await;
    // SIGTERM: each stops, unregisters and exits 0.
    for w in &mut workers {
        w.signal("TERM");
        assert!(w.exited().await.success());
    }
    let live: u64 = c.zcard("captcha:consumers").await.unwrap();
    assert_eq!(live, 0);
    drained(&redis).await;
}

/// Workers `kill -9`ed while the producer waits, each replaced by a new process (a new consumer
/// name): no task is lost, each gets exactly one success result, and only the killed workers'
/// tasks are solved again upstream (the figure is printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_producer_loses_nothing_while_seed_workers_are_killed() {
    const TASKS: usize = 200;
    let redis = RedisServer::start();
    let sim = SimServer::start(latency(), 500).await;
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(seed_worker(&sim, &redis).await);
    }
    let mut names: HashSet<String> = workers.iter().map(|w| w.consumer().to_owned()).collect();
    let running = producer(&redis, TASKS);
    let c = raw(&redis.url()).await;
    for (i, done) in [30u64, 80, 130].into_iter().enumerate() {
        eventually(WAIT, &format!("{done} results"), || {
            let mut c = c.clone();
            async move { c.hlen::<_, u64>("captcha:results").await.unwrap() >= done }
        })
        .await;
        workers[i].kill().await;
        workers[i] = seed_worker(&sim, &redis).await;
        names.insert(workers[i].consumer().to_owned());
    }
    let tokens = all_succeeded(running, &names).await;
    assert_eq!(tokens.len(), TASKS);
    all_verify(&sim, &tokens).await;
    let mut c = c.clone();
    let results: u64 = c.hlen("captcha:results").await.unwrap();
    assert_eq!(results, TASKS as u64);
    let submits = sim.sim.stats().submits;
    let repeated = submits - TASKS as u64;
    println!(
        "seed crash test: {TASKS} tasks, 3 kill -9, {submits} upstream tasks ({repeated} repeated for killed workers' entries)"
    );
    // At most what the three killed workers could hold: their concurrency.
    assert!(repeated <= 3 * 16, "{repeated} tasks solved again");
    drained(&redis).await;
}

/// A worker frozen (`kill -STOP`) past its lease while it solves: another worker gives its
/// entries back to the queue and finishes them; thawed (`kill -CONT`), its late answers find
/// the entries gone and the results written, so it counts each entry lost, writes nothing, and
/// carries on taking work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_seed_workers_tasks_are_finished_once_by_another() {
    const TASKS: usize = 30;
    let redis = RedisServer::start();
    // The frozen worker's provider (same key, another simulator) stands still until the test
    // moves its clock, so none of its solves ends before it is frozen (its deadline, the default
    // 180 s, is beyond every wait here). The other worker's provider answers by itself.
    let stalled = SimServer::stalled(500).await;
    let sim = SimServer::start(latency(), 500).await;
    let mut frozen = seed_worker(&stalled, &redis).await;
    let c = raw(&redis.url()).await;
    let running = producer(&redis, TASKS);
    let list = format!("captcha:processing:{}", frozen.consumer());
    // Frozen with every slot holding a started solve: then no take is in flight, so each listed
    // entry is one it knows it holds. (A take's reply still unread when it stops times out after
    // the thaw; the worker then rereads its list, finds it given back, and never learns of those
    // entries, so it cannot count them lost.)
    eventually(
        WAIT,
        "the first worker solving as many entries as it may",
        || {
            let (mut c, list, stalled) = (c.clone(), list.clone(), stalled.sim.clone());
            async move {
                let listed: u64 = c.llen(&list).await.unwrap();
                listed == CONCURRENCY && stalled.stats().submits == CONCURRENCY
            }
        },
    )
    .await;
    frozen.signal("STOP");
    let held: Vec<String> = c.clone().lrange(&list, 0, -1).await.unwrap();
    assert_eq!(held.len() as u64, CONCURRENCY);
    let mut other = seed_worker(&sim, &redis).await;
    // Every result, the held entries' included, is the other worker's.
    let tokens = all_succeeded(running, &HashSet::from([other.consumer().to_owned()])).await;
    assert_eq!(tokens.len(), TASKS);
    let mut c2 = c.clone();
    let listed: bool = c2.exists(&list).await.unwrap();
    assert!(!listed, "the frozen worker's list was given back");
    let before: HashMap<String, String> = c2.hgetall("captcha:results").await.unwrap();
    assert_eq!(before.len(), TASKS);

    frozen.signal("CONT");
    stalled.sim.clock().advance(Duration::from_secs(1));
    // Each of its solves ends now and finds its entry given back (`lost`), so its result is
    // not written (`duplicates`): as many of each as it held. Every change is printed, so a wait that
    // fails says what was missing.
    let seen = std::sync::Mutex::new(None);
    eventually(WAIT, "the thawed worker's late outcomes", || async {
        let lost = frozen.metric("captcha_gateway_seed_queue_lost_total").await;
        let found = frozen
            .metric("captcha_gateway_seed_queue_duplicates_total")
            .await;
        let ended = frozen
            .metric("captcha_gateway_seed_queue_solved_total")
            .await
            + frozen
                .metric("captcha_gateway_seed_queue_failed_total")
                .await;
        let now = (lost, found, ended);
        if seen.lock().unwrap().replace(now) != Some(now) {
            println!(
                "thawed worker: lost {lost}, duplicates {found}, solved+failed {ended} \
                 of {CONCURRENCY} held"
            );
        }
        now == (CONCURRENCY, CONCURRENCY, CONCURRENCY)
    })
    .await;
    let after: HashMap<String, String> = c2.hgetall("captcha:results").await.unwrap();
    assert_eq!(after, before, "no result was written twice");
    all_verify(&sim, &tokens).await;

    // It carries on: alone now, it takes the next task and solves it.
    other.signal("TERM");
    assert!(other.exited().await.success());
    // Its own held tasks have all ended (above), so its next submit is the new task's: time
    // moves on once, by the solve time, and the answer comes.
    let submitted_before = stalled.sim.stats().submits;
    let entry = serde_json::json!({"id": "after-thaw", "method": "userrecaptcha",
        "params": {"googlekey": "6Le-thawed", "pageurl": "https://shop.example/thawed"}});
    let _: u64 = c2.rpush("captcha:queue", entry.to_string()).await.unwrap();
    eventually(WAIT, "the thawed worker solving a new task", || async {
        stalled.sim.stats().submits > submitted_before
    })
    .await;
    stalled.sim.clock().advance(Duration::from_secs(1));
    eventually(WAIT, "the new task's result", || {
        let mut c = c.clone();
        async move {
            c.hexists::<_, _, bool>("captcha:results", "after-thaw")
                .await
                .unwrap()
        }
    })
    .await;
    let written: String = c2.hget("captcha:results", "after-thaw").await.unwrap();
    let r: Value = serde_json::from_str(&written).unwrap();
    assert_eq!(r["status"], "success", "{r}");
    assert_eq!(r["worker"], frozen.consumer(), "{r}");
    all_verify(&stalled, &[r["token"].as_str().unwrap().to_owned()]).await;
    drained(&redis).await;
    frozen.signal("TERM");
    assert!(frozen.exited().await.success());
}

/// Redis restarted empty between two batches: the workers reconnect and the next batch is
/// served as the first was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_workers_carry_on_after_redis_restarts_empty() {
    let mut redis = RedisServer::start();
    let sim = SimServer::start(latency(), 500).await;
    let workers = [
        seed_worker(&sim, &redis).await,
        seed_worker(&sim, &redis).await,
    ];
    let names: HashSet<String> = workers.iter().map(|w| w.consumer().to_owned()).collect();
    let first = all_succeeded(producer(&redis, 20), &names).await;
    assert_eq!(first.len(), 20);
    redis.restart();
    let second = all_succeeded(producer(&redis, 20), &names).await;
    assert_eq!(second.len(), 20);
    all_verify(&sim, &[first, second].concat()).await;
    drained(&redis).await;
}

/// A Cluster URL with `--seed-queue`: refused at startup in one line naming the setting and
/// the fix, exit code 2 (the seed's keys cannot share a slot).
#[tokio::test]
async fn seed_queue_on_a_redis_cluster_is_refused_with_exit_code_2() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args([
            "worker",
            "--seed-queue",
            "--provider",
            "sim",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--redis-url", "redis://127.0.0.1:1,redis://127.0.0.1:2"])
        .env_clear()
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("--seed-queue") && lines[0].contains("one Redis server"),
        "{stderr}"
    );
}

/// Seed mode as a user runs it, with the lease set once (`--lease-s 3`, also the default): three
/// workers, one `kill -9`ed while every entry it holds is being solved upstream. Once it is taken
/// for dead (its lease and a beat), another gives its entries back to the queue, and by then its
/// instance's lease has lapsed too, so the workers that take them adopt its provider tasks: every
/// task answered once, no provider task paid for twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_seed_workers_provider_tasks_are_adopted_not_paid_twice() {
    const PER_WORKER: u64 = 4;
    const TASKS: u64 = 3 * PER_WORKER;
    let redis = RedisServer::start();
    // Solves outlast the time it takes to notice the death, so the adopted tasks still run.
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_secs(6)), 100).await;
    let mut workers = Vec::new();
    for _ in 0..3 {
        let flags = ["--seed-queue", "--concurrency", "4", "--lease-s", "3"];
        workers.push(
            worker_as_users_run_it(sim.addr, &redis.url())
                .args(&flags)
                .start()
                .await,
        );
    }
    let names: HashSet<String> = workers.iter().map(|w| w.consumer().to_owned()).collect();
    let running = producer(&redis, TASKS as usize);
    let c = raw(&redis.url()).await;
    let list = format!("captcha:processing:{}", workers[0].consumer());
    eventually(
        WAIT,
        "every task submitted upstream and noted, four held by the victim",
        || {
            let (mut c, sim, list) = (c.clone(), sim.sim.clone(), list.clone());
            async move {
                sim.stats().submits == TASKS
                    && noted_provider_tasks(&mut c).await == TASKS
                    && c.llen::<_, u64>(&list).await.unwrap() == PER_WORKER
            }
        },
    )
    .await;
    workers[0].kill().await;
    let tokens = all_succeeded(running, &names).await;
    assert_eq!(tokens.len() as u64, TASKS);
    all_verify(&sim, &tokens).await;
    assert_eq!(
        sim.sim.stats().submits,
        TASKS,
        "its provider tasks were adopted, none submitted again"
    );
    for w in &mut workers[1..] {
        w.kill().await;
    }
}
