//! `captcha-gateway bench <scenario>`: load scenarios that start their own simulator, gateway
//! and (for `hit`, `queue` and `seed-stack`) `redis-server` on free loopback ports, drive them,
//! check every token handed out with the simulator, and report figures against the targets of
//! docs/BENCHMARKS.md.
//!
//! # Layout
//!
//! - `rig.rs`: the systems under test (simulator, gateway in process or as a process, Redis),
//!   CPU time and peak memory from `/proc`.
//! - `conn.rs`: a minimal HTTP/1.1 keep-alive client for `hit`, cheap enough that the load
//!   generator does not compete with the gateway for the two cores.
//! - `load.rs`: HTTP client, request bodies, token import, latencies, progress bars, token
//!   checks.
//! - `report.rs`: figures, targets, medians over runs, the table and the JSON.
//! - `redis_pop.rs`: `redis-benchmark` of an equivalent Lua pop, the floor `hit` is quoted against.
//! - `gunicorn.rs`: the seed stack `seed-stack` compares with (`bench/seed_stack/app.py` on
//!   gunicorn), its process group killed on drop.
//! - one file per scenario: `hit`, `burst`, `steady`, `slack`, `capacity`, `plan`, `soak`,
//!   `polling`, `queue`, `seed_stack`.
//!
//! A run *fails* (exit code 1) when the scenario itself went wrong: a caller got an error, a
//! token was invalid, expired or handed out twice. A missed target is reported, not a failure:
//! timings on a shared machine are figures to read, not assertions.

mod advise;
mod burst;
mod capacity;
mod conn;
mod cycle;
mod gunicorn;
mod hit;
mod load;
mod plan;
mod polling;
mod queue;
mod queue_floor;
mod redis_pop;
mod report;
mod rig;
mod seed_stack;
mod slack;
mod soak;
mod steady;
mod worker_kill;

use std::process::ExitCode;

use crate::cli::{BenchArgs, Scenario};
pub use report::{Goal, Metric, RunResult};

/// What stops a scenario from running at all (as opposed to a run that fails its checks).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Setup(String),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// The size knobs every scenario reads.
#[derive(Debug, Clone)]
pub struct Opts {
    pub quick: bool,
    pub duration: Option<f64>,
    pub redis_url: Option<String>,
    pub concurrency: Option<usize>,
    pub durable: Option<crate::cli::Durable>,
    /// The Python that runs the seed stack (`seed-stack`).
    pub python: std::path::PathBuf,
    /// The folder of the seed stack's `app.py` (`seed-stack`).
    pub seed_stack_dir: std::path::PathBuf,
}

impl Opts {
    /// `--duration`, else the scenario's default (`quick` or full).
    pub fn duration_or(&self, quick: f64, full: f64) -> f64 {
        self.duration
            .unwrap_or(if self.quick { quick } else { full })
    }
}

fn name(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::Hit => "hit",
        Scenario::Burst => "burst",
        Scenario::Steady => "steady",
        Scenario::Cycle => "cycle",
        Scenario::Advise => "advise",
        Scenario::Slack => "slack",
        Scenario::Capacity => "capacity",
        Scenario::Plan => "plan",
        Scenario::Soak => "soak",
        Scenario::Polling => "polling",
        Scenario::Queue => "queue",
        Scenario::SeedStack => "seed-stack",
        Scenario::WorkerKill => "worker-kill",
    }
}

async fn run_once(scenario: Scenario, opts: &Opts) -> Result<RunResult, BenchError> {
    match scenario {
        Scenario::Hit => hit::run(opts).await,
        Scenario::Burst => burst::run(opts).await,
        Scenario::Steady => steady::run(opts).await,
        Scenario::Cycle => cycle::run(opts).await,
        Scenario::Advise => advise::run(opts).await,
        Scenario::Slack => slack::run(opts).await,
        Scenario::Capacity => capacity::run(opts).await,
        Scenario::Plan => plan::run(opts).await,
        Scenario::Soak => soak::run(opts).await,
        Scenario::Polling => polling::run(opts).await,
        Scenario::Queue => queue::run(opts).await,
        Scenario::SeedStack => seed_stack::run(opts).await,
        Scenario::WorkerKill => worker_kill::run(opts).await,
    }
}

/// Runs `args.scenario` `args.runs` times, prints the table, writes the JSON. Exit code 0 when
/// every run passed its checks, 1 when one failed or could not run, 2 when the JSON file cannot
/// be written.
pub async fn run(args: BenchArgs, env: &dyn Fn(&str) -> Option<String>) -> ExitCode {
    // Quieter than `serve` (warnings only, under the progress bar) unless RUST_LOG says
    // otherwise; a RUST_LOG that does not parse is a configuration error, as for `serve`.
    let mut log = match crate::config::log_settings(&Default::default(), None, None, env) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if env("RUST_LOG").is_none_or(|v| v.trim().is_empty()) {
        log.filter = "warn".to_owned();
    }
    crate::telemetry::init_logs(&log, &[]);
    let opts = Opts {
        quick: args.quick,
        duration: args.duration,
        redis_url: args.redis_url.clone(),
        concurrency: args.concurrency,
        durable: args.durable,
        python: args.python.clone(),
        seed_stack_dir: args.seed_stack_dir.clone(),
    };
    let scenario = name(args.scenario);
    let command: Vec<String> = std::env::args().skip(1).collect();
    let command = format!("captcha-gateway {}", command.join(" "));
    let mut runs = Vec::new();
    for i in 0..args.runs {
        eprintln!("bench {scenario}: run {} of {}", i + 1, args.runs);
        match run_once(args.scenario, &opts).await {
            Ok(r) => runs.push(r),
            Err(e) => {
                eprintln!("error: bench {scenario} could not run: {e}");
                return ExitCode::from(1);
            }
        }
    }
    println!("{}", report::table(scenario, &runs));
    if let Some(path) = &args.json {
        let json = report::json(scenario, &command, &runs);
        let text = serde_json::to_string_pretty(&json).expect("JSON values serialize");
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if runs.iter().any(|r| !r.failures.is_empty()) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
