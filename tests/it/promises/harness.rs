//! Three `captcha-gateway serve` processes sharing one Redis, the simulator as their provider,
//! and callers spread over whichever gateways are live, each caller's handout recorded for the
//! history check.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use captcha_gateway::model::{Kind, now_ms};
use captcha_gateway::sim::{LatencyRange, SimSettings};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::support::KEY;
use crate::support::eventually::eventually;
use crate::support::fleet::{SimServer, client};
use crate::support::gateway::{GatewayProcess, SimAccountConfig, Stderr};

/// The lease every gateway of a scenario runs with: short, so a fault of two leases is seconds.
pub const LEASE_S: f64 = 3.0;
/// Each caller's `timeout_s`: far beyond any fault plus a solve, so a caller answered with a
/// timeout was stranded, not slow.
pub const CALLER_TIMEOUT_S: f64 = 25.0;
/// What HTTP adds to a caller's deadline before the test calls it unanswered.
pub const HTTP_SLACK: Duration = Duration::from_secs(3);
/// Pool size of each pooled target.
pub const POOL_SIZE: u64 = 4;
/// The gateways' `min_remaining_s` (its default): life an answer must have left when handed out.
pub const MIN_REMAINING_S: u64 = 10;
/// The life of every answer of the scenarios (reCAPTCHA v2 and Turnstile, at the simulator and
/// in the gateways): just above `min_remaining`, so an answer handed out more than
/// `LIFETIME_S - MIN_REMAINING_S` seconds after it was ready breaks the history check, where
/// the real lifetimes (minutes) would let any stale hand-out of a short scenario pass.
pub const LIFETIME_S: u64 = 20;
/// Bound on waits for the rig itself (a gateway exiting, load building up): only ends a hang.
pub const SOON: Duration = Duration::from_secs(30);

/// The targets callers ask for, by index: two with configured pools, two without.
pub fn target(t: usize) -> Value {
    match t % 4 {
        0 => {
            json!({"kind": "recaptcha_v2", "sitekey": "6Le-promise-pool", "pageurl": "https://example.com/login"})
        }
        1 => {
            json!({"kind": "turnstile", "sitekey": "0x4-promise-pool", "pageurl": "https://example.com/signup"})
        }
        2 => {
            json!({"kind": "recaptcha_v2", "sitekey": "6Le-promise-plain", "pageurl": "https://example.com/login"})
        }
        _ => {
            json!({"kind": "turnstile", "sitekey": "0x4-promise-plain", "pageurl": "https://example.com/checkout"})
        }
    }
}

/// `[[pools]]` for targets 0 and 1.
fn pools_toml() -> String {
    format!(
        "[[pools]]\nkind = \"recaptcha_v2\"\nsitekey = \"6Le-promise-pool\"\npageurl = \"https://example.com/login\"\nsize = {POOL_SIZE}\n\n\
         [[pools]]\nkind = \"turnstile\"\nsitekey = \"0x4-promise-pool\"\npageurl = \"https://example.com/signup\"\nsize = {POOL_SIZE}\n"
    )
}

/// Upstream tasks the configured pools may hold at any one time.
pub const POOLED_TASKS: u64 = 2 * POOL_SIZE;

/// What a caller got.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A token (`source`: pool, solved, shared).
    Answered { token: String, source: String },
    /// A clear refusal: an HTTP error other than a timeout, with its code.
    Error { status: u16, code: String },
    /// The gateway said 504, or said nothing by the deadline plus [`HTTP_SLACK`].
    TimedOut { detail: String },
    /// The connection failed or closed (a gateway stopped or killed under the caller).
    Dropped { detail: String },
}

/// One caller's request and what it got.
#[derive(Debug, Clone)]
pub struct Handout {
    pub caller: usize,
    pub gateway: usize,
    pub kind: String,
    pub timeout_s: f64,
    pub ended_ms: u64,
    pub took: Duration,
    pub outcome: Outcome,
}

/// The simulator, the gateways, and which of them callers may pick.
pub struct Fleet {
    pub sim: SimServer,
    pub redis_url: String,
    pub http: reqwest::Client,
    pub gateways: Vec<Option<GatewayProcess>>,
    live: Arc<Mutex<Vec<(usize, String)>>>,
    pub pools: bool,
    extra_toml: String,
    /// When the fleet started: pools restock once per answer's usable life from then.
    pub started: Instant,
    /// When each gateway the scenario stopped or killed was signalled (Unix ms): only its
    /// callers that ended after that may have an error.
    pub signalled: Mutex<HashMap<usize, u64>>,
    /// How long every answer lives ([`LIFETIME_S`] unless the scenario says otherwise).
    pub lifetime_s: u64,
}

impl Fleet {
    /// A simulator solving within `latency` and three gateways on `redis_url` (extra top-level
    /// TOML in `extra_toml`).
    pub async fn start(redis_url: &str, latency: LatencyRange, extra_toml: &str) -> Fleet {
        Self::start_wrapped(redis_url, latency, extra_toml, true, &[&[], &[], &[]]).await
    }

    /// [`start`](Self::start) with or without the configured pools, each gateway run through its
    /// wrapper command (empty: none).
    pub async fn start_wrapped(
        redis_url: &str,
        latency: LatencyRange,
        extra_toml: &str,
        pools: bool,
        wrappers: &[&[&str]],
    ) -> Fleet {
        Self::start_lived(redis_url, latency, extra_toml, pools, wrappers, LIFETIME_S).await
    }

    /// [`start_wrapped`](Self::start_wrapped) with answers living `lifetime_s` (a scenario whose
    /// fault outlasts [`LIFETIME_S`]'s usable life on purpose).
    pub async fn start_lived(
        redis_url: &str,
        latency: LatencyRange,
        extra_toml: &str,
        pools: bool,
        wrappers: &[&[&str]],
        lifetime_s: u64,
    ) -> Fleet {
        let mut settings = SimSettings {
            threads: 5000,
            ..SimSettings::default()
        };
        for kind in [Kind::RecaptchaV2, Kind::Turnstile] {
            settings
                .lifetimes
                .insert(kind, Duration::from_secs(lifetime_s));
        }
        let sim = SimServer::with_settings(settings, latency).await;
        let mut fleet = Fleet {
            sim,
            redis_url: redis_url.to_owned(),
            http: client(),
            gateways: Vec::new(),
            live: Arc::default(),
            pools,
            extra_toml: extra_toml.to_owned(),
            started: Instant::now(),
            signalled: Mutex::default(),
            lifetime_s,
        };
        for wrapper in wrappers {
            fleet.add(wrapper).await;
        }
        fleet
    }

    /// Starts one more gateway and lets callers pick it. Returns its index.
    pub async fn add(&mut self, wrapper: &[&str]) -> usize {
        let lifetimes = format!(
            "[lifetimes]\nrecaptcha_v2 = {lifetime}\nturnstile = {lifetime}\n",
            lifetime = self.lifetime_s
        );
        let mut config = SimAccountConfig::new(self.sim.addr, &self.redis_url)
            .top_level(&format!(
                "redis_lease_s = {LEASE_S}\nmin_remaining_s = {MIN_REMAINING_S}\n{}",
                self.extra_toml
            ))
            .poll(0.25, 0.25)
            .poll_option("max_polls_per_task = 60")
            .section(&lifetimes);
        if self.pools {
            config = config.section(&pools_toml());
        }
        let gateway = config
            .serve()
            // libfaketime shifts wall-clock time only: tokio's timers run on the monotonic clock.
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .wrapper(wrapper)
            .stderr(Stderr::LogFile)
            .start()
            .await;
        let index = self.gateways.len();
        self.live
            .lock()
            .unwrap()
            .push((index, gateway.base.clone()));
        self.gateways.push(Some(gateway));
        index
    }

    fn retire(&self, i: usize) {
        self.live.lock().unwrap().retain(|(g, _)| *g != i);
    }

    /// SIGTERM to gateway `i` (callers stop picking it first), then waits for it to exit.
    pub async fn terminate(&mut self, i: usize) -> std::process::ExitStatus {
        self.retire(i);
        let mut gw = self.gateways[i].take().expect("a running gateway");
        self.signalled.lock().unwrap().insert(i, now_ms());
        gw.terminate();
        tokio::time::timeout(SOON, gw.exited())
            .await
            .unwrap_or_else(|_| {
                panic!("gateway {i} did not exit after SIGTERM; log:\n{}", gw.log())
            })
    }

    /// `kill -9` of gateway `i`.
    pub async fn kill(&mut self, i: usize) {
        self.retire(i);
        let mut gw = self.gateways[i].take().expect("a running gateway");
        self.signalled.lock().unwrap().insert(i, now_ms());
        gw.kill().await;
    }

    /// The sum of a metric over every live gateway's `/metrics` (series holding every one of
    /// `labels`): what the fleet did, e.g. pool hits, while a fault lasted.
    pub async fn metric(&self, name: &str, labels: &[&str]) -> u64 {
        let bases: Vec<String> = self
            .live
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect();
        let mut sum = 0;
        for base in bases {
            sum += crate::support::metric_sum_where(&self.http, &base, name, labels).await;
        }
        sum
    }

    /// Answers handed out from pools so far, over the live gateways.
    pub async fn pool_hits(&self) -> u64 {
        self.metric("captcha_gateway_answers_total", &["source=\"pool\""])
            .await
    }

    /// The last `lines` lines of each running gateway's log (warnings and errors), for a
    /// failure message.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for (i, gw) in self.gateways.iter().enumerate() {
            if let Some(gw) = gw {
                let log = gw.log();
                let all: Vec<&str> = log.lines().collect();
                let lines = match crate::support::gateway::log_filter() {
                    Some(_) => all.len(),
                    None => lines,
                };
                let tail = all[all.len().saturating_sub(lines)..].join("\n");
                out.push_str(&format!(
                    "--- gateway {i} log (last {lines} lines):\n{tail}\n"
                ));
            }
        }
        out
    }

    /// Waits until the simulator has accepted `n` upstream tasks: load is running.
    pub async fn tasks_started(&self, n: u64) {
        eventually(SOON, &format!("{n} upstream tasks started"), || async {
            self.submits() >= n
        })
        .await;
    }

    /// Upstream tasks the simulator has accepted so far.
    pub fn submits(&self) -> u64 {
        self.sim.sim.stats().submits
    }

    /// Callers `callers` (their numbers also pick the target, `caller % 4`) on the live gateways,
    /// round-robin by caller number.
    pub fn wave(&self, callers: std::ops::Range<usize>) -> Vec<JoinHandle<Handout>> {
        callers
            .map(|c| self.caller(c, target(c), None, CALLER_TIMEOUT_S))
            .collect()
    }

    /// One caller asking for `body` with `timeout_s`, on gateway `on` or else on a live one
    /// picked by number.
    pub fn caller(
        &self,
        caller: usize,
        body: Value,
        on: Option<usize>,
        timeout_s: f64,
    ) -> JoinHandle<Handout> {
        let (gateway, base) = {
            let live = self.live.lock().unwrap();
            assert!(!live.is_empty(), "no live gateway for caller {caller}");
            match on {
                Some(g) => live
                    .iter()
                    .find(|(i, _)| *i == g)
                    .cloned()
                    .expect("the gateway asked for is live"),
                None => live[caller % live.len()].clone(),
            }
        };
        let http = self.http.clone();
        tokio::spawn(async move { solve(&http, caller, gateway, &base, body, timeout_s).await })
    }
}

async fn solve(
    http: &reqwest::Client,
    caller: usize,
    gateway: usize,
    base: &str,
    mut body: Value,
    timeout_s: f64,
) -> Handout {
    body["timeout_s"] = json!(timeout_s);
    let kind = body["kind"].as_str().unwrap_or_default().to_owned();
    let started = Instant::now();
    let sent = http
        .post(format!("{base}/v1/solve"))
        .bearer_auth(KEY)
        .timeout(Duration::from_secs_f64(timeout_s) + HTTP_SLACK)
        .json(&body)
        .send()
        .await;
    let outcome = match sent {
        Err(e) if e.is_timeout() => Outcome::TimedOut {
            detail: "no reply by the deadline".into(),
        },
        Err(e) => Outcome::Dropped {
            detail: e.to_string(),
        },
        Ok(res) => {
            let status = res.status().as_u16();
            match res.json::<Value>().await {
                Err(e) if e.is_timeout() => Outcome::TimedOut {
                    detail: "the body did not arrive by the deadline".into(),
                },
                Err(e) => Outcome::Dropped {
                    detail: format!("{status}: {e}"),
                },
                Ok(v) => match (status, v["token"].as_str()) {
                    (200, Some(token)) => Outcome::Answered {
                        token: token.to_owned(),
                        source: v["source"].as_str().unwrap_or_default().to_owned(),
                    },
                    (504, _) => Outcome::TimedOut {
                        detail: format!("504 {v}"),
                    },
                    _ => Outcome::Error {
                        status,
                        code: v["error"]["code"].as_str().unwrap_or("?").to_owned(),
                    },
                },
            }
        }
    };
    Handout {
        caller,
        gateway,
        kind,
        timeout_s,
        ended_ms: now_ms(),
        took: started.elapsed(),
        outcome,
    }
}

/// Awaits every caller.
pub async fn join(callers: Vec<JoinHandle<Handout>>) -> Vec<Handout> {
    let mut out = Vec::with_capacity(callers.len());
    for c in callers {
        out.push(c.await.expect("a caller task does not panic"));
    }
    out
}

/// Pooled answers on the server at `port`, over every target.
pub fn pooled_on(port: u16) -> usize {
    redis_cli(port, &["--scan", "--pattern", "cg:{t:*}:pool"])
        .lines()
        .map(|key| {
            redis_cli(port, &["zcard", key.trim()])
                .trim()
                .parse::<usize>()
                .unwrap_or(0)
        })
        .sum()
}

/// `redis-cli -p <port> <args>`'s output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}
