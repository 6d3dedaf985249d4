//! Load-generation pieces shared by the scenarios: the HTTP client, the request bodies of one
//! target, a `/v1/solve` call that keeps what the report needs, latency percentiles, progress
//! bars, and checking handed-out tokens with the simulator the way a site would.
//!
//! Owns nothing long-lived: each scenario builds what it needs from these per run.

use std::time::Duration;

use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;
use serde_json::json;

use crate::model::{Kind, now_ms};
use crate::sim::{Simulator, Verdict};

/// The key every bench client sends: a loopback gateway without `--gateway-key` accepts any
/// 32-character key, and the simulator too.
pub const KEY: &str = "0123456789abcdef0123456789abcdef";

/// An HTTP/1.1 client with a connection pool big enough that load never waits for a
/// connection, and a timeout far above any scenario's solve time.
pub fn client(connections: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_secs(300))
        .tcp_nodelay(true)
        .build()
        .expect("a client with default TLS settings builds")
}

/// One reCAPTCHA v2 target, as callers and imports name it.
#[derive(Debug, Clone)]
pub struct TargetSpec {
    pub sitekey: String,
    pub pageurl: String,
}

impl TargetSpec {
    /// A target unique to this run, so nothing left in a shared Redis is reused.
    pub fn unique(name: &str) -> Self {
        Self {
            sitekey: format!("6Le-bench-{name}-{}", rand::random::<u32>()),
            pageurl: format!("https://{name}.bench.example/login"),
        }
    }

    /// The `/v1/solve` body.
    pub fn solve_body(&self) -> Bytes {
        Bytes::from(
            json!({"kind": "recaptcha_v2", "sitekey": self.sitekey, "pageurl": self.pageurl})
                .to_string(),
        )
    }

    /// The `in.php` query (JSON replies).
    pub fn in_query(&self) -> String {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("key", KEY)
            .append_pair("method", "userrecaptcha")
            .append_pair("googlekey", &self.sitekey)
            .append_pair("pageurl", &self.pageurl)
            .append_pair("json", "1")
            .finish()
    }

    /// The `[[pools]]` table of an auto-sized pool for this target.
    pub fn auto_pool_toml(&self, max: u32) -> String {
        format!(
            "[[pools]]\nkind = \"recaptcha_v2\"\nsitekey = \"{}\"\npageurl = \"{}\"\nsize = \"auto\"\nmin = 0\nmax = {max}\n",
            self.sitekey, self.pageurl
        )
    }
}

/// What the report keeps of a `/v1/solve` answer.
#[derive(Debug, Clone, Deserialize)]
pub struct Solved {
    pub token: String,
    pub source: String,
    /// The upstream task that produced the token (none for a pool import).
    #[serde(default)]
    pub task_id: Option<String>,
}

/// One `/v1/solve`; `Err` carries the status and body of anything but a 200 with a token.
pub async fn solve(client: &reqwest::Client, base: &str, body: Bytes) -> Result<Solved, String> {
    let res = client
        .post(format!("{base}/v1/solve"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("request failed: {}", e.without_url()))?;
    let status = res.status();
    let bytes = res.bytes().await.map_err(|e| e.without_url().to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("unreadable answer: {e}"))
}

/// Imports `n` fresh simulator tokens into `target`'s pool, 1000 per request (the API's limit),
/// a few requests at a time. Returns how many the gateway accepted.
pub async fn import_tokens(
    client: &reqwest::Client,
    base: &str,
    sim: &Simulator,
    target: &TargetSpec,
    n: usize,
) -> Result<usize, String> {
    let bodies: Vec<String> = (0..n)
        .collect::<Vec<_>>()
        .chunks(1000)
        .map(|chunk| {
            let now = now_ms();
            let tokens: Vec<_> = chunk
                .iter()
                .map(|_| {
                    json!({"token": sim.mint_token(Kind::RecaptchaV2, now)
                        .expect("reCAPTCHA answers are tokens"), "solved_at": now})
                })
                .collect();
            json!({"kind": "recaptcha_v2", "sitekey": target.sitekey,
                   "pageurl": target.pageurl, "tokens": tokens})
            .to_string()
        })
        .collect();
    let results = futures::future::join_all(bodies.into_iter().map(|body| async move {
        let res = client
            .post(format!("{base}/v1/pools/tokens"))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        let v: serde_json::Value = res.json().await.map_err(|e| e.to_string())?;
        v["accepted"]
            .as_u64()
            .map(|a| a as usize)
            .ok_or_else(|| format!("import refused: {v}"))
    }))
    .await;
    results.into_iter().sum()
}

/// Latency samples in microseconds.
#[derive(Debug, Default, Clone)]
pub struct Latencies(pub Vec<u32>);

impl Latencies {
    pub fn record(&mut self, d: Duration) {
        self.0
            .push(u32::try_from(d.as_micros()).unwrap_or(u32::MAX));
    }

    pub fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    /// The `q`-quantile (0..=1) in milliseconds; NaN without samples.
    pub fn quantile_ms(&mut self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.sort_unstable();
        let i = ((self.0.len() - 1) as f64 * q).round() as usize;
        f64::from(self.0[i]) / 1000.0
    }
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn bar(len: u64, message: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:<28} [{elapsed_precise}] {wide_bar} {pos}/{len}")
            .expect("the template is valid"),
    );
    bar.set_message(message.to_owned());
    bar
}

/// What checking every handed-out token with the simulator found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    pub ok: u64,
    pub duplicate: u64,
    pub expired: u64,
    pub invalid: u64,
}

impl Checked {
    /// Checks each token once, like a site's `/verify`: a token seen twice is a duplicate.
    pub fn tokens<'a>(sim: &Simulator, tokens: impl IntoIterator<Item = &'a str>) -> Checked {
        let mut c = Checked::default();
        for t in tokens {
            match sim.verify(t).0 {
                Verdict::Ok { .. } => c.ok += 1,
                Verdict::Duplicate { .. } => c.duplicate += 1,
                Verdict::Expired { .. } => c.expired += 1,
                Verdict::Invalid => c.invalid += 1,
            }
        }
        c
    }

    /// Adds another batch's counts.
    pub fn add(&mut self, other: Checked) {
        self.ok += other.ok;
        self.duplicate += other.duplicate;
        self.expired += other.expired;
        self.invalid += other.invalid;
    }

    /// Failures worth failing the run for: a token that was not valid exactly once.
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        if self.duplicate > 0 {
            f.push(format!("{} tokens handed out twice", self.duplicate));
        }
        if self.expired > 0 {
            f.push(format!("{} tokens expired when handed out", self.expired));
        }
        if self.invalid > 0 {
            f.push(format!(
                "{} tokens the simulator never issued",
                self.invalid
            ));
        }
        f
    }
}

/// The ready time (ms) of a token the simulator issued, checking it once like `/verify`.
pub fn ready_at(sim: &Simulator, token: &str) -> Result<u64, Verdict> {
    match sim.verify(token).0 {
        Verdict::Ok { solved_at, .. } => Ok(solved_at),
        other => Err(other),
    }
}

/// What a closed-loop phase did: `done` operations in `elapsed`, their latencies, the tokens
/// they got, how many did not come from the pool, and the errors (the first few verbatim).
#[derive(Debug, Default)]
pub struct LoopOutcome {
    pub done: usize,
    pub elapsed: Duration,
    pub latencies: Latencies,
    pub tokens: Vec<String>,
    pub misses: usize,
    pub errors: usize,
    pub first_errors: Vec<String>,
}

impl LoopOutcome {
    fn merge(&mut self, other: LoopOutcome) {
        self.done += other.done;
        self.latencies.extend(other.latencies);
        self.tokens.extend(other.tokens);
        self.misses += other.misses;
        self.errors += other.errors;
        if self.first_errors.len() < 5 {
            self.first_errors
                .extend(other.first_errors.into_iter().take(5));
        }
    }

    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.done as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `op` from `concurrency` tasks, each starting its next call when the last one ends,
/// until `budget` calls have started or `duration` has passed. Each task starts with its own
/// state from `init` (a connection, say), hands it to `op` and gets it back. `op` returns a
/// token and whether it came from the pool.
pub async fn closed_loop<S, I, F, Fut>(
    concurrency: usize,
    budget: usize,
    duration: Duration,
    bar: &ProgressBar,
    init: I,
    op: F,
) -> LoopOutcome
where
    S: Send + 'static,
    I: Fn() -> S + Clone + Send + 'static,
    F: Fn(S) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = (S, Result<(String, bool), String>)> + Send,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let started = Arc::new(AtomicUsize::new(0));
    let start = tokio::time::Instant::now();
    let deadline = start + duration;
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (init, op, started, bar) = (init.clone(), op.clone(), started.clone(), bar.clone());
            tokio::spawn(async move {
                let mut out = LoopOutcome::default();
                let mut state = Some(init());
                while started.fetch_add(1, Ordering::Relaxed) < budget
                    && tokio::time::Instant::now() < deadline
                {
                    let t = std::time::Instant::now();
                    let (next, result) = op(state.take().expect("put back after each call")).await;
                    state = Some(next);
                    match result {
                        Ok((token, pooled)) => {
                            out.latencies.record(t.elapsed());
                            out.tokens.push(token);
                            out.misses += usize::from(!pooled);
                            out.done += 1;
                        }
                        Err(e) => {
                            out.errors += 1;
                            if out.first_errors.len() < 5 {
                                out.first_errors.push(e);
                            }
                        }
                    }
                    bar.inc(1);
                }
                out
            })
        })
        .collect();
    let mut total = LoopOutcome::default();
    for w in workers {
        if let Ok(out) = w.await {
            total.merge(out);
        }
    }
    total.elapsed = start.elapsed();
    total
}
