//! `worker-kill`: a worker `kill -9`ed while it solves (docs/QUEUE.md "Leases, reclaim, retries,
//! dead letters"). Three `captcha-gateway worker` processes configured as for a real provider
//! (default lease and polling: the simulator's solve times unknown to them), with room for 16
//! tasks each, share 24 tasks solving upstream (3-6 s); then the one holding the most is killed.
//! Measured from the kill: when its entries had all moved to the others, when the last of them
//! was answered, and the provider tasks paid twice (submits beyond one per task; goal 0: the
//! others adopt the dead one's provider tasks). Once on the stream, once on seed 003's list
//! (`--seed-queue`).

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use tokio::time::Instant;

use super::load::Checked;
use super::report::{Goal, RunResult};
use super::rig::{GatewaySpec, RedisServer, SimServer, WorkerUnderTest, secs};
use super::{BenchError, Opts};
use crate::engine::store::redis::RedisSettings;
use crate::queue::{NewTask, Queue, QueueSettings, ResultStatus};

const WORKERS: usize = 3;
/// Tasks one worker may hold (`--concurrency`): room for the dead one's on the others.
const ROOM: u32 = 16;
const TASKS: u64 = 24;
/// How often the bench looks at Redis while it waits (a measurement's resolution, not a test's
/// synchronisation).
const LOOK: Duration = Duration::from_millis(20);
const PATIENCE: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Stream,
    Seed,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Stream => "stream",
            Mode::Seed => "seed list",
        }
    }
}

pub async fn run(_opts: &Opts) -> Result<RunResult, BenchError> {
    let mut result = RunResult::default();
    for mode in [Mode::Stream, Mode::Seed] {
        let figures = run_mode(mode, &mut result).await?;
        let (moved, answered, repaid) = match mode {
            Mode::Stream => (
                "stream: its entries all moved, s after the kill",
                "stream: its tasks all answered, s after the kill",
                "stream: provider tasks paid twice",
            ),
            Mode::Seed => (
                "seed list: its entries all moved, s after the kill",
                "seed list: its tasks all answered, s after the kill",
                "seed list: provider tasks paid twice",
            ),
        };
        result.goal(moved, figures.moved, "s", Goal::AtMost(5.0));
        result.info(answered, figures.answered, "s");
        result.goal(repaid, figures.repaid, "", Goal::Exactly(0.0));
    }
    Ok(result)
}

struct Figures {
    moved: f64,
    answered: f64,
    repaid: f64,
}

async fn run_mode(mode: Mode, result: &mut RunResult) -> Result<Figures, BenchError> {
    let redis = RedisServer::start().await?;
    let sim = SimServer::start_apart(500, secs(3.0, 6.0))?;
    let spec = GatewaySpec {
        redis_url: Some(redis.url()),
        ..GatewaySpec::real_provider(500)
    };
    let extra: &[&str] = match mode {
        Mode::Stream => &[],
        Mode::Seed => &["--seed-queue"],
    };
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        workers.push(WorkerUnderTest::process_with(&spec, &sim, ROOM, extra).await?);
    }
    let mut conn = redis::Client::open(redis.url())
        .map_err(redis_error)?
        .get_multiplexed_async_connection()
        .await
        .map_err(redis_error)?;
    let queue = Queue::open(
        &RedisSettings::new(vec![redis.url()], false).target,
        QueueSettings::default(),
    )
    .await
    .map_err(|e| BenchError::Setup(format!("queue: {e}")))?;

    let ids = enqueue(mode, &queue, &mut conn).await?;
    wait_for(&format!("{}: every task solving", mode.name()), || {
        let (sim, mut c) = (sim.sim.clone(), conn.clone());
        async move { Ok(sim.stats().submits == TASKS && noted(&mut c).await? == TASKS) }
    })
    .await?;
    let mut held = Vec::new();
    for w in &workers {
        held.push(held_ids(mode, &mut conn, &w.consumer).await?);
    }
    let most = (0..WORKERS).max_by_key(|i| held[*i].len()).unwrap_or(0);
    let victims = held.swap_remove(most);
    let victim = workers[most].consumer.clone();
    workers.remove(most).stop().await;
    let killed = Instant::now();
    result.info(
        match mode {
            Mode::Stream => "stream: tasks the killed worker held",
            Mode::Seed => "seed list: tasks the killed worker held",
        },
        victims.len() as f64,
        "",
    );

    wait_for(
        &format!("{}: the victim's entries moved", mode.name()),
        || {
            let (mut c, victim) = (conn.clone(), victim.clone());
            async move { Ok(held_by(mode, &mut c, &victim).await? == 0) }
        },
    )
    .await?;
    let moved = killed.elapsed().as_secs_f64();

    let mut answered_at: HashMap<String, f64> = HashMap::new();
    let mut tokens = Vec::new();
    let give_up = Instant::now() + PATIENCE;
    while tokens.len() < ids.len() && Instant::now() < give_up {
        for id in &ids {
            if answered_at.contains_key(id) {
                continue;
            }
            if let Some(token) = answer(mode, &queue, &mut conn, id).await? {
                answered_at.insert(id.clone(), killed.elapsed().as_secs_f64());
                tokens.push(token);
            }
        }
        tokio::time::sleep(LOOK).await;
    }
    if tokens.len() < ids.len() {
        result.fail(format!(
            "{}: {} of {} tasks answered",
            mode.name(),
            tokens.len(),
            ids.len()
        ));
    }
    let checked = Checked::tokens(&sim.sim, tokens.iter().map(String::as_str));
    for f in checked.failures() {
        result.fail(format!("{}: {f}", mode.name()));
    }
    let answered = victims
        .iter()
        .filter_map(|id| answered_at.get(id))
        .fold(0.0f64, |a, b| a.max(*b));
    let repaid = sim.sim.stats().submits.saturating_sub(TASKS) as f64;
    if repaid > 0.0 {
        result.fail(format!(
            "{}: {repaid} provider tasks submitted again for the killed worker's tasks",
            mode.name()
        ));
    }
    for w in workers {
        w.stop().await;
    }
    Ok(Figures {
        moved,
        answered,
        repaid,
    })
}

/// Adds the tasks, each for a page of its own; returns their ids.
async fn enqueue(
    mode: Mode,
    queue: &Queue,
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<Vec<String>, BenchError> {
    let mut ids = Vec::new();
    for i in 0..TASKS {
        let id = format!("kill-{i}");
        let pageurl = format!("https://kill.example/{i}");
        match mode {
            Mode::Stream => {
                let task = NewTask {
                    id: Some(id.clone()),
                    request: serde_json::json!({
                        "kind": "recaptcha_v2", "sitekey": "6Le-kill", "pageurl": pageurl,
                    }),
                    ..NewTask::default()
                };
                queue
                    .enqueue(task)
                    .await
                    .map_err(|e| BenchError::Setup(format!("enqueue: {e}")))?;
            }
            Mode::Seed => {
                // Seed 003's entry, as its producer pushes it.
                let entry = serde_json::json!({
                    "id": id, "method": "userrecaptcha",
                    "params": {"googlekey": "6Le-kill", "pageurl": pageurl},
                });
                let _: u64 = conn
                    .rpush("captcha:queue", entry.to_string())
                    .await
                    .map_err(redis_error)?;
            }
        }
        ids.push(id);
    }
    Ok(ids)
}

/// Provider tasks the store noted (ids another instance can adopt), over every target.
async fn noted(conn: &mut redis::aio::MultiplexedConnection) -> Result<u64, BenchError> {
    let keys: Vec<String> = conn.keys("cg:{t:*}:notes").await.map_err(redis_error)?;
    let mut n = 0;
    for k in keys {
        n += conn.hlen::<_, u64>(&k).await.map_err(redis_error)?;
    }
    Ok(n)
}

async fn held_by(
    mode: Mode,
    conn: &mut redis::aio::MultiplexedConnection,
    consumer: &str,
) -> Result<u64, BenchError> {
    Ok(held_ids(mode, conn, consumer).await?.len() as u64)
}

/// The task ids `consumer` holds: its pending entries, or its processing list.
async fn held_ids(
    mode: Mode,
    conn: &mut redis::aio::MultiplexedConnection,
    consumer: &str,
) -> Result<Vec<String>, BenchError> {
    match mode {
        Mode::Stream => {
            let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
                .arg("cg:q:{captcha}:tasks")
                .arg("workers")
                .arg("-")
                .arg("+")
                .arg(1000)
                .arg(consumer)
                .query_async(conn)
                .await
                .map_err(redis_error)?;
            let mut ids = Vec::new();
            for (stream_id, ..) in rows {
                let entries: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
                    .arg("cg:q:{captcha}:tasks")
                    .arg(&stream_id)
                    .arg(&stream_id)
                    .query_async(conn)
                    .await
                    .map_err(redis_error)?;
                ids.extend(
                    entries
                        .into_iter()
                        .filter_map(|(_, f)| f.get("id").cloned()),
                );
            }
            Ok(ids)
        }
        Mode::Seed => {
            let list = format!("captcha:processing:{consumer}");
            let raw: Vec<String> = conn.lrange(&list, 0, -1).await.map_err(redis_error)?;
            Ok(raw
                .iter()
                .filter_map(|e| serde_json::from_str::<serde_json::Value>(e).ok())
                .filter_map(|e| e["id"].as_str().map(str::to_owned))
                .collect())
        }
    }
}

/// Task `id`'s token once it has a successful result.
async fn answer(
    mode: Mode,
    queue: &Queue,
    conn: &mut redis::aio::MultiplexedConnection,
    id: &str,
) -> Result<Option<String>, BenchError> {
    match mode {
        Mode::Stream => Ok(queue
            .result(id)
            .await
            .map_err(|e| BenchError::Setup(format!("result: {e}")))?
            .filter(|r| r.status == ResultStatus::Ready)
            .and_then(|r| r.answer)),
        Mode::Seed => {
            let raw: Option<String> = conn
                .hget("captcha:results", id)
                .await
                .map_err(redis_error)?;
            Ok(raw
                .and_then(|r| serde_json::from_str::<serde_json::Value>(&r).ok())
                .filter(|r| r["status"] == "success")
                .and_then(|r| r["token"].as_str().map(str::to_owned)))
        }
    }
}

/// Looks every [`LOOK`] until `done` says so, for at most [`PATIENCE`].
async fn wait_for<F, Fut>(what: &str, mut done: F) -> Result<(), BenchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, BenchError>>,
{
    let give_up = Instant::now() + PATIENCE;
    while Instant::now() < give_up {
        if done().await? {
            return Ok(());
        }
        tokio::time::sleep(LOOK).await;
    }
    Err(BenchError::Setup(format!(
        "{what}: not within {PATIENCE:?}"
    )))
}

fn redis_error(e: redis::RedisError) -> BenchError {
    BenchError::Setup(format!("redis: {e}"))
}
