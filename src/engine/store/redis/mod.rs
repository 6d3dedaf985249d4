//! The Redis store: the same promises as the embedded store, fleet-wide. Every multi-step
//! operation is one Lua script (`lua/`, contract header on top); every key name comes from
//! [`keys`]; every script's keys share one hash tag, so Redis Cluster works.
//!
//! When Redis cannot be reached, operations fail with [`StoreError::Unavailable`]; the engine
//! then solves directly (degraded, no pool), finished answers still reach this instance's own
//! waiters, and task records live in a local fallback until Redis returns.

pub mod call;
mod clock;
mod durable;
mod fanout;
mod held;
mod keys;
mod live;
mod mail;
mod ops;
mod reply;
mod server;
mod shared;
mod single;
mod takeover;
mod tasks;
mod wake;

use crate::redis_base::{Conn, RedisTarget, Wakeups};
pub use durable::Durability;
pub use server::{ServerFacts, ServerProblem};

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;

use self::fanout::Local;
use self::wake::{inbox_reader, renewer};
use super::{
    Arrival, Backend, ClaimId, Finished, Housekeeping, IdempotencyKeys, Reusable, SharedArrival,
    SingleUse, StoreError, TargetCounts, TargetFigures, TaskOutcome, TaskRecords, WaiterId,
};
use crate::engine::{Delivery, SolveFailure, TaskRecord, TaskState};
use crate::model::{Answer, Millis, Reuse, Target, UpstreamRef};

/// How long an instance (a gateway or a worker) that stopped renewing is still counted alive.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(3);

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
    /// No hand-off (mail, pass-on, pool, local) gives out an answer with less left than this;
    /// serve sets it from the engine's `min_remaining`.
    pub min_remaining: Duration,
    /// How long an operation's reply is kept, so running it again changes nothing (`ops.rs`).
    pub op_ttl: Duration,
    /// How long an operation whose outcome is unknown is retried; well inside `op_ttl`.
    pub unknown_retry: Duration,
    /// Tests only: scripts take `now` from the caller instead of Redis `TIME`, so the store's
    /// promises can be checked on a clock the test controls. Never set in production, where
    /// instance clocks must not matter.
    pub explicit_clock: bool,
    /// Run on a server whose `maxmemory-policy` evicts keys (refused at start otherwise).
    pub allow_eviction: bool,
    /// What a hand-out waits for before its answer leaves the gateway (`durable.rs`).
    pub durability: Durability,
    /// The most pooled answers one local claim batch takes (`held.rs`); 0 turns them off.
    pub pool_batch: u32,
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
            // The one lease of every instance and worker (docs/QUEUE.md "Leases, reclaim, retries, dead letters"): a crashed
            // instance's demand is re-covered and its provider tasks adopted within about 4 s;
            // renewing every second survives a missed beat.
            lease: DEFAULT_LEASE,
            mail_ttl: Duration::from_secs(30),
            // The engine's task timeout (180 s) plus slack.
            lock_ttl: Duration::from_secs(210),
            block: Duration::from_secs(5),
            retention: Duration::from_secs(20 * 60),
            pending_ttl: Duration::from_secs(15 * 60),
            target_idle: crate::engine::EngineSettings::default().target_idle,
            min_remaining: crate::engine::EngineSettings::default().min_remaining,
            // Twice the retries' horizon, and longer than any entry's renewal outlives its end
            // (the markers that stop a restore are kept as long). Records cost ~200 bytes per
            // operation for this long: 60k keys at 100 operations a second.
            op_ttl: Duration::from_secs(10 * 60),
            // Covers a Sentinel or Cluster failover (tens of seconds) with room to spare.
            unknown_retry: Duration::from_secs(5 * 60),
            explicit_clock: false,
            // Evicting keys breaks the promises silently; running anyway must be a choice.
            allow_eviction: false,
            // Off: a hand-out costs one round trip, as a single server without persistence
            // needs (docs/REDIS.md says which faults each setting covers).
            durability: Durability::default(),
            // About 100 ms of a busy target's hits at a few hundred a second; a batch is sized
            // to the target's rate below that (docs/REDIS.md "Local claim batches").
            pool_batch: 64,
        }
    }
}

/// The largest `pool_batch` (`redis_pool_batch`).
pub const MAX_POOL_BATCH: u32 = held::MAX_BATCH;

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
    /// Every master's `run_id` last seen: a change means one restarted or was replaced
    /// (`ops.rs`).
    epoch: Mutex<Option<String>>,
    /// What the servers were when last read (`server.rs`), for `/v1/status`.
    facts: Mutex<Option<ServerFacts>>,
    /// Redis's time as this instance reads it, to stamp operations (`clock.rs`).
    redis_clock: clock::RedisClock,
    /// Hand-outs' own connections and their confirmation, when durable hand-outs are on.
    durable: Option<Arc<durable::Durable>>,
    counters: Counters,
    /// Set once `connect` returned: later readings log what is wrong with the servers.
    started: AtomicBool,
    /// The latest caller time, for a store on an explicit clock (`ops.rs`).
    clock: Arc<AtomicU64>,
    next_id: AtomicU64,
    /// Reusable targets this instance leads, whose locks the renewer extends.
    leads: takeover::Leads,
    /// Local claim batches in hand (`held.rs`).
    held: held::Held,
}

/// What `/v1/status` shows of the Redis store (docs/API.md "Status") and `/metrics` counts.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ServerReport {
    /// The servers as last read; `None` before Redis was ever reached.
    pub server: Option<ServerFacts>,
    /// What is wrong with them for this gateway's settings (also logged as errors).
    pub problems: Vec<String>,
    /// Replicas a hand-out waits for (`redis_handout_replicas`).
    pub handout_replicas: u32,
    /// Whether a hand-out waits for the master's disk (`redis_handout_fsync`).
    pub handout_fsync: bool,
    /// False while hand-outs cannot be confirmed (callers are solved alone meanwhile).
    pub handouts_confirmed: bool,
    /// Answers withheld because their hand-out was not confirmed in time, since start.
    pub handouts_withheld: u64,
    /// Operations whose reply was lost (they may or may not have run), since start.
    pub operations_unknown: u64,
    /// Operations sent again after their reply was lost, since start.
    pub operations_retried: u64,
    /// Operations sent again after Redis refused them during a failover, since start.
    pub operations_refused_retried: u64,
    /// Answers given up because their task's finish had an unknown outcome across a master's
    /// restart or replacement (`single::refinish`), since start: at most this much waste.
    pub answers_given_up: u64,
    /// Operations a script refused because their record may have expired, since start.
    pub operations_expired: u64,
    /// Waiting callers let go to be solved alone because their answer could not be handed
    /// out durably, or because renewal found their mail passed on or taken by a lost reply,
    /// since start.
    pub callers_released: u64,
    /// Waiters and claims renewal put back after Redis forgot them, since start.
    pub leases_restored: u64,
}

/// What became of operations whose outcome was unknown.
#[derive(Default)]
struct Counters {
    /// Operations whose reply was lost: they may or may not have run.
    unknown: AtomicU64,
    /// Operations sent again after their reply was lost.
    retried: AtomicU64,
    /// Operations sent again after Redis refused them for a passing state (`ops::passing`).
    refused_retried: AtomicU64,
    /// Answers whose finish stayed unknown, finished again without them.
    given_up: AtomicU64,
    /// Operations a script refused because their record may have expired.
    expired: AtomicU64,
    /// Waiting callers let go to be solved alone because their answer could not be handed out
    /// durably.
    released: AtomicU64,
    /// Waiters and claims a renewal put back after Redis had forgotten them (it was away
    /// longer than a lease, or restarted empty).
    restored: AtomicU64,
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

impl RedisStore {
    /// Connects and starts this instance's inbox reader and lease renewer, which stop with
    /// `shutdown`. A single server may be down at this point (the store starts degraded).
    /// The other leases this fleet's instances said they run with in the last hour (one lease
    /// for the whole fleet is right; `connect` warns about any other).
    pub async fn other_leases(&self) -> Result<Vec<Duration>, StoreError> {
        self.inner.other_leases().await.map_err(unavailable)
    }

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
        let durable = match settings.durability.is_on() {
            true => Some(Arc::new(
                durable::Durable::open(settings.durability, &settings.target)
                    .await
                    .map_err(unavailable)?,
            )),
            false => None,
        };
        // On an explicit clock (tests of the scripts' promises) holds are timed on it too, as
        // Redis times their leases on the time the scripts are given.
        let clock = Arc::new(AtomicU64::new(0));
        let held = match settings.explicit_clock {
            true => held::Held::on_explicit_clock(settings.pool_batch, clock.clone()),
            false => held::Held::new(settings.pool_batch),
        };
        // Readers of a task another instance runs are woken when its record is finished.
        let finished = Arc::new(Wakeups::new(
            settings.target.pubsub_client().map_err(unavailable)?,
            keys::TASKS_FINISHED.to_owned(),
            shutdown.clone(),
        ));
        let inner = Arc::new(Inner {
            conn,
            tasks: tasks::Tasks::new(settings.retention, settings.pending_ttl, finished),
            settings,
            instance,
            local: Local::default(),
            healthy: AtomicBool::new(true),
            known: Mutex::default(),
            epoch: Mutex::default(),
            facts: Mutex::default(),
            redis_clock: clock::RedisClock::default(),
            durable,
            counters: Counters::default(),
            started: AtomicBool::new(false),
            clock,
            next_id: AtomicU64::new(1),
            leads: takeover::Leads::default(),
            held,
        });
        inner.read_server().await;
        inner.say_alive().await;
        if let Ok(others) = inner.other_leases().await {
            for other in others {
                tracing::warn!(
                    lease_s = inner.settings.lease.as_secs_f64(),
                    other_s = other.as_secs_f64(),
                    "another instance of this fleet runs with a different lease (redis_lease_s, a worker's --lease-s): the shorter takes the longer for dead too early, and its tasks are paid for twice; give every instance the same"
                );
            }
        }
        inner.started.store(true, Ordering::Relaxed);
        if let Some(durable) = &inner.durable {
            tokio::spawn(durable::prober(durable.clone(), shutdown.clone()));
        }
        tokio::spawn(inbox_reader(inner.clone(), blocking, shutdown.clone()));
        tokio::spawn(renewer(inner.clone(), shutdown));
        Ok(RedisStore { inner })
    }

    /// Ends every local claim batch in hand, so the answers it did not hand out go back to the
    /// pool for the rest of the fleet; none is kept from then on. The instance calls it when it
    /// stops.
    pub async fn hand_back(&self) {
        let batches = self.inner.held.stop();
        let releases = batches.into_iter().map(|(target_id, release)| async move {
            self.inner.unhold(&target_id, release).await;
        });
        futures::future::join_all(releases).await;
    }

    /// What keeps the gateway from running on the servers as last read: an evicting policy not
    /// allowed, a durability setting they cannot honour. Empty when they could not be read.
    pub fn problems(&self) -> Vec<ServerProblem> {
        let s = &self.inner.settings;
        self.inner
            .facts()
            .map(|f| f.problems(s.allow_eviction, s.durability.fsync))
            .unwrap_or_default()
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

    /// Reads the servers (their facts and epoch) and Redis's clock; logs what is wrong with them
    /// when that changed.
    async fn read_server(&self) {
        if self.redis_clock.sync(&self.conn).await.is_err() {
            return;
        }
        self.current_epoch().await;
    }

    fn facts(&self) -> Option<ServerFacts> {
        self.facts.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Keeps the servers' facts; a problem that appeared since the last reading (a failover to
    /// a server set up otherwise) is logged as an error once.
    fn note_facts(&self, facts: ServerFacts) {
        let s = &self.settings;
        let new = facts.problems(s.allow_eviction, s.durability.fsync);
        let mut kept = self.facts.lock().unwrap_or_else(|e| e.into_inner());
        let old = kept
            .as_ref()
            .map(|f| f.problems(s.allow_eviction, s.durability.fsync))
            .unwrap_or_default();
        // The reading made while connecting is the start's to refuse (`serve`'s one line).
        let quiet = !self.started.load(Ordering::Relaxed);
        for p in new.iter().filter(|p| !quiet && !old.contains(p)) {
            tracing::error!(setting = p.setting, "{}; {}", p.problem, p.fix);
        }
        *kept = Some(facts);
    }

    /// A fresh id of this instance: `<instance>:<prefix><n>`.
    fn new_id(&self, prefix: &str) -> String {
        format!(
            "{}:{prefix}{}",
            self.instance,
            self.next_id.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn new_claim(&self) -> String {
        self.new_id("c")
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
}

impl Backend for RedisStore {
    fn instance(&self) -> &str {
        &self.inner.instance
    }

    fn backend(&self) -> &'static str {
        "redis"
    }

    fn degraded(&self) -> bool {
        let unconfirmed = self.inner.durable.as_ref().is_some_and(|d| !d.ok());
        !self.inner.healthy.load(Ordering::Relaxed) || unconfirmed
    }

    fn lease(&self) -> Option<Duration> {
        Some(self.inner.settings.lease)
    }

    fn server_report(&self) -> Option<ServerReport> {
        let inner = &self.inner;
        let s = &inner.settings;
        let durable = inner.durable.as_deref();
        Some(ServerReport {
            problems: self
                .problems()
                .into_iter()
                .map(|p| format!("{}: {}", p.setting, p.problem))
                .collect(),
            server: inner.facts(),
            handout_replicas: s.durability.replicas,
            handout_fsync: s.durability.fsync,
            handouts_confirmed: durable.is_none_or(|d| d.ok()),
            handouts_withheld: durable.map_or(0, |d| d.withheld()),
            operations_unknown: inner.counters.unknown.load(Ordering::Relaxed),
            operations_retried: inner.counters.retried.load(Ordering::Relaxed),
            operations_refused_retried: inner.counters.refused_retried.load(Ordering::Relaxed),
            answers_given_up: inner.counters.given_up.load(Ordering::Relaxed),
            operations_expired: inner.counters.expired.load(Ordering::Relaxed),
            callers_released: inner.counters.released.load(Ordering::Relaxed),
            leases_restored: inner.counters.restored.load(Ordering::Relaxed),
        })
    }
}

#[async_trait]
impl SingleUse for RedisStore {
    fn arrive_at_once(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Option<Answer> {
        single::arrive_at_once(&self.inner, target, now, min_remaining_ms)
    }

    async fn arrive(
        &self,
        target: &Target,
        waiter: &WaiterId,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<Arrival, StoreError> {
        single::arrive(&self.inner, target, waiter, now, min_remaining_ms).await
    }

    async fn finish(
        &self,
        target: &Target,
        claim: &ClaimId,
        outcome: TaskOutcome,
        poolable: bool,
        now: Millis,
    ) -> Result<Finished, StoreError> {
        self.inner
            .finish(target, claim, outcome, poolable, now)
            .await
    }

    async fn abandon(
        &self,
        target: &Target,
        waiter: &WaiterId,
        delivered: Option<Delivery>,
        poolable: bool,
        now: Millis,
    ) -> Result<(), StoreError> {
        self.inner.local.take_waiter(&waiter.0);
        let answer = match delivered {
            Some(Ok(a)) => Some(a),
            _ => None,
        };
        self.inner
            .abandon(&target.id, &waiter.0, answer, ops::Pk::of(poolable), now)
            .await
    }

    async fn put(&self, target: &Target, answer: Answer, now: Millis) -> Result<(), StoreError> {
        self.inner.note_target(target, now).await?;
        self.inner.put(target, answer, now).await
    }

    async fn reserve(
        &self,
        target: &Target,
        size: u32,
        now: Millis,
    ) -> Result<Vec<ClaimId>, StoreError> {
        self.inner.note_target(target, now).await?;
        self.inner.reserve(target, size, now).await
    }

    async fn counts(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<TargetCounts, StoreError> {
        self.inner.counts(target, now, min_remaining_ms).await
    }

    async fn cover(&self, target: &Target, now: Millis) -> Result<Vec<ClaimId>, StoreError> {
        self.inner.cover(target, now).await
    }

    async fn note_upstream(
        &self,
        target: &Target,
        claim: &ClaimId,
        task: &UpstreamRef,
        keep: Duration,
    ) -> Result<(), StoreError> {
        self.inner.note_upstream(target, claim, task, keep).await
    }

    fn adopted(&self, claim: &ClaimId) -> Option<UpstreamRef> {
        self.inner.local.take_adoption(&claim.0)
    }
}

#[async_trait]
impl Reusable for RedisStore {
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
}

#[async_trait]
impl TaskRecords for RedisStore {
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

    async fn instance_alive(&self, instance: &str) -> Result<bool, StoreError> {
        let mut conn = self.inner.conn();
        let r = conn.exists::<_, bool>(keys::alive(instance)).await;
        self.inner.seen(r)
    }
}

#[async_trait]
impl IdempotencyKeys for RedisStore {
    async fn bound_key(&self, scoped: &str, _now: Millis) -> Result<Option<String>, StoreError> {
        // Redis expires the binding itself (PX), on its own clock.
        let mut conn = self.inner.conn();
        let r = conn
            .get::<_, Option<String>>(keys::idempotency(scoped))
            .await;
        self.inner.seen(r)
    }

    async fn bind_key(
        &self,
        scoped: &str,
        expected: Option<&str>,
        value: &str,
        ttl_ms: u64,
        _now: Millis,
    ) -> Result<bool, StoreError> {
        let mut conn = self.inner.conn();
        let call = call::IdemBindCall {
            expected: expected.map(str::to_owned),
            value: value.to_owned(),
            ttl_ms: ttl_ms.max(1),
        };
        let r = call
            .invocation(scoped)
            .invoke_async::<redis::Value>(&mut conn)
            .await;
        Ok(reply::Bound::read(self.inner.seen(r)?)?.bound)
    }
}

#[async_trait]
impl Housekeeping for RedisStore {
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
