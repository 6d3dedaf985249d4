//! One account's thread budget, fleet-wide on Redis (docs/REDIS.md "Thread budget").
//!
//! Owns: this process's leases of the account's threads (a sorted set scored by expiry on
//! Redis time, a fence per grant, renewed every third of a lease, released when the task ends),
//! its waiters' places (registered in Redis so a refill elsewhere does not overtake a caller
//! here, in order of first arrival), waking them when a thread frees (Pub/Sub on a single server,
//! plus a recheck so a lost message only delays), the fleet's cap (`lua/budget_cap.lua`; the
//! proof of what the provider carried is this process's own, from its accepted submits), and
//! the fallback to an in-process budget while Redis cannot be asked.
//! Does not own: the rules' arithmetic twin in process (`MemoryBudget`, `CapRule`).
//!
//! Each Redis call and what happens when its reply is lost, it runs twice, Redis restarts
//! empty or this process pauses:
//! - acquire: retried under the same lease id, which answers the grant already made; given up
//!   (Redis unreachable), the id is released in the background, and an unrenewed grant lapses
//!   within one lease anyway.
//! - release: only its own id is removed, so a replay frees nothing else; a release that never
//!   arrives leaves the lease to lapse within one lease.
//! - renew: an extension run twice is the same extension; a lease found gone (this process
//!   paused past it, or Redis restarted empty) is counted lost and never put back.
//! - cap: a second cut inside the decrease gap changes nothing.

mod askers;
mod background;
mod call;
mod release;
mod reply;

pub use call::{BudgetCall, BudgetPrelude, CapChange, Follower, budget_channel, budget_keys};

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use redis::{RedisResult, Value};
use tokio::sync::Notify;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use self::askers::{Askers, MAX_FOLLOWERS};
use self::background::{listener, renewer};
use self::release::{Place, RedisLease};
use self::reply::Acquired;
use super::{Accepted, BudgetSettings, BudgetStats, Lease, MemoryBudget, Priority, ThreadBudget};
use crate::redis_base::{Conn, RedisTarget};

/// How long a cut of the cap is remembered after its last change: far beyond its regrowth.
const CAP_MEMORY: Duration = Duration::from_secs(24 * 3600);

/// How long one ask may take once Redis is known down: long enough for a Redis that is back.
const KNOWN_DOWN_ASK: Duration = Duration::from_millis(200);

fn no_answer() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no answer within the thread budget's bound",
    ))
}

/// The fleet-wide budget of one account.
pub struct RedisBudget {
    inner: Arc<Shared>,
}

struct Shared {
    conn: Conn,
    /// The account's keys, named once ([`budget_keys`]).
    keys: [String; 6],
    channel: String,
    account: String,
    /// Prefix of this process's lease ids: random per start, so ids never repeat across restarts.
    instance: String,
    next_id: AtomicU64,
    settings: BudgetSettings,
    lease: Duration,
    /// How often a waiter asks again without being told a thread freed.
    recheck: Duration,
    /// One waiter per class asks Redis at a time; the rest queue here in arrival order.
    turns: [tokio::sync::Mutex<()>; 3],
    /// The same waiters, which the one whose turn it is asks for too (`askers.rs`).
    askers: [Askers; 3],
    /// Releases waiting for the next call, and whether a call is under way.
    releasing: Mutex<(Vec<(String, bool)>, bool)>,
    freed: Notify,
    /// Lease ids this process holds and renews.
    held: Mutex<HashSet<String>>,
    in_use: AtomicU32,
    cap: AtomicU32,
    queued: [AtomicUsize; 3],
    leases_lost: AtomicU64,
    over_admissions: AtomicU64,
    /// Set while Redis cannot be asked and threads are granted from `fallback`.
    local: AtomicBool,
    fallback: MemoryBudget,
    /// The most this process saw the provider take (fleet-wide leases beside an accepted task).
    accepted: Mutex<Accepted>,
    /// The clock `accepted` counts on.
    born: Instant,
}

/// What one acquire attempt found; either way, this many of the followers asked for were
/// granted, the first ones in order (those that first asked before this caller may be granted
/// while it waits).
enum Attempt {
    Granted(usize),
    Wait(usize),
}

impl RedisBudget {
    /// Connects (lazily on a single server) and starts the renewer and the listener, which
    /// stop at `cut`.
    pub async fn start(
        target: &RedisTarget,
        lease: Duration,
        account: &str,
        settings: BudgetSettings,
        cut: CancellationToken,
    ) -> RedisResult<RedisBudget> {
        let conn = Conn::open(target, target.response_timeout).await?;
        let instance = hex::encode(rand::random::<[u8; 8]>());
        let inner = Arc::new(Shared {
            conn,
            keys: budget_keys(account),
            channel: budget_channel(account),
            account: account.to_owned(),
            instance,
            next_id: AtomicU64::new(0),
            settings,
            lease,
            recheck: (lease / 3).min(Duration::from_secs(1)),
            turns: Default::default(),
            askers: Default::default(),
            releasing: Mutex::default(),
            freed: Notify::new(),
            held: Mutex::new(HashSet::new()),
            in_use: AtomicU32::new(0),
            cap: AtomicU32::new(settings.threads),
            queued: Default::default(),
            leases_lost: AtomicU64::new(0),
            over_admissions: AtomicU64::new(0),
            local: AtomicBool::new(false),
            fallback: MemoryBudget::new(settings),
            accepted: Mutex::default(),
            born: Instant::now(),
        });
        tokio::spawn(renewer(inner.clone(), cut.clone()));
        if let Some(client) = target.single_client() {
            let client = client?;
            tokio::spawn(listener(inner.clone(), client, cut));
        }
        Ok(RedisBudget { inner })
    }
}

impl Shared {
    fn held(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn call(&self, call: BudgetCall) -> RedisResult<Vec<Value>> {
        let prelude = BudgetPrelude {
            clock: None,
            lease_ms: ms(self.lease),
            threads: self.settings.threads,
            increase_every_ms: ms(self.settings.cap.increase_every),
            channel: self.channel.clone(),
        };
        let mut conn = self.conn.clone();
        call.invocation(&self.keys, &prelude)
            .invoke_async(&mut conn)
            .await
    }

    fn note(&self, in_use: u64, cap: u64) {
        self.in_use.store(saturate(in_use), Ordering::Relaxed);
        self.cap.store(saturate(cap), Ordering::Relaxed);
    }

    /// Asks for `id` (first asked at `since`) and `followers` (queued in this process, same
    /// class), in order of first arrival.
    async fn try_acquire(
        &self,
        id: &str,
        since: Instant,
        followers: &[Follower],
        priority: Priority,
    ) -> RedisResult<Attempt> {
        let call = BudgetCall::Acquire {
            id: id.to_owned(),
            class: priority.index(),
            reserve: self.settings.refill_reserve,
            // A waiter refreshes its place at every recheck; three missed ones and it is gone.
            waiter_ttl_ms: ms(self.recheck * 3),
            age_ms: ms(since.elapsed()),
            followers: followers.to_vec(),
        };
        let reply = self.call(call).await?;
        let Acquired {
            granted,
            in_use,
            cap,
            also,
        } = Acquired::read(reply)?;
        self.note(in_use, cap);
        let also = usize::try_from(also)
            .unwrap_or(usize::MAX)
            .min(followers.len());
        let mut held = self.held();
        held.extend(followers[..also].iter().map(|f| f.id.clone()));
        Ok(if granted {
            held.insert(id.to_owned());
            Attempt::Granted(also)
        } else {
            Attempt::Wait(also)
        })
    }

    fn now_ms(&self) -> u64 {
        ms(self.born.elapsed())
    }

    fn accepted(&self) -> std::sync::MutexGuard<'_, Accepted> {
        self.accepted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands the followers granted with an ask their leases.
    fn deliver(self: &Arc<Self>, class: usize, granted: &[Follower]) {
        for follower in granted {
            let lease = Lease::new(RedisLease {
                inner: self.clone(),
                id: follower.id.clone(),
            });
            self.askers[class].deliver(&follower.id, lease);
        }
    }

    fn new_id(&self) -> String {
        format!(
            "{}:{}",
            self.instance,
            self.next_id.fetch_add(1, Ordering::Relaxed)
        )
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A count as the gauges hold it.
fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A caller's place among the askers of its class; leaving (drop) withdraws it.
struct Ticket<'a> {
    askers: &'a Askers,
    id: &'a str,
    granted: tokio::sync::oneshot::Receiver<Lease>,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.askers.withdraw(self.id);
    }
}

/// Counts a waiter of one class while it waits.
struct Queued<'a>(&'a AtomicUsize);

impl<'a> Queued<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Queued(counter)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl ThreadBudget for RedisBudget {
    async fn acquire_from(&self, priority: Priority, since: Instant) -> Lease {
        let class = priority.index();
        let _queued = Queued::new(&self.inner.queued[class]);
        let inner = self.inner.clone();
        let id = inner.new_id();
        // Armed from the start: the caller whose turn it is may ask for this id too, so a
        // caller that gives up while queued may hold a grant it never saw.
        let mut place = Place {
            inner: inner.clone(),
            id: id.clone(),
            armed: true,
        };
        let mut ticket = Ticket {
            askers: &self.inner.askers[class],
            id: &id,
            granted: self.inner.askers[class].join(&id, since),
        };
        let turn = self.inner.turns[class].lock();
        tokio::pin!(turn);
        let _turn = tokio::select! {
            biased;
            granted = &mut ticket.granted => match granted {
                Ok(lease) => {
                    place.armed = false;
                    return lease;
                }
                // Never expected: a ticket is only answered with a lease.
                Err(_) => turn.await,
            },
            guard = &mut turn => guard,
        };
        // A grant may have arrived as the turn came: the holder before answers before leaving.
        if let Ok(lease) = ticket.granted.try_recv() {
            place.armed = false;
            return lease;
        }
        drop(ticket);
        let mut failing_since: Option<Instant> = None;
        loop {
            let freed = self.inner.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            // Bounded so a Redis that does not answer (paused, failing over) holds a caller no
            // longer than the grace, and not at all once it is known down; a run that answers
            // after the bound is undone by `place` (its id is released).
            let bound = match (inner.local.load(Ordering::Relaxed), failing_since) {
                (true, _) => KNOWN_DOWN_ASK,
                (false, since) => (inner.lease / 3)
                    .saturating_sub(since.map_or(Duration::ZERO, |s| s.elapsed()))
                    .max(KNOWN_DOWN_ASK),
            };
            let asked_at = Instant::now();
            let followers = inner.askers[class].front(MAX_FOLLOWERS);
            let asked = inner.try_acquire(&id, since, &followers, priority);
            let attempt = tokio::time::timeout(bound, asked)
                .await
                .unwrap_or_else(|_| Err(no_answer()));
            match attempt {
                Ok(Attempt::Granted(also)) => {
                    inner.deliver(class, &followers[..also]);
                    place.armed = false;
                    if inner.local.swap(false, Ordering::Relaxed) {
                        tracing::warn!(account = %inner.account, "thread budget: Redis answers again; leases are fleet-wide again");
                    }
                    return Lease::new(RedisLease { inner, id });
                }
                Ok(Attempt::Wait(also)) => {
                    inner.deliver(class, &followers[..also]);
                    failing_since = None;
                    tokio::select! {
                        _ = freed => {}
                        _ = sleep(inner.recheck) => {}
                    }
                }
                Err(e) => {
                    // The grace counts from the first ask that failed, not from its timeout.
                    let since = *failing_since.get_or_insert(asked_at);
                    // Once Redis is known down, one failed ask is enough: no caller waits out
                    // the grace again until Redis has answered.
                    let patient = !inner.local.load(Ordering::Relaxed);
                    if patient && since.elapsed() < inner.lease / 3 {
                        // The same id again: a grant made by a run whose reply was lost is
                        // answered, not doubled.
                        tracing::debug!(account = %inner.account, error = %e, "asking for a thread");
                        sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    if !inner.local.swap(true, Ordering::Relaxed) {
                        tracing::warn!(account = %inner.account, error = %e, "thread budget: Redis cannot be asked; granting threads in this process only until it answers");
                    }
                    drop(place);
                    let lease = inner.fallback.acquire_from(priority, since).await;
                    inner.over_admissions.fetch_add(1, Ordering::Relaxed);
                    return lease;
                }
            }
        }
    }

    fn in_use(&self) -> u32 {
        self.inner.in_use.load(Ordering::Relaxed)
    }

    fn cap(&self) -> u32 {
        self.inner.cap.load(Ordering::Relaxed)
    }

    fn queued(&self, priority: Priority) -> usize {
        self.inner.queued[priority.index()].load(Ordering::Relaxed)
    }

    fn accepted(&self, lease: &Lease) {
        if lease.held::<RedisLease>().is_none() {
            return self.inner.fallback.accepted(lease);
        }
        let others = self.inner.in_use.load(Ordering::Relaxed).saturating_sub(1);
        let now = self.inner.now_ms();
        let settings = &self.inner.settings.cap;
        self.inner.accepted().record(others, now, settings);
    }

    fn refused(&self, lease: Lease) {
        let Some(held) = lease.held::<RedisLease>() else {
            // Granted while Redis could not be asked: the refusal is this process's alone.
            return self.inner.fallback.refused(lease);
        };
        let settings = &self.inner.settings.cap;
        let proven = self.inner.accepted().proven(self.inner.now_ms(), settings);
        let change = CapChange::Refused {
            gap_ms: ms(settings.decrease_gap),
            lease: held.id.clone(),
            proven,
        };
        // The lease is given back once the cap has counted the others beside it.
        self.inner.spawn_cap(change, Some(lease));
    }

    fn calibrate(&self, plan: u32) {
        self.inner.fallback.calibrate(plan);
        let change = CapChange::Plan {
            threads: plan.into(),
        };
        self.inner.spawn_cap(change, None);
    }

    fn stats(&self) -> BudgetStats {
        BudgetStats {
            leases_lost: self.inner.leases_lost.load(Ordering::Relaxed),
            over_admissions: self.inner.over_admissions.load(Ordering::Relaxed),
        }
    }
}
