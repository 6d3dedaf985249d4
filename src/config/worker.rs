//! `worker`'s settings: `serve`'s (provider, accounts, Redis, polling) plus the queue's, from
//! flags over the `[queue]` table over the defaults, each range-checked by name.

use std::net::SocketAddr;
use std::time::Duration;

use super::{ConfigError, Settings, load_serve};
use crate::cli::WorkerArgs;
use crate::queue::QueueSettings;
use crate::queue::settings::{check_name, seconds, whole};

/// Shutdown grace when neither `--grace-s` nor `queue.grace_s` says: below Kubernetes' default
/// 30 s before SIGKILL, so in-flight tasks are finished or handed back before it comes.
const DEFAULT_GRACE: Duration = Duration::from_secs(25);

pub struct WorkerSettings {
    pub serve: Settings,
    pub queue: QueueSettings,
    /// Where /livez, /readyz and /metrics are served (`--listen` or `--ops-listen`).
    pub listen: SocketAddr,
    pub grace: Duration,
}

pub fn load_worker(
    args: &mut WorkerArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<WorkerSettings, ConfigError> {
    // The worker's listener serves no API, so serve's rule (a key when not on loopback) does
    // not apply: take it out before serve's settings are read.
    let listen = args.serve.listen.take();
    let serve = load_serve(&args.serve, env)?;
    // The worker's one listener is an operations listener: `--ops-listen` (or the shared file's
    // `ops_listen`) names it as well as `--listen` does, and two different names are a mistake.
    let listen = match (listen, serve.ops.listen) {
        (Some(a), Some(b)) if a != b => {
            return Err(ConfigError {
                setting: "--ops-listen".into(),
                problem: format!("is {b} but --listen is {a}; a worker serves one listener"),
                fix: "give the worker one of them".into(),
            });
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => SocketAddr::from(([0, 0, 0, 0], 9090)),
    };
    if serve.redis.is_none() {
        return Err(ConfigError {
            setting: "--redis-url".into(),
            problem: "the worker needs the Redis that holds the queue".into(),
            fix: "pass --redis-url redis://host:6379/0 (or set REDIS_URL)".into(),
        });
    }
    let mut queue = QueueSettings::from_file(&serve.queue)?;
    if let Some(name) = &args.serve.queue {
        check_name("--queue", name)?;
        queue.name = name.clone();
    }
    if let Some(n) = args.concurrency {
        queue.concurrency = whole("--concurrency", n, 1, 10_000)?;
    }
    if let Some(s) = args.lease_s {
        queue.lease = seconds("--lease-s", s, 1.0, 3600.0)?;
    }
    if let Some(n) = args.max_deliveries {
        queue.max_deliveries = whole("--max-deliveries", n, 1, 100)?;
    }
    if let Some(s) = args.result_ttl_s {
        queue.result_ttl = seconds("--result-ttl-s", s, 1.0, 30.0 * 86_400.0)?;
    }
    queue.check()?;
    let grace = match args.grace_s.or(serve.queue.grace_s) {
        Some(s) => seconds("--grace-s", s, 0.0, 3600.0)?,
        None => DEFAULT_GRACE,
    };
    Ok(WorkerSettings {
        serve,
        queue,
        listen,
        grace,
    })
}
