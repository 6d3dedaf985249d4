//! Gateway processes (the real binary) in front of one simulator, sharing a Redis: what a fleet
//! looks like on one machine.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use captcha_gateway::model::Kind;
use captcha_gateway::sim::{Clock, LatencyRange, SimSettings, Simulator};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::KEY;

/// A simulator served on a loopback port by this test process.
pub struct SimServer {
    pub sim: Arc<Simulator>,
    pub addr: SocketAddr,
}

impl SimServer {
    pub async fn start(latency: LatencyRange, threads: u32) -> SimServer {
        Self::with_settings(
            SimSettings {
                threads,
                ..SimSettings::default()
            },
            latency,
        )
        .await
    }

    /// A simulator with `settings`, every kind solving within `latency`.
    pub async fn with_settings(settings: SimSettings, latency: LatencyRange) -> SimServer {
        Self::with_clock(settings, latency, Clock::system()).await
    }

    /// A simulator with `threads` whose time stands still until the test moves it
    /// (`sim.clock().advance`): every task is ready 1 s of that time after its submit, so none
    /// ends before the test says, however slow the machine.
    pub async fn stalled(threads: u32) -> SimServer {
        let settings = SimSettings {
            threads,
            ..SimSettings::default()
        };
        let latency = LatencyRange::fixed(Duration::from_secs(1));
        Self::with_clock(
            settings,
            latency,
            Clock::manual(captcha_gateway::model::now_ms()),
        )
        .await
    }

    /// The simulator's verdict on `token` (`/verify`: valid, already used, expired or unknown).
    pub async fn verify(&self, http: &reqwest::Client, token: &str) -> serde_json::Value {
        super::verify_at(http, &format!("http://{}", self.addr), token).await
    }

    /// [`with_settings`](Self::with_settings) reading `clock`: on a [`Clock::manual`] no task is
    /// ready until the test moves it past the task's latency.
    pub async fn with_clock(
        mut settings: SimSettings,
        latency: LatencyRange,
        clock: Clock,
    ) -> SimServer {
        for kind in Kind::ALL {
            settings.latency.insert(kind, latency);
        }
        let sim = Simulator::with_clock(settings, clock);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(captcha_gateway::sim::serve(
            sim.clone(),
            listener,
            std::future::pending(),
        ));
        SimServer { sim, addr }
    }
}

/// The real binary as `serve --config <config>`, with a clean environment plus `env`, stdout
/// piped and stderr to `stderr`. Returns the process, its base URL (the first line it prints:
/// `captcha-gateway listening on <url>`) and the rest of its stdout.
pub async fn spawn_serve(
    config: &std::path::Path,
    env: &[(&str, &str)],
    stderr: Stdio,
) -> (Child, String, Lines<BufReader<ChildStdout>>) {
    spawn_serve_wrapped(&[], config, env, stderr).await
}

/// [`spawn_serve`] run through a wrapper command that execs the binary (e.g. `/usr/bin/env
/// LD_PRELOAD=... FAKETIME=+5s`), so the child is the gateway itself and dies on drop.
pub async fn spawn_serve_wrapped(
    wrapper: &[&str],
    config: &std::path::Path,
    env: &[(&str, &str)],
    stderr: Stdio,
) -> (Child, String, Lines<BufReader<ChildStdout>>) {
    let binary = env!("CARGO_BIN_EXE_captcha-gateway");
    let (program, args) = match wrapper.split_first() {
        Some((program, args)) => (*program, [args, &[binary]].concat()),
        None => (binary, Vec::new()),
    };
    let mut child = Command::new(program)
        .args(args)
        .args(["serve", "--config", config.to_str().unwrap()])
        .env_clear()
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("the gateway binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().unwrap_or_default();
    let base = line
        .trim()
        .strip_prefix("captcha-gateway listening on ")
        .unwrap_or_else(|| panic!("the gateway did not start: {line:?}"))
        .to_owned();
    (child, base, lines)
}

/// One `captcha-gateway serve` process.
pub struct GatewayProcess {
    child: Child,
    pub base: String,
    _config: tempfile::NamedTempFile,
}

impl GatewayProcess {
    /// Starts a gateway on the simulator and `redis_url`, with extra top-level TOML lines and
    /// the poller's interval (its 20-check budget must cover the simulator's solve time).
    pub async fn start(
        sim: &SimServer,
        redis_url: &str,
        extra_toml: &str,
        poll_interval_s: f64,
    ) -> GatewayProcess {
        Self::start_logging_to(
            sim,
            redis_url,
            extra_toml,
            poll_interval_s,
            Stdio::inherit(),
        )
        .await
    }

    /// [`start`](Self::start) with the process's log (stderr) sent to `log`.
    pub async fn start_logging_to(
        sim: &SimServer,
        redis_url: &str,
        extra_toml: &str,
        poll_interval_s: f64,
        log: Stdio,
    ) -> GatewayProcess {
        Self::start_with_threads(sim, redis_url, 2000, extra_toml, poll_interval_s, log).await
    }

    /// [`start_logging_to`](Self::start_logging_to) with the account's `threads`.
    pub async fn start_with_threads(
        sim: &SimServer,
        redis_url: &str,
        threads: u32,
        extra_toml: &str,
        poll_interval_s: f64,
        log: Stdio,
    ) -> GatewayProcess {
        use std::io::Write;
        let mut config = tempfile::NamedTempFile::new().unwrap();
        writeln!(
            config,
            "provider = \"captchaai\"\nprovider_url = \"http://{}\"\nlisten = \"127.0.0.1:0\"\nthreads = {threads}\n\
             max_concurrent = 20000\nwarmup_s = 0\nredis_url = \"{redis_url}\"\n{extra_toml}\n\
             [poll]\nfirst_check_s = 0.05\ninterval_s = {poll_interval_s}\nmax_requests_per_second = 2000\n",
            sim.addr
        )
        .unwrap();
        let env = [("CAPTCHAAI_API_KEY", KEY), ("RUST_LOG", "warn")];
        let (child, base, _) = spawn_serve(config.path(), &env, log).await;
        GatewayProcess {
            child,
            base,
            _config: config,
        }
    }

    /// Sends `signal` (`STOP`, `CONT`...) with the shell's builtin `kill`.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("still running");
        let sent = std::process::Command::new("sh")
            .args(["-c", &format!("kill -{signal} {pid}")])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// `kill -9`.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// SIGTERM, as an orchestrator stops it (the shell's builtin `kill`: no extra package).
    pub fn terminate(&self) {
        let pid = self.child.id().expect("still running");
        let sent = std::process::Command::new("sh")
            .args(["-c", &format!("kill -TERM {pid}")])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
    }

    /// Waits for the process to end.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        self.child.wait().await.unwrap()
    }
}

/// An HTTP client that keeps up with a thousand concurrent callers.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(2000)
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}
