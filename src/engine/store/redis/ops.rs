//! Running target scripts when a reply can be lost (issue 9, defect 2).
//!
//! A script whose reply never arrives (a timeout, a dropped connection, Redis paused) may or may
//! not have run, and on Cluster redis-rs may send it twice. So every operation that hands
//! something out or takes something carries an op id: the script records its reply under it
//! (`lua/lib/target.lua`, `replay`/`done`), and running it again returns that reply and changes
//! nothing. A caller whose outcome is unknown retries the same operation until it is known, and
//! never acts on a guess.
//!
//! Two limits, both on the side of losing rather than doubling: retries stop after
//! [`RedisSettings::unknown_retry`] (well inside the record's lifetime), and they stop at once
//! when a single server's `run_id` changed (it restarted, maybe empty: the record may be gone
//! while the first run's effects were already seen by others).

use std::time::Duration;

use redis::{RedisError, Script, Value};
use tokio::time::Instant;

use super::conn::Conn;
use super::{Inner, keys, ms};
use crate::engine::store::StoreError;

/// What became of an operation whose script did not answer with a reply.
#[derive(Debug)]
pub(super) enum OpError {
    /// It certainly did not run (refused before reaching Redis, or refused by Redis).
    NotRun(StoreError),
    /// It may have run; its retries did not find out in time.
    Unknown(StoreError),
}

impl From<OpError> for StoreError {
    fn from(e: OpError) -> StoreError {
        match e {
            OpError::NotRun(e) | OpError::Unknown(e) => e,
        }
    }
}

/// Whether an error proves the script never ran: the connection was refused, or Redis answered
/// with an error instead of running it (loading, busy, a Cluster redirection it could not follow).
fn never_ran(e: &RedisError) -> bool {
    e.is_connection_refusal() || !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped())
}

/// Whether a target script is poolable: '1', '0', or '' (as recorded in the target's stats).
#[derive(Debug, Clone, Copy)]
pub(super) enum Pk {
    Yes,
    No,
    AsRecorded,
}

impl Pk {
    pub fn of(poolable: bool) -> Pk {
        if poolable { Pk::Yes } else { Pk::No }
    }

    fn arg(self) -> &'static str {
        match self {
            Pk::Yes => "1",
            Pk::No => "0",
            Pk::AsRecorded => "",
        }
    }
}

/// One run of a target script: its op id, the prelude's arguments and its own.
pub(super) struct Op<'a> {
    pub script: &'a Script,
    pub target_id: &'a str,
    pub pk: Pk,
    pub args: Vec<String>,
    pub id: String,
    /// The caller's time, used only by a store on an explicit clock.
    pub now: Option<u64>,
    /// The caller's freshness rule where the trait passes one; else the store's.
    pub min_remaining: Option<u64>,
    /// How long its reply is kept, when shorter than the store's `op_ttl`; its retries stop
    /// at half of it.
    pub ttl: Option<Duration>,
}

impl Op<'_> {
    pub fn at(mut self, now: u64) -> Self {
        self.now = Some(now);
        self
    }

    pub fn min_remaining(mut self, ms: u64) -> Self {
        self.min_remaining = Some(ms);
        self
    }

    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

impl Inner {
    /// A new operation on `target_id` under a fresh op id.
    pub(super) fn op<'a>(
        &self,
        script: &'a Script,
        target_id: &'a str,
        pk: Pk,
        args: Vec<String>,
    ) -> Op<'a> {
        Op {
            script,
            target_id,
            pk,
            args,
            id: self.new_id("o"),
            now: None,
            min_remaining: None,
            ttl: None,
        }
    }

    /// This instance's idea of now for the scripts: Redis decides in production; on an explicit
    /// clock, the latest time a caller passed in.
    pub(super) fn local_now(&self) -> u64 {
        if self.settings.explicit_clock {
            self.clock.load(std::sync::atomic::Ordering::Relaxed)
        } else {
            crate::model::now_ms()
        }
    }

    /// The clock argument of a script: '' (Redis time) in production, the caller's `now` on an
    /// explicit clock.
    pub(super) fn clock_arg(&self, now: u64) -> String {
        match self.settings.explicit_clock {
            true => now.to_string(),
            false => String::new(),
        }
    }

    /// Notes a caller's `now` (on an explicit clock, the time of the store's background work
    /// from then on) and returns the time that answers' remaining life is counted from.
    pub(super) fn observe(&self, now: u64) -> u64 {
        if self.settings.explicit_clock {
            self.clock.store(now, std::sync::atomic::Ordering::Relaxed);
            now
        } else {
            crate::model::now_ms()
        }
    }

    async fn attempt(&self, op: &Op<'_>) -> redis::RedisResult<Vec<Value>> {
        let mut inv = op.script.prepare_invoke();
        for key in keys::target_keys(op.target_id, &op.id) {
            inv.key(key);
        }
        let s = &self.settings;
        let clock = match s.explicit_clock {
            true => op.now.unwrap_or_else(|| self.local_now()).to_string(),
            false => String::new(),
        };
        inv.arg(ms(op.ttl.unwrap_or(s.op_ttl)))
            .arg(op.min_remaining.unwrap_or_else(|| ms(s.min_remaining)))
            .arg(ms(s.mail_ttl))
            .arg(ms(s.lease))
            .arg(op.pk.arg())
            .arg(clock);
        for a in &op.args {
            inv.arg(a);
        }
        let mut conn = self.conn();
        inv.invoke_async::<Vec<Value>>(&mut conn).await
    }

    /// Runs `op` once, for scripts that are safe to run twice (reads, renewals, retirement).
    pub(super) async fn run_once(&self, op: &Op<'_>) -> Result<Vec<Value>, StoreError> {
        let r = self.attempt(op).await;
        self.seen(r)
    }

    /// Runs `op` until its outcome is known: the reply of its one run, or [`OpError::NotRun`]
    /// when the first attempt certainly did not run. Gives [`OpError::Unknown`] when retries ran
    /// out or Redis restarted; `patient: false` gives it after the first unknown attempt
    /// (the caller then finishes with [`Inner::resolve`]).
    pub(super) async fn run(&self, op: &Op<'_>, patient: bool) -> Result<Vec<Value>, OpError> {
        let epoch = self.epoch();
        match self.attempt(op).await {
            Ok(v) => {
                let _ = self.seen(Ok(()));
                Ok(v)
            }
            Err(e) if never_ran(&e) => Err(OpError::NotRun(self.seen::<()>(Err(e)).unwrap_err())),
            Err(e) => {
                let e = self.seen::<()>(Err(e)).unwrap_err();
                if !patient {
                    return Err(OpError::Unknown(e));
                }
                self.resolve(op, epoch).await
            }
        }
    }

    /// Retries `op`, whose first run's outcome is unknown, until the outcome is known. `epoch` is
    /// the server's `run_id` from before that first run.
    pub(super) async fn resolve(
        &self,
        op: &Op<'_>,
        epoch: Option<String>,
    ) -> Result<Vec<Value>, OpError> {
        let horizon = match op.ttl {
            Some(ttl) => (ttl / 2).min(self.settings.unknown_retry),
            None => self.settings.unknown_retry,
        };
        let give_up = Instant::now() + horizon;
        let mut pause = Duration::from_millis(50);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            if let (Some(before), Some(now)) = (&epoch, self.current_epoch().await) {
                if *before != now {
                    tracing::warn!(
                        "redis restarted while an operation's outcome was unknown; not repeating it"
                    );
                    return Err(OpError::Unknown(StoreError::Unavailable(
                        "redis restarted; outcome unknown".into(),
                    )));
                }
            }
            let r = self.attempt(op).await;
            match self.seen(r) {
                Ok(v) => return Ok(v),
                Err(e) if Instant::now() >= give_up => {
                    tracing::warn!(error = %e, "an operation's outcome stayed unknown; giving up");
                    return Err(OpError::Unknown(e));
                }
                Err(_) => {}
            }
        }
    }

    /// The `run_id` last seen for a single server (a Cluster has one per node: `None`).
    pub(super) fn epoch(&self) -> Option<String> {
        self.epoch.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Asks a single server for its `run_id` now, and records it. When it changed, the server
    /// restarted: targets this instance registered may be gone, so they are registered again on
    /// their next use.
    pub(super) async fn current_epoch(&self) -> Option<String> {
        let Conn::Single(_) = &self.conn else {
            return None;
        };
        let mut conn = self.conn();
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await
            .ok()?;
        let run_id = info
            .lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|id| id.trim().to_owned())?;
        let mut epoch = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
        if epoch.as_ref().is_some_and(|before| *before != run_id) {
            tracing::warn!("redis restarted; registering live targets again");
            self.known.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        *epoch = Some(run_id.clone());
        Some(run_id)
    }
}
