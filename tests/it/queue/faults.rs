//! Workers under faults, with real processes: `kill -9` mid-task, a worker paused past its
//! lease, a poison task, Redis restarted empty. After each, the query KEDA runs must give a
//! number that counts the queued work.

use std::collections::HashSet;
use std::time::Duration;

use captcha_gateway::model::Kind;
use captcha_gateway::queue::{NewTask, QueueSettings, ResultStatus};
use captcha_gateway::sim::LatencyRange;
use serde_json::json;

use super::support::{
    keda_sees_new_work, noted_provider_tasks, open, pending, raw, request, sim_with_slow_kind,
    worker_as_users_run_it, worker_on, xadd,
};
use crate::support::eventually::eventually;
use crate::support::fleet::SimServer;
use crate::support::redis::RedisServer;

/// Enqueues `n` tasks `<prefix>-<i>`, each for a page of its own; returns their ids.
async fn enqueue_pages(
    queue: &captcha_gateway::queue::Queue,
    prefix: &str,
    n: usize,
) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("{prefix}-{i}");
        queue
            .enqueue(NewTask {
                id: Some(id.clone()),
                request: serde_json::from_str(&request(&id)).unwrap(),
                ..NewTask::default()
            })
            .await
            .unwrap();
        ids.push(id);
    }
    ids
}

fn latency(min_ms: u64, max_ms: u64) -> LatencyRange {
    LatencyRange {
        min: Duration::from_millis(min_ms),
        max: Duration::from_millis(max_ms),
    }
}

const QUEUE_TOML: &str = "[queue]\nretry_base_s = 0.05\nretry_cap_s = 0.2\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_crash_kill_9_loses_nothing_and_repeats_only_dead_workers_tasks() {
    const TASKS: usize = 500;
    const CONCURRENCY: u64 = 3;
    let redis = RedisServer::start();
    let sim = SimServer::start(latency(50, 500), 2000).await;
    let url = redis.url();
    let start = |n: usize| {
        let url = url.clone();
        let addr = sim.addr;
        async move {
            let _ = n;
            worker_on(addr, &url, QUEUE_TOML)
                .args(&["--concurrency", &CONCURRENCY.to_string(), "--lease-s", "2"])
                .start()
                .await
        }
    };
    let mut workers = vec![start(0).await, start(1).await, start(2).await];
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let mut conn = raw(&redis.url()).await;
    let ids = enqueue_pages(&queue, "crash", TASKS).await;

    // The fault schedule (not a synchronization): one worker killed every 2 s for 20 s, and
    // started again at once under a new consumer name.
    let mut kills = 0u64;
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    tick.tick().await;
    for round in 0..10 {
        tick.tick().await;
        let victim = round % workers.len();
        workers[victim].kill().await;
        kills += 1;
        workers[victim] = start(round).await;
    }

    let mut redelivered = 0u64;
    let mut consumers = HashSet::new();
    for id in &ids {
        let result = queue
            .wait_result(id, Duration::from_secs(90))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("task {id} has no result"));
        assert_eq!(result.status, ResultStatus::Ready, "{result:?}");
        redelivered += u64::from(result.attempts - 1);
        consumers.insert(result.worker);
    }
    // Exactly one result record per task: one key each, nothing under any other id.
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("cg:q:{captcha}:result:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    assert_eq!(keys.len(), TASKS);
    // Nothing stays pending once every stalled entry was reclaimed (lease 2 s, reclaim every 1 s).
    eventually(Duration::from_secs(15), "no entry pending", || {
        let mut c = conn.clone();
        async move { pending(&mut c).await == 0 }
    })
    .await;

    let submits = sim.sim.stats().submits;
    let repeats = submits.saturating_sub(TASKS as u64);
    println!(
        "crash test: {kills} kills, {redelivered} deliveries repeated after a worker died, \
         {repeats} upstream repeats ({submits} submits for {TASKS} tasks), {} consumers wrote results",
        consumers.len()
    );
    // A kill can orphan at most the entries its worker held; only those are delivered again,
    // and only a task delivered again may be solved upstream again.
    assert!(
        redelivered <= kills * CONCURRENCY,
        "{redelivered} redeliveries for {kills} kills of workers holding {CONCURRENCY} each"
    );
    assert!(
        repeats <= redelivered,
        "{repeats} upstream repeats but only {redelivered} redeliveries"
    );

    for w in &workers {
        assert_eq!(
            w.metric("captcha_gateway_queue_deleted_pending_total")
                .await,
            0,
            "no pending entry was ever deleted before its acknowledgement"
        );
    }
    for w in &mut workers {
        w.kill().await;
    }
    keda_sees_new_work(&mut conn, 5).await;
}

#[tokio::test]
async fn queue_pause_past_the_lease_is_reclaimed_and_the_resumed_worker_writes_nothing() {
    let redis = RedisServer::start();
    let sim = SimServer::start(latency(3000, 3000), 100).await;
    // The paused worker's provider (same key, another simulator) stands still until the test
    // moves its clock, so its solve cannot end before it is paused.
    let stalled = SimServer::stalled(100).await;
    let mut conn = raw(&redis.url()).await;
    let paused = worker_on(stalled.addr, &redis.url(), QUEUE_TOML)
        .args(&["--concurrency", "1", "--lease-s", "2"])
        .start()
        .await;
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let id = queue
        .enqueue(NewTask {
            request: serde_json::from_str(&request("pause")).unwrap(),
            ..NewTask::default()
        })
        .await
        .unwrap()
        .id;
    // Solving it, not only delivered: a delivery whose reply is still unread when it stops
    // times out after the resume, and the worker never learns it held the task (nor that it
    // lost it).
    eventually(
        Duration::from_secs(10),
        "the first worker solving the task",
        || {
            let mut c = conn.clone();
            let stalled = stalled.sim.clone();
            async move { pending(&mut c).await == 1 && stalled.stats().submits == 1 }
        },
    )
    .await;
    paused.signal("STOP");
    let other = worker_on(sim.addr, &redis.url(), QUEUE_TOML)
        .args(&["--concurrency", "1", "--lease-s", "2"])
        .start()
        .await;
    let result = queue
        .wait_result(&id, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the task was reclaimed and finished");
    assert_eq!(
        result.worker,
        other.consumer(),
        "finished by the worker that took it over"
    );
    assert_eq!(result.attempts, 2);

    paused.signal("CONT");
    stalled.sim.clock().advance(Duration::from_secs(1));
    eventually(
        Duration::from_secs(20),
        "the resumed worker noticing its lost lease",
        || {
            let p = &paused;
            async move { p.metric("captcha_gateway_queue_leases_lost_total").await >= 1 }
        },
    )
    .await;
    eventually(Duration::from_secs(10), "the resumed worker ending the task", || {
        let p = &paused;
        async move {
            p.metric("captcha_gateway_queue_processed_total{queue=\"captcha\",outcome=\"lease_lost\"}")
                .await
                == 1
        }
    })
    .await;
    assert_eq!(
        paused
            .metric("captcha_gateway_queue_processed_total{queue=\"captcha\",outcome=\"written\"}")
            .await,
        0
    );
    let still = queue.result(&id).await.unwrap().unwrap();
    assert_eq!(still, result, "one result, unchanged");
    assert_eq!(pending(&mut conn).await, 0);

    let (mut paused, mut other) = (paused, other);
    paused.kill().await;
    other.kill().await;
    keda_sees_new_work(&mut conn, 3).await;
}

#[tokio::test]
async fn queue_poison_task_is_dead_lettered_after_max_deliveries_without_blocking_others() {
    let redis = RedisServer::start();
    let sim = sim_with_slow_kind(latency(50, 100), Kind::RecaptchaV3).await;
    let mut conn = raw(&redis.url()).await;
    // A poll budget far beyond the test: the provider never gives up on the poison task
    // first (which would be its verdict, a terminal failure).
    let config = format!("max_polls_per_task = 1000\n{QUEUE_TOML}");
    let worker = worker_on(sim.addr, &redis.url(), &config)
        .args(&[
            "--concurrency",
            "2",
            "--lease-s",
            "2",
            "--max-deliveries",
            "3",
        ])
        .start()
        .await;
    let queue = open(&redis.url(), QueueSettings::default()).await;
    // Every attempt at it times out: it always fails, retryably.
    let poison = queue
        .enqueue(NewTask {
            request: json!({"kind": "recaptcha_v3", "sitekey": "k", "pageurl": "https://shop.example/poison", "action": "login"}),
            timeout_ms: Some(300),
            ..NewTask::default()
        })
        .await
        .unwrap()
        .id;
    let mut others = Vec::new();
    for i in 0..20 {
        let id = format!("ok-{i}");
        queue
            .enqueue(NewTask {
                id: Some(id.clone()),
                request: serde_json::from_str(&request(&id)).unwrap(),
                ..NewTask::default()
            })
            .await
            .unwrap();
        others.push(id);
    }
    for id in &others {
        let r = queue
            .wait_result(id, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(r.map(|r| r.status), Some(ResultStatus::Ready), "{id}");
    }
    let failed = queue
        .wait_result(&poison, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the poison task ends with a failed result");
    assert_eq!(failed.status, ResultStatus::Failed, "{failed:?}");
    assert_eq!(failed.attempts, 3, "{failed:?}");

    let dead: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg("cg:q:{captcha}:dead")
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let field = |name: &str| {
        dead[0]
            .1
            .chunks(2)
            .find(|kv| kv[0] == name)
            .map(|kv| kv[1].clone())
            .unwrap_or_default()
    };
    assert_eq!(field("id"), poison);
    assert!(
        field("reason").contains("3 deliveries"),
        "{}",
        field("reason")
    );
    assert!(field("request").contains("recaptcha_v3"));
    assert_eq!(
        worker
            .metric("captcha_gateway_queue_processed_total{queue=\"captcha\",outcome=\"retried\"}")
            .await,
        2
    );
    assert_eq!(pending(&mut conn).await, 0);
    let retries: u64 = redis::cmd("ZCARD")
        .arg("cg:q:{captcha}:retry")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(retries, 0);

    let mut worker = worker;
    worker.kill().await;
    keda_sees_new_work(&mut conn, 3).await;
}

#[tokio::test]
async fn queue_redis_restarted_empty_workers_reconnect_recreate_the_group_and_continue() {
    let mut redis = RedisServer::start();
    let sim = SimServer::start(latency(50, 150), 500).await;
    let mut workers = Vec::new();
    for _ in 0..2 {
        workers.push(
            worker_on(sim.addr, &redis.url(), QUEUE_TOML)
                .args(&["--concurrency", "4", "--lease-s", "2"])
                .start()
                .await,
        );
    }
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let mut conn = raw(&redis.url()).await;
    for i in 0..10 {
        let id = format!("before-{i}");
        xadd(
            &mut conn,
            &[("id", id.as_str()), ("request", request(&id).as_str())],
        )
        .await;
    }
    for i in 0..10 {
        let r = queue
            .wait_result(&format!("before-{i}"), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(r.map(|r| r.status), Some(ResultStatus::Ready));
    }

    redis.restart();
    let mut conn = raw(&redis.url()).await;
    // Added as a foreign producer would, without creating the group: only the workers can
    // notice it is missing and make it again.
    for i in 0..10 {
        let id = format!("after-{i}");
        xadd(
            &mut conn,
            &[("id", id.as_str()), ("request", request(&id).as_str())],
        )
        .await;
    }
    for i in 0..10 {
        let r = queue
            .wait_result(&format!("after-{i}"), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            r.map(|r| r.status),
            Some(ResultStatus::Ready),
            "after-{i} after the restart"
        );
    }
    assert_eq!(pending(&mut conn).await, 0);

    for w in &mut workers {
        w.kill().await;
    }
    keda_sees_new_work(&mut conn, 3).await;
}

/// Entries pending for `consumer`.
async fn held_by(conn: &mut redis::aio::MultiplexedConnection, consumer: &str) -> u64 {
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg("cg:q:{captcha}:tasks")
        .arg("workers")
        .arg("-")
        .arg("+")
        .arg(1000)
        .arg(consumer)
        .query_async(conn)
        .await
        .unwrap();
    rows.len() as u64
}

/// Waits until `consumer` holds `n` pending entries.
async fn holding(conn: &redis::aio::MultiplexedConnection, consumer: &str, n: u64) {
    let what = format!("{consumer} holding {n} entries");
    eventually(Duration::from_secs(30), &what, || {
        let mut c = conn.clone();
        async move { held_by(&mut c, consumer).await == n }
    })
    .await;
}

/// Three workers as a user runs them, with the lease set once (`--lease-s 3`, also the default):
/// one is `kill -9`ed while every task it holds is
/// being solved upstream. Once it is taken for dead (its lease and a beat), the others take its
/// entries, and by then its instance's lease has lapsed too, so they adopt its provider tasks
/// instead of submitting new ones: every task answered, no provider task paid for twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_a_killed_workers_tasks_move_on_and_its_provider_tasks_are_not_paid_twice() {
    const PER_WORKER: u64 = 4;
    const TASKS: u64 = 3 * PER_WORKER;
    let redis = RedisServer::start();
    // Solves outlast the time it takes to notice the death, so the adopted tasks still run.
    let sim = SimServer::start(latency(6000, 6000), 100).await;
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(
            worker_as_users_run_it(sim.addr, &redis.url())
                .args(&["--concurrency", &PER_WORKER.to_string(), "--lease-s", "3"])
                .start()
                .await,
        );
    }
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let conn = raw(&redis.url()).await;
    let ids = enqueue_pages(&queue, "adopt", TASKS as usize).await;
    let victim = workers[0].consumer().to_owned();
    eventually(
        Duration::from_secs(30),
        "every task submitted upstream and noted, four held by the victim",
        || {
            let (mut c, sim, victim) = (conn.clone(), sim.sim.clone(), victim.clone());
            async move {
                sim.stats().submits == TASKS
                    && noted_provider_tasks(&mut c).await == TASKS
                    && held_by(&mut c, &victim).await == PER_WORKER
            }
        },
    )
    .await;
    workers[0].kill().await;

    let mut moved = 0;
    for id in &ids {
        let result = queue
            .wait_result(id, Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("task {id} has no result"));
        assert_eq!(result.status, ResultStatus::Ready, "{result:?}");
        assert_ne!(result.worker, victim);
        if result.attempts == 2 {
            moved += 1;
        }
    }
    assert_eq!(moved, PER_WORKER, "the victim's entries, delivered again");
    assert_eq!(
        sim.sim.stats().submits,
        TASKS,
        "its provider tasks were adopted, none submitted again"
    );
    for w in &mut workers[1..] {
        w.kill().await;
    }
}

/// The bound itself: a `kill -9`ed worker's entries are held by a worker with free slots within
/// 5 s of the kill (docs/QUEUE.md: taken for dead after its lease and a beat, 4 s with
/// `--lease-s 3`, looked for every beat). Asserted at 6 s: the promised 5 s and one more second
/// for a loaded 2-core machine, where a beat's timer or a worker's start can run late. With the
/// reclaim's look off (`reclaim_due` never true) the entries stay with the dead worker and this
/// fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_a_killed_workers_entries_are_taken_over_within_five_seconds() {
    const HELD: u64 = 3;
    let redis = RedisServer::start();
    // Solves outlast the takeover, so the entries are still in flight when they move.
    let sim = SimServer::start(latency(20_000, 20_000), 100).await;
    let mut victim = worker_as_users_run_it(sim.addr, &redis.url())
        .args(&["--concurrency", "4", "--lease-s", "3"])
        .start()
        .await;
    let queue = open(&redis.url(), QueueSettings::default()).await;
    let conn = raw(&redis.url()).await;
    enqueue_pages(&queue, "takeover", HELD as usize).await;
    let dead = victim.consumer().to_owned();
    holding(&conn, &dead, HELD).await;
    // The survivor starts with every slot free, so only the lease stands between it and them.
    let mut survivor = worker_as_users_run_it(sim.addr, &redis.url())
        .args(&["--concurrency", "4", "--lease-s", "3"])
        .start()
        .await;
    let alive = survivor.consumer().to_owned();
    let killed = std::time::Instant::now();
    victim.kill().await;
    holding(&conn, &alive, HELD).await;
    let moved = killed.elapsed();
    assert!(
        moved <= Duration::from_secs(6),
        "the entries moved {moved:?} after the kill"
    );
    survivor.kill().await;
}
