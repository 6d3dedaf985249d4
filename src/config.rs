//! One typed [`Settings`], loaded once from the TOML file, the environment and the flags (a flag
//! or variable wins over the file), validated once, then handed down in pieces. Nothing below
//! `main` reads environment variables: `main` passes a lookup function in.
//!
//! Every problem is a [`ConfigError`]: one line naming the setting and the fix (exit code 2).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::callback::CallbackSettings;
use crate::cli::{ServeArgs, SimulateArgs};
use crate::engine::EngineSettings;
use crate::engine::store::redis::RedisSettings;
use crate::http::Limits;
use crate::model::Kind;
use crate::pools::{PoolSpec, PoolTable};
use crate::provider::{AccountSettings, PollSettings};
use crate::sim::{KindLatency, KindLifetime, SettingsError, SimSettings};

pub use crate::setting::ConfigError;
use crate::setting::bad;

pub use crate::secret::Secret;

mod access;
mod accounts;
mod engine;
mod logs;
mod prices;
mod submit;
mod upstream;
mod worker;

pub use crate::provider::AccountProvider;
use access::Access;
pub use accounts::AccountSpec;
pub use logs::log_settings;
pub use submit::{SubmitSettings, SubmitTask, load_submit};
use upstream::Upstream;
pub use worker::{WorkerSettings, load_worker};

/// Everything `serve` needs, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub provider: AccountProvider,
    /// Base URL of the provider; `None` with `sim` (the simulator picks its own loopback port).
    pub provider_url: Option<url::Url>,
    pub provider_key: Option<Secret>,
    /// The plan's threads; `None` means ask the provider (`threadsinfo`) at startup.
    pub threads: Option<u32>,
    pub gateway_keys: Vec<Secret>,
    pub max_concurrent: u64,
    /// Slow start: how long after start the admission limit ramps up to `max_concurrent`.
    pub warmup: Duration,
    /// Threads of each account that pool refills leave to callers (docs/CONFIGURATION.md).
    pub refill_reserve: u32,
    /// The shared store of a fleet; `None` runs the embedded store.
    pub redis: Option<RedisSettings>,
    /// Whether the file set `redis_lease_s` (a worker's `queue.lease_s` must then agree with it).
    pub redis_lease_given: bool,
    pub engine: EngineSettings,
    pub limits: Limits,
    pub poll: PollSettings,
    /// Retry policy of the account (name, threads and poll are filled in at startup).
    pub account: AccountSettings,
    pub sim: SimSettings,
    /// Log format and filter (docs/CONFIGURATION.md "Logs").
    pub log: crate::telemetry::LogSettings,
    /// Every configured key and password, scrubbed from log lines wherever it appears.
    pub log_secrets: Vec<Secret>,
    /// Targets kept stocked with ready answers (`[[pools]]`).
    pub pools: Vec<PoolSpec>,
    /// Tenants with their own keys, limits and pool mode (`[[tenants]]`).
    pub tenants: Vec<crate::tenants::TenantSpec>,
    /// Serve HTTPS (`--tls-cert` / `--tls-key`); `None`: plain HTTP.
    pub tls: Option<crate::http::TlsSettings>,
    /// How long shutdown waits for in-flight requests and tasks before cutting them short.
    pub shutdown_grace: Duration,
    /// Client connections: timeouts for slow clients and the cap (`[connections]`).
    pub connections: crate::http::ConnSettings,
    /// Result callbacks (`pingback`, `callback_url`): allow-list and delivery limits.
    pub callbacks: CallbackSettings,
    /// `[[accounts]]`; empty: the one account of `provider`, `provider_url`, the key and `threads`.
    pub accounts: Vec<AccountSpec>,
    /// How accounts leave and rejoin rotation (breaker, balance checks).
    pub upstream: crate::upstream::UpstreamSettings,
    /// `serve --queue`: the queue accepted tasks are handed to, instead of solving them here.
    pub enqueue_to: Option<String>,
    /// The `[queue]` table as written (docs/QUEUE.md "Settings"); `worker` checks and applies
    /// it under its flags.
    pub queue: crate::queue::QueueFile,
    /// How often the status page's history is sampled and, with Redis, this instance's figures
    /// published to the fleet (`crate::status`; no flag: tests shorten it).
    pub status_every: Duration,
    /// The span of one bucket of the demand log the plan advisor reads (`status::demand`; 5
    /// minutes, 14 days kept; no flag: tests shorten it).
    pub demand_bucket: Duration,
    /// The operations endpoints' listener and key (docs/SECURITY.md "Endpoints").
    pub ops: crate::http::OpsSettings,
    /// `[prices]`: what the plan advisor prices threads and solves at.
    pub prices: crate::status::advice::prices::Prices,
}

/// The TOML file: every flag, plus the knobs that have no flag.
// No `Debug`: it holds gateway keys (and tenants' keys) in clear until they are digested.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    provider: Option<AccountProvider>,
    provider_url: Option<String>,
    provider_key_file: Option<PathBuf>,
    threads: Option<u32>,
    #[serde(default)]
    gateway_keys: Vec<String>,
    max_concurrent: Option<u64>,
    /// Seconds of slow start after a start (default 10, at most 3600; 0 turns it off).
    warmup_s: Option<f64>,
    /// Callers waiting for an upstream thread, with the fleet's threads all taken, beyond which
    /// new solves get 429 `fleet_busy` (default: no limit, they wait).
    max_thread_waiters: Option<i64>,
    /// Threads of each account that refills leave free for callers (default 1). Signed, so a
    /// negative value is refused by name rather than by the TOML reader.
    refill_reserve: Option<i64>,
    redis_url: Option<String>,
    redis_cluster: Option<bool>,
    redis_required: Option<bool>,
    /// PEM file of the CA that `rediss://` servers chain to (a private CA); default: system roots.
    redis_ca_file: Option<PathBuf>,
    /// Seconds a crashed instance's waiters and tasks stay counted (default 15).
    redis_lease_s: Option<f64>,
    /// Run on a Redis whose `maxmemory-policy` evicts keys (refused by default).
    redis_allow_eviction: Option<bool>,
    /// Replicas that must hold a hand-out's write before its answer leaves (default 0).
    redis_handout_replicas: Option<i64>,
    /// The master's disk must hold a hand-out's write before its answer leaves (default false).
    redis_handout_fsync: Option<bool>,
    /// Seconds a hand-out waits for that before its answer is withheld (default 1).
    redis_handout_wait_s: Option<f64>,
    /// Most pooled answers an instance takes at once to hand out from memory (default 0: off; 64 in the benchmarks).
    redis_pool_batch: Option<i64>,
    min_remaining_s: Option<f64>,
    keep_query: Option<bool>,
    task_timeout_s: Option<f64>,
    compat_task_timeout_s: Option<f64>,
    default_solve_timeout_s: Option<f64>,
    result_retention_s: Option<f64>,
    log_json: Option<bool>,
    /// `text` or `json` (`--log-format`).
    log_format: Option<String>,
    /// Seconds per kind.
    #[serde(default)]
    lifetimes: HashMap<String, f64>,
    #[serde(default)]
    poll: PollFile,
    #[serde(default)]
    sim: SimFile,
    #[serde(default)]
    pools: Vec<PoolTable>,
    #[serde(default)]
    tenants: Vec<crate::tenants::TenantTable>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    /// Seconds shutdown waits for in-flight work (default `shutdown::SHUTDOWN_GRACE`).
    shutdown_grace_s: Option<f64>,
    /// Timeouts for slow clients and the connection cap (docs/CONFIGURATION.md "Connections").
    #[serde(default)]
    connections: crate::http::ConnectionsFile,
    /// Hosts callbacks may go to (`*.example.com` for subdomains); empty refuses callbacks.
    #[serde(default)]
    callback_hosts: Vec<String>,
    /// CIDR networks callbacks may reach although special (loopback, private, link-local...).
    #[serde(default)]
    callback_allow_networks: Vec<String>,
    callback_timeout_s: Option<f64>,
    callback_attempts: Option<u32>,
    callback_max_concurrent: Option<usize>,
    /// Seconds an empty target stays known after its last use (default 900).
    target_idle_s: Option<f64>,
    /// Targets shown one by one in `/metrics`, `/` and `GET /v1/pools` (default 50).
    metrics_top_targets: Option<usize>,
    /// Several provider accounts (docs/CONFIGURATION.md "Accounts").
    #[serde(default)]
    accounts: Vec<accounts::AccountTable>,
    /// The task queue's settings (docs/QUEUE.md "Settings").
    #[serde(default)]
    queue: crate::queue::QueueFile,
    /// The operations endpoints' own listener, key and place (docs/CONFIGURATION.md).
    ops_listen: Option<SocketAddr>,
    ops_key: Option<String>,
    ops_key_file: Option<PathBuf>,
    ops_on_api_port: Option<bool>,
    /// What threads and solves cost, per provider (docs/CONFIGURATION.md "Prices").
    prices: Option<toml::Table>,
    /// Whether a task of a type no declaration names is forwarded as sent (default true).
    passthrough: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PollFile {
    adaptive: Option<bool>,
    first_check_s: Option<f64>,
    interval_s: Option<f64>,
    max_polls_per_task: Option<u32>,
    batch_size: Option<usize>,
    max_requests_per_second: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SimFile {
    threads: Option<u32>,
    /// `kind = "2s..5s"`.
    #[serde(default)]
    latency: HashMap<String, String>,
    /// `kind = seconds`.
    #[serde(default)]
    lifetime: HashMap<String, f64>,
    unsolvable_rate: Option<f64>,
    server_error_rate: Option<f64>,
    html_error_rate: Option<f64>,
    capacity_code: Option<String>,
    #[serde(default)]
    keys: Vec<String>,
    seed: Option<u64>,
    /// Further injected faults (see docs/SIMULATOR.md "Faults").
    capacity_error_rate: Option<f64>,
    zero_balance_rate: Option<f64>,
    plain_error_rate: Option<f64>,
    drop_rate: Option<f64>,
    malformed_rate: Option<f64>,
    slow_rate: Option<f64>,
    slow_ms: Option<u64>,
}

/// Loads and validates `serve`'s settings. `env` looks up environment variables (main passes
/// `std::env::var`; tests pass a map).
pub fn load_serve(
    args: &ServeArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, ConfigError> {
    let file = match &args.config {
        Some(path) => read_file(path)?,
        None => FileConfig::default(),
    };
    let provider = args
        .provider
        .or(file.provider)
        .unwrap_or(AccountProvider::Captchaai);
    if !AccountProvider::SHORTCUT.contains(&provider) {
        return Err(bad(
            "provider",
            format!("{provider} has no one-account shortcut"),
            format!("configure it as an [[accounts]] table with provider = \"{provider}\""),
        ));
    }
    let listen = args
        .listen
        .or(file.listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080)));

    let redis = redis_settings(args, &file)?;
    let enqueue_to = match &args.queue {
        None => None,
        Some(_) if redis.is_none() => {
            return Err(bad(
                "--queue",
                "needs a Redis: the queue and its workers share it",
                "add --redis-url redis://host:6379/0, or drop --queue to solve in this process",
            ));
        }
        Some(name) => {
            crate::queue::check_name("--queue", name)?;
            Some(name.clone())
        }
    };

    let Upstream {
        provider_url,
        provider_key,
        accounts,
        threads,
    } = upstream::upstream(args, &file, provider, env)?;
    let Access {
        keys,
        tenants,
        ops,
        ops_key,
    } = access::access(args, &file, listen, env)?;

    let max_concurrent = args
        .max_concurrent
        .or(file.max_concurrent)
        .unwrap_or(10_000);
    if max_concurrent == 0 {
        return Err(bad(
            "--max-concurrent",
            "must be at least 1",
            "set the number of solves one process may hold, e.g. 10000",
        ));
    }

    let warmup = secs_up_to(
        "--warmup-s",
        args.warmup_s.or(file.warmup_s).unwrap_or(DEFAULT_WARMUP_S),
        MAX_WARMUP_S,
    )?;

    let (engine, limits) = engine::engine_settings(args, &file)?;

    let sim = sim_settings(&file.sim, &SimulateArgs::default())?;
    let poll = upstream::poll_settings(&file, provider, &accounts, &sim)?;

    let pools = crate::pools::specs(&file.pools, engine.target_policy)?;
    let callbacks = callback_settings(&file)?;

    let tls = crate::http::tls_settings(
        args.tls_cert.clone().or(file.tls_cert.clone()),
        args.tls_key.clone().or(file.tls_key.clone()),
    )?;
    let shutdown_grace = match file.shutdown_grace_s {
        Some(s) => secs("shutdown_grace_s", s)?,
        None => crate::shutdown::SHUTDOWN_GRACE,
    };

    let mut log_secrets = log_secrets(args, &file, provider_key.as_ref(), &keys, &accounts);
    log_secrets.extend(ops_key);
    Ok(Settings {
        listen,
        provider,
        provider_url,
        provider_key,
        threads,
        gateway_keys: keys.into_iter().map(Secret).collect(),
        max_concurrent,
        warmup,
        refill_reserve: refill_reserve(file.refill_reserve)?,
        redis,
        engine,
        limits,
        poll,
        account: AccountSettings::default(),
        sim,
        log: log_settings(&args.log, file.log_format.as_deref(), file.log_json, env)?,
        log_secrets,
        pools,
        tenants,
        tls,
        shutdown_grace,
        connections: file.connections.settings()?,
        callbacks,
        accounts,
        upstream: crate::upstream::UpstreamSettings {
            passthrough: file.passthrough.unwrap_or(true),
            ..crate::upstream::UpstreamSettings::default()
        },
        enqueue_to,
        redis_lease_given: file.redis_lease_s.is_some(),
        queue: file.queue.clone(),
        status_every: crate::status::DEFAULT_EVERY,
        demand_bucket: crate::status::demand::DEFAULT_BUCKET,
        ops,
        prices: prices::prices(file.prices.as_ref())?,
    })
}

/// The passwords in a comma-separated list of URLs (Redis nodes).
pub fn url_passwords(urls: &str) -> Vec<String> {
    urls.split(',')
        .filter_map(|u| url::Url::parse(u.trim()).ok())
        .filter_map(|u| u.password().map(str::to_owned))
        .collect()
}

impl Settings {
    /// [`Settings::log_secrets`] as the log scrubber takes them.
    pub fn secret_values(&self) -> Vec<&str> {
        self.log_secrets.iter().map(|s| s.0.as_str()).collect()
    }
}

/// The configured keys and Redis passwords, for the log scrubber (docs/SECURITY.md "Logs").
fn log_secrets(
    args: &ServeArgs,
    file: &FileConfig,
    provider_key: Option<&Secret>,
    gateway_keys: &[String],
    accounts: &[AccountSpec],
) -> Vec<Secret> {
    let redis_urls = args
        .redis_url
        .as_ref()
        .map(|u| u.0.clone())
        .or(file.redis_url.clone())
        .unwrap_or_default();
    let redis_passwords = url_passwords(&redis_urls);
    let tenant_keys = file.tenants.iter().flat_map(|t| t.keys.iter().cloned());
    provider_key
        .map(|k| k.0.clone())
        .into_iter()
        .chain(
            accounts
                .iter()
                .filter_map(|a| a.key.as_ref().map(|k| k.0.clone())),
        )
        .chain(gateway_keys.iter().cloned())
        .chain(tenant_keys)
        .chain(redis_passwords)
        .map(Secret)
        .collect()
}

/// With `[[accounts]]`, the one-account settings would be silently ignored: refuse them instead.
fn one_account_settings_unused(args: &ServeArgs, file: &FileConfig) -> Result<(), ConfigError> {
    let set = [
        (
            "--provider",
            args.provider.is_some() || file.provider.is_some(),
        ),
        (
            "--provider-url",
            args.provider_url.is_some() || file.provider_url.is_some(),
        ),
        (
            "--provider-key-file",
            args.provider_key_file.is_some() || file.provider_key_file.is_some(),
        ),
        (
            "--threads",
            args.threads.is_some() || file.threads.is_some(),
        ),
    ];
    match set.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(bad(
            flag,
            "is the one-account shortcut, but [[accounts]] tables are configured",
            "drop it, or describe that account as one more [[accounts]] table",
        )),
        None => Ok(()),
    }
}

/// `--redis-url` (one URL, or a comma-separated list of Cluster nodes) into store settings.
fn redis_settings(
    args: &ServeArgs,
    file: &FileConfig,
) -> Result<Option<RedisSettings>, ConfigError> {
    let from_args = args.redis_url.as_ref().map(|u| u.0.clone());
    let Some(raw) = from_args.or(file.redis_url.clone()) else {
        if args.redis_required || file.redis_required.unwrap_or(false) {
            return Err(bad(
                "--redis-required",
                "is set but no Redis is configured",
                "set --redis-url / REDIS_URL, or drop --redis-required",
            ));
        }
        return Ok(None);
    };
    let urls: Vec<String> = raw
        .split(',')
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    for u in &urls {
        let valid = url::Url::parse(u)
            .is_ok_and(|p| matches!(p.scheme(), "redis" | "rediss") && p.host().is_some());
        if !valid {
            // Only a scheme is echoed, and only one that looks like a scheme: the value may
            // carry a password (`user:pass@host` has no `://`) or a line break.
            let scheme = u.split_once("://").map(|(s, _)| s).filter(|s| {
                !s.is_empty()
                    && s.len() <= 16
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
            });
            let problem = match scheme {
                Some(scheme) => format!("a URL with scheme `{scheme}` is not a Redis URL"),
                None => "the value is not a URL".to_owned(),
            };
            return Err(bad(
                "--redis-url",
                problem,
                "write redis://host:6379/0 (rediss:// for TLS); several comma-separated for a Cluster",
            ));
        }
    }
    if urls.is_empty() {
        return Err(bad(
            "--redis-url",
            "is empty",
            "write redis://host:6379/0, or unset it for the embedded store",
        ));
    }
    let cluster = args.redis_cluster || file.redis_cluster.unwrap_or(false) || urls.len() > 1;
    let mut settings = RedisSettings::new(urls, cluster);
    if let Some(s) = file.redis_lease_s {
        settings.lease = crate::queue::settings::seconds("redis_lease_s", s, 1.0, 3600.0)?;
    }
    if let Some(path) = &file.redis_ca_file {
        settings.target.ca_pem = Some(redis_ca(path, &settings.target.urls)?);
    }
    settings.allow_eviction = file.redis_allow_eviction.unwrap_or(false);
    if let Some(n) = file.redis_handout_replicas {
        settings.durability.replicas =
            u32::try_from(n).ok().filter(|n| *n <= 16).ok_or_else(|| {
                bad(
                    "redis_handout_replicas",
                    format!("{n} is out of range"),
                    "use 0 (do not wait for replicas) to 16, at most the replicas each master has",
                )
            })?;
    }
    settings.durability.fsync = file.redis_handout_fsync.unwrap_or(false);
    if let Some(s) = file.redis_handout_wait_s {
        settings.durability.wait = secs_up_to("redis_handout_wait_s", s, 60.0)?;
        if settings.durability.wait < Duration::from_millis(1) {
            return Err(bad(
                "redis_handout_wait_s",
                format!("{s:?} seconds is less than a millisecond"),
                "give 0.001 to 60 seconds (WAIT's timeout counts in milliseconds; 0 would wait forever)",
            ));
        }
    }
    if let Some(n) = file.redis_pool_batch {
        settings.pool_batch = u32::try_from(n)
            .ok()
            .filter(|n| *n <= crate::engine::store::redis::MAX_POOL_BATCH)
            .ok_or_else(|| {
                bad(
                    "redis_pool_batch",
                    format!("{n} is out of range"),
                    format!(
                        "use 0 (every pool hit is its own Redis call) to {}",
                        crate::engine::store::redis::MAX_POOL_BATCH
                    ),
                )
            })?;
    }
    Ok(Some(settings))
}

/// The private CA for `rediss://`, checked now so a wrong path fails at startup, not at the
/// first reconnect.
fn redis_ca(path: &Path, urls: &[String]) -> Result<Vec<u8>, ConfigError> {
    if !urls.iter().all(|u| u.starts_with("rediss://")) {
        return Err(bad(
            "redis_ca_file",
            "is set but the Redis URL is not rediss://",
            "use rediss:// URLs for TLS, or drop redis_ca_file",
        ));
    }
    let pem = std::fs::read(path).map_err(|e| {
        bad(
            "redis_ca_file",
            format!("cannot read {}: {e}", path.display()),
            "point it at a readable PEM file with the CA certificate",
        )
    })?;
    if !pem
        .windows(b"-----BEGIN CERTIFICATE-----".len())
        .any(|w| w == b"-----BEGIN CERTIFICATE-----")
    {
        return Err(bad(
            "redis_ca_file",
            format!("{} holds no PEM certificate", path.display()),
            "point it at the CA certificate in PEM form (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(pem)
}

/// The simulator's settings from a `[sim]` table and `simulate` flags (flags win).
pub(crate) fn sim_settings(
    file: &SimFile,
    args: &SimulateArgs,
) -> Result<SimSettings, ConfigError> {
    let mut sim = SimSettings::default();
    if let Some(t) = args.threads.or(file.threads) {
        if t == 0 {
            return Err(bad(
                "--threads",
                "must be at least 1",
                "set the simulated plan's threads, e.g. --threads 15",
            ));
        }
        sim.threads = t;
    }
    let fix_latency = "write KIND=RANGE, e.g. --latency recaptcha_v2=2s..5s";
    let file_latencies = file.latency.iter().map(|(k, v)| format!("{k}={v}"));
    for pair in file_latencies.chain(args.latencies.iter().cloned()) {
        let l: KindLatency = pair
            .parse()
            .map_err(|e: SettingsError| bad("--latency", e.to_string(), fix_latency))?;
        sim.latency.insert(l.kind, l.range);
    }
    let fix_lifetime = "write KIND=DURATION, e.g. --lifetime turnstile=300s";
    let file_lifetimes = file.lifetime.iter().map(|(k, v)| format!("{k}={v}s"));
    for pair in file_lifetimes.chain(args.lifetimes.iter().cloned()) {
        let l: KindLifetime = pair
            .parse()
            .map_err(|e: SettingsError| bad("--lifetime", e.to_string(), fix_lifetime))?;
        sim.lifetimes.insert(l.kind, l.lifetime);
    }
    if let Some(v) = args.unsolvable_rate.or(file.unsolvable_rate) {
        sim.unsolvable_rate = v;
    }
    if let Some(v) = args.server_error_rate.or(file.server_error_rate) {
        sim.faults.server_error_rate = v;
    }
    if let Some(v) = args.html_error_rate.or(file.html_error_rate) {
        sim.faults.html_error_rate = v;
    }
    let faults = &mut sim.faults;
    let file_faults = [
        (&mut faults.capacity_error_rate, file.capacity_error_rate),
        (&mut faults.zero_balance_rate, file.zero_balance_rate),
        (&mut faults.plain_error_rate, file.plain_error_rate),
        (&mut faults.drop_rate, file.drop_rate),
        (&mut faults.malformed_rate, file.malformed_rate),
        (&mut faults.slow_rate, file.slow_rate),
    ];
    for (rate, value) in file_faults {
        if let Some(v) = value {
            *rate = v;
        }
    }
    if let Some(v) = file.slow_ms {
        faults.slow_ms = v;
    }
    if let Some(code) = args.capacity_code.clone().or(file.capacity_code.clone()) {
        sim.capacity_code = code;
    }
    let keys = if args.keys.is_empty() {
        file.keys.clone()
    } else {
        args.keys.clone()
    };
    if !keys.is_empty() {
        sim.keys = keys;
    }
    sim.seed = args.seed.or(file.seed);
    sim.validate().map_err(|e| {
        bad(
            "simulator",
            e.to_string(),
            "fix the flag or the [sim] table of --config",
        )
    })?;
    Ok(sim)
}

/// `simulate`'s settings: flags over an optional `[sim]` table of `--config`.
pub fn load_simulate(
    args: &SimulateArgs,
    config: Option<&Path>,
) -> Result<SimSettings, ConfigError> {
    let file = match config {
        Some(path) => read_file(path)?.sim,
        None => SimFile::default(),
    };
    sim_settings(&file, args)
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        bad(
            "--config",
            format!("cannot read {}: {e}", path.display()),
            "point --config / CAPTCHA_GATEWAY_CONFIG at a readable TOML file",
        )
    })?;
    toml::from_str(&text).map_err(|e| {
        let first_line = e
            .message()
            .lines()
            .next()
            .unwrap_or("invalid TOML")
            .to_owned();
        bad(
            &format!("--config {}", path.display()),
            first_line,
            "fix the file; docs/CONFIGURATION.md lists every setting",
        )
    })
}

/// Slow start: long enough for a balancer to see the instance busy, short next to a solve's
/// minutes; an hour is far beyond any use, so more is a typo.
const DEFAULT_WARMUP_S: f64 = 10.0;
const MAX_WARMUP_S: f64 = 3600.0;

/// [`secs`], at most `max` seconds.
fn secs_up_to(setting: &str, s: f64, max: f64) -> Result<Duration, ConfigError> {
    if s > max {
        return Err(bad(
            setting,
            format!("{s:?} seconds is more than {max:?}"),
            format!("give at most {max:?} seconds"),
        ));
    }
    secs(setting, s)
}

fn secs(setting: &str, s: f64) -> Result<Duration, ConfigError> {
    if (0.0..1e9).contains(&s) {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(bad(
            setting,
            format!("{s:?} is not a number of seconds"),
            "give a non-negative number of seconds",
        ))
    }
}

/// The `callback_*` settings, validated: hosts are host names or IP literals (no scheme, path or
/// port), networks are CIDR, the counts at least 1.
fn callback_settings(file: &FileConfig) -> Result<CallbackSettings, ConfigError> {
    let mut s = CallbackSettings::default();
    for entry in &file.callback_hosts {
        let host = crate::callback::normalize_host_entry(entry).ok_or_else(|| {
            bad(
                "callback_hosts",
                format!("`{entry}` is not a host name"),
                "list bare host names or IP literals, e.g. \"hooks.example.com\" or \"*.example.com\"",
            )
        })?;
        s.hosts.push(host);
    }
    for entry in &file.callback_allow_networks {
        let net = entry.trim().parse().map_err(|_| {
            bad(
                "callback_allow_networks",
                format!("`{entry}` is not a CIDR network"),
                "write networks as address/prefix, e.g. \"10.0.0.0/8\" or \"127.0.0.1/32\"",
            )
        })?;
        s.allow_networks.push(net);
    }
    if let Some(t) = file.callback_timeout_s {
        s.timeout = secs("callback_timeout_s", t)?;
        if s.timeout.is_zero() {
            return Err(bad("callback_timeout_s", "must be above 0", "e.g. 10"));
        }
    }
    if let Some(n) = file.callback_attempts {
        if !(1..=10).contains(&n) {
            return Err(bad("callback_attempts", "must be from 1 to 10", "e.g. 3"));
        }
        s.attempts = n;
    }
    if let Some(n) = file.callback_max_concurrent {
        if n == 0 {
            return Err(bad(
                "callback_max_concurrent",
                "must be at least 1",
                "e.g. 16",
            ));
        }
        s.max_concurrent = n;
    }
    Ok(s)
}

fn refill_reserve(value: Option<i64>) -> Result<u32, ConfigError> {
    let Some(n) = value else {
        return Ok(crate::provider::budget::DEFAULT_REFILL_RESERVE);
    };
    u32::try_from(n).map_err(|_| {
        bad(
            "refill_reserve",
            format!("is {n}"),
            "write a number of threads, 0 or more (0 lets refills use every thread)",
        )
    })
}

fn kind(setting: &str, name: &str) -> Result<Kind, ConfigError> {
    name.parse()
        .map_err(|e: String| bad(setting, e, "use one of the kind names above"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_redis_url_is_named_without_echoing_it() {
        // Found by the `config_toml` fuzz target (docs/FUZZING.md): the whole value was echoed
        // as the "scheme" when it had no `://`, password and line breaks included.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        for url in [
            "user:hunter2@cache.internal:6379",
            // A TOML escape puts a line break into the value.
            r"h+\t0:/\\r##@ho/\n2222\te",
            "ftp://user:hunter2@cache.internal/",
        ] {
            std::fs::write(
                &path,
                format!("provider = \"sim\"\nredis_url = \"{url}\"\n"),
            )
            .unwrap();
            let args = ServeArgs {
                config: Some(path.clone()),
                ..ServeArgs::default()
            };
            let line = load_serve(&args, &|_| None).unwrap_err().to_string();
            assert!(line.starts_with("--redis-url: "), "{line}");
            assert!(!line.contains("hunter2") && !line.contains('\n'), "{line}");
        }
    }

    /// `serve`'s settings from a config file holding `text`, with `env` as the environment.
    fn from_file(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, text).unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        load_serve(&args, env)
    }

    #[test]
    fn the_refill_reserve_defaults_to_one_and_a_negative_one_is_refused_by_name() {
        let load = |text: &str| from_file(text, &|_| None);
        assert_eq!(load("provider = \"sim\"\n").unwrap().refill_reserve, 1);
        let zero = load("provider = \"sim\"\nrefill_reserve = 0\n").unwrap();
        assert_eq!(zero.refill_reserve, 0);
        let line = load("provider = \"sim\"\nrefill_reserve = -1\n")
            .unwrap_err()
            .to_string();
        assert!(line.contains("refill_reserve"), "{line}");
    }

    #[test]
    fn the_provider_shortcut_names_its_three_providers_and_sends_others_to_accounts() {
        let load = |text: &str| {
            from_file(text, &|name| {
                (name == "TWOCAPTCHA_API_KEY").then(|| "k".repeat(32))
            })
        };
        let two = load("provider = \"2captcha\"\n").unwrap();
        assert_eq!(two.provider, AccountProvider::TwoCaptcha);
        for other in ["anticaptcha", "capsolver"] {
            let e = load(&format!("provider = \"{other}\"\n")).unwrap_err();
            assert_eq!(e.setting, "provider", "{e}");
            assert!(e.fix.contains("[[accounts]]"), "{e}");
        }
    }

    #[test]
    fn max_thread_waiters_is_off_by_default_and_range_checked_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            let args = ServeArgs {
                config: Some(path.clone()),
                ..ServeArgs::default()
            };
            load_serve(&args, &|_| None)
        };
        let default = load("provider = \"sim\"\n").unwrap();
        assert_eq!(default.limits.max_thread_waiters, None);
        let set = load("provider = \"sim\"\nmax_thread_waiters = 50\n").unwrap();
        assert_eq!(set.limits.max_thread_waiters, Some(50));
        for bad in ["0", "-1", "1000001"] {
            let line = load(&format!("provider = \"sim\"\nmax_thread_waiters = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(line.starts_with("max_thread_waiters: "), "{line}");
        }
    }

    #[test]
    fn the_pool_batch_is_64_by_default_and_range_checked_by_name() {
        let load = |text: &str| from_file(text, &|_| None);
        let redis = "provider = \"sim\"\nredis_url = \"redis://127.0.0.1:1\"\n";
        let batch = |text: &str| load(text).unwrap().redis.unwrap().pool_batch;
        assert_eq!(batch(redis), 64);
        assert_eq!(batch(&format!("{redis}redis_pool_batch = 32\n")), 32);
        assert_eq!(batch(&format!("{redis}redis_pool_batch = 0\n")), 0);
        assert_eq!(batch(&format!("{redis}redis_pool_batch = 256\n")), 256);
        for bad in ["-1", "257", "4294967296"] {
            let line = load(&format!("{redis}redis_pool_batch = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(line.starts_with("redis_pool_batch: "), "{line}");
        }
    }

    #[test]
    fn poll_settings_out_of_range_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        for (poll, setting) in [
            ("max_polls_per_task = 0", "poll.max_polls_per_task"),
            ("max_polls_per_task = 4000000000", "poll.max_polls_per_task"),
            ("interval_s = 1e8", "poll.interval_s"),
            ("first_check_s = 86400", "poll.first_check_s"),
        ] {
            std::fs::write(&path, format!("provider = \"sim\"\n[poll]\n{poll}\n")).unwrap();
            let args = ServeArgs {
                config: Some(path.clone()),
                ..ServeArgs::default()
            };
            let line = load_serve(&args, &|_| None).unwrap_err().to_string();
            assert!(line.contains(setting), "{poll}: {line}");
        }
    }

    #[test]
    fn a_configured_poll_interval_brings_its_coalescing_window_along() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, "provider = \"sim\"\n[poll]\ninterval_s = 0.05\n").unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        let settings = load_serve(&args, &|_| None).unwrap();
        assert_eq!(settings.poll.interval, Duration::from_millis(50));
        assert_eq!(settings.poll.coalesce, Duration::from_millis(10));
    }

    #[test]
    fn debug_output_of_the_flags_and_the_settings_shows_no_secret() {
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("provider.key");
        std::fs::write(&key_file, "ProviderKeyDebug0123456789abcdef\n").unwrap();
        let path = dir.path().join("gateway.toml");
        std::fs::write(
            &path,
            "[[tenants]]\nname = \"team\"\nkeys = [\"TenantKeyDebug0123456789abcdef01\"]\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            provider_key_file: Some(key_file),
            gateway_keys: vec![Secret("GatewayKeyDebug0123456789abcdef0".into())],
            redis_url: Some(Secret("redis://:RedisPasswordDebug@127.0.0.1:6379/".into())),
            ..ServeArgs::default()
        };
        let settings = load_serve(&args, &|_| None).unwrap();
        let shown = format!("{args:?}\n{settings:?}");
        assert!(shown.contains("127.0.0.1:6379"), "the Redis host is shown");
        for secret in [
            "ProviderKeyDebug",
            "TenantKeyDebug",
            "GatewayKeyDebug",
            "RedisPasswordDebug",
        ] {
            assert!(!shown.contains(secret), "{secret} in Debug output");
        }
    }
}
