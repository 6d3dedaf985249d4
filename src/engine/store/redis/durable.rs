//! Durable hand-outs. Redis acknowledges a write before its replicas have it and, unless it syncs
//! every write, before its disk has it: a failover to a replica that never saw a pool take, or a
//! restart from a file that never got it, puts the token back where a second caller finds it.
//! With `redis_handout_replicas` or `redis_handout_fsync` set, every script that hands a
//! single-use answer out (`arrive` taking from a pool, `take` collecting mail) is followed by
//! `WAIT` (or `WAITAOF` on Redis 7.2+), and the answer leaves the gateway only once that write is
//! confirmed. An answer whose write is not confirmed in time is withheld: put back into Redis,
//! where it stays once whether or not the first write survives, and never given to the caller.
//!
//! `WAIT` counts only the writes made earlier on its own connection, so it is sent in one
//! pipeline with the script (a reconnect between them would confirm nothing); and it blocks its
//! connection until the replicas answer, so hand-outs use connections of their own and never
//! hold up the instance's other commands.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{RedisResult, ScriptInvocation, ServerErrorKind, Value};
use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::server::{LocalFsync, ServerFacts};
use crate::redis_base::{Conn, RedisTarget};

/// What a hand-out waits for before its answer leaves the gateway (all off by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Durability {
    /// Replicas that must hold the write (`WAIT n`).
    pub replicas: u32,
    /// The master's append-only file must hold it on disk (`WAITAOF 1`, or `appendfsync always`
    /// on servers without `WAITAOF`).
    pub fsync: bool,
    /// How long to wait for that before the answer is withheld.
    #[serde(serialize_with = "as_secs")]
    pub wait: Duration,
}

fn as_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for Durability {
    fn default() -> Self {
        Self {
            replicas: 0,
            fsync: false,
            // Replicas on one network answer within milliseconds; a second means one is behind
            // (or gone), and a caller is better served solving alone than waiting longer.
            wait: Duration::from_secs(1),
        }
    }
}

impl Durability {
    pub fn is_on(&self) -> bool {
        self.replicas > 0 || self.fsync
    }
}

/// How a hand-out's write is confirmed on the server as it is now: by `WAIT` for replicas, by
/// `WAITAOF 1 0` for the master's disk (Redis 7.2+; under `appendfsync always` the reply itself
/// says so), each after the other in the script's pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Confirm {
    replicas: u32,
    waitaof: bool,
    /// The server cannot confirm what is asked (no append-only file, or nothing to check it
    /// with): every hand-out is withheld.
    never: bool,
}

impl Confirm {
    fn of(setting: &Durability, facts: Option<&ServerFacts>) -> Confirm {
        let mut confirm = Confirm {
            replicas: setting.replicas,
            waitaof: false,
            never: facts.is_none(),
        };
        if let (true, Some(facts)) = (setting.fsync, facts) {
            match facts.local_fsync() {
                Ok(LocalFsync::WaitAof) => confirm.waitaof = true,
                Ok(LocalFsync::EveryWrite) => {}
                Err(_) => confirm.never = true,
            }
        }
        confirm
    }

    /// The commands that confirm, appended to `pipe`; how many.
    fn append(self, pipe: &mut redis::Pipeline, wait: Duration) -> usize {
        let ms = wait.as_millis() as u64;
        let mut n = 0;
        if self.replicas > 0 {
            pipe.cmd("WAIT").arg(self.replicas).arg(ms);
            n += 1;
        }
        if self.waitaof {
            pipe.cmd("WAITAOF").arg(1).arg(0).arg(ms);
            n += 1;
        }
        n
    }

    /// Whether the confirming commands' replies (in the order `append` sent them) say enough
    /// copies hold the write.
    fn confirmed(self, replies: &[Value]) -> bool {
        if self.never {
            return false;
        }
        let int = |v: &Value| redis::from_redis_value_ref::<i64>(v).unwrap_or(-1);
        let mut replies = replies.iter();
        if self.replicas > 0
            && replies
                .next()
                .is_none_or(|v| int(v) < i64::from(self.replicas))
        {
            return false;
        }
        if self.waitaof {
            let on_disk = matches!(replies.next(), Some(Value::Array(c)) if c.first().is_some_and(|v| int(v) >= 1));
            if !on_disk {
                return false;
            }
        }
        true
    }
}

/// Hand-outs' own connections and whether their writes are being confirmed now.
pub(super) struct Durable {
    pub setting: Durability,
    conns: Vec<Conn>,
    next: AtomicUsize,
    confirm: Mutex<Confirm>,
    /// False from a hand-out that could not be confirmed until a probe is: meanwhile the store
    /// reports itself degraded and callers are solved alone rather than each waiting it out.
    ok: AtomicBool,
    /// Wakes the prober after a hand-out could not be confirmed.
    unconfirmed: Notify,
    /// A key in the slot of the last target whose hand-out failed, for the prober's write.
    probe_key: Mutex<Option<String>>,
    withheld: AtomicU64,
}

/// Connections for hand-outs: each waits for one confirmation at a time (about a replica's round
/// trip), so the rest queue behind it. In `bench hit --durable replica` on 2 shared cores, 8 of
/// them gave a p99 of 37-170 ms at half the peak rate (hand-outs queued behind slow `WAIT`s),
/// 32 gave 27-29 ms at the same peak (docs/BENCHMARKS.md "Durable hand-outs").
const CONNECTIONS: usize = 32;

/// How often the prober writes and waits while hand-outs cannot be confirmed.
const PROBE_EVERY: Duration = Duration::from_millis(250);

impl Durable {
    pub async fn open(setting: Durability, target: &RedisTarget) -> RedisResult<Durable> {
        let mut conns = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            conns.push(Conn::open(target, target.response_timeout + setting.wait).await?);
        }
        Ok(Durable {
            setting,
            conns,
            next: AtomicUsize::new(0),
            confirm: Mutex::new(Confirm::of(&setting, None)),
            ok: AtomicBool::new(true),
            unconfirmed: Notify::new(),
            probe_key: Mutex::default(),
            withheld: AtomicU64::new(0),
        })
    }

    /// Follows what the servers are now (a failover may bring another version or setting).
    pub fn update(&self, facts: Option<&ServerFacts>) {
        *self.confirm.lock().unwrap_or_else(|e| e.into_inner()) = Confirm::of(&self.setting, facts);
    }

    fn confirm(&self) -> Confirm {
        *self.confirm.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn conn(&self) -> Conn {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        self.conns[i].clone()
    }

    pub fn ok(&self) -> bool {
        self.ok.load(Ordering::Relaxed)
    }

    pub fn withheld(&self) -> u64 {
        self.withheld.load(Ordering::Relaxed)
    }

    /// Runs a hand-out script and confirms its write: its reply, and whether the write is
    /// confirmed.
    pub async fn run(&self, inv: &ScriptInvocation<'_>) -> RedisResult<(Vec<Value>, bool)> {
        let confirm = self.confirm();
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        pipe.invoke_script(inv).ignore_errors();
        if confirm.append(&mut pipe, self.setting.wait) == 0 {
            let values = inv.invoke_async::<Vec<Value>>(&mut conn).await?;
            return Ok((values, confirm.confirmed(&[])));
        }
        let mut replies = pipe.query_async::<Vec<Value>>(&mut conn).await?;
        if let Some(Value::ServerError(e)) = replies.first() {
            if e.kind() != Some(ServerErrorKind::NoScript) {
                return Err(e.clone().into());
            }
            // Not run (the server lost its script cache, e.g. it restarted): load and run again.
            inv.load_async(&mut conn).await?;
            replies = pipe.query_async::<Vec<Value>>(&mut conn).await?;
            if let Some(Value::ServerError(e)) = replies.first() {
                return Err(e.clone().into());
            }
        }
        let confirmed = confirm.confirmed(replies.get(1..).unwrap_or_default());
        let values = match replies.into_iter().next() {
            Some(v) => redis::from_redis_value::<Vec<Value>>(v)?,
            None => Vec::new(),
        };
        Ok((values, confirmed))
    }

    /// A hand-out on `probe_key`'s slot was withheld: degrade until a probe confirms again.
    pub fn unconfirmed(&self, probe_key: String) {
        self.withheld.fetch_add(1, Ordering::Relaxed);
        *self.probe_key.lock().unwrap_or_else(|e| e.into_inner()) = Some(probe_key);
        if self.ok.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                replicas = self.setting.replicas,
                fsync = self.setting.fsync,
                "a hand-out's write was not confirmed in time; callers are solved alone until it is"
            );
        }
        self.unconfirmed.notify_one();
    }

    /// One write on the failing slot, confirmed as a hand-out would be.
    async fn probe(&self) -> bool {
        let Some(key) = self
            .probe_key
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return true;
        };
        let confirm = self.confirm();
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(&key)
            .arg(1)
            .arg("PX")
            .arg(60_000)
            .ignore_errors();
        confirm.append(&mut pipe, self.setting.wait);
        let mut conn = self.conn();
        match pipe.query_async::<Vec<Value>>(&mut conn).await {
            Ok(replies) => confirm.confirmed(replies.get(1..).unwrap_or_default()),
            Err(_) => false,
        }
    }
}

/// While hand-outs cannot be confirmed, writes and waits every quarter second until one is,
/// then lets callers use the store again.
pub(super) async fn prober(durable: Arc<Durable>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            () = durable.unconfirmed.notified() => {}
        }
        while !durable.ok() {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(PROBE_EVERY) => {}
            }
            if durable.probe().await {
                durable.ok.store(true, Ordering::Relaxed);
                tracing::info!("hand-outs are confirmed again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(version: &str, aof: bool, fsync: Option<&str>) -> ServerFacts {
        ServerFacts {
            version: version.into(),
            aof_enabled: aof,
            appendfsync: fsync.map(str::to_owned),
            ..ServerFacts::default()
        }
    }

    #[test]
    fn the_confirmation_follows_the_setting_and_what_the_server_can_do() {
        let with = |replicas, fsync| Durability {
            replicas,
            fsync,
            ..Durability::default()
        };
        let old_always = facts("7.0.15", true, Some("always"));
        let old_everysec = facts("7.0.15", true, Some("everysec"));
        let new = facts("7.2.5", true, None);
        let c = |replicas, waitaof, never| Confirm {
            replicas,
            waitaof,
            never,
        };
        assert_eq!(
            Confirm::of(&with(1, false), Some(&old_everysec)),
            c(1, false, false)
        );
        assert_eq!(Confirm::of(&with(1, false), Some(&new)), c(1, false, false));
        assert_eq!(
            Confirm::of(&with(0, true), Some(&old_always)),
            c(0, false, false)
        );
        assert_eq!(
            Confirm::of(&with(0, true), Some(&old_everysec)),
            c(0, false, true)
        );
        assert_eq!(
            Confirm::of(&with(2, true), Some(&old_always)),
            c(2, false, false)
        );
        assert_eq!(Confirm::of(&with(2, true), Some(&new)), c(2, true, false));
        assert_eq!(Confirm::of(&with(1, false), None), c(1, false, true));
    }

    #[test]
    fn a_reply_confirms_only_when_enough_copies_hold_the_write() {
        let wait = Confirm {
            replicas: 2,
            waitaof: false,
            never: false,
        };
        assert!(wait.confirmed(&[Value::Int(2)]));
        assert!(wait.confirmed(&[Value::Int(3)]));
        assert!(!wait.confirmed(&[Value::Int(1)]));
        assert!(!wait.confirmed(&[]));
        assert!(!wait.confirmed(&[Value::Nil]));
        let both = Confirm {
            replicas: 1,
            waitaof: true,
            never: false,
        };
        let pair = |a, b| Value::Array(vec![Value::Int(a), Value::Int(b)]);
        assert!(both.confirmed(&[Value::Int(1), pair(1, 0)]));
        assert!(!both.confirmed(&[Value::Int(1), pair(0, 0)]));
        assert!(!both.confirmed(&[Value::Int(0), pair(1, 0)]));
        assert!(!both.confirmed(&[Value::Int(1)]));
        let reply = Confirm {
            replicas: 0,
            waitaof: false,
            never: false,
        };
        assert!(reply.confirmed(&[]));
        let never = Confirm {
            never: true,
            ..reply
        };
        assert!(!never.confirmed(&[]));
    }
}
