//! Running target scripts when a reply can be lost.
//!
//! A script whose reply never arrives (a timeout, a dropped connection, Redis paused) may or may
//! not have run, and on Cluster redis-rs may send it twice. So every operation that hands
//! something out or takes something carries an op id: the script records its reply under it
//! (`lua/lib/target.lua`, `replay`/`done`), and running it again returns that reply and changes
//! nothing. (A pool hit that woke nobody is not recorded: run again it takes another answer, so
//! its lost reply wastes one answer and never hands one out twice; `lua/arrive.lua`.) A caller
//! whose outcome is unknown retries the same operation until it is known, and never acts on a
//! guess.
//!
//! An operation Redis refused for a state a failover passes through (a replica not yet promoted
//! answering `READONLY`, `CLUSTERDOWN`, `TRYAGAIN`, `MASTERDOWN`, a promoted replica without the
//! script, a node refusing connections) certainly did not run: a patient caller sends it again
//! until it runs, for at most [`REFUSED_RETRY`], instead of dropping what it carried (an answer,
//! a release, a claim). Each such retry is a first run.
//!
//! Retries of an unknown outcome stop, on the side of losing rather than doubling:
//! - after [`RedisSettings::unknown_retry`] (well inside the record's lifetime);
//! - when the script finds the operation older than its record may live (it carries the Redis
//!   time it was issued at, so a process that paused between two tries cannot run it afresh);
//! - when a master's `run_id` changed (it restarted, maybe empty, or a replica took its place:
//!   the record may be gone while the first run's effects were already seen by others), or
//!   when it cannot be read to tell.
//!
//! [`RedisSettings::unknown_retry`]: super::RedisSettings::unknown_retry

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::time::Instant;

use super::call::{Prelude, TargetCall};
use super::{Inner, ms};
use crate::engine::store::StoreError;

/// How long a patient caller sends an operation Redis refused again: past a Cluster failover
/// (`cluster-node-timeout` is 15 s by default, then a replica is elected), short of holding an
/// answer for a server that stays down.
pub(super) const REFUSED_RETRY: Duration = Duration::from_secs(30);

/// The first pause before a retry, doubled each time.
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two retries.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// Whether Redis refused an operation for a state that passes: a failover under way (a replica
/// not yet promoted, slots without a master, a promoted replica that has not loaded the script,
/// a master short of the replicas `min-replicas-to-write` asks for) or a node not accepting
/// connections yet. The script did not run (a refused write aborts it before anything is
/// written); shortly it can.
fn passing(e: &RedisError) -> bool {
    e.is_connection_refusal()
        || e.code() == Some("NOREPLICAS")
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::ReadOnly
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::BusyLoading
                        | ServerErrorKind::NoScript
                )
        )
}

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
/// with an error instead of running it (loading, busy, a Cluster redirection it could not follow,
/// or the script refusing an operation older than its record).
fn never_ran(e: &RedisError) -> bool {
    e.is_connection_refusal() || !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped())
}

/// The error a target script answers when an operation is older than its record may live.
fn expired(e: &RedisError) -> bool {
    e.code() == Some("CGEXPIRED")
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

    fn known(self) -> Option<bool> {
        match self {
            Pk::Yes => Some(true),
            Pk::No => Some(false),
            Pk::AsRecorded => None,
        }
    }
}

/// One run of a target script: its op id, the prelude's arguments and its own.
#[derive(Clone)]
pub(super) struct Op<'a> {
    pub call: TargetCall,
    pub target_id: &'a str,
    pub pk: Pk,
    pub id: String,
    /// The caller's time, used only by a store on an explicit clock.
    pub now: Option<u64>,
    /// The caller's freshness rule where the trait passes one; else the store's.
    pub min_remaining: Option<u64>,
    /// How long its reply is kept, when shorter than the store's `op_ttl`; its retries stop
    /// at half of it.
    pub ttl: Option<Duration>,
    /// When it was issued, in Redis time as this instance reads it (`clock.rs`); `None` before
    /// the first reading, and then it is never retried.
    pub issued: Option<u64>,
    /// Its reply may hand an answer out: with durable hand-outs its write is confirmed first
    /// (`durable.rs`).
    pub handout: bool,
    /// A refusal during a failover is returned at once rather than retried: its caller has a
    /// better use for it first (see `finish`).
    pub refusal_first: bool,
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

    pub fn handout(mut self) -> Self {
        self.handout = true;
        self
    }

    pub fn refusal_first(mut self) -> Self {
        self.refusal_first = true;
        self
    }
}

/// A script's reply and whether the write it made is confirmed as durable hand-outs require
/// (always true for a script that hands nothing out, or with durable hand-outs off).
pub(super) struct Ran {
    pub values: Vec<Value>,
    pub confirmed: bool,
}

impl Inner {
    /// A new operation on `target_id` under a fresh op id.
    pub(super) fn op<'a>(&self, call: TargetCall, target_id: &'a str, pk: Pk) -> Op<'a> {
        Op {
            call,
            target_id,
            pk,
            id: self.new_id("o"),
            now: None,
            min_remaining: None,
            ttl: None,
            issued: self.redis_clock.now(),
            handout: false,
            refusal_first: false,
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

    /// The clock a script is called with: `None` (Redis time) in production, the caller's `now`
    /// on an explicit clock.
    pub(super) fn script_clock(&self, now: u64) -> Option<u64> {
        self.settings.explicit_clock.then_some(now)
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

    async fn attempt(&self, op: &Op<'_>) -> redis::RedisResult<Ran> {
        let s = &self.settings;
        let (clock, issued) = match s.explicit_clock {
            // On an explicit clock the caller's time is the only time: an operation is as old as
            // the time it carries.
            true => {
                let now = op.now.unwrap_or_else(|| self.local_now());
                (Some(now), Some(now))
            }
            false => (None, op.issued),
        };
        let prelude = Prelude {
            op_ttl_ms: ms(op.ttl.unwrap_or(s.op_ttl)),
            min_remaining_ms: op.min_remaining.unwrap_or_else(|| ms(s.min_remaining)),
            mail_ttl_ms: ms(s.mail_ttl),
            lease_ms: ms(s.lease),
            poolable: op.pk.known(),
            clock,
            issued,
        };
        let inv = op.call.invocation(op.target_id, &op.id, &prelude);
        if let (true, Some(durable)) = (op.handout, &self.durable) {
            let (values, confirmed) = durable.run(&inv).await?;
            return Ok(Ran { values, confirmed });
        }
        let mut conn = self.conn();
        let values = inv.invoke_async::<Vec<Value>>(&mut conn).await?;
        Ok(Ran {
            values,
            confirmed: true,
        })
    }

    /// Runs `op` once, for scripts that are safe to run twice (reads, renewals, retirement).
    pub(super) async fn run_once(&self, op: &Op<'_>) -> Result<Vec<Value>, StoreError> {
        let r = self.attempt(op).await;
        self.seen(r).map(|ran| ran.values)
    }

    /// Runs `op` until its outcome is known: the reply of its one run, or [`OpError::NotRun`]
    /// when it certainly did not run (a patient caller first sends it again while Redis refuses
    /// it for a passing state, for up to [`REFUSED_RETRY`]). Gives [`OpError::Unknown`] when
    /// retries ran out or Redis restarted; `patient: false` gives it after the first unknown
    /// attempt (the caller then finishes with [`Inner::resolve`]).
    pub(super) async fn run(&self, op: &Op<'_>, patient: bool) -> Result<Vec<Value>, OpError> {
        self.run_handout(op, patient).await.map(|ran| ran.values)
    }

    /// [`run`](Self::run), also telling whether a hand-out's write is confirmed.
    pub(super) async fn run_handout(&self, op: &Op<'_>, patient: bool) -> Result<Ran, OpError> {
        let retry_refusals = patient && !op.refusal_first;
        self.run_from(op, patient, retry_refusals).await
    }

    /// Sends `op` again after a refusal [`run`](Self::run) returned (an `Op::refusal_first`
    /// caller that had no better use for it): a refusal proves it did not run, so this is its
    /// first run, retried as a patient one.
    pub(super) async fn run_refused(&self, op: &Op<'_>) -> Result<Vec<Value>, OpError> {
        self.run_from(op, true, true).await.map(|ran| ran.values)
    }

    async fn run_from(
        &self,
        op: &Op<'_>,
        patient: bool,
        retry_refusals: bool,
    ) -> Result<Ran, OpError> {
        // An operation without an issue time cannot tell a late retry from a first run.
        let retry_refusals = retry_refusals && op.issued.is_some();
        // Set at the first refusal: the hot path reads no clock for it.
        let mut give_up = None;
        let mut pause = FIRST_PAUSE;
        loop {
            let epoch = self.epoch();
            match self.attempt(op).await {
                Ok(ran) => {
                    let _ = self.seen(Ok(()));
                    return Ok(ran);
                }
                Err(e) if never_ran(&e) => {
                    let give_up = *give_up.get_or_insert_with(|| {
                        Instant::now() + self.horizon(op).min(REFUSED_RETRY)
                    });
                    if retry_refusals && passing(&e) && Instant::now() + pause < give_up {
                        let _ = self.seen::<()>(Err(e));
                        self.counters
                            .refused_retried
                            .fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(MAX_PAUSE);
                        continue;
                    }
                    if expired(&e) {
                        self.counters.expired.fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(OpError::NotRun(self.seen::<()>(Err(e)).unwrap_err()));
                }
                Err(e) => {
                    self.counters.unknown.fetch_add(1, Ordering::Relaxed);
                    let e = self.seen::<()>(Err(e)).unwrap_err();
                    if !patient {
                        return Err(OpError::Unknown(e));
                    }
                    return self.resolve(op, epoch).await;
                }
            }
        }
    }

    /// How long retries of `op` may go on: well inside the life of its record.
    fn horizon(&self, op: &Op<'_>) -> Duration {
        match op.ttl {
            Some(ttl) => (ttl / 2).min(self.settings.unknown_retry),
            None => self.settings.unknown_retry,
        }
    }

    /// Retries `op`, whose first run's outcome is unknown, until the outcome is known. `epoch` is
    /// every master's `run_id` from before that first run.
    pub(super) async fn resolve(&self, op: &Op<'_>, epoch: Option<String>) -> Result<Ran, OpError> {
        let gone = |why: &str| {
            tracing::warn!("{why}; not repeating an operation whose outcome is unknown");
            Err(OpError::Unknown(StoreError::Unavailable(format!(
                "{why}; outcome unknown"
            ))))
        };
        let (Some(before), Some(_)) = (epoch, op.issued) else {
            // Without both, neither a restart nor an expired record could be told apart from a
            // first run.
            return gone("redis was never read before this operation");
        };
        let give_up = Instant::now() + self.horizon(op);
        let mut pause = FIRST_PAUSE;
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
            if Instant::now() >= give_up {
                tracing::warn!("an operation's outcome stayed unknown; giving up");
                return Err(OpError::Unknown(StoreError::Unavailable(
                    "outcome unknown".into(),
                )));
            }
            // Run again only where the record can still be: the same masters as before.
            match self.current_epoch().await {
                Some(now) if now == before => {}
                Some(_) => return gone("a redis master restarted or was replaced"),
                None => continue,
            }
            self.counters.retried.fetch_add(1, Ordering::Relaxed);
            let r = self.attempt(op).await;
            match r {
                Err(e) if expired(&e) => {
                    self.counters.expired.fetch_add(1, Ordering::Relaxed);
                    let _ = self.seen::<()>(Ok(()));
                    return gone("the operation outlived its record");
                }
                r => {
                    if let Ok(ran) = self.seen(r) {
                        return Ok(ran);
                    }
                }
            }
        }
    }

    /// Every master's `run_id` as last read (`None` before the first reading).
    pub(super) fn epoch(&self) -> Option<String> {
        self.epoch.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads the servers now (`server.rs`) and records what they are: their epoch, the facts
    /// `/v1/status` shows, how hand-outs are confirmed. When a master restarted or was
    /// replaced, targets this instance registered may be gone, so they are registered again on
    /// their next use. `None` when Redis cannot be read.
    pub(super) async fn current_epoch(&self) -> Option<String> {
        let facts = super::server::read(&self.conn).await.ok()?;
        let now = facts.epoch();
        {
            let mut epoch = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
            if epoch.as_ref().is_some_and(|before| *before != now) {
                tracing::warn!(
                    "a redis master restarted or was replaced; registering live targets again"
                );
                self.known.lock().unwrap_or_else(|e| e.into_inner()).clear();
            }
            *epoch = Some(now.clone());
        }
        if let Some(durable) = &self.durable {
            durable.update(Some(&facts));
        }
        self.note_facts(facts);
        Some(now)
    }
}
