//! The client: a typed native API over a balanced, self-healing set of gateways.
//!
//! Each call is sent to the gateway the balancer picks; how it ended is fed back
//! ([`crate::judge`]); a call that may go elsewhere does, up to `max_attempts`, after a short
//! random wait, and never to a gateway it already tried while another is available.

use std::sync::Arc;
use std::time::Duration;

use captcha_gateway_balance::{EjectionPolicy, Strategy};
use rand::Rng;
use reqwest::Method;
use serde_json::Value;
use tokio::sync::watch;

use crate::config::{Config, ConfigError, backend_url};
use crate::fleet::{BackendState, Fleet};
use crate::judge::{self, Next};
use crate::native::{Solution, SolveRequest, Submitted, TaskBody, TaskRef, TaskState};
use crate::{Error, probe};

/// A balancing client for a fleet of gateways. Cheap to clone; clones share the balancer.
///
/// Made with [`Client::builder`]. Must be built inside a Tokio runtime when probes are on
/// (the default): they run as a task that ends when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    http: reqwest::Client,
    fleet: Arc<Fleet>,
}

/// Settings for a [`Client`]; every one has a default but the gateway list.
#[derive(Debug, Default)]
pub struct ClientBuilder {
    config: Config,
    error: Option<ConfigError>,
}

impl ClientBuilder {
    /// The gateways' base URLs (`http://host:port`).
    pub fn backends<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for url in urls {
            match backend_url(url.as_ref()) {
                Ok(url) => self.config.backends.push(url),
                Err(e) => {
                    self.error.get_or_insert(e);
                }
            }
        }
        self
    }

    /// The gateway key, sent as `Authorization: Bearer`.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.config.key = Some(key.into());
        self
    }

    /// Least-outstanding (default) or power-of-two-choices.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.config.strategy = strategy;
        self
    }

    /// When a gateway is ejected and for how long (default: 3 failures, 10 s, doubling to 5 min).
    pub fn ejection(mut self, policy: EjectionPolicy) -> Self {
        self.config.ejection = policy;
        self
    }

    /// Attempts per call, the first included: 1 to 10 (default 3).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.config.max_attempts = attempts;
        self
    }

    /// Retry `n` waits a random time below `min(cap, base * 2^(n-1))` (default 50 ms, 1 s).
    pub fn retry_backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.config.retry_base = base;
        self.config.retry_cap = cap;
        self
    }

    /// How often `/health` is probed on every gateway; `None` turns probes off (default 5 s).
    pub fn probe_interval(mut self, interval: Option<Duration>) -> Self {
        self.config.probe_interval = interval;
        self
    }

    /// How long a probe may take before it counts as a failure (default 2 s).
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.config.probe_timeout = timeout;
        self
    }

    /// How long connecting may take (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Added to a call's own deadline (`timeout_s`, or `wait`) for the whole HTTP exchange
    /// (default 10 s): the gateway answers 504 at its deadline, this only catches a hung one.
    pub fn response_margin(mut self, margin: Duration) -> Self {
        self.config.response_margin = margin;
        self
    }

    /// Seeds power-of-two-choices draws, for reproducible runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }

    /// Whether a solve or submit without its own idempotency key gets a generated one (default
    /// on). With it, a call whose gateway died after the call was sent (connection lost, a 502
    /// from a proxy, `shutting_down`) is sent to another gateway, which on a shared Redis
    /// resumes the same task; without it such a call fails with the transport error, since
    /// sending it again could solve it twice. See docs/CLIENTS.md.
    pub fn generated_idempotency_keys(mut self, on: bool) -> Self {
        self.config.generated_keys = on;
        self
    }

    /// Checks the settings and makes the client (and starts its probes).
    pub fn build(self) -> Result<Client, ConfigError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let config = self.config;
        config.check()?;
        let runtime = match config.probe_interval {
            Some(_) => Some(tokio::runtime::Handle::try_current().map_err(|_| {
                ConfigError {
                    setting: "probe_interval",
                    problem: "probes run on Tokio: build the client inside a Tokio runtime, or \
                          turn probes off with probe_interval(None)"
                        .into(),
                }
            })?),
            None => None,
        };
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|e| ConfigError {
                setting: "http",
                problem: format!("the HTTP client cannot start: {e}"),
            })?;
        let fleet = Arc::new(Fleet::new(
            &config.backends,
            config.strategy,
            config.ejection,
            config.seed,
        ));
        if let (Some(runtime), Some(interval)) = (runtime, config.probe_interval) {
            probe::spawn(
                &runtime,
                &fleet,
                http.clone(),
                interval,
                config.probe_timeout,
            );
        }
        Ok(Client {
            inner: Arc::new(Inner {
                config,
                http,
                fleet,
            }),
        })
    }
}

/// One request as the retry loop sends it.
struct Call<'a> {
    method: Method,
    path: String,
    body: Option<Value>,
    /// How long the gateway may take by itself; the HTTP timeout adds the margin.
    wait: Duration,
    idempotency_key: Option<&'a str>,
    /// The key was generated for this call, not given by its caller: the gateway is told
    /// (`Idempotency-Scope: request`) so that the task ends when its callers leave, as a call
    /// without a key does, instead of waiting for a caller who will never come back with it.
    request_scoped: bool,
    /// Safe to send again after it may have started (a read, or an idempotency key).
    repeatable: bool,
    /// The gateway to try first (the one that holds a task).
    prefer: Option<&'a str>,
}

impl Client {
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// `POST /v1/solve`: waits for the answer.
    pub async fn solve(&self, request: &SolveRequest) -> Result<Solution, Error> {
        let generated = self.generated_key(request);
        let key = request.key().or(generated.as_deref());
        let (address, body) = self
            .send(Call {
                method: Method::POST,
                path: "/v1/solve".into(),
                body: Some(request.body()),
                wait: request.deadline(),
                idempotency_key: key,
                request_scoped: generated.is_some(),
                repeatable: key.is_some(),
                prefer: None,
            })
            .await?;
        serde_json::from_value(body).map_err(|e| Error::BadAnswer {
            address,
            what: e.to_string(),
        })
    }

    /// `POST /v1/tasks`: starts a task and returns at once; read it with [`task`](Self::task).
    pub async fn submit(&self, request: &SolveRequest) -> Result<TaskRef, Error> {
        let generated = self.generated_key(request);
        let key = request.key().or(generated.as_deref());
        let (address, body) = self
            .send(Call {
                method: Method::POST,
                path: "/v1/tasks".into(),
                body: Some(request.body()),
                wait: Duration::ZERO,
                idempotency_key: key,
                // A task for later outlives its request whatever the key's scope.
                request_scoped: false,
                repeatable: key.is_some(),
                prefer: None,
            })
            .await?;
        let submitted: Submitted = serde_json::from_value(body).map_err(|e| Error::BadAnswer {
            address: address.clone(),
            what: e.to_string(),
        })?;
        Ok(TaskRef {
            id: submitted.task_id,
            address,
        })
    }

    /// `GET /v1/tasks/{id}?wait=`: the task's state, waiting up to `wait` (at most 600 s) for it
    /// to end. Asks the gateway that took it first; a read is safe to repeat, so when that one
    /// cannot answer another is asked (gateways on one Redis share their tasks).
    pub async fn task(&self, task: &TaskRef, wait: Duration) -> Result<TaskState, Error> {
        let wait = wait.min(Duration::from_secs(600));
        let (address, body) = self
            .send(Call {
                method: Method::GET,
                path: format!(
                    "/v1/tasks/{}?wait={}",
                    encode_id(&task.id),
                    wait.as_secs_f64()
                ),
                body: None,
                wait,
                idempotency_key: None,
                request_scoped: false,
                repeatable: true,
                prefer: Some(&task.address),
            })
            .await?;
        let body: TaskBody = serde_json::from_value(body).map_err(|e| Error::BadAnswer {
            address: address.clone(),
            what: e.to_string(),
        })?;
        body.into_state()
            .map_err(|what| Error::BadAnswer { address, what })
    }

    /// Every gateway as the client sees it now: load, ejection, calls served, re-admissions.
    pub fn backends(&self) -> Vec<BackendState> {
        self.inner.fleet.snapshot()
    }

    /// A receiver whose value changes on every ejection and re-admission: wait on it to react
    /// to the fleet's health without polling [`backends`](Self::backends).
    pub fn health_changes(&self) -> watch::Receiver<u64> {
        self.inner.fleet.changes()
    }

    /// A fresh key for a call whose caller gave none, when generated keys are on: 128 random
    /// bits, so two calls never share one.
    fn generated_key(&self, request: &SolveRequest) -> Option<String> {
        if request.key().is_some() || !self.inner.config.generated_keys {
            return None;
        }
        Some(format!("cgc-{:032x}", rand::rng().random::<u128>()))
    }

    async fn send(&self, call: Call<'_>) -> Result<(String, Value), Error> {
        let config = &self.inner.config;
        let mut tried: Vec<String> = Vec::new();
        let mut last = None;
        for attempt in 1..=config.max_attempts {
            if attempt > 1 {
                tokio::time::sleep(self.backoff(attempt - 1)).await;
            }
            let ticket = match (call.prefer, tried.is_empty()) {
                (Some(prefer), true) => self.inner.fleet.pick_preferring(prefer),
                _ => self.inner.fleet.pick(&tried),
            };
            // The builder refuses an empty list, so there is always an instance.
            let Some(ticket) = ticket else {
                break;
            };
            let address = ticket.address().to_owned();
            let (outcome, next) = self.attempt(&address, &call).await;
            self.inner.fleet.finish(ticket, outcome);
            match next {
                Next::Done(result) => return result.map(|body| (address, body)),
                Next::Retry(error) => last = Some(error),
            }
            tried.push(address);
        }
        let last = last.unwrap_or_else(|| Error::Transport {
            address: String::new(),
            what: "no gateway configured".into(),
            sent: false,
        });
        Err(Error::Exhausted {
            attempts: u32::try_from(tried.len()).unwrap_or(u32::MAX),
            last: Box::new(last),
        })
    }

    async fn attempt(
        &self,
        address: &str,
        call: &Call<'_>,
    ) -> (captcha_gateway_balance::Outcome, Next) {
        let config = &self.inner.config;
        let mut req = self
            .inner
            .http
            .request(call.method.clone(), format!("{address}{}", call.path))
            .timeout(call.wait.saturating_add(config.response_margin));
        if let Some(key) = &config.key {
            req = req.bearer_auth(key);
        }
        if let Some(key) = call.idempotency_key {
            req = req.header("Idempotency-Key", key);
            if call.request_scoped {
                req = req.header("Idempotency-Scope", "request");
            }
        }
        if let Some(body) = &call.body {
            req = req.json(body);
        }
        let res = match req.send().await {
            Ok(res) => res,
            Err(e) => return judge::transport(address, &e, call.repeatable),
        };
        let status = res.status().as_u16();
        let retry_after = res
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match res.bytes().await {
            Ok(body) => judge::answer(
                address,
                status,
                retry_after.as_deref(),
                &body,
                call.repeatable,
            ),
            Err(e) => judge::transport(address, &e, call.repeatable),
        }
    }

    /// Full jitter: spreads the retries of many callers refused at once.
    fn backoff(&self, retry: u32) -> Duration {
        let config = &self.inner.config;
        let ceiling = 2u32
            .checked_pow(retry.saturating_sub(1))
            .and_then(|factor| config.retry_base.checked_mul(factor))
            .unwrap_or(config.retry_cap)
            .min(config.retry_cap);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rand::rng().random_range(0..=nanos))
    }
}

/// A task id in a path: the gateway's ids are digits, but an id from elsewhere must not be
/// able to change the path.
fn encode_id(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_cannot_escape_their_path_segment() {
        assert_eq!(encode_id("322701605756477"), "322701605756477");
        assert_eq!(encode_id("../x?y"), "%2E%2E%2Fx%3Fy");
    }

    #[test]
    fn the_builder_names_the_bad_setting() {
        let err = Client::builder()
            .backends(["http://127.0.0.1:1"])
            .max_attempts(0)
            .probe_interval(None)
            .build()
            .unwrap_err();
        assert_eq!(err.setting, "max_attempts");
        let err = Client::builder().backends(["nope"]).build().unwrap_err();
        assert_eq!(err.setting, "backends");
    }

    #[test]
    fn probes_outside_a_runtime_are_a_config_error_not_a_panic() {
        let err = Client::builder()
            .backends(["http://127.0.0.1:1"])
            .build()
            .unwrap_err();
        assert_eq!(err.setting, "probe_interval");
    }

    #[test]
    fn the_key_is_not_in_debug_output() {
        let client = Client::builder()
            .backends(["http://127.0.0.1:1"])
            .key("s3cret-key")
            .probe_interval(None)
            .build()
            .unwrap();
        assert!(!format!("{client:?}").contains("s3cret-key"));
    }
}
