//! The store factories the conformance suite runs against: the embedded store, one real
//! `redis-server`, and a real three-master Redis Cluster. Each test starts its own backend, so
//! no two tests share a key or a server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use captcha_gateway::engine::MemoryStore;
use captcha_gateway::engine::Store;
use captcha_gateway::engine::store::redis::{RedisSettings, RedisStore};
use captcha_gateway::engine::store::{Arrival, ClaimId, WaiterId};
use captcha_gateway::model::{Answer, SolveRequest, Target, TargetPolicy};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::support::redis::{RedisCluster, RedisServer};

/// Callers in the suite need this much life left on an answer.
pub const MIN_REMAINING: u64 = 10_000;

/// Store settings a test may shorten. The embedded store has no leases or locks (one process
/// never loses its own claims) and takes record lifetimes as `sweep` arguments; Redis applies
/// them as key lifetimes, so a test passes the same numbers to both.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// How long a waiter or claim stays counted without its instance renewing it.
    pub lease: Duration,
    /// How long a reusable target's leader may keep renewing its lock (a lease of `lease`).
    pub lock_ttl: Duration,
    /// How long finished task records stay readable.
    pub retention: Duration,
    /// How long a pending task record may live.
    pub pending_limit: Duration,
    /// How long an empty target stays known after its last use (`target_idle_s`).
    pub target_idle: Duration,
    /// Local claim batches (`redis_pool_batch`, on by default); the embedded store has none.
    pub batches: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        let defaults = RedisSettings::new(Vec::new(), false);
        Self {
            // Far longer than any test's explicit clock runs: no claim expires unless a test
            // says so (the model has no crashed instances).
            lease: Duration::from_secs(30 * 24 * 3600),
            lock_ttl: defaults.lock_ttl,
            retention: defaults.retention,
            pending_limit: defaults.pending_ttl,
            target_idle: defaults.target_idle,
            batches: true,
        }
    }
}

/// A store backend: its servers (if any) live as long as the value.
pub trait Backend: Sized + 'static {
    async fn start(tuning: Tuning) -> Self;
    /// One gateway instance on this backend. The embedded store is one process: every instance
    /// is the same store. On Redis each is a new connection with its own instance id.
    async fn instance(&self) -> Arc<dyn Store>;
    /// Scripts the servers have run so far (`INFO commandstats`), where there are servers.
    async fn scripts_run(&self) -> Option<u64> {
        None
    }
}

pub struct Memory(Arc<MemoryStore>);

impl Backend for Memory {
    async fn start(tuning: Tuning) -> Self {
        Memory(Arc::new(MemoryStore::with_target_idle(tuning.target_idle)))
    }

    async fn instance(&self) -> Arc<dyn Store> {
        self.0.clone()
    }
}

/// Either Redis topology, with the settings every instance connects with.
pub struct Redis<T> {
    /// Kept for its lifetime: the servers stop when the backend drops.
    _servers: T,
    urls: String,
    cluster: bool,
    tuning: Tuning,
}

pub type SingleRedis = Redis<RedisServer>;
pub type ClusterRedis = Redis<RedisCluster>;

impl<T> Redis<T> {
    /// `EVALSHA` and `EVAL` calls summed over every server.
    async fn scripts_on_servers(&self) -> u64 {
        let mut total = 0;
        for url in self.urls.split(',') {
            let client = redis::Client::open(url).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut conn)
                .await
                .unwrap();
            total += info
                .lines()
                .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
                .filter_map(|l| {
                    l.split("calls=")
                        .nth(1)?
                        .split(',')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum::<u64>();
        }
        total
    }

    /// A new instance and the token that stops its lease renewer and inbox reader (its death).
    pub async fn connect(&self) -> (RedisStore, CancellationToken) {
        self.connect_tuned(self.tuning).await
    }

    /// Like [`Redis::connect`], with this instance's own settings.
    pub async fn connect_tuned(&self, tuning: Tuning) -> (RedisStore, CancellationToken) {
        let mut settings = RedisSettings::new(
            self.urls.split(',').map(str::to_owned).collect(),
            self.cluster,
        );
        settings.lease = tuning.lease;
        settings.lock_ttl = tuning.lock_ttl;
        settings.retention = tuning.retention;
        settings.pending_ttl = tuning.pending_limit;
        settings.target_idle = tuning.target_idle;
        if !tuning.batches {
            settings.pool_batch = 0;
        }
        // The promises are checked on the tests' explicit clock; Redis time itself is checked by
        // the lapse tests and the fault suite.
        settings.explicit_clock = true;
        let life = CancellationToken::new();
        let store = RedisStore::connect(settings, life.clone())
            .await
            .expect("redis store connects");
        (store, life)
    }
}

impl Backend for SingleRedis {
    async fn start(tuning: Tuning) -> Self {
        let servers = RedisServer::start();
        let urls = servers.url();
        Redis {
            _servers: servers,
            urls,
            cluster: false,
            tuning,
        }
    }

    async fn instance(&self) -> Arc<dyn Store> {
        Arc::new(self.connect().await.0)
    }

    async fn scripts_run(&self) -> Option<u64> {
        Some(self.scripts_on_servers().await)
    }
}

impl Backend for ClusterRedis {
    async fn start(tuning: Tuning) -> Self {
        let servers = RedisCluster::start();
        let urls = servers.urls();
        Redis {
            _servers: servers,
            urls,
            cluster: true,
            tuning,
        }
    }

    async fn instance(&self) -> Arc<dyn Store> {
        Arc::new(self.connect().await.0)
    }

    async fn scripts_run(&self) -> Option<u64> {
        Some(self.scripts_on_servers().await)
    }
}

static NEXT: AtomicU64 = AtomicU64::new(1);

fn next() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A fresh digit-only task id (as the compatible API makes them).
pub fn task_id() -> String {
    (900_000_000 + next()).to_string()
}

/// A fresh single-use (poolable) target per call, so cases never share keys.
pub fn target() -> Target {
    let req = SolveRequest::recaptcha_v2(format!("6Le-conf-{}", next()), "https://example.com/");
    Target::of(&req, TargetPolicy::default())
}

/// An answer solved at `now` with `left` ms of life.
pub fn answer(text: impl Into<String>, now: u64, left: u64) -> Answer {
    Answer {
        text: text.into(),
        user_agent: None,
        solved_at: now,
        expires_at: now + left,
        upstream: None,
    }
}

/// A new caller of `store`'s instance (`<instance>:<seq>`, as the engine makes them).
pub fn waiter(store: &dyn Store) -> WaiterId {
    WaiterId::new(store.instance(), next())
}

/// What an arrival decided, for assertions that name it.
pub type Mailbox = oneshot::Receiver<captcha_gateway::engine::Delivery>;

/// A caller arrives and must be told to start a task.
pub async fn arrive_start(store: &dyn Store, t: &Target, now: u64) -> (WaiterId, Mailbox, ClaimId) {
    let w = waiter(store);
    match store.arrive(t, &w, now, MIN_REMAINING).await.unwrap() {
        Arrival::Start(rx, claim) => (w, rx, claim),
        other => panic!("expected to start a task, got {other:?}"),
    }
}

/// A caller arrives and must be told to wait for a running task.
pub async fn arrive_wait(store: &dyn Store, t: &Target, now: u64) -> (WaiterId, Mailbox) {
    let w = waiter(store);
    match store.arrive(t, &w, now, MIN_REMAINING).await.unwrap() {
        Arrival::Wait(rx) => (w, rx),
        other => panic!("expected to wait for a running task, got {other:?}"),
    }
}

/// A caller arrives and must be served from the pool: the answer's text.
pub async fn arrive_pooled(store: &dyn Store, t: &Target, now: u64) -> String {
    match store
        .arrive(t, &waiter(store), now, MIN_REMAINING)
        .await
        .unwrap()
    {
        Arrival::Pooled(a) => a.text,
        other => panic!("expected a pooled answer, got {other:?}"),
    }
}

/// What reached a mailbox (bounded: a store that never delivers fails the test).
pub async fn received(rx: Mailbox) -> captcha_gateway::engine::Delivery {
    tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .expect("a delivery within 30 s")
        .expect("the store kept the mailbox")
}

/// The delivery in a mailbox: an answer's text, or the failure's code.
pub async fn delivered(rx: Mailbox) -> Result<String, String> {
    received(rx).await.map(|a| a.text).map_err(|f| f.code)
}

/// True when nothing has been delivered to `rx` yet (it stays open and empty).
pub fn still_waiting(rx: &mut Mailbox) -> bool {
    matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty))
}

/// The store's counters for `t`.
pub async fn figures(store: &dyn Store, t: &Target) -> captcha_gateway::engine::TargetFigures {
    store
        .figures()
        .await
        .unwrap()
        .into_iter()
        .find(|f| f.id == t.id)
        .unwrap_or_else(|| panic!("no figures for {}", t.label))
}
