//! `queue`: the task queue end to end (docs/QUEUE.md). This process is the producer: it enqueues
//! reCAPTCHA v2 tasks into a `redis-server` of its own, `captcha-gateway worker` processes solve
//! them against a simulator they are configured for as for a real provider (its solve times
//! unknown to them), and the producer waits for every result, woken by the queue.
//!
//! Two settings, one after the other:
//! - `instant`: the simulator answers at once and 2 workers share a large plan: the ceiling of
//!   the queue, the engine and Redis in tasks per second (goal 5,000/s).
//! - `seed`: seed 003's setup: 3 workers, 3-6 s solves, a 15-thread plan. The rate is then set
//!   by the plan: at most 15 / 4.5 s = 3.3 tasks/s; the seed's own worker did 0.42.
//!
//! Every result must be ready, once, with a token the simulator issued and never saw twice.

use std::collections::HashSet;
use std::time::Duration;

use futures::{StreamExt, stream};
use tokio::time::Instant;

use super::load::{self, Checked, TargetSpec};
use super::report::{Goal, RunResult};
use super::rig::{self, GatewaySpec, RedisServer, SimServer, WorkerUnderTest, secs};
use super::{BenchError, Opts};
use crate::engine::store::redis::RedisSettings;
use crate::queue::{NewTask, Queue, QueueSettings, ResultStatus};
use crate::sim::LatencyRange;

/// One setting of the scenario.
struct Setting {
    name: &'static str,
    workers: usize,
    /// The plan's threads, at the simulator and in the workers' configuration.
    threads: u32,
    /// Tasks each worker keeps in flight (`--concurrency`).
    concurrency: u32,
    latency: LatencyRange,
    tasks: usize,
    goal: Goal,
    /// The workers' `[poll] max_requests_per_second` when not the default (10 `res.php`
    /// requests/s of up to 100 ids each per process: 1,000 checks/s per worker).
    poll_rps: Option<f64>,
}

fn settings(quick: bool) -> [Setting; 3] {
    let instant = Setting {
        name: "instant",
        workers: 2,
        threads: 2_000,
        // Each worker its share of the plan's threads: with instant solves a task still spends
        // the poll schedule's first check in flight, so tasks/s = tasks in flight / that time.
        concurrency: 1_000,
        latency: secs(0.0, 0.0),
        tasks: if quick { 200 } else { 20_000 },
        goal: Goal::AtLeast(5_000.0),
        poll_rps: None,
    };
    // The same with the polling limit raised tenfold: what the queue and the machine do once
    // the provider-politeness limit on `res.php` is out of the way.
    let instant_fast_poll = Setting {
        name: "instant100",
        poll_rps: Some(100.0),
        ..instant
    };
    let seed = Setting {
        name: "seed",
        workers: 3,
        threads: 15,
        concurrency: 32,
        latency: if quick {
            secs(0.1, 0.2)
        } else {
            secs(3.0, 6.0)
        },
        tasks: if quick { 30 } else { 150 },
        // The plan's ceiling, 15 threads / 4.5 s mean solve, less a tenth for polling.
        goal: Goal::AtLeast(15.0 / 4.5 * 0.9),
        poll_rps: None,
    };
    [instant, instant_fast_poll, seed]
}

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    let mut result = RunResult::default();
    super::queue_floor::provider_protocol(if opts.quick { 200 } else { 20_000 }, &mut result)
        .await?;
    for setting in settings(opts.quick) {
        run_setting(&setting, &mut result).await?;
    }
    Ok(result)
}

async fn run_setting(s: &Setting, result: &mut RunResult) -> Result<(), BenchError> {
    let redis = RedisServer::start().await?;
    // On its own thread, so its CPU is told apart from the producer's.
    let sim = SimServer::start_apart(s.threads, s.latency)?;
    let spec = GatewaySpec {
        redis_url: Some(redis.url()),
        tables: s
            .poll_rps
            .map(|rps| format!("[poll]\nmax_requests_per_second = {rps:.1}\n"))
            .unwrap_or_default(),
        ..GatewaySpec::real_provider(s.threads)
    };
    let mut workers = Vec::new();
    for _ in 0..s.workers {
        workers.push(WorkerUnderTest::process(&spec, &sim, s.concurrency).await?);
    }
    let target = RedisSettings::new(vec![redis.url()], false).target;
    let queue = Queue::open(&target, QueueSettings::default())
        .await
        .map_err(|e| BenchError::Setup(format!("queue: {e}")))?;
    let site = TargetSpec::unique(s.name);
    let request = serde_json::json!({
        "kind": "recaptcha_v2", "sitekey": site.sitekey, "pageurl": site.pageurl,
    });

    let bar = load::bar(s.tasks as u64, &format!("queue {}: results", s.name));
    let cpu = || {
        let sim = rig::threads_cpu_seconds(rig::SIM_THREAD);
        Cpu {
            workers: workers.iter().map(|w| rig::cpu_seconds(w.pid())).sum(),
            redis: rig::cpu_seconds(redis.pid()),
            producer: rig::cpu_seconds(std::process::id()) - sim,
            sim,
        }
    };
    let calls_before = rig::command_calls(&redis.url()).await?;
    let cpu_before = cpu();
    let started = Instant::now();
    let ids: Vec<String> = stream::iter(0..s.tasks)
        .map(|_| {
            let task = NewTask {
                request: request.clone(),
                ..NewTask::default()
            };
            let queue = &queue;
            async move { queue.enqueue(task).await.map(|e| e.id) }
        })
        .buffered(256)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .map_err(|e| BenchError::Setup(format!("enqueue: {e}")))?;
    let enqueued = started.elapsed();

    let mut tokens = Vec::with_capacity(s.tasks);
    let mut failed = 0usize;
    let mut waits = stream::iter(ids.iter())
        .map(|id| queue.wait_result(id, Duration::from_secs(600)))
        .buffer_unordered(4096);
    let mut done_at = Vec::with_capacity(s.tasks);
    let mut in_worker_ms = Vec::with_capacity(s.tasks);
    while let Some(r) = waits.next().await {
        match r {
            Ok(Some(r)) if r.status == ResultStatus::Ready => {
                in_worker_ms.push(r.duration_ms);
                tokens.push(r.answer.unwrap_or_default());
            }
            _ => failed += 1,
        }
        done_at.push(started.elapsed());
        bar.inc(1);
    }
    let elapsed = started.elapsed();
    let cpu_after = cpu();
    bar.finish_and_clear();
    let calls_after = rig::command_calls(&redis.url()).await?;

    let checked = Checked::tokens(&sim.sim, tokens.iter().map(String::as_str));
    for f in checked.failures() {
        result.fail(format!("{}: {f}", s.name));
    }
    if failed > 0 {
        result.fail(format!("{}: {failed} tasks without a ready result", s.name));
    }
    let distinct: HashSet<&String> = tokens.iter().collect();
    if distinct.len() != tokens.len() {
        result.fail(format!("{}: a token reached two tasks", s.name));
    }
    let stats = sim.sim.stats();
    let rate = s.tasks as f64 / elapsed.as_secs_f64();
    if s.name == "instant100" {
        in_worker_ms.sort_unstable();
        let median_ms = in_worker_ms
            .get(in_worker_ms.len() / 2)
            .copied()
            .unwrap_or(0);
        let per_task = cpu_after.minus(&cpu_before).per_task_ms(s.tasks);
        result.info(
            "instant, res.php limit 100/s: tasks/s end to end",
            rate,
            "/s",
        );
        result.info(
            "instant, res.php limit 100/s: median time from take to result",
            median_ms as f64,
            "ms",
        );
        result.info(
            "instant, res.php limit 100/s: CPU per task, all processes",
            per_task.total(),
            "ms",
        );
        let names = [
            "instant, res.php limit 100/s: worker CPU per task",
            "instant, res.php limit 100/s: Redis CPU per task",
            "instant, res.php limit 100/s: producer CPU per task",
            "instant, res.php limit 100/s: simulator CPU per task",
        ];
        for (name, ms) in names.into_iter().zip(per_task.parts()) {
            result.info(name, ms, "ms");
        }
        for w in workers {
            w.stop().await;
        }
        return Ok(());
    }
    match s.name {
        "instant" => {
            result.goal("instant: tasks/s end to end", rate, "/s", s.goal);
            result.info(
                "instant: enqueue rate",
                s.tasks as f64 / enqueued.as_secs_f64(),
                "/s",
            );
        }
        _ => {
            result.goal("seed: tasks/s end to end", rate, "/s", s.goal);
            // Without the first and last tenth: the schedule still learning the solve times,
            // and the last wave finishing with threads idle.
            result.info("seed: tasks/s, middle 80 %", middle_rate(&done_at), "/s");
            result.info(
                "seed: peak upstream tasks",
                stats.peak_concurrent as f64,
                "",
            );
            result.info(
                "seed: plan ceiling (threads / mean solve)",
                f64::from(s.threads) / ((s.latency.min + s.latency.max).as_secs_f64() / 2.0),
                "/s",
            );
        }
    }
    result.info(
        match s.name {
            "instant" => "instant: upstream submits per task",
            _ => "seed: upstream submits per task",
        },
        stats.submits as f64 / s.tasks as f64,
        "",
    );
    // Where the machine's time went, per task: the workers, Redis, this process's producer and
    // its simulator.
    let cpu_per_task = cpu_after.minus(&cpu_before).per_task_ms(s.tasks);
    let names = match s.name {
        "instant" => [
            "instant: worker CPU per task",
            "instant: Redis CPU per task",
            "instant: producer CPU per task",
            "instant: simulator CPU per task",
        ],
        _ => [
            "seed: worker CPU per task",
            "seed: Redis CPU per task",
            "seed: producer CPU per task",
            "seed: simulator CPU per task",
        ],
    };
    for (name, ms) in names.into_iter().zip(cpu_per_task.parts()) {
        result.info(name, ms, "ms");
    }
    let per_task = |name: &str| {
        let after = calls_after.get(name).copied().unwrap_or(0);
        let before = calls_before.get(name).copied().unwrap_or(0);
        after.saturating_sub(before) as f64 / s.tasks as f64
    };
    if s.name == "instant" {
        in_worker_ms.sort_unstable();
        // Little's law: the rate the workers' slots allow at this time per task.
        let median_s = in_worker_ms
            .get(in_worker_ms.len() / 2)
            .copied()
            .unwrap_or(0) as f64
            / 1000.0;
        result.info(
            "instant: median time from a worker's take to its result",
            median_s * 1000.0,
            "ms",
        );
        result.info(
            "instant: tasks in flight / that time (the slots' ceiling)",
            (s.workers as f64 * f64::from(s.concurrency)) / median_s,
            "/s",
        );
        result.info(
            "instant: Redis script calls per task",
            per_task("evalsha") + per_task("eval"),
            "",
        );
        result.info(
            "floor: Redis alone at one full core (1 / its CPU per task)",
            1000.0 / cpu_per_task.redis,
            "/s",
        );
        let mix: Vec<String> = calls_after
            .keys()
            .map(|name| (name, per_task(name)))
            .filter(|(_, n)| *n >= 0.01)
            .map(|(name, n)| format!("{name} {n:.2}"))
            .collect();
        result.notes.push(format!(
            "instant: Redis commands per task (inside scripts too): {}",
            mix.join(", ")
        ));
    }
    for w in workers {
        w.stop().await;
    }
    Ok(())
}

/// CPU seconds used so far by each part of the run (or, after [`Cpu::per_task_ms`], ms per task).
#[derive(Debug, Clone, Copy)]
struct Cpu {
    workers: f64,
    redis: f64,
    /// The bench process without its simulator's thread: enqueueing and waiting for results.
    producer: f64,
    sim: f64,
}

impl Cpu {
    fn minus(&self, before: &Cpu) -> Cpu {
        Cpu {
            workers: self.workers - before.workers,
            redis: self.redis - before.redis,
            producer: self.producer - before.producer,
            sim: self.sim - before.sim,
        }
    }

    fn per_task_ms(&self, tasks: usize) -> Cpu {
        let ms = |s: f64| s * 1000.0 / tasks as f64;
        Cpu {
            workers: ms(self.workers),
            redis: ms(self.redis),
            producer: ms(self.producer),
            sim: ms(self.sim),
        }
    }

    /// Workers, Redis, producer, simulator: the order of the figures' names.
    fn parts(&self) -> [f64; 4] {
        [self.workers, self.redis, self.producer, self.sim]
    }

    fn total(&self) -> f64 {
        self.parts().iter().sum()
    }
}

/// Completions per second between the 10th and the 90th percentile of completion times.
fn middle_rate(done_at: &[Duration]) -> f64 {
    let n = done_at.len();
    let (first, last) = (n / 10, n * 9 / 10);
    if last <= first + 1 {
        return f64::NAN;
    }
    let span = done_at[last - 1]
        .saturating_sub(done_at[first])
        .as_secs_f64();
    (last - 1 - first) as f64 / span
}
