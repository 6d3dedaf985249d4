//! The real binary as a long-running process (`serve` or `worker`), described by a [`Launch`]
//! and controlled through the [`GatewayProcess`] it starts.

use std::io::Write;
use std::net::SocketAddr;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::task::JoinHandle;

use crate::support::KEY;

/// Bound on a process printing its address, and on its exit after [`GatewayProcess::stop`]'s
/// SIGTERM: only ends a hang.
const HANG: Duration = Duration::from_secs(60);

/// Where a process's stderr (its log) goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stderr {
    /// The test's own stderr, which the test runner shows for a failing test.
    Inherit,
    /// Nowhere.
    Null,
    /// A temporary file that lives as long as the process, read with [`GatewayProcess::log`].
    LogFile,
    /// A pipe for the test to read: [`GatewayProcess::take_stderr`].
    Piped,
}

/// One line a process printed, as a [`Transcript`] keeps it.
#[derive(Clone, Debug)]
pub struct OutputLine {
    /// The name the process was captured under ([`Launch::capture`]).
    pub process: String,
    /// Printed on stdout (else on stderr).
    pub stdout: bool,
    /// The line, without its end of line.
    pub text: String,
}

/// Every line that captured processes print after their address, kept for the test to search.
#[derive(Clone, Default)]
pub struct Transcript(Arc<Mutex<Vec<OutputLine>>>);

impl Transcript {
    /// The lines so far.
    pub fn lines(&self) -> Vec<OutputLine> {
        self.0.lock().unwrap().clone()
    }

    /// Copies every line of `reader` until its end; the task ends there.
    fn drain(
        &self,
        reader: impl AsyncRead + Unpin + Send + 'static,
        process: String,
        stdout: bool,
    ) -> JoinHandle<()> {
        let into = self.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(text)) = lines.next_line().await {
                into.0.lock().unwrap().push(OutputLine {
                    process: process.clone(),
                    stdout,
                    text,
                });
            }
        })
    }
}

/// The config most process tests run: the simulator at `sim` as a captchaai account (the key
/// from the environment, see [`serve`](Self::serve)), a shared Redis, no slow start, a
/// concurrency cap no test reaches, and fast polling.
#[derive(Clone, Debug)]
pub struct SimAccountConfig {
    sim: SocketAddr,
    redis_url: String,
    threads: u32,
    first_check_s: f64,
    interval_s: f64,
    top_level: String,
    poll_options: String,
    sections: String,
}

impl SimAccountConfig {
    /// 2000 threads, a first check after 50 ms, then one every 50 ms.
    pub fn new(sim: SocketAddr, redis_url: &str) -> Self {
        Self {
            sim,
            redis_url: redis_url.to_owned(),
            threads: 2000,
            first_check_s: 0.05,
            interval_s: 0.05,
            top_level: String::new(),
            poll_options: String::new(),
            sections: String::new(),
        }
    }

    /// The account's `threads`.
    pub fn threads(mut self, threads: u32) -> Self {
        self.threads = threads;
        self
    }

    /// The poller's interval: its check budget per task must cover the simulator's solve time.
    pub fn poll_interval(mut self, interval_s: f64) -> Self {
        self.interval_s = interval_s;
        self
    }

    /// The poller's first check and interval.
    pub fn poll(mut self, first_check_s: f64, interval_s: f64) -> Self {
        self.first_check_s = first_check_s;
        self.interval_s = interval_s;
        self
    }

    /// Top-level TOML lines, added after the defaults.
    pub fn top_level(mut self, toml: &str) -> Self {
        self.top_level.push_str(toml);
        self.top_level.push('\n');
        self
    }

    /// Lines for the `[poll]` table (`max_polls_per_task = 60`).
    pub fn poll_option(mut self, toml: &str) -> Self {
        self.poll_options.push_str(toml);
        self.poll_options.push('\n');
        self
    }

    /// Tables (`[lifetimes]`, `[[pools]]`...), added at the end.
    pub fn section(mut self, toml: &str) -> Self {
        self.sections.push_str(toml);
        self.sections.push('\n');
        self
    }

    /// The TOML text.
    pub fn toml(&self) -> String {
        format!(
            "provider = \"captchaai\"\nprovider_url = \"http://{sim}\"\nlisten = \"127.0.0.1:0\"\n\
             threads = {threads}\nmax_concurrent = 20000\nwarmup_s = 0\nredis_url = \"{redis}\"\n\
             {top_level}\n[poll]\nfirst_check_s = {first}\ninterval_s = {interval}\n\
             max_requests_per_second = 2000\n{poll_options}\n{sections}",
            sim = self.sim,
            threads = self.threads,
            redis = self.redis_url,
            top_level = self.top_level,
            first = self.first_check_s,
            interval = self.interval_s,
            poll_options = self.poll_options,
            sections = self.sections,
        )
    }

    /// `serve` on this config with the test's provider key and warnings logged.
    pub fn serve(&self) -> Launch {
        Launch::serve(self.toml()).provider_key(KEY).log("warn")
    }
}

/// Everything about starting one process of the real binary: the subcommand and its arguments,
/// the config file's text, a clean environment plus what is set here, a wrapper command, and
/// where the output goes. Cloning it starts the same process again (a restart).
#[derive(Clone)]
pub struct Launch {
    subcommand: &'static str,
    args: Vec<String>,
    config: String,
    env: Vec<(String, String)>,
    wrapper: Vec<String>,
    stderr: Stderr,
    capture: Option<(Transcript, String)>,
    keep: Vec<Arc<tempfile::NamedTempFile>>,
}

impl Launch {
    /// `serve --config <file>`, the file holding `config`.
    pub fn serve(config: impl Into<String>) -> Launch {
        Self::new("serve", config.into(), Vec::new())
    }

    /// `worker --config <file> --listen 127.0.0.1:0`, the file holding `config`.
    pub fn worker(config: impl Into<String>) -> Launch {
        let listen = ["--listen", "127.0.0.1:0"].map(String::from).to_vec();
        Self::new("worker", config.into(), listen)
    }

    fn new(subcommand: &'static str, config: String, args: Vec<String>) -> Launch {
        Launch {
            subcommand,
            args,
            config,
            env: Vec::new(),
            wrapper: Vec::new(),
            stderr: Stderr::Inherit,
            capture: None,
            keep: Vec::new(),
        }
    }

    /// More command-line arguments, after the config's.
    pub fn args(mut self, args: &[&str]) -> Launch {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// One environment variable (the environment starts empty).
    pub fn env(mut self, name: &str, value: &str) -> Launch {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// `CAPTCHAAI_API_KEY`.
    pub fn provider_key(self, key: &str) -> Launch {
        self.env("CAPTCHAAI_API_KEY", key)
    }

    /// `RUST_LOG`.
    pub fn log(self, filter: &str) -> Launch {
        self.env("RUST_LOG", filter)
    }

    /// Runs the binary through `wrapper`, a command that execs its last argument (e.g.
    /// `/usr/bin/env LD_PRELOAD=... FAKETIME=+5s`), so the process is still the gateway itself.
    pub fn wrapper(mut self, wrapper: &[&str]) -> Launch {
        self.wrapper = wrapper.iter().map(|w| w.to_string()).collect();
        self
    }

    /// Where stderr goes ([`Stderr::Inherit`] unless set).
    pub fn stderr(mut self, stderr: Stderr) -> Launch {
        self.stderr = stderr;
        self
    }

    /// Every line the process prints after its address, on either stream, into `transcript`
    /// under `name`. Stderr is read from the start, so a chatty log never fills its pipe.
    pub fn capture(mut self, transcript: &Transcript, name: &str) -> Launch {
        self.capture = Some((transcript.clone(), name.to_owned()));
        self
    }

    /// Keeps `file` (one the config names, such as a key file) until the process is dropped.
    pub fn keep_file(mut self, file: tempfile::NamedTempFile) -> Launch {
        self.keep.push(Arc::new(file));
        self
    }

    /// Writes the config, starts the process and returns once it has printed its address.
    pub async fn start(self) -> GatewayProcess {
        let mut config = tempfile::NamedTempFile::new().unwrap();
        config.write_all(self.config.as_bytes()).unwrap();
        let binary = env!("CARGO_BIN_EXE_captcha-gateway").to_owned();
        let (program, mut args) = match self.wrapper.split_first() {
            Some((program, args)) => (program.clone(), [args, &[binary]].concat()),
            None => (binary, Vec::new()),
        };
        args.extend([self.subcommand.into(), "--config".into()]);
        args.push(config.path().to_str().unwrap().to_owned());
        args.extend(self.args.iter().cloned());
        let mut log = None;
        let stderr = match self.stderr {
            _ if self.capture.is_some() => Stdio::piped(),
            Stderr::Inherit => Stdio::inherit(),
            Stderr::Null => Stdio::null(),
            Stderr::Piped => Stdio::piped(),
            Stderr::LogFile => {
                let file = tempfile::NamedTempFile::new().unwrap();
                let stdio = Stdio::from(file.reopen().unwrap());
                log = Some(file);
                stdio
            }
        };
        let mut child = Command::new(program)
            .args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // A test that fails once in many runs needs the gateways' whole story (README).
            .envs(log_filter().map(|v| ("RUST_LOG".to_string(), v)))
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("the gateway binary starts");
        let mut drains = Vec::new();
        if let Some((transcript, name)) = &self.capture {
            let stderr = child.stderr.take().unwrap();
            drains.push(transcript.drain(stderr, name.clone(), false));
        }
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let announced = tokio::time::timeout(HANG, stdout.next_line())
            .await
            .expect("the process announces its address")
            .unwrap()
            .unwrap_or_default();
        let (who, base) = announced
            .trim()
            .split_once(" listening on ")
            .unwrap_or_else(|| panic!("the {} did not start: {announced:?}", self.subcommand));
        let consumer = match self.subcommand {
            "worker" => who
                .strip_prefix("captcha-gateway worker ")
                .map(str::to_owned),
            _ => (who == "captcha-gateway").then(String::new),
        }
        .unwrap_or_else(|| panic!("the {} did not start: {announced:?}", self.subcommand));
        let base = base.to_owned();
        let stdout = match &self.capture {
            Some((transcript, name)) => {
                drains.push(transcript.drain(stdout.into_inner(), name.clone(), true));
                None
            }
            None => Some(stdout),
        };
        GatewayProcess {
            child,
            base,
            announcement: announced,
            consumer,
            stdout,
            log,
            drains,
            _config: config,
            _kept: self.keep,
        }
    }
}

/// A running `serve` or `worker`, killed when dropped.
pub struct GatewayProcess {
    child: Child,
    /// `http://127.0.0.1:port`: the API of a `serve`, the probes and `/metrics` of a `worker`.
    pub base: String,
    announcement: String,
    consumer: String,
    stdout: Option<Lines<BufReader<ChildStdout>>>,
    log: Option<tempfile::NamedTempFile>,
    drains: Vec<JoinHandle<()>>,
    _config: tempfile::NamedTempFile,
    _kept: Vec<Arc<tempfile::NamedTempFile>>,
}

impl GatewayProcess {
    /// A `serve` on [`SimAccountConfig`] with `extra_toml` top-level lines and the poller's
    /// `poll_interval_s`, its log on the test's stderr.
    pub async fn start(
        sim: &crate::support::fleet::SimServer,
        redis_url: &str,
        extra_toml: &str,
        poll_interval_s: f64,
    ) -> GatewayProcess {
        SimAccountConfig::new(sim.addr, redis_url)
            .top_level(extra_toml)
            .poll_interval(poll_interval_s)
            .serve()
            .start()
            .await
    }

    /// `path` on [`base`](Self::base).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `127.0.0.1:port`: [`base`](Self::base) without its scheme, for raw connections.
    pub fn addr(&self) -> &str {
        let (_, addr) = self.base.split_once("://").expect("a base URL");
        addr
    }

    /// The first line it printed: `captcha-gateway ... listening on <base>`.
    pub fn announcement(&self) -> &str {
        &self.announcement
    }

    /// A worker's consumer name, from its announcement.
    pub fn consumer(&self) -> &str {
        assert!(
            !self.consumer.is_empty(),
            "only a worker has a consumer name"
        );
        &self.consumer
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the process is running")
    }

    /// Sends `signal` (`STOP`, `CONT`, `TERM`...) with the shell's builtin `kill`: no extra
    /// package on a fresh machine.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid();
        let sent = std::process::Command::new("sh")
            .args(["-c", &format!("kill -{signal} {pid}")])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// SIGTERM, as an orchestrator stops it.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// `kill -9`, returning once it is gone.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("kill -9 of the process");
    }

    /// Waits for the process to end.
    pub async fn exited(&mut self) -> ExitStatus {
        self.child.wait().await.unwrap()
    }

    /// Whether it is still running (not ended, whatever the reason).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then waits for the exit and, for a captured process, for both streams to end:
    /// what it logs on its way out is in the transcript after this.
    pub async fn stop(mut self) -> ExitStatus {
        let pid = self.pid();
        self.terminate();
        let status = tokio::time::timeout(HANG, self.exited())
            .await
            .unwrap_or_else(|_| panic!("process {pid} did not exit on SIGTERM"));
        for drain in std::mem::take(&mut self.drains) {
            drain.await.expect("the output reader ends at end of file");
        }
        status
    }

    /// Its log so far ([`Stderr::LogFile`]).
    pub fn log(&self) -> String {
        let file = self.log.as_ref().expect("launched with Stderr::LogFile");
        std::fs::read_to_string(file.path()).expect("the log file reads")
    }

    /// The next line it prints on stdout after its address (empty at the end of the stream).
    pub async fn stdout_line(&mut self) -> String {
        let stdout = self
            .stdout
            .as_mut()
            .expect("stdout is not captured or taken");
        stdout.next_line().await.unwrap().unwrap_or_default()
    }

    /// Reads the rest of stdout in the background, so the process never writes to a full or
    /// closed pipe.
    pub fn drain_stdout(&mut self) {
        let mut stdout = self.stdout.take().expect("stdout is not captured or taken");
        tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
    }

    /// Its stderr ([`Stderr::Piped`]), for the test to read.
    pub fn take_stderr(&mut self) -> ChildStderr {
        self.child
            .stderr
            .take()
            .expect("launched with Stderr::Piped")
    }

    /// A memory figure of `/proc/<pid>/status` (`field` such as `VmRSS:` or `VmHWM:`), in kB.
    pub fn memory_kb(&self, field: &str) -> u64 {
        let pid = self.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
    }

    /// One metric of its `/metrics`, summed over label sets.
    pub async fn metric(&self, name: &str) -> u64 {
        crate::support::metric_sum(&reqwest::Client::new(), &self.base, name).await
    }
}

/// `CAPTCHA_GATEWAY_TEST_LOG`: a `RUST_LOG` filter for every gateway a test launches, whose
/// promise tests then show whole logs on failure instead of their tails.
pub fn log_filter() -> Option<String> {
    std::env::var("CAPTCHA_GATEWAY_TEST_LOG").ok()
}
