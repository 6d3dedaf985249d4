//! `worker --seed-queue`: seed 003's list protocol, so a producer written for the seed works
//! unchanged (docs/QUEUE.md "Seed 003 list compatibility"). The producer `RPUSH`es
//! `{"id","method","params"}` entries to `captcha:queue` and reads `captcha:results` by task id;
//! the seed's worker lost a task whenever it died between its `BLPOP` and its result, kept results
//! forever and solved one task at a time.
//!
//! Here an entry moves atomically from the queue to this consumer's processing list
//! (`captcha:processing:<consumer>`) and leaves it only in the script that writes its result
//! (the result is written only by the consumer that still holds the entry). Consumers beat in
//! `captcha:consumers`; a consumer silent for its lease and a beat is dead and any worker gives
//! its entries back to the queue. Results are indexed by finish time and swept after the
//! retention. Solves go through the engine at queued
//! priority, so pools, coalescing and the fleet-wide thread budget apply.
//!
//! Owns: the seed's key names ([`keys`]), reading entries ([`entry`]), the result shape
//! ([`outcome`]), the scripts' calls (`lists`) and the consumer ([`Seed`], a `queue::worker`
//! source: its takes, each entry's end, its heartbeat and sweep).
//! Does not own: the loop and the stop (`queue::worker`), the `worker` command, the engine.

mod consume;
pub mod entry;
pub mod keys;
mod lists;
mod metrics;
pub mod outcome;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use self::consume::Seed;
use self::keys::SeedKeys;
use self::lists::Lists;
pub use self::metrics::SeedFigures;
use crate::engine::Engine;
use crate::queue::QueueSettings;
use crate::redis_base::{Conn, RedisTarget};

/// How the seed mode behaves; every default in `impl Default` with its reason.
#[derive(Debug, Clone)]
pub struct SeedSettings {
    /// Key prefix: `captcha`, the seed's (the worker's `--queue` name).
    pub prefix: String,
    /// A consumer silent this long is dead and its entries go back to the queue; it beats every
    /// third of it.
    pub lease: Duration,
    /// How long results stay in the results hash after they are written.
    pub retention: Duration,
    /// How long one entry's solve may take.
    pub solve_timeout: Duration,
    /// Block time of the take that waits on an empty queue: also how long a stop may wait for it.
    pub block: Duration,
    /// How often the retention sweep runs.
    pub sweep_every: Duration,
}

impl Default for SeedSettings {
    fn default() -> Self {
        Self {
            prefix: "captcha".into(),
            // The worker's `--lease-s` default, its instance's lease: beats every second.
            lease: crate::engine::store::redis::DEFAULT_LEASE,
            // The worker's `--result-ttl-s` default: the seed's producer reads within 180 s.
            retention: Duration::from_secs(3600),
            // The engine's task timeout: the seed's worker polled 120 s after its submit.
            solve_timeout: Duration::from_secs(180),
            // Short, so a stop is seen within a second without dropping a blocked take (which
            // could move an entry after this consumer handed its list back).
            block: Duration::from_secs(1),
            // A minute: results outlive their retention by at most that.
            sweep_every: Duration::from_secs(60),
        }
    }
}

impl SeedSettings {
    /// The seed mode's settings from the queue's, which the `worker` command reads for either
    /// mode: the queue's name is the key prefix (`captcha`, the seed's, by default), its lease
    /// how long a silent consumer lives, its result retention the results'; a solve may take
    /// `solve_timeout`.
    pub fn from_queue(queue: &QueueSettings, solve_timeout: Duration) -> Self {
        let retention = queue.result_ttl;
        SeedSettings {
            prefix: queue.name.clone(),
            lease: queue.lease,
            retention,
            solve_timeout,
            // A quarter of the retention, at most a minute: results outlive it by that much at
            // most.
            sweep_every: (retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(60)),
            ..SeedSettings::default()
        }
    }
}

/// Counters of one seed consumer, for logs and `/metrics`.
#[derive(Debug, Default)]
pub struct SeedStats {
    pub solved: AtomicU64,
    /// Solves that ended with an error result.
    pub failed: AtomicU64,
    /// Entries with an id the parser refused (error result written).
    pub refused: AtomicU64,
    /// Entries without a usable id (dropped).
    pub unreadable: AtomicU64,
    /// Results not written because the entry had been given to another consumer (this one was
    /// taken for dead while it solved it).
    pub duplicates: AtomicU64,
    /// Entries of dead consumers this one gave back to the queue.
    pub recovered: AtomicU64,
    /// Times this consumer's beat found it had been taken for dead (a take may register it
    /// again first, so [`lost`](Self::lost) is the surer sign).
    pub taken_for_dead: AtomicU64,
    /// Entries this consumer finished after they had been given back to the queue (it was
    /// taken for dead while it held them).
    pub lost: AtomicU64,
    /// Results removed by the retention sweep.
    pub swept: AtomicU64,
    pub redis_errors: AtomicU64,
}

impl SeedStats {
    fn add(&self, counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    /// The seed's key names have no hash tag: its scripts would span Cluster slots.
    #[error(
        "--seed-queue needs a single Redis server: the seed's key names span Redis Cluster slots"
    )]
    Cluster,
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// The seed consumer `consumer` (`<hostname>-<random boot id>`, never reused) of the queue at
/// `target`, for `queue::worker` to run.
pub async fn open(
    engine: Engine,
    target: &RedisTarget,
    settings: SeedSettings,
    consumer: &str,
    stats: Arc<SeedStats>,
) -> Result<Arc<Seed>, SeedError> {
    if target.cluster {
        return Err(SeedError::Cluster);
    }
    let conn = Conn::open(target, target.response_timeout).await?;
    // Blocking takes on their own connection, patient for longer than they block.
    let blocking = Conn::open(target, settings.block + target.response_timeout).await?;
    let keys = SeedKeys::new(&settings.prefix);
    tracing::info!(consumer, queue = %keys.queue(), "seed queue: consuming");
    let lists = Lists::new(conn, keys, consumer, settings.retention);
    Ok(Seed::new(engine, lists, blocking, settings, stats))
}
