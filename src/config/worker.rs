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
    let mut serve = serve;
    let mut queue = QueueSettings::from_file(&serve.queue)?;
    if let Some(name) = &args.serve.queue {
        check_name("--queue", name)?;
        queue.name = name.clone();
    }
    if let Some(n) = args.concurrency {
        queue.concurrency = whole("--concurrency", n, 1, 10_000)?;
    }
    // One lease for the worker's entries and its instance in the store: were the entries'
    // shorter, a dead worker's entries would move before its provider tasks could be adopted,
    // and each would be paid for twice.
    let lease = match args.lease_s {
        Some(s) => seconds("--lease-s", s, 1.0, 3600.0)?,
        None => one_lease(&serve)?,
    };
    queue.lease = lease;
    if let Some(redis) = serve.redis.as_mut() {
        redis.lease = lease;
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

/// The lease from the file: `queue.lease_s` or `redis_lease_s`, two names for the one lease
/// (refused when they differ), else the default.
fn one_lease(serve: &Settings) -> Result<Duration, ConfigError> {
    let store = serve.redis.as_ref().map(|r| r.lease);
    let Some(queue) = serve.queue.lease_s else {
        return Ok(store.unwrap_or(crate::engine::store::redis::DEFAULT_LEASE));
    };
    let queue = seconds("queue.lease_s", queue, 1.0, 3600.0)?;
    match (store, serve.redis_lease_given) {
        (Some(store), true) if store != queue => Err(ConfigError {
            setting: "queue.lease_s".into(),
            problem: format!(
                "is {} s but redis_lease_s is {} s; a worker has one lease, for its entries and its instance alike",
                queue.as_secs_f64(),
                store.as_secs_f64()
            ),
            fix: "set one of them (or --lease-s)".into(),
        }),
        _ => Ok(queue),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `worker`'s settings from a config file holding `text` (with a Redis) and `lease_s`.
    fn load(text: &str, lease_s: Option<f64>) -> Result<WorkerSettings, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker.toml");
        let text = format!("provider = \"sim\"\nredis_url = \"redis://127.0.0.1:1/0\"\n{text}");
        std::fs::write(&path, text).unwrap();
        let mut args = WorkerArgs {
            serve: crate::cli::ServeArgs {
                config: Some(path),
                ..crate::cli::ServeArgs::default()
            },
            concurrency: None,
            lease_s,
            max_deliveries: None,
            result_ttl_s: None,
            grace_s: None,
            seed_queue: false,
            runtime_threads: 1,
        };
        load_worker(&mut args, &|_| None)
    }

    fn leases(s: &WorkerSettings) -> (Duration, Duration) {
        (s.queue.lease, s.serve.redis.as_ref().unwrap().lease)
    }

    #[test]
    fn a_worker_has_one_lease_for_its_entries_and_its_instance() {
        let secs = Duration::from_secs;
        let default = crate::engine::store::redis::DEFAULT_LEASE;
        assert_eq!(leases(&load("", None).unwrap()), (default, default));
        assert_eq!(leases(&load("", Some(7.0)).unwrap()), (secs(7), secs(7)));
        let file = "redis_lease_s = 5\n";
        assert_eq!(leases(&load(file, None).unwrap()), (secs(5), secs(5)));
        let file = "[queue]\nlease_s = 6\n";
        assert_eq!(leases(&load(file, None).unwrap()), (secs(6), secs(6)));
        // The flag wins over the file, as everywhere.
        let file = "redis_lease_s = 5\n[queue]\nlease_s = 5\n";
        assert_eq!(leases(&load(file, Some(4.0)).unwrap()), (secs(4), secs(4)));
    }

    #[test]
    fn two_different_leases_or_one_under_a_second_are_refused_by_name() {
        let line = load("redis_lease_s = 3\n[queue]\nlease_s = 30\n", None)
            .err()
            .unwrap()
            .to_string();
        assert!(line.starts_with("queue.lease_s: "), "{line}");
        assert!(line.contains("one lease"), "{line}");
        for (file, flag, setting) in [
            ("redis_lease_s = 0.5\n", None, "redis_lease_s"),
            ("", Some(0.5), "--lease-s"),
            ("[queue]\nlease_s = 0.2\n", None, "queue.lease_s"),
        ] {
            let line = load(file, flag).err().unwrap().to_string();
            assert!(line.starts_with(setting), "{file:?} {flag:?}: {line}");
        }
    }
}
