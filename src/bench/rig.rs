//! The systems under test, started by the bench itself on free loopback ports: the provider
//! simulator (always in the bench process, so every token can be checked with its secret), a
//! gateway (in process, or as a separate `captcha-gateway serve` process where its CPU and memory
//! must be measured apart from the load generator) and a `redis-server`.
//!
//! Owns starting, configuring and stopping them, and reading a process's CPU time and peak
//! memory from `/proc`. Does not generate load.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::BenchError;
use super::load::KEY;
use crate::cli::ServeArgs;
use crate::commands::serve::Gateway;
use crate::model::Kind;
use crate::shutdown::Shutdown;
use crate::sim::{LatencyRange, SimSettings, Simulator};

/// The name of the threads of a simulator started with [`SimServer::start_apart`]: their CPU
/// time ([`threads_cpu_seconds`]) is the simulator's, the rest of the bench process's is the
/// load generator's.
pub const SIM_THREAD: &str = "bench-sim";

/// A simulator served on a loopback port by the bench process; stops when dropped.
pub struct SimServer {
    pub sim: Arc<Simulator>,
    pub addr: SocketAddr,
    stop: CancellationToken,
    /// The simulator's own runtime (`start_apart`); `None` when it shares the bench's.
    runtime: Option<tokio::runtime::Runtime>,
}

impl SimServer {
    /// A simulator with `threads` plan threads and every kind solved in `latency`.
    pub async fn start(threads: u32, latency: LatencyRange) -> Result<SimServer, BenchError> {
        let sim = Simulator::new(sim_settings(threads, latency));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        tokio::spawn(crate::sim::serve(
            sim.clone(),
            listener,
            stop.clone().cancelled_owned(),
        ));
        Ok(SimServer {
            sim,
            addr,
            stop,
            runtime: None,
        })
    }

    /// The same, served by a runtime of its own (one thread named [`SIM_THREAD`]), so the
    /// simulator's CPU time can be told apart from the load generator's in the same process.
    pub fn start_apart(threads: u32, latency: LatencyRange) -> Result<SimServer, BenchError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(SIM_THREAD)
            .enable_all()
            .build()?;
        let sim = Simulator::new(sim_settings(threads, latency));
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let (served, stopped) = (sim.clone(), stop.clone().cancelled_owned());
        runtime.spawn(async move {
            // Registered with the reactor of the runtime it runs on: the simulator's own.
            let listener = TcpListener::from_std(listener)?;
            crate::sim::serve(served, listener, stopped).await
        });
        Ok(SimServer {
            sim,
            addr,
            stop,
            runtime: Some(runtime),
        })
    }
}

fn sim_settings(threads: u32, latency: LatencyRange) -> SimSettings {
    let mut settings = SimSettings {
        threads,
        ..SimSettings::default()
    };
    for kind in Kind::ALL {
        settings.latency.insert(kind, latency);
    }
    settings
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(runtime) = self.runtime.take() {
            // Dropped inside the bench's own runtime, where a blocking shutdown would panic.
            runtime.shutdown_background();
        }
    }
}

/// A latency range from seconds.
pub fn secs(min: f64, max: f64) -> LatencyRange {
    LatencyRange {
        min: Duration::from_secs_f64(min),
        max: Duration::from_secs_f64(max),
    }
}

/// How to configure the gateway under test; becomes its TOML file.
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    pub threads: u32,
    pub max_concurrent: u64,
    pub redis_url: Option<String>,
    /// First poll after submit and the interval after it (seconds).
    pub first_check_s: f64,
    pub interval_s: f64,
    pub max_requests_per_second: f64,
    /// Whether the `[poll]` table above is written at all: without it the gateway polls as it
    /// does for a real provider whose solve times it has to learn.
    pub poll_table: bool,
    /// More top-level `key = value` lines.
    pub top: String,
    /// More tables (`[lifetimes]`, `[[pools]]`).
    pub tables: String,
}

impl GatewaySpec {
    pub fn new(threads: u32, first_check_s: f64, interval_s: f64) -> Self {
        Self {
            threads,
            max_concurrent: 20_000,
            redis_url: None,
            first_check_s,
            interval_s,
            max_requests_per_second: 10.0,
            poll_table: true,
            top: String::new(),
            tables: String::new(),
        }
    }

    /// The gateway as a user with a real provider configures it: the plan's threads and
    /// nothing about polling, so it knows nothing of the simulator's solve times.
    pub fn real_provider(threads: u32) -> Self {
        Self {
            poll_table: false,
            ..Self::new(threads, 0.0, 0.0)
        }
    }

    fn toml(&self, sim: SocketAddr) -> String {
        let redis = match &self.redis_url {
            Some(url) => format!("redis_url = \"{url}\"\n"),
            None => String::new(),
        };
        let poll = if self.poll_table {
            format!(
                "[poll]\nfirst_check_s = {}\ninterval_s = {}\nmax_requests_per_second = {}\n",
                self.first_check_s, self.interval_s, self.max_requests_per_second
            )
        } else {
            String::new()
        };
        // Benchmarks measure a warm process: no slow start (`warmup_s`).
        format!(
            "provider = \"captchaai\"\nprovider_url = \"http://{sim}\"\nlisten = \"127.0.0.1:0\"\n\
             threads = {}\nmax_concurrent = {}\nwarmup_s = 0\n{redis}{}\n{poll}\n{}\n",
            self.threads, self.max_concurrent, self.top, self.tables
        )
    }
}

/// A config file in the temp directory, removed on drop.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn write(text: &str) -> Result<ConfigFile, BenchError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "captcha-gateway-bench-{}-{}.toml",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, text)?;
        Ok(ConfigFile(path))
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

enum Running {
    InProcess(Gateway),
    Process(Child),
}

/// A gateway under test; `base` is its `http://addr`.
pub struct GatewayUnderTest {
    pub base: String,
    running: Running,
    _config: ConfigFile,
}

impl GatewayUnderTest {
    /// A gateway inside the bench process: for scenarios where CPU is not what is measured.
    pub async fn in_process(spec: &GatewaySpec, sim: &SimServer) -> Result<Self, BenchError> {
        let config = ConfigFile::write(&spec.toml(sim.addr))?;
        let args = ServeArgs {
            config: Some(config.0.clone()),
            ..ServeArgs::default()
        };
        let env = |name: &str| (name == "CAPTCHAAI_API_KEY").then(|| KEY.to_owned());
        let settings = crate::config::load_serve(&args, &env)
            .map_err(|e| BenchError::Setup(format!("gateway settings: {e}")))?;
        let gateway = Gateway::start(settings, Shutdown::new())
            .await
            .map_err(|e| BenchError::Setup(format!("gateway: {e}")))?;
        tracing::info!(addr = %gateway.addr, "gateway under test, in process");
        Ok(Self {
            base: format!("http://{}", gateway.addr),
            running: Running::InProcess(gateway),
            _config: config,
        })
    }

    /// `captcha-gateway serve` as its own process (this same binary), so its CPU time and peak
    /// memory are its own. Its address is the first line it prints.
    pub async fn process(spec: &GatewaySpec, sim: &SimServer) -> Result<Self, BenchError> {
        let config = ConfigFile::write(&spec.toml(sim.addr))?;
        let (child, line) = spawn_self(&["serve"], &config, "gateway").await?;
        let base = line
            .trim()
            .strip_prefix("captcha-gateway listening on ")
            .ok_or_else(|| BenchError::Setup(format!("the gateway did not start: {line:?}")))?
            .to_owned();
        tracing::info!(%base, "gateway under test, own process");
        Ok(Self {
            base,
            running: Running::Process(child),
            _config: config,
        })
    }

    /// The gateway's process id (the bench's own when in process).
    pub fn pid(&self) -> u32 {
        match &self.running {
            Running::InProcess(_) => std::process::id(),
            Running::Process(child) => child.id().unwrap_or(0),
        }
    }

    /// Stops the gateway: cancels an in-process one, kills a process.
    pub async fn stop(self) {
        match self.running {
            Running::InProcess(gateway) => gateway.shutdown.token.cancel(),
            Running::Process(mut child) => {
                let _ = child.kill().await;
            }
        }
    }
}

/// `captcha-gateway worker` as its own process (this same binary), configured from `spec` like
/// a gateway (`spec.redis_url` must be set): it consumes the default queue.
pub struct WorkerUnderTest {
    child: Child,
    _config: ConfigFile,
    /// Its consumer name, as it printed it.
    pub consumer: String,
}

impl WorkerUnderTest {
    pub async fn process(
        spec: &GatewaySpec,
        sim: &SimServer,
        concurrency: u32,
    ) -> Result<Self, BenchError> {
        Self::process_with(spec, sim, concurrency, &[]).await
    }

    /// The same with `extra` flags (`--seed-queue`, say).
    pub async fn process_with(
        spec: &GatewaySpec,
        sim: &SimServer,
        concurrency: u32,
        extra: &[&str],
    ) -> Result<Self, BenchError> {
        let config = ConfigFile::write(&spec.toml(sim.addr))?;
        let concurrency = concurrency.to_string();
        let mut args = vec![
            "worker",
            "--listen",
            "127.0.0.1:0",
            "--concurrency",
            &concurrency,
        ];
        args.extend_from_slice(extra);
        let (child, line) = spawn_self(&args, &config, "worker").await?;
        // "captcha-gateway worker <consumer> listening on ..."
        let Some(consumer) = line
            .strip_prefix("captcha-gateway worker ")
            .and_then(|rest| rest.split_whitespace().next())
        else {
            return Err(BenchError::Setup(format!(
                "the worker did not start: {line:?}"
            )));
        };
        Ok(Self {
            consumer: consumer.to_owned(),
            child,
            _config: config,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// This same binary with `args`, then `--config <config>`, as its own process with the provider
/// key of the bench; returns it and the first line it printed (its address), and keeps reading
/// the rest so it never blocks on a full pipe.
async fn spawn_self(
    args: &[&str],
    config: &ConfigFile,
    what: &str,
) -> Result<(Child, String), BenchError> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(args)
        .arg("--config")
        .arg(&config.0)
        .env_remove("REDIS_URL")
        .env_remove("CAPTCHA_GATEWAY_CONFIG")
        .env_remove("CAPTCHA_GATEWAY_QUEUE")
        .env("CAPTCHAAI_API_KEY", KEY)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .map_err(|_| BenchError::Setup(format!("the {what} did not start within 30 s")))??
        .unwrap_or_default();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, line))
}

/// A `redis-server` on a free loopback port, without persistence, killed on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    /// Its working directory (an append-only file, when asked for), removed with it.
    dir: std::path::PathBuf,
}

impl RedisServer {
    /// Starts one, retrying when another process takes the free port first.
    pub async fn start() -> Result<RedisServer, BenchError> {
        Self::start_with(&["--appendonly", "no"]).await
    }

    /// Starts one with more `redis-server` arguments (e.g. an append-only file synced on
    /// every write, or `--replicaof`).
    pub async fn start_with(extra: &[&str]) -> Result<RedisServer, BenchError> {
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let dir = std::env::temp_dir().join(format!(
                "captcha-gateway-bench-{}-{port}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir)?;
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--loglevel", "warning"])
                .arg("--dir")
                .arg(&dir)
                .args(extra)
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| BenchError::Setup(format!("redis-server: {e} (is it installed?)")))?;
            let mut server = RedisServer { child, port, dir };
            for _ in 0..250 {
                if ping(port).await {
                    return Ok(server);
                }
                if matches!(server.child.try_wait(), Ok(Some(_))) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = server.child.kill().await;
        }
        Err(BenchError::Setup("redis-server would not start".into()))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").await.is_ok()
        && s.read_exact(&mut buf).await.is_ok()
        && &buf == b"+PONG\r\n"
}

/// CPU seconds (user + system, all threads) process `pid` has used, from `/proc/PID/stat`.
/// Assumes the usual 100 clock ticks per second.
pub fn cpu_seconds(pid: u32) -> f64 {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_cpu_seconds(&stat),
        Err(_) => f64::NAN,
    }
}

/// CPU seconds the threads of this process whose name starts with `name` have used (from
/// `/proc/self/task/*/stat`; threads that already ended are not counted).
pub fn threads_cpu_seconds(name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return f64::NAN;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter(|stat| {
            stat.split_once('(')
                .is_some_and(|(_, rest)| rest.starts_with(name))
        })
        .map(|stat| stat_cpu_seconds(&stat))
        .sum()
}

/// The processes of process group `pgid` (a server and the workers it forked), from the group
/// field of each `/proc/PID/stat`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .filter_map(Result::ok)
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat_group(&stat) == Some(pgid))
        })
        .collect()
}

/// CPU seconds the live processes of group `pgid` have used, summed ([`cpu_seconds`] of each).
pub fn group_cpu_seconds(pgid: u32) -> f64 {
    group_members(pgid).into_iter().map(cpu_seconds).sum()
}

/// The process group field of a `/proc/PID/stat` line.
fn stat_group(stat: &str) -> Option<u32> {
    // After the command name: state, parent, group.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// User + system CPU seconds from a `stat` line of `/proc` (a process's or a thread's).
fn stat_cpu_seconds(stat: &str) -> f64 {
    // The command name may contain spaces; the fields after its closing parenthesis do not.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// Peak resident memory of process `pid` in MB (`VmHWM`).
pub fn peak_rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Calls per command since the server started (`INFO commandstats`), commands inside scripts
/// included (Redis counts them too), keyed by lower-case name (`evalsha`, `xpending`, ...).
pub async fn command_calls(
    url: &str,
) -> Result<std::collections::BTreeMap<String, u64>, BenchError> {
    let client = redis::Client::open(url)?;
    let mut con = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut con)
        .await?;
    Ok(info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect())
}
