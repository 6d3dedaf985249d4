//! The Redis store: the same promises as the embedded store, fleet-wide. Every multi-step
//! operation is one Lua script (`lua/`, contract header on top); every key name comes from
//! [`keys`]; every script's keys share one hash tag, so Redis Cluster works.
//!
//! When Redis cannot be reached, operations fail with [`StoreError::Unavailable`]; the engine
//! then solves directly (degraded, no pool), finished answers still reach this instance's own
//! waiters, and task records live in a local fallback until Redis returns.

mod conn;
mod fanout;
mod keys;
mod live;
mod mail;
mod scripts;
mod shared;
mod takeover;
mod tasks;
mod wake;

pub use conn::RedisTarget;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use redis::{AsyncCommands, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use self::conn::Conn;
use self::fanout::{Local, LocalWaiter};
use self::wake::{inbox_reader, renewer};
use super::{
    Arrival, ClaimId, Finished, SharedArrival, Store, StoreError, TargetCounts, TargetFigures,
    TaskOutcome, WaiterId,
};
use crate::engine::{Delivery, SolveFailure, TaskRecord, TaskState};
use crate::model::{Answer, Millis, Reuse, Target};

/// How the Redis store behaves; every default in `impl Default` with its reason.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub target: RedisTarget,
    /// How long a waiter or a running task stays counted without its instance renewing it: a
    /// crashed instance's claims expire within this (renewed every third of it).
    pub lease: Duration,
    /// How long delivered mail waits for its instance to take it before it is passed on.
    pub mail_ttl: Duration,
    /// How long a reusable target's leader may keep renewing its lock (the lock itself is a
    /// lease, see `takeover.rs`): a task that never finishes lets it go after this.
    pub lock_ttl: Duration,
    /// Block time of the inbox reader's `BLPOP`.
    pub block: Duration,
    /// How long finished task records stay readable.
    pub retention: Duration,
    /// How long a pending task record may live (its solve always ends well before).
    pub pending_ttl: Duration,
    /// How long an empty target is kept after its last use (`retire.lua`); serve sets it from
    /// `target_idle_s`.
    pub target_idle: Duration,
}

impl RedisSettings {
    pub fn new(urls: Vec<String>, cluster: bool) -> Self {
        Self {
            target: RedisTarget {
                urls,
                cluster,
                // Loopback or one network hop: a second means it is down.
                connect_timeout: Duration::from_secs(1),
                // Every script is O(waiters of one target); two seconds means trouble.
                response_timeout: Duration::from_secs(2),
                ca_pem: None,
            },
            // Short enough that a crashed instance's demand is re-covered quickly, long enough
            // that renewing every 5 s survives a missed beat.
            lease: Duration::from_secs(15),
            mail_ttl: Duration::from_secs(30),
            // The engine's task timeout (180 s) plus slack.
            lock_ttl: Duration::from_secs(210),
            block: Duration::from_secs(5),
            retention: Duration::from_secs(20 * 60),
            pending_ttl: Duration::from_secs(15 * 60),
            target_idle: crate::engine::EngineSettings::default().target_idle,
        }
    }
}

pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    settings: RedisSettings,
    instance: String,
    local: Local,
    tasks: tasks::Tasks,
    healthy: AtomicBool,
    /// Targets this process registered in `cg:targets`, and when (see `live.rs`).
    known: Mutex<HashMap<String, Millis>>,
    next_id: AtomicU64,
    /// Reusable targets this instance leads, whose locks the renewer extends.
    leads: takeover::Leads,
}

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

fn poolable(target: &Target) -> &'static str {
    match target.kind.reuse() {
        Reuse::SingleUse { poolable: true } => "1",
        _ => "0",
    }
}

/// A script reply: its leading integer, then its strings.
fn split_reply(values: Vec<Value>) -> (i64, Vec<String>) {
    let mut iter = values.into_iter();
    let head = match iter.next() {
        Some(Value::Int(n)) => n,
        _ => 0,
    };
    (
        head,
        iter.filter_map(|v| redis::from_redis_value::<String>(v).ok())
            .collect(),
    )
}

impl RedisStore {
    /// Connects and starts this instance's inbox reader and lease renewer, which stop with
    /// `shutdown`. A single server may be down at this point (the store starts degraded).
    pub async fn connect(
        settings: RedisSettings,
        shutdown: CancellationToken,
    ) -> Result<RedisStore, StoreError> {
        let conn = Conn::open(&settings.target, settings.target.response_timeout)
            .await
            .map_err(unavailable)?;
        // The blocking reader gets its own connection, patient for longer than it blocks.
        let blocking = Conn::open(&settings.target, settings.block + Duration::from_secs(2))
            .await
            .map_err(unavailable)?;
        let instance = {
            use rand::Rng;
            format!("{:016x}", rand::rng().random::<u64>())
        };
        let inner = Arc::new(Inner {
            conn,
            tasks: tasks::Tasks::new(settings.retention, settings.pending_ttl),
            settings,
            instance,
            local: Local::default(),
            healthy: AtomicBool::new(true),
            known: Mutex::default(),
            next_id: AtomicU64::new(1),
            leads: takeover::Leads::default(),
        });
        tokio::spawn(inbox_reader(inner.clone(), blocking, shutdown.clone()));
        tokio::spawn(renewer(inner.clone(), shutdown));
        Ok(RedisStore { inner })
    }

    /// Whether Redis answers a `PING` now.
    pub async fn ping(&self) -> bool {
        let mut conn = self.inner.conn.clone();
        let ok = redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .is_ok();
        self.inner.healthy.store(ok, Ordering::Relaxed);
        ok
    }
}

impl Inner {
    fn conn(&self) -> Conn {
        self.conn.clone()
    }

    fn new_claim(&self) -> String {
        format!(
            "{}:c{}",
            self.instance,
            self.next_id.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn lease_end(&self, now: Millis) -> Millis {
        now + ms(self.settings.lease)
    }

    fn mail_ttl(&self) -> u64 {
        ms(self.settings.mail_ttl)
    }

    /// Records the outcome of a Redis call in the health flag.
    fn seen<T>(&self, r: redis::RedisResult<T>) -> Result<T, StoreError> {
        let was_healthy = self.healthy.swap(r.is_ok(), Ordering::Relaxed);
        if r.is_ok() && !was_healthy {
            // Redis may have come back empty: register targets again as they are used.
            self.known.lock().unwrap_or_else(|e| e.into_inner()).clear();
            tracing::info!("redis reachable again");
        }
        if let Err(e) = &r {
            tracing::debug!(error = %e, "redis call failed");
        }
        r.map_err(unavailable)
    }

    async fn run_target(
        &self,
        script: &redis::Script,
        target_id: &str,
        args: &[String],
    ) -> Result<Vec<Value>, StoreError> {
        let mut inv = script.prepare_invoke();
        for key in keys::target_keys(target_id) {
            inv.key(key);
        }
        for a in args {
            inv.arg(a);
        }
        let mut conn = self.conn();
        let r = inv.invoke_async::<Vec<Value>>(&mut conn).await;
        self.seen(r)
    }
}

/// Every element of a reply as a string (replies that are only waiter lists).
fn split_reply_all(values: Vec<Value>) -> Vec<String> {
    values
        .into_iter()
        .filter_map(|v| redis::from_redis_value::<String>(v).ok())
        .collect()
}

#[async_trait]
impl Store for RedisStore {
    fn instance(&self) -> &str {
        &self.inner.instance
    }

    fn degraded(&self) -> bool {
        !self.inner.healthy.load(Ordering::Relaxed)
    }

    async fn arrive(
        &self,
        target: &Target,
        waiter: &WaiterId,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<Arrival, StoreError> {
        let inner = &self.inner;
        inner.note_target(target, now).await?;
        let (tx, rx) = oneshot::channel();
        // Registered before the script runs, so a delivery racing the reply finds it.
        inner.local.add_waiter(
            &waiter.0,
            LocalWaiter {
                target: target.clone(),
                tx,
                poolable: poolable(target) == "1",
            },
        );
        let claim = inner.new_claim();
        let lease = inner.lease_end(now).to_string();
        let args = [
            now.to_string(),
            (now + min_remaining_ms).to_string(),
            waiter.0.clone(),
            lease.clone(),
            claim.clone(),
            lease,
            poolable(target).to_owned(),
            inner.mail_ttl().to_string(),
        ];
        let reply = match inner.run_target(&scripts::ARRIVE, &target.id, &args).await {
            Ok(v) => v,
            Err(e) => {
                inner.local.take_waiter(&waiter.0);
                return Err(e);
            }
        };
        let (code, mut rest) = split_reply(reply);
        let arrival = match code {
            1 => {
                inner.local.take_waiter(&waiter.0);
                let json = if rest.is_empty() {
                    String::new()
                } else {
                    rest.remove(0)
                };
                let answer: Answer = serde_json::from_str(&json).map_err(|e| {
                    StoreError::Unavailable(format!("unreadable pooled answer: {e}"))
                })?;
                Arrival::Pooled(answer)
            }
            2 => Arrival::Wait(rx),
            _ => {
                inner.local.add_claim(&claim, target);
                Arrival::Start(rx, ClaimId(claim))
            }
        };
        inner.notify(&target.id, rest).await;
        Ok(arrival)
    }

    async fn finish(
        &self,
        target: &Target,
        claim: &ClaimId,
        outcome: TaskOutcome,
        poolable: bool,
        now: Millis,
    ) -> Result<Finished, StoreError> {
        let inner = &self.inner;
        inner.local.remove_claim(&claim.0);
        let (code, mail_text) = match &outcome {
            TaskOutcome::Answer(a) => ("A", mail::answer_mail(a)),
            TaskOutcome::Failed(f) => ("F", mail::encode(&Err(f.clone()))),
            TaskOutcome::Stale => ("S", String::new()),
            TaskOutcome::Requeue => ("R", String::new()),
        };
        let restart = inner.new_claim();
        let args = [
            now.to_string(),
            claim.0.clone(),
            code.to_owned(),
            mail_text,
            if poolable { "1" } else { "0" }.to_owned(),
            restart.clone(),
            inner.lease_end(now).to_string(),
            inner.mail_ttl().to_string(),
        ];
        match inner.run_target(&scripts::FINISH, &target.id, &args).await {
            Ok(values) => {
                let (again, woken) = split_reply(values);
                inner.notify(&target.id, woken).await;
                if again == 1 {
                    inner.local.add_claim(&restart, target);
                    return Ok(Finished::Restart(ClaimId(restart)));
                }
                Ok(Finished::Done)
            }
            Err(e) => {
                // Redis is away: this instance's own waiters still get what they wait for.
                let delivery: Option<Delivery> = match outcome {
                    TaskOutcome::Answer(a) => Some(Ok(a)),
                    TaskOutcome::Failed(f) => Some(Err(f)),
                    TaskOutcome::Stale | TaskOutcome::Requeue => None,
                };
                if let Some(d) = delivery {
                    if let Some(w) = inner.local.take_any_waiter(&target.id) {
                        let _ = w.tx.send(d);
                        return Ok(Finished::Done);
                    }
                }
                Err(e)
            }
        }
    }

    async fn abandon(
        &self,
        target: &Target,
        waiter: &WaiterId,
        delivered: Option<Delivery>,
        poolable: bool,
        now: Millis,
    ) -> Result<(), StoreError> {
        let inner = &self.inner;
        inner.local.take_waiter(&waiter.0);
        let mail_text = match &delivered {
            Some(Ok(a)) => mail::answer_mail(a),
            _ => String::new(),
        };
        let args = [
            now.to_string(),
            waiter.0.clone(),
            mail_text,
            if poolable { "1" } else { "0" }.to_owned(),
            inner.mail_ttl().to_string(),
        ];
        let woken = split_reply_all(
            inner
                .run_target(&scripts::ABANDON, &target.id, &args)
                .await?,
        );
        inner.notify(&target.id, woken).await;
        Ok(())
    }

    async fn put(&self, target: &Target, answer: Answer, now: Millis) -> Result<(), StoreError> {
        let inner = &self.inner;
        inner.note_target(target, now).await?;
        let args = [
            now.to_string(),
            mail::answer_mail(&answer),
            inner.mail_ttl().to_string(),
        ];
        let woken = split_reply_all(inner.run_target(&scripts::PUT, &target.id, &args).await?);
        inner.notify(&target.id, woken).await;
        Ok(())
    }

    async fn reserve(&self, target: &Target, now: Millis) -> Result<ClaimId, StoreError> {
        let inner = &self.inner;
        inner.note_target(target, now).await?;
        let claim = inner.new_claim();
        inner
            .run_target(
                &scripts::RESERVE,
                &target.id,
                &[
                    claim.clone(),
                    inner.lease_end(now).to_string(),
                    now.to_string(),
                ],
            )
            .await?;
        inner.local.add_claim(&claim, target);
        Ok(ClaimId(claim))
    }

    async fn counts(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<TargetCounts, StoreError> {
        let inner = &self.inner;
        let args = [
            now.to_string(),
            (now + min_remaining_ms).to_string(),
            poolable(target).to_owned(),
            inner.mail_ttl().to_string(),
        ];
        let values = inner
            .run_target(&scripts::COUNTS, &target.id, &args)
            .await?;
        let mut nums = values.iter().take(3).map(|v| match v {
            Value::Int(n) => *n as u64,
            _ => 0,
        });
        let counts = TargetCounts {
            pooled: nums.next().unwrap_or(0),
            in_flight: nums.next().unwrap_or(0),
            waiting: nums.next().unwrap_or(0),
        };
        inner
            .notify(
                &target.id,
                split_reply_all(values.into_iter().skip(3).collect()),
            )
            .await;
        Ok(counts)
    }

    async fn cover(&self, target: &Target, now: Millis) -> Result<Vec<ClaimId>, StoreError> {
        let inner = &self.inner;
        let mine = inner.local.waiting_on(&target.id);
        if mine == 0 {
            return Ok(Vec::new());
        }
        let candidates: Vec<String> = (0..mine).map(|_| inner.new_claim()).collect();
        let mut args = vec![
            now.to_string(),
            inner.lease_end(now).to_string(),
            poolable(target).to_owned(),
            inner.mail_ttl().to_string(),
        ];
        args.extend(candidates.iter().cloned());
        let (n, woken) = split_reply(inner.run_target(&scripts::COVER, &target.id, &args).await?);
        inner.notify(&target.id, woken).await;
        let started: Vec<ClaimId> = candidates
            .into_iter()
            .take(n.max(0) as usize)
            .map(ClaimId)
            .collect();
        for c in &started {
            inner.local.add_claim(&c.0, target);
        }
        Ok(started)
    }

    async fn shared_arrive(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<SharedArrival, StoreError> {
        self.inner
            .shared_arrive(target, now, min_remaining_ms)
            .await
    }

    async fn shared_finish(
        &self,
        target: &Target,
        lead: u64,
        outcome: Result<Answer, SolveFailure>,
        now: Millis,
    ) -> Result<(), StoreError> {
        self.inner.shared_finish(target, lead, outcome, now).await
    }

    async fn shared_takeover(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<Option<u64>, StoreError> {
        self.inner
            .shared_takeover(target, now, min_remaining_ms)
            .await
    }

    async fn shared_evict(&self, target_id: &str) -> Result<(), StoreError> {
        let mut conn = self.inner.conn();
        let r = conn.del::<_, ()>(keys::shared(target_id)).await;
        self.inner.seen(r)
    }

    async fn create_task(&self, record: TaskRecord) -> Result<(), StoreError> {
        self.inner
            .tasks
            .create(&self.inner.conn(), &self.inner.healthy, record)
            .await
    }

    async fn finish_task(&self, id: &str, state: TaskState, now: Millis) -> Result<(), StoreError> {
        self.inner
            .tasks
            .finish(&self.inner.conn(), &self.inner.healthy, id, state, now)
            .await
    }

    async fn mark_reported(&self, id: &str) -> Result<bool, StoreError> {
        self.inner
            .tasks
            .mark_reported(&self.inner.conn(), &self.inner.healthy, id)
            .await
    }

    async fn get_task(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        self.inner
            .tasks
            .get(&self.inner.conn(), &self.inner.healthy, id)
            .await
    }

    async fn wait_task(&self, id: &str, wait: Duration) -> Result<Option<TaskRecord>, StoreError> {
        self.inner
            .tasks
            .wait(&self.inner.conn(), &self.inner.healthy, id, wait)
            .await
    }

    async fn sweep(
        &self,
        now: Millis,
        retention_ms: u64,
        pending_limit_ms: u64,
    ) -> Result<usize, StoreError> {
        let removed = self
            .inner
            .tasks
            .sweep_fallback(now, retention_ms, pending_limit_ms)
            .await;
        self.inner.sweep_targets(now).await?;
        Ok(removed)
    }

    async fn retire(&self, now: Millis, keep: &HashSet<String>) -> Result<usize, StoreError> {
        self.inner.retire_idle(now, keep).await
    }

    async fn figures(&self) -> Result<Vec<TargetFigures>, StoreError> {
        self.inner.live_figures().await
    }
}
