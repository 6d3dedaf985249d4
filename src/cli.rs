//! The command line (clap). Operators and scripts rely on these names: keep them.
//! Flags also read their environment variable; a `--config` TOML file sets anything a flag does,
//! and a flag or variable wins over the file.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::provider::AccountProvider;
use crate::secret::Secret;

#[derive(Debug, Parser)]
#[command(
    name = "captcha-gateway",
    version,
    about = "A broker between automation fleets and CAPTCHA-solving providers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Run the provider simulator as its own server.
    Simulate(SimulateArgs),
    /// Run a load scenario against a gateway and the simulator; print a table (and JSON).
    Bench(BenchArgs),
    /// Put tasks on a queue (docs/QUEUE.md) and print their results as JSON lines.
    Submit(SubmitArgs),
    /// Consume the task queue in Redis (docs/QUEUE.md): solve with the same engine as `serve`,
    /// store one result per task.
    Worker(WorkerArgs),
    /// Print a one-screen summary of a running gateway's live figures (`GET /v1/status`).
    Status(StatusArgs),
    /// Print what the plan needs, from the demand a running gateway served (`GET /v1/advice`).
    Advise(AdviseArgs),
}

/// `--provider`: the providers the one-account shortcut serves (CaptchaAI and 2captcha with
/// `--provider-url` and their key variables, or the built-in simulator in process: no account,
/// no money). Others are configured under `[[accounts]]`.
fn shortcut_provider() -> impl TypedValueParser<Value = AccountProvider> {
    clap::builder::PossibleValuesParser::new(AccountProvider::SHORTCUT.map(AccountProvider::as_str))
        .map(|name| {
            AccountProvider::SHORTCUT
                .into_iter()
                .find(|p| p.as_str() == name)
                .expect("clap checked the name against the same list")
        })
}

#[derive(Debug, Default, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "CAPTCHA_GATEWAY_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// TOML file with any of these settings (see docs/CONFIGURATION.md).
    #[arg(long, env = "CAPTCHA_GATEWAY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Which provider to solve with.
    #[arg(long, value_parser = shortcut_provider())]
    pub provider: Option<AccountProvider>,
    /// Base URL override for the provider (e.g. a simulator started with `simulate`).
    #[arg(long)]
    pub provider_url: Option<String>,
    /// File holding the provider API key (instead of CAPTCHAAI_API_KEY).
    #[arg(long)]
    pub provider_key_file: Option<PathBuf>,
    /// The account's plan threads: upstream tasks in flight never exceed it.
    #[arg(long)]
    pub threads: Option<u32>,
    /// A 32-character key clients must send (repeatable; env: comma-separated).
    #[arg(
        long = "gateway-key",
        env = "CAPTCHA_GATEWAY_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub gateway_keys: Vec<Secret>,
    /// Solves this process holds at once before answering 503 / ERROR_NO_SLOT_AVAILABLE.
    #[arg(long, env = "MAX_CONCURRENT")]
    pub max_concurrent: Option<u64>,
    /// Seconds after start over which the admission limit ramps up to --max-concurrent (slow
    /// start; 0 turns it off).
    #[arg(long, env = "WARMUP_S")]
    pub warmup_s: Option<f64>,
    /// Redis shared by a fleet of gateways (`redis://host:6379/0`); several comma-separated
    /// URLs, or --redis-cluster, for a Redis Cluster. Without it: the embedded store.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<Secret>,
    /// The Redis URLs are nodes of a Redis Cluster.
    #[arg(long)]
    pub redis_cluster: bool,
    /// `serve`: hand accepted tasks to the workers of this queue instead of solving them here
    /// (needs --redis-url). `worker`: the queue to consume. `--queue` alone names the default
    /// queue, `captcha` (docs/QUEUE.md).
    #[arg(long, num_args = 0..=1, default_missing_value = "captcha", env = "CAPTCHA_GATEWAY_QUEUE")]
    pub queue: Option<String>,
    /// Refuse to solve while Redis is unreachable (default: keep solving without the pool).
    #[arg(long)]
    pub redis_required: bool,
    /// Seconds of life an answer must have left to be handed out.
    #[arg(long)]
    pub min_remaining_s: Option<f64>,
    /// Keep the page URL's query string in target keys (default: dropped).
    #[arg(long)]
    pub keep_query: bool,
    #[command(flatten)]
    pub log: LogArgs,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long, env = "CAPTCHA_GATEWAY_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, env = "CAPTCHA_GATEWAY_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Serve /metrics, /v1/status and the dashboard on this address instead of --listen (with
    /// /livez, /readyz and /health); the API port then answers 404 for them.
    #[arg(long, env = "CAPTCHA_GATEWAY_OPS_LISTEN")]
    pub ops_listen: Option<SocketAddr>,
    /// File holding the operations key that /metrics, /v1/status and the dashboard require as
    /// `Authorization: Bearer` (or set CAPTCHA_GATEWAY_OPS_KEY).
    #[arg(long)]
    pub ops_key_file: Option<PathBuf>,
}

/// How a long-running command writes its log lines (docs/CONFIGURATION.md "Logs"); which lines
/// are written is `RUST_LOG`'s.
#[derive(Debug, Default, Clone, Args)]
pub struct LogArgs {
    /// `text` (human-readable, the default) or `json` (one JSON object per line).
    #[arg(long, env = "CAPTCHA_GATEWAY_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Log as JSON lines: the same as `--log-format json`.
    #[arg(long)]
    pub log_json: bool,
}

#[derive(Debug, Default, Args)]
pub struct SimulateArgs {
    /// Address to listen on (default 127.0.0.1:8081).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Plan threads: tasks being solved at once before the capacity error.
    #[arg(long)]
    pub threads: Option<u32>,
    /// Solve time per kind, e.g. `recaptcha_v2=2s..5s` (repeatable).
    #[arg(long = "latency")]
    pub latencies: Vec<String>,
    /// Token lifetime per kind, e.g. `turnstile=300s` (repeatable).
    #[arg(long = "lifetime")]
    pub lifetimes: Vec<String>,
    /// Share of tasks that end ERROR_CAPTCHA_UNSOLVABLE (0..1).
    #[arg(long)]
    pub unsolvable_rate: Option<f64>,
    /// Share of submits answered ERROR_SERVER_ERROR (0..1).
    #[arg(long)]
    pub server_error_rate: Option<f64>,
    /// Share of submits answered with an HTML 502 page (0..1).
    #[arg(long)]
    pub html_error_rate: Option<f64>,
    /// What a submit beyond the thread limit gets (ERROR_NO_SLOT_AVAILABLE or ERROR_ZERO_BALANCE).
    #[arg(long)]
    pub capacity_code: Option<String>,
    /// Accepted API keys (repeatable); none means any 32-character key.
    #[arg(long = "key", hide_env_values = true)]
    pub keys: Vec<String>,
    /// Seed for reproducible latencies and errors.
    #[arg(long)]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub log: LogArgs,
}

/// The load scenarios of `bench` (docs/BENCHMARKS.md says what each measures and its target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Pool hits: imported tokens taken through `/v1/solve` and `in.php` + `res.php` (Redis).
    Hit,
    /// 40 callers for one target at once, empty pool (seed 000's story).
    Burst,
    /// Steady Poisson demand on an `auto` pool: hit rate and waste after warm-up.
    Steady,
    /// Predictive against reactive `auto` pools on a week with a daily rush, in virtual time:
    /// hit rate in the rush's first minutes, waste a day.
    Cycle,
    /// The plan advisor on a busy day of history, its replay included: how long it takes.
    Advise,
    /// Solve path only: delay from ready to handout, `res.php` calls per task.
    Slack,
    /// 10,000 callers waiting on slow solves in one gateway process: memory, handout delay.
    Capacity,
    /// A 15-thread plan, 40 callers hitting one target continuously.
    Plan,
    /// A million distinct page URLs: memory, `/metrics` size and live targets stay flat.
    Soak,
    /// The gateway as a real provider's user runs it, not told the solve times (3-6 s, 15-30 s):
    /// delay from ready to caller, checks and `res.php` requests per task.
    Polling,
    /// The task queue end to end: tasks/s with an instant simulator and 2 workers, and seed
    /// 003's setup (3 workers, 3-6 s solves, a 15-thread plan).
    Queue,
    /// A worker `kill -9`ed while it solves, of three (the stream and seed 003's list): how soon
    /// its tasks move and are answered, and provider tasks paid twice.
    WorkerKill,
    /// The pool hit path against "the seed stack" (seed 002's Flask worker on gunicorn taking
    /// cached tokens from a Redis list written seed 000's way), alternated on one Redis.
    SeedStack,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Which scenario to run.
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// Use this Redis instead of starting a `redis-server` on a free port (`hit`; other
    /// scenarios use the embedded store unless this is given).
    #[arg(long)]
    pub redis_url: Option<String>,
    /// Seconds of load per run (per phase for `hit`); each scenario has its own default.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Runs of the scenario; the table shows the median of each figure.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub runs: u32,
    /// A tiny configuration that runs in seconds (fast simulated solves, few callers): checks
    /// that the scenario works, measures nothing worth quoting.
    #[arg(long)]
    pub quick: bool,
    /// Concurrent load connections (`hit`, default 64; `seed-stack`, default 50), 1-10,000:
    /// zero measures nothing, and more than `capacity`'s callers is a typo.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    pub concurrency: Option<usize>,
    /// `hit` with durable hand-outs (docs/REDIS.md): `fsync` runs its Redis with `appendfsync
    /// always` and the gateway with `redis_handout_fsync`; `replica` gives its Redis a replica
    /// and the gateway `redis_handout_replicas = 1`. Off by default.
    #[arg(long, value_enum)]
    pub durable: Option<Durable>,
    /// The Python that runs the seed stack of `seed-stack`; it needs Flask, gunicorn and redis
    /// (`pip install -r bench/seed_stack/requirements.txt`).
    #[arg(
        long,
        env = "CAPTCHA_GATEWAY_BENCH_PYTHON",
        default_value = "python3",
        value_name = "PATH"
    )]
    pub python: PathBuf,
    /// The folder of the seed stack's `app.py` (`seed-stack`), relative to the current directory.
    #[arg(long, default_value = "bench/seed_stack", value_name = "DIR")]
    pub seed_stack_dir: PathBuf,
}

/// How `bench hit` makes hand-outs durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Durable {
    Fsync,
    Replica,
}

/// `status`: one screen of a gateway's live figures, as its dashboard shows them.
#[derive(Debug, Default, Args)]
pub struct StatusArgs {
    /// The gateway's base URL, e.g. `http://127.0.0.1:8080`.
    #[arg(
        long,
        env = "CAPTCHA_GATEWAY_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// The gateway's operations key (its `ops_key`), sent as `Authorization: Bearer`.
    #[arg(long, env = "CAPTCHA_GATEWAY_OPS_KEY", hide_env_values = true)]
    pub ops_key: Option<Secret>,
    /// A key for a proxy in front that asks for one, sent as `Authorization: Bearer` when no
    /// --ops-key is given.
    #[arg(long, env = "CAPTCHA_GATEWAY_KEY", hide_env_values = true)]
    pub key: Option<Secret>,
    /// Seconds to wait for the gateway's answer.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub timeout_s: u64,
}

/// `advise`: the plan advice of a running gateway, over a window of its demand log.
#[derive(Debug, Default, Args)]
pub struct AdviseArgs {
    #[command(flatten)]
    pub gateway: StatusArgs,
    /// Hours of demand to look at, back from now (the log keeps 14 days).
    #[arg(long, default_value_t = 24.0, value_parser = window_hours)]
    pub window_h: f64,
    /// The share of a busy target's callers its pool should serve (0.01 to 0.999).
    #[arg(long, default_value_t = 0.95, value_parser = hit_rate)]
    pub hit_rate: f64,
    /// Also find the fewest threads whose replay keeps 95 % of callers' waits for a thread
    /// within this many seconds (0 to 600).
    #[arg(long, value_parser = wait_seconds)]
    pub wait_s: Option<f64>,
    /// Print the advice as the endpoint's JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

fn wait_seconds(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(s) if (0.0..=600.0).contains(&s) => Ok(s),
        _ => Err("use a number of seconds from 0 to 600".into()),
    }
}

fn hit_rate(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(h) if (0.01..=0.999).contains(&h) => Ok(h),
        _ => Err("use a share from 0.01 to 0.999 (0.95 is 95 %)".into()),
    }
}

fn window_hours(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(h) if h > 0.0 && h <= 14.0 * 24.0 => Ok(h),
        _ => Err("use a number of hours above 0 and at most 336 (14 days)".into()),
    }
}

/// `submit`: tasks from arguments or a JSON-lines file onto a queue, results back as JSON lines.
#[derive(Debug, Default, Args)]
pub struct SubmitArgs {
    /// The Redis holding the queue (`redis://host:6379/0`).
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<Secret>,
    /// The Redis URLs are nodes of a Redis Cluster.
    #[arg(long)]
    pub redis_cluster: bool,
    /// Which queue (the workers' `--queue`).
    #[arg(long, default_value = "captcha")]
    pub queue: String,
    /// Tasks as JSON lines, one native API body per line (`-` reads stdin); a line may also
    /// carry `id` and `idempotency_key`.
    #[arg(long, conflicts_with_all = ["kind", "params"])]
    pub file: Option<PathBuf>,
    /// One task from arguments: its kind (`recaptcha_v2`, `turnstile`, ...).
    #[arg(long, requires = "params")]
    pub kind: Option<String>,
    /// A parameter of that task as `name=value` (repeatable), e.g. `--param sitekey=6Le...`.
    #[arg(long = "param", requires = "kind")]
    pub params: Vec<String>,
    /// Submit the task given in arguments this many times.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub count: u32,
    /// Seconds to wait for every result before giving up on the rest.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout_s: u64,
    /// Print the task ids and return without waiting for results.
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub log: LogArgs,
}

/// `worker`: every `serve` flag for the provider, accounts, Redis and polling, plus the queue's.
/// `--listen` serves /livez, /readyz and /metrics (default 0.0.0.0:9090).
#[derive(Debug, Default, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Tasks this process keeps in flight.
    #[arg(long, env = "CAPTCHA_GATEWAY_CONCURRENCY")]
    pub concurrency: Option<i64>,
    /// Seconds this worker may go silent before it is taken for dead (after one more beat, a
    /// third of it, its tasks move and its provider tasks are adopted). One lease for its tasks
    /// and its instance: the same setting as `redis_lease_s`.
    #[arg(long)]
    pub lease_s: Option<f64>,
    /// Deliveries before a task goes to the dead-letter stream.
    #[arg(long)]
    pub max_deliveries: Option<i64>,
    /// Seconds a result stays readable.
    #[arg(long)]
    pub result_ttl_s: Option<f64>,
    /// Seconds a SIGTERM leaves in-flight tasks to finish; the rest are left for other workers.
    #[arg(long)]
    pub grace_s: Option<f64>,
    /// Consume seed 003's `captcha:queue` list instead of the stream.
    #[arg(long)]
    pub seed_queue: bool,
    /// Threads of this process's async runtime. One by default: workers scale out as processes,
    /// and one thread spends about a quarter less CPU per task than one per core
    /// (docs/BENCHMARKS.md `queue`) while still handling thousands of tasks a second.
    #[arg(long, env = "CAPTCHA_GATEWAY_RUNTIME_THREADS", default_value_t = 1)]
    pub runtime_threads: u16,
}
