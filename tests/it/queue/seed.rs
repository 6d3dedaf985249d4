//! `queue::seed` (seed 003's list protocol) in process, against a real redis-server, with a
//! scripted provider: the seed's producer (Python, `tests/python/seed_producer.py`) gets exactly
//! one result per task from several consumers; a dead consumer's entries come back; bad entries
//! never block the queue; old results are swept; a stop hands unfinished entries back.
//! The key names are the seed's (`captcha:*`, src/queue/seed/keys.rs).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use captcha_gateway::engine::store::redis::RedisSettings;
use captcha_gateway::engine::{
    Engine, EngineSettings, MemoryStore, Priority, Solution, SolveFailure, Solver,
};
use captcha_gateway::lua;
use captcha_gateway::model::{SolveRequest, UpstreamRef, now_ms};
use captcha_gateway::queue::seed::{self, SeedSettings, SeedStats};
use captcha_gateway::queue::worker::{Running, WorkerFigures};
use redis::AsyncCommands;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::support::eventually::eventually;
use crate::support::fault_proxy::{FaultProxy, Mode};
use crate::support::redis::RedisServer;

const WAIT: Duration = Duration::from_secs(30);

/// Answers `tok-<n>` at once, or (`park`) only once a test lets a solve through; counts the
/// solves it started.
struct Provider {
    gate: Option<Semaphore>,
    started: AtomicU64,
}

impl Provider {
    fn new(park: bool) -> Arc<Self> {
        Arc::new(Provider {
            gate: park.then(|| Semaphore::new(0)),
            started: AtomicU64::new(0),
        })
    }

    fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    /// Lets one parked solve answer.
    fn let_one_through(&self) {
        self.gate
            .as_ref()
            .expect("a parked provider")
            .add_permits(1);
    }
}

#[async_trait]
impl Solver for Provider {
    async fn solve(
        &self,
        _req: &SolveRequest,
        _deadline: Instant,
        _priority: Priority,
    ) -> Result<Solution, SolveFailure> {
        let n = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("the gate stays open").forget();
        }
        Ok(Solution {
            text: format!("tok-{n}"),
            user_agent: None,
            upstream: UpstreamRef {
                account: "a".into(),
                task_id: n.to_string(),
            },
            solved_at: now_ms(),
        })
    }

    async fn report(&self, _task: &UpstreamRef, _good: bool) -> Result<(), SolveFailure> {
        Ok(())
    }
}

/// One in-process consumer: its engine's shutdown cut, its stop token and its run.
struct Consumer {
    name: String,
    stop: CancellationToken,
    cut: CancellationToken,
    stats: Arc<SeedStats>,
    run: JoinHandle<Result<(), seed::SeedError>>,
}

impl Consumer {
    fn start(redis: &RedisServer, provider: Arc<Provider>, settings: SeedSettings) -> Consumer {
        Self::start_at(redis.url(), provider, settings, CONCURRENCY)
    }

    /// A consumer of the Redis at `url` (a fault proxy's, say) keeping up to `concurrency`
    /// entries in flight.
    fn start_at(
        url: String,
        provider: Arc<Provider>,
        settings: SeedSettings,
        concurrency: usize,
    ) -> Consumer {
        let cut = CancellationToken::new();
        let engine = Engine::new(
            Arc::new(MemoryStore::new()),
            provider,
            EngineSettings::default(),
            TaskTracker::new(),
        )
        .cut_short_by(cut.clone());
        let target = RedisSettings::new(vec![url], false).target;
        let name = format!("test-{:016x}", rand::random::<u64>());
        let stop = CancellationToken::new();
        let stats = Arc::new(SeedStats::default());
        let run = tokio::spawn({
            let (name, stats, stop) = (name.clone(), stats.clone(), stop.clone());
            async move {
                let source = seed::open(engine, &target, settings, &name, stats).await?;
                let figures = Arc::new(WorkerFigures::default());
                let tracker = TaskTracker::new();
                let mut running =
                    Running::start(source, concurrency, figures, tracker, stop.clone());
                stop.cancelled().await;
                running.in_flight_done().await;
                running.close().await;
                Ok(())
            }
        });
        Consumer {
            name,
            stop,
            cut,
            stats,
            run,
        }
    }

    /// Stops taking, cuts what is still solving (as the shutdown's cut does), waits for the end.
    async fn stop(self) {
        self.stop.cancel();
        self.cut.cancel();
        self.run.await.unwrap().unwrap();
    }
}

/// Entries a test consumer keeps in flight unless a test says otherwise.
const CONCURRENCY: usize = 8;

fn settings() -> SeedSettings {
    SeedSettings {
        lease: Duration::from_secs(3),
        ..SeedSettings::default()
    }
}

async fn conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn entry(id: &str, pageurl: &str) -> String {
    serde_json::json!({
        "id": id,
        "method": "userrecaptcha",
        "params": {"googlekey": "6Le-test", "pageurl": pageurl},
    })
    .to_string()
}

async fn result(c: &mut redis::aio::MultiplexedConnection, id: &str) -> Option<Value> {
    let raw: Option<String> = c.hget("captcha:results", id).await.unwrap();
    raw.map(|r| serde_json::from_str(&r).expect("results are JSON"))
}

/// The seed's producer, run to its end: 40 tasks, 3 consumers, each task exactly one success
/// result of the seed's shape, from one of the consumers, with a distinct token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_producer_gets_one_success_per_task_from_several_consumers() {
    let redis = RedisServer::start();
    let provider = Provider::new(false);
    let consumers: Vec<Consumer> = (0..3)
        .map(|_| Consumer::start(&redis, provider.clone(), settings()))
        .collect();
    let out = tokio::process::Command::new(crate::clients::python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/seed_producer.py"
        ))
        .args([&redis.url(), "40", "60"])
        .output()
        .await
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: HashSet<&str> = consumers.iter().map(|c| c.name.as_str()).collect();
    let mut tokens = HashSet::new();
    for id in report["ids"].as_array().unwrap() {
        let r = &report["results"][id.as_str().unwrap()];
        assert_eq!(r["status"], "success", "{id}: {r}");
        assert!(names.contains(r["worker"].as_str().unwrap()), "{r}");
        let duration = r["duration"].as_str().unwrap();
        assert!(duration.ends_with('s') && duration[..duration.len() - 1].parse::<f64>().is_ok());
        assert!(
            tokens.insert(r["token"].as_str().unwrap().to_owned()),
            "token twice: {r}"
        );
    }
    assert_eq!(tokens.len(), 40);
    // One solve per task: nothing was taken twice.
    assert_eq!(provider.started(), 40);
    let mut c = conn(&redis).await;
    let len: String = c.get("captcha:queue_length").await.unwrap();
    assert_eq!(len, "0");
    let indexed: u64 = c.zcard("captcha:results:index").await.unwrap();
    assert_eq!(indexed, 40);
    for consumer in consumers {
        let name = consumer.name.clone();
        consumer.stop().await;
        let listed: bool = c
            .exists(format!("captcha:processing:{name}"))
            .await
            .unwrap();
        assert!(!listed, "{name}'s processing list is gone after its stop");
    }
    let live: u64 = c.zcard("captcha:consumers").await.unwrap();
    assert_eq!(live, 0, "stopped consumers unregister");
}

/// A consumer that died holding entries (its processing list stays, its beat stops): another
/// consumer gives them back to the queue after a lease and they are solved once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_consumers_entries_are_recovered_and_solved_once() {
    let redis = RedisServer::start();
    let mut c = conn(&redis).await;
    let dead = "deadhost-00000000000000aa";
    for i in 0..5 {
        let _: () = c
            .rpush(
                format!("captcha:processing:{dead}"),
                entry(&format!("d{i}"), &format!("https://a.example/{i}")),
            )
            .await
            .unwrap();
    }
    // Its last beat, long ago (ms since the epoch: 1).
    let _: () = c.zadd("captcha:consumers", dead, 1).await.unwrap();
    let provider = Provider::new(false);
    let consumer = Consumer::start(&redis, provider.clone(), settings());
    eventually(WAIT, "the dead consumer's 5 tasks have results", || {
        let mut c = c.clone();
        async move { c.hlen::<_, u64>("captcha:results").await.unwrap() == 5 }
    })
    .await;
    for i in 0..5 {
        let r = result(&mut c, &format!("d{i}")).await.unwrap();
        assert_eq!(r["status"], "success");
        assert_eq!(r["worker"], consumer.name.as_str());
    }
    assert_eq!(SeedStats::get(&consumer.stats.recovered), 5);
    assert_eq!(provider.started(), 5);
    let listed: bool = c
        .exists(format!("captcha:processing:{dead}"))
        .await
        .unwrap();
    assert!(!listed, "the dead consumer's list is removed");
    let score: Option<f64> = c.zscore("captcha:consumers", dead).await.unwrap();
    assert_eq!(score, None, "the dead consumer is forgotten");
    consumer.stop().await;
}

/// A processing list whose consumer has no beat at all (it was taken for dead while blocked in a
/// take that then moved an entry, and died before beating again) is found and given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processing_list_nobody_beats_for_is_found_and_given_back() {
    let redis = RedisServer::start();
    let mut c = conn(&redis).await;
    let orphan = "frozenhost-00000000000000bb";
    let _: () = c
        .rpush(
            format!("captcha:processing:{orphan}"),
            entry("o1", "https://a.example/o"),
        )
        .await
        .unwrap();
    let consumer = Consumer::start(&redis, Provider::new(false), settings());
    eventually(WAIT, "the orphaned entry's result", || {
        let mut c = c.clone();
        async move { result(&mut c, "o1").await.is_some() }
    })
    .await;
    let listed: bool = c
        .exists(format!("captcha:processing:{orphan}"))
        .await
        .unwrap();
    assert!(!listed);
    assert_eq!(SeedStats::get(&consumer.stats.recovered), 1);
    consumer.stop().await;
}

/// Bad entries: with an id, an error result in the seed's shape; without one (not JSON, not
/// UTF-8, no id), dropped and counted. The good entry behind them is solved; nothing stays
/// listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_entries_get_an_error_result_or_are_dropped_without_blocking_the_queue() {
    let redis = RedisServer::start();
    let mut c = conn(&redis).await;
    let bad: Vec<Vec<u8>> = vec![
        b"not json".to_vec(),
        b"\xff\xfe\x00garbage".to_vec(),
        br#"{"method":"userrecaptcha","params":{}}"#.to_vec(),
        br#"{"id":"m1","method":"no such","params":{}}"#.to_vec(),
        br#"{"id":"p1","method":"userrecaptcha","params":{"googlekey":"k"}}"#.to_vec(),
        br#"{"id":"p2","method":"userrecaptcha","params":"googlekey=k"}"#.to_vec(),
    ];
    for raw in &bad {
        let _: () = c.rpush("captcha:queue", raw).await.unwrap();
    }
    let _: () = c
        .rpush("captcha:queue", entry("ok1", "https://a.example/ok"))
        .await
        .unwrap();
    let consumer = Consumer::start(&redis, Provider::new(false), settings());
    eventually(WAIT, "4 results", || {
        let mut c = c.clone();
        async move { c.hlen::<_, u64>("captcha:results").await.unwrap() == 4 }
    })
    .await;
    for (id, code) in [
        ("m1", "ERROR_BAD_PARAMETERS"),
        ("p1", "ERROR_PAGEURL"),
        ("p2", "ERROR_BAD_PARAMETERS"),
    ] {
        let r = result(&mut c, id).await.unwrap();
        assert_eq!(
            r,
            serde_json::json!({"status":"error","error":code,"worker":consumer.name}),
            "{id}"
        );
    }
    assert_eq!(result(&mut c, "ok1").await.unwrap()["status"], "success");
    eventually(WAIT, "the unreadable entries dropped, the refused answered", || {
        let stats = consumer.stats.clone();
        async move { SeedStats::get(&stats.unreadable) == 3 && SeedStats::get(&stats.refused) == 3 }
    })
    .await;
    let processing: u64 = c
        .llen(format!("captcha:processing:{}", consumer.name))
        .await
        .unwrap();
    let queued: u64 = c.llen("captcha:queue").await.unwrap();
    assert_eq!((processing, queued), (0, 0));
    consumer.stop().await;
}

/// An id the producer pushes again is a new task, as with the seed's own worker: it is solved,
/// and its result replaces the first (which a reused id's producer must not be handed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_pushed_again_is_solved_and_its_result_replaces_the_first() {
    let redis = RedisServer::start();
    let mut c = conn(&redis).await;
    let first = r#"{"status":"success","token":"first","duration":"1.0s","worker":"w-1"}"#;
    let _: () = c.hset("captcha:results", "r1", first).await.unwrap();
    let _: () = c
        .rpush("captcha:queue", entry("r1", "https://a.example/again"))
        .await
        .unwrap();
    let provider = Provider::new(false);
    let consumer = Consumer::start(&redis, provider.clone(), settings());
    eventually(WAIT, "the second task's result", || {
        let mut c = c.clone();
        async move {
            result(&mut c, "r1")
                .await
                .is_some_and(|r| r["token"] == "tok-1")
        }
    })
    .await;
    assert_eq!(provider.started(), 1);
    assert_eq!(SeedStats::get(&consumer.stats.duplicates), 0);
    let queued: u64 = c.llen("captcha:queue").await.unwrap();
    let processing: u64 = c
        .llen(format!("captcha:processing:{}", consumer.name))
        .await
        .unwrap();
    assert_eq!((queued, processing), (0, 0));
    consumer.stop().await;
}

/// A solve that ends after its entry left this consumer's list: if Redis lost the entry (it
/// restarted empty) the producer is still answered, unless the task has a result already; if
/// the entry was given to another consumer (this one taken for dead), nothing is written, even
/// before that consumer answers, so the task's one result is the new owner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_result_is_written_when_redis_lost_the_entry_never_once_it_was_given_away() {
    let redis = RedisServer::start();
    let mut c = conn(&redis).await;
    let provider = Provider::new(true);
    // One at a time, so an entry given back to the queue is not taken again while its first
    // solve still runs.
    let consumer = Consumer::start_at(redis.url(), provider.clone(), settings(), 1);
    let list = format!("captcha:processing:{}", consumer.name);
    let started = |n| {
        let p = provider.clone();
        move || {
            let p = p.clone();
            async move { p.started() == n }
        }
    };

    // Lost by Redis, no result yet: written.
    let _: () = c
        .rpush("captcha:queue", entry("l1", "https://a.example/l1"))
        .await
        .unwrap();
    eventually(WAIT, "l1 solving", started(1)).await;
    let _: () = c.del(&list).await.unwrap();
    provider.let_one_through();
    eventually(WAIT, "l1's result", || {
        let mut c = c.clone();
        async move {
            result(&mut c, "l1")
                .await
                .is_some_and(|r| r["token"] == "tok-1")
        }
    })
    .await;

    // Lost by Redis, a result there already: kept.
    let kept = r#"{"status":"success","token":"kept","duration":"1.0s","worker":"w-1"}"#;
    let _: () = c
        .rpush("captcha:queue", entry("l2", "https://a.example/l2"))
        .await
        .unwrap();
    eventually(WAIT, "l2 solving", started(2)).await;
    let _: () = c.del(&list).await.unwrap();
    let _: () = c.hset("captcha:results", "l2", kept).await.unwrap();
    provider.let_one_through();
    eventually(WAIT, "l2's late result counted, not written", || {
        let stats = consumer.stats.clone();
        async move { SeedStats::get(&stats.duplicates) == 1 }
    })
    .await;
    let raw: String = c.hget("captcha:results", "l2").await.unwrap();
    assert_eq!(raw, kept);

    // Given away while this consumer was taken for dead (the real recovery script, run as
    // another worker's heartbeat would once this consumer's beat is old), and finished here
    // before its new owner answers: not written.
    let _: () = c
        .rpush("captcha:queue", entry("g1", "https://a.example/g1"))
        .await
        .unwrap();
    eventually(WAIT, "g1 solving", started(3)).await;
    eventually(WAIT, "g1 given back to the queue", || {
        let (mut c, name, list) = (c.clone(), consumer.name.clone(), list.clone());
        async move {
            // Its own beat (every second) may land in between; then the script leaves it be.
            let _: () = c.zadd("captcha:consumers", &name, 0).await.unwrap();
            let moved: i64 = lua::SEED_RECOVER
                .key("captcha:consumers")
                .key(&list)
                .key("captcha:queue")
                .key("captcha:queue_length")
                .key(format!("captcha:dead:{name}"))
                .arg("")
                .arg(&name)
                .arg(1)
                .arg(60_000)
                .invoke_async(&mut c)
                .await
                .unwrap();
            moved == 1
        }
    })
    .await;
    let taken: Option<String> = c.lpop("captcha:queue", None).await.unwrap();
    assert!(taken.is_some(), "the entry went back to the queue");
    provider.let_one_through();
    eventually(WAIT, "g1's late result counted, not written", || {
        let stats = consumer.stats.clone();
        async move { SeedStats::get(&stats.duplicates) == 2 }
    })
    .await;
    let g1: Option<String> = c.hget("captcha:results", "g1").await.unwrap();
    assert_eq!(
        g1, None,
        "the late result of an entry given away is not written"
    );
    consumer.stop().await;
}

/// Results past the retention go, with their index entries; newer ones stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_past_the_retention_are_swept_with_their_index_entries() {
    let redis = RedisServer::start();
    let mut c = conn(&redis).await;
    let now = now_ms();
    for (id, finished) in [("old1", 1), ("old2", now - 7_200_000), ("new1", now)] {
        let _: () = c.hset("captcha:results", id, "{}").await.unwrap();
        let _: () = c.zadd("captcha:results:index", id, finished).await.unwrap();
    }
    let consumer = Consumer::start(&redis, Provider::new(false), settings());
    eventually(WAIT, "the old results swept", || {
        let mut c = c.clone();
        async move { c.hlen::<_, u64>("captcha:results").await.unwrap() == 1 }
    })
    .await;
    let kept: Vec<String> = c.hkeys("captcha:results").await.unwrap();
    let indexed: Vec<String> = c.zrange("captcha:results:index", 0, -1).await.unwrap();
    assert_eq!(
        (kept, indexed),
        (vec!["new1".to_owned()], vec!["new1".to_owned()])
    );
    eventually(WAIT, "the sweep counted", || {
        let stats = consumer.stats.clone();
        async move { SeedStats::get(&stats.swept) == 2 }
    })
    .await;
    consumer.stop().await;
}

/// Many in flight at once, not one at a time: with solves that never end and a concurrency of
/// 4, four entries are solving together; a stop then hands all of them back to the head of the
/// queue, in order, and the queue length says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_keeps_its_concurrency_in_flight_and_hands_entries_back_on_stop() {
    let redis = RedisServer::start();
    let mut c = conn(&redis).await;
    let entries: Vec<String> = (0..6)
        .map(|i| entry(&format!("c{i}"), &format!("https://a.example/{i}")))
        .collect();
    for e in &entries {
        let _: () = c.rpush("captcha:queue", e).await.unwrap();
    }
    let provider = Provider::new(true);
    let consumer = Consumer::start_at(redis.url(), provider.clone(), settings(), 4);
    eventually(WAIT, "four solves started", || {
        let p = provider.clone();
        async move { p.started() == 4 }
    })
    .await;
    let processing: u64 = c
        .llen(format!("captcha:processing:{}", consumer.name))
        .await
        .unwrap();
    assert_eq!(processing, 4);
    let len: String = c.get("captcha:queue_length").await.unwrap();
    assert_eq!(len, "2");
    let name = consumer.name.clone();
    consumer.stop().await;
    let queued: Vec<String> = c.lrange("captcha:queue", 0, -1).await.unwrap();
    assert_eq!(queued, entries, "every entry back, in the order taken");
    let len: String = c.get("captcha:queue_length").await.unwrap();
    assert_eq!(len, "6");
    let results: u64 = c.hlen("captcha:results").await.unwrap();
    assert_eq!(results, 0, "a cut-short solve writes no result");
    let score: Option<f64> = c.zscore("captcha:consumers", &name).await.unwrap();
    assert_eq!(score, None);
}

/// A take whose reply is lost (it ran: the entry sits in the consumer's processing list,
/// unknown to it): once Redis answers again, the consumer rereads its list and solves every
/// entry exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_taken_by_a_take_whose_reply_was_lost_are_found_and_solved_once() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(format!("127.0.0.1:{}", redis.port).parse().unwrap()).await;
    let provider = Provider::new(false);
    let consumer = Consumer::start_at(
        format!("redis://127.0.0.1:{}/", proxy.port()),
        provider.clone(),
        SeedSettings {
            block: Duration::from_secs(5),
            ..settings()
        },
        CONCURRENCY,
    );
    let c = conn(&redis).await;
    let list = format!("captcha:processing:{}", consumer.name);
    // Waiting in its blocking take (a long one, so the entry pushed next comes during it).
    eventually(WAIT, "the consumer blocked in BLMOVE", || {
        let mut c = c.clone();
        async move {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut c)
                .await
                .unwrap();
            clients
                .lines()
                .any(|l| l.contains("cmd=blmove") && l.contains("flags=b"))
        }
    })
    .await;
    proxy.set(Mode::DropReplies);
    for i in 0..3 {
        let _: () = c
            .clone()
            .rpush(
                "captcha:queue",
                entry(&format!("l{i}"), &format!("https://a.example/{i}")),
            )
            .await
            .unwrap();
    }
    // Its blocking take moves the first; further calls (the reread) fail until Redis answers.
    eventually(
        WAIT,
        "an entry moved by a take it never heard back from",
        || {
            let (mut c, list) = (c.clone(), list.clone());
            async move { c.llen::<_, u64>(&list).await.unwrap() >= 1 }
        },
    )
    .await;
    assert_eq!(provider.started(), 0, "nothing solved while no reply came");
    proxy.set(Mode::Pass);
    eventually(WAIT, "three results", || {
        let mut c = c.clone();
        async move { c.hlen::<_, u64>("captcha:results").await.unwrap() == 3 }
    })
    .await;
    let mut c = c.clone();
    for i in 0..3 {
        assert_eq!(
            result(&mut c, &format!("l{i}")).await.unwrap()["status"],
            "success"
        );
    }
    assert_eq!(provider.started(), 3, "each solved once");
    eventually(WAIT, "the processing list empty", || {
        let (mut c, list) = (c.clone(), list.clone());
        async move { c.llen::<_, u64>(&list).await.unwrap() == 0 }
    })
    .await;
    consumer.stop().await;
}
