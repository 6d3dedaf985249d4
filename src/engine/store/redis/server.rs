//! What the gateway must know about the Redis it runs on, read with `INFO` (which works where
//! `CONFIG` is disabled, as on most managed services) and, where allowed, `CONFIG GET`: each
//! master's `run_id` (a change means it restarted or was replaced, so a retried operation may no
//! longer find its record), the version (`WAITAOF` needs 7.2), the eviction policy, persistence
//! and replicas. Read at start, where an evicting policy or a durability setting the server
//! cannot honour is refused, and again at every renewal, for `/v1/status` and the restart check.

use std::collections::HashMap;

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{RedisResult, Value};
use serde::{Deserialize, Serialize};

use crate::redis_base::Conn;

/// The one eviction policy under which Redis never drops a key the gateway still needs.
pub const NO_EVICTION: &str = "noeviction";

/// What the servers said, merged over every master of a Cluster (the weakest value wins: one
/// evicting master is enough to lose a pool).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerFacts {
    /// `redis_version` (the lowest over masters).
    pub version: String,
    /// Each master's `run_id`, sorted: any change means a master restarted or was replaced.
    #[serde(skip)]
    pub run_ids: Vec<String>,
    /// `maxmemory_policy`: `noeviction` unless some master evicts.
    pub maxmemory_policy: String,
    /// `maxmemory` in bytes (0: no limit) of the master that evicts, else the smallest set.
    pub maxmemory: u64,
    /// Whether every master writes an append-only file.
    pub aof_enabled: bool,
    /// `CONFIG GET appendfsync`; `None` where `CONFIG` is refused (then only `WAITAOF` can
    /// confirm that a write reached the disk).
    pub appendfsync: Option<String>,
    /// `CONFIG GET save` (`""`: no RDB snapshots); `None` where `CONFIG` is refused.
    pub rdb_save: Option<String>,
    /// Replicas connected to the master with the fewest.
    pub replicas: u32,
    /// Masters answering (1 for a single server).
    pub masters: u32,
}

/// Why the gateway will not run on a server as configured: the setting to change and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerProblem {
    pub setting: &'static str,
    pub problem: String,
    pub fix: String,
}

impl ServerFacts {
    /// `major.minor` of the version, `(0, 0)` when it does not parse.
    pub fn version_at_least(&self, major: u32, minor: u32) -> bool {
        version_tuple(&self.version) >= (major, minor)
    }

    /// The restart check's epoch: every master's `run_id`.
    pub fn epoch(&self) -> String {
        self.run_ids.join(",")
    }

    /// What keeps the gateway from running on these servers with these settings
    /// (`redis_allow_eviction`, `redis_handout_fsync`).
    pub fn problems(&self, allow_eviction: bool, handout_fsync: bool) -> Vec<ServerProblem> {
        let mut out = Vec::new();
        if self.maxmemory_policy != NO_EVICTION && !allow_eviction {
            out.push(ServerProblem {
                setting: "redis_allow_eviction",
                problem: format!(
                    "Redis evicts keys under memory pressure (maxmemory-policy {}): pools, \
                     waiting callers, leases and the records that make retries safe could \
                     vanish, and a token could be handed out twice",
                    self.maxmemory_policy
                ),
                fix: "set `maxmemory-policy noeviction` on the server (docs/REDIS.md), or \
                      redis_allow_eviction = true to run anyway"
                    .into(),
            });
        }
        if handout_fsync {
            if let Err(why) = self.local_fsync() {
                out.push(ServerProblem {
                    setting: "redis_handout_fsync",
                    problem: why,
                    fix: "turn on `appendonly yes` with `appendfsync always`, or set \
                          redis_handout_fsync = false"
                        .into(),
                });
            }
        }
        out
    }

    /// How a hand-out's write is confirmed on the master's disk, or why it cannot be. Only
    /// `appendfsync always` is trusted where `CONFIG GET` can tell: under `everysec`, `WAITAOF`
    /// answers before the sync on some servers (Redis 7.4.0 to 7.4.2 and Valkey 8.0,
    /// redis/redis#13793; docs/REDIS.md "Durable hand-outs"), and a host crash then hands the
    /// confirmed tokens out again. Where `CONFIG` is refused, `WAITAOF` is all there is.
    pub fn local_fsync(&self) -> Result<LocalFsync, String> {
        if !self.aof_enabled {
            return Err("the server writes no append-only file (appendonly no)".into());
        }
        let waitaof = self.version_at_least(7, 2);
        match self.appendfsync.as_deref() {
            Some("always") if waitaof => Ok(LocalFsync::WaitAof),
            Some("always") => Ok(LocalFsync::EveryWrite),
            Some(other) if waitaof => Err(format!(
                "Redis {} syncs its append-only file `{other}`, and under it WAITAOF can \
                 confirm a hand-out before the sync on some versions (redis/redis#13793), so \
                 an acknowledged hand-out may not be on disk",
                self.version
            )),
            Some(other) => Err(format!(
                "Redis {} has no WAITAOF and syncs its append-only file `{other}`, so an \
                 acknowledged hand-out may not be on disk",
                self.version
            )),
            None if waitaof => Ok(LocalFsync::WaitAof),
            None => Err(format!(
                "Redis {} has no WAITAOF and refuses CONFIG GET, so nothing can confirm that a \
                 hand-out reached its disk",
                self.version
            )),
        }
    }
}

/// How the master's disk holds a write the moment Redis acknowledges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalFsync {
    /// `WAITAOF 1 ...` confirms it (Redis 7.2+).
    WaitAof,
    /// `appendfsync always`: Redis syncs before it replies, so the reply is the confirmation.
    EveryWrite,
}

fn version_tuple(v: &str) -> (u32, u32) {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// `INFO`'s `key:value` lines.
fn fields(text: &str) -> HashMap<&str, &str> {
    text.lines()
        .filter_map(|l| l.trim_end().split_once(':'))
        .collect()
}

/// One master's `INFO` and `CONFIG GET` answers, as read.
#[derive(Debug, Default)]
struct Master {
    info: String,
    appendfsync: Option<String>,
    save: Option<String>,
}

/// Reads every master's facts now.
pub async fn read(conn: &Conn) -> RedisResult<ServerFacts> {
    // Plain `INFO` (its default sections hold all of these): Redis 6.2 takes no list of sections.
    let infos = on_masters(conn, &redis::cmd("INFO")).await?;
    let fsyncs = config_get(conn, "appendfsync").await;
    let saves = config_get(conn, "save").await;
    let masters: Vec<Master> = infos
        .into_iter()
        .map(|(addr, info)| Master {
            appendfsync: fsyncs.as_ref().and_then(|m| m.get(&addr).cloned()),
            save: saves.as_ref().and_then(|m| m.get(&addr).cloned()),
            info,
        })
        .collect();
    Ok(merge(&masters))
}

fn merge(masters: &[Master]) -> ServerFacts {
    let mut facts = ServerFacts {
        maxmemory_policy: NO_EVICTION.into(),
        aof_enabled: !masters.is_empty(),
        replicas: u32::MAX,
        masters: masters.len() as u32,
        ..ServerFacts::default()
    };
    let mut fsyncs: Vec<Option<String>> = Vec::new();
    let mut saves: Vec<Option<String>> = Vec::new();
    for m in masters {
        let f = fields(&m.info);
        let version = f.get("redis_version").copied().unwrap_or_default();
        if facts.version.is_empty() || version_tuple(version) < version_tuple(&facts.version) {
            facts.version = version.to_owned();
        }
        if let Some(id) = f.get("run_id") {
            facts.run_ids.push((*id).to_owned());
        }
        let policy = f.get("maxmemory_policy").copied().unwrap_or(NO_EVICTION);
        let maxmemory = f.get("maxmemory").and_then(|v| v.parse().ok()).unwrap_or(0);
        if policy != NO_EVICTION && facts.maxmemory_policy == NO_EVICTION {
            facts.maxmemory_policy = policy.to_owned();
            facts.maxmemory = maxmemory;
        } else if facts.maxmemory_policy == NO_EVICTION
            && maxmemory > 0
            && (facts.maxmemory == 0 || maxmemory < facts.maxmemory)
        {
            facts.maxmemory = maxmemory;
        }
        facts.aof_enabled &= f.get("aof_enabled") == Some(&"1");
        let replicas = f
            .get("connected_slaves")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        facts.replicas = facts.replicas.min(replicas);
        fsyncs.push(m.appendfsync.clone());
        saves.push(m.save.clone());
    }
    if facts.replicas == u32::MAX {
        facts.replicas = 0;
    }
    facts.run_ids.sort();
    facts.appendfsync = agreed(fsyncs);
    facts.rdb_save = agreed(saves);
    facts
}

/// The value every master gave, `Some("mixed")` when they differ, `None` when any refused.
fn agreed(values: Vec<Option<String>>) -> Option<String> {
    let values: Option<Vec<String>> = values.into_iter().collect();
    let values = values?;
    let first = values.first()?.clone();
    Some(if values.iter().all(|v| *v == first) {
        first
    } else {
        "mixed".into()
    })
}

/// `cmd` on every master, with each one's address (one unnamed entry for a single server).
async fn on_masters(conn: &Conn, cmd: &redis::Cmd) -> RedisResult<Vec<(String, String)>> {
    match conn.clone() {
        Conn::Single(mut c) => {
            let text: String = cmd.query_async(&mut c).await?;
            Ok(vec![(String::new(), text)])
        }
        Conn::Cluster(mut c) => {
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let reply = c.route_command(cmd.clone(), routing).await?;
            Ok(by_address(reply)
                .into_iter()
                .filter_map(|(addr, v)| Some((addr, redis::from_redis_value::<String>(v).ok()?)))
                .collect())
        }
    }
}

/// A multi-node reply as (address, value) pairs.
fn by_address(reply: Value) -> Vec<(String, Value)> {
    match reply {
        Value::Map(pairs) => pairs
            .into_iter()
            .filter_map(|(k, v)| Some((redis::from_redis_value::<String>(k).ok()?, v)))
            .collect(),
        other => vec![(String::new(), other)],
    }
}

/// `CONFIG GET <name>` on every master by address, or `None` where any refuses (`CONFIG` is
/// often disabled or renamed on managed servers).
async fn config_get(conn: &Conn, name: &str) -> Option<HashMap<String, String>> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg(name);
    let replies: Vec<(String, Value)> = match conn.clone() {
        Conn::Single(mut c) => vec![(String::new(), cmd.query_async::<Value>(&mut c).await.ok()?)],
        Conn::Cluster(mut c) => {
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            by_address(c.route_command(cmd, routing).await.ok()?)
        }
    };
    replies
        .into_iter()
        .map(|(addr, v)| Some((addr, config_value(v)?)))
        .collect()
}

/// The value in a `CONFIG GET` reply (a flat array or a RESP3 map of name and value).
fn config_value(v: Value) -> Option<String> {
    match v {
        Value::Array(items) => redis::from_redis_value(items.into_iter().nth(1)?).ok(),
        Value::Map(pairs) => redis::from_redis_value(pairs.into_iter().next()?.1).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master(info: &str, fsync: Option<&str>) -> Master {
        Master {
            info: info.replace(' ', "\r\n"),
            appendfsync: fsync.map(str::to_owned),
            save: Some(String::new()),
        }
    }

    #[test]
    fn one_evicting_master_and_the_oldest_version_decide_for_a_cluster() {
        let facts = merge(&[
            master(
                "redis_version:7.2.4 run_id:b maxmemory_policy:noeviction aof_enabled:1 connected_slaves:1",
                Some("always"),
            ),
            master(
                "redis_version:7.0.15 run_id:a maxmemory_policy:volatile-lru maxmemory:1000 aof_enabled:1 connected_slaves:2",
                Some("always"),
            ),
        ]);
        assert_eq!(facts.version, "7.0.15");
        assert_eq!(facts.run_ids, ["a", "b"]);
        assert_eq!(facts.maxmemory_policy, "volatile-lru");
        assert_eq!(facts.maxmemory, 1000);
        assert_eq!(facts.replicas, 1);
        assert!(facts.aof_enabled);
        assert_eq!(facts.appendfsync.as_deref(), Some("always"));
        let problems = facts.problems(false, false);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].setting, "redis_allow_eviction");
        assert!(facts.problems(true, false).is_empty());
    }

    #[test]
    fn local_fsync_needs_an_aof_and_waitaof_or_every_write_synced() {
        let on = |version: &str, aof: &str, fsync: Option<&str>| {
            merge(&[master(
                &format!("redis_version:{version} run_id:x aof_enabled:{aof}"),
                fsync,
            )])
            .local_fsync()
        };
        assert_eq!(on("7.2.0", "1", None), Ok(LocalFsync::WaitAof));
        assert_eq!(
            on("7.0.15", "1", Some("always")),
            Ok(LocalFsync::EveryWrite)
        );
        assert_eq!(on("7.4.1", "1", Some("always")), Ok(LocalFsync::WaitAof));
        assert!(on("7.0.15", "1", Some("everysec")).is_err());
        // Valkey 8.0 reports 7.2.4; its WAITAOF answers early under `everysec`.
        assert!(on("7.2.4", "1", Some("everysec")).is_err());
        assert!(on("7.0.15", "1", None).is_err());
        assert!(on("7.4.1", "0", Some("always")).is_err());
        let facts = merge(&[master("redis_version:7.0.15 aof_enabled:0", None)]);
        assert_eq!(
            facts.problems(false, true)[0].setting,
            "redis_handout_fsync"
        );
    }

    #[test]
    fn masters_that_disagree_or_refuse_config_are_reported_so() {
        assert_eq!(
            agreed(vec![Some("a".into()), Some("a".into())]).as_deref(),
            Some("a")
        );
        assert_eq!(
            agreed(vec![Some("a".into()), Some("b".into())]).as_deref(),
            Some("mixed")
        );
        assert_eq!(agreed(vec![Some("a".into()), None]), None);
        assert_eq!(version_tuple("7.2.4"), (7, 2));
        assert_eq!(version_tuple("garbage"), (0, 0));
    }
}
