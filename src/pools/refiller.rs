//! The refiller: one task that keeps every configured pool at its size.
//!
//! Each pass asks the store to claim whatever a pool lacks of its size (ready answers plus tasks
//! coming, counted and claimed in one atomic step so two instances never both start the same
//! shortfall) and starts the whole shortfall at once (seed 000 refilled one solve at a time and could not
//! keep up with more than one caller per solve time). It runs on a timer, and sooner when a
//! caller takes a pooled answer; auto pools are resized from the store's figures on a slower
//! timer. Refills run at refill priority, so they only use threads no caller is waiting for.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::{Pool, Pools, SizingSettings};
use crate::engine::Engine;
use crate::shutdown::Shutdown;

/// How the refiller paces itself; every default says why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefillSettings {
    /// The longest a pool waits for a top-up when no take nudges the refiller (an answer can
    /// also leave by expiring, which nothing announces).
    pub check_every: Duration,
    /// How often auto pools are resized from the figures.
    pub resize_every: Duration,
    /// The longest a pool holds back its refills after failures in a row.
    pub max_backoff: Duration,
    pub sizing: SizingSettings,
}

impl Default for RefillSettings {
    fn default() -> Self {
        Self {
            // A second is nothing against 10-20 s solves, and one store read per pool per
            // second is nothing for the store.
            check_every: Duration::from_secs(1),
            // Several arrivals per sample even for quiet targets, while still following a fleet
            // scaling within the minute the rate is averaged over.
            resize_every: Duration::from_secs(5),
            // A provider refusing work (no balance, banned key) is retried once a minute, not
            // every second with a whole pool's worth of tasks.
            max_backoff: Duration::from_secs(60),
            sizing: SizingSettings::default(),
        }
    }
}

/// Spawns the refiller on the shutdown tracker, stopping on its token. Without configured pools
/// there is nothing to keep warm, so nothing is spawned.
pub fn spawn_refiller(engine: Engine, pools: Arc<Pools>, shutdown: &Shutdown) {
    if pools.list().is_empty() {
        return;
    }
    let token = shutdown.token.clone();
    shutdown.tracker.spawn(run(engine, pools, token));
}

async fn run(engine: Engine, pools: Arc<Pools>, token: CancellationToken) {
    let settings = *pools.settings();
    let began = Instant::now();
    let mut next_resize = began;
    loop {
        let now = Instant::now();
        if now >= next_resize {
            match engine.store().figures().await {
                Ok(figures) => pools.resize(&figures, now - began),
                Err(e) => tracing::warn!(error = %e, "pool sizing could not read the figures"),
            }
            next_resize = now + settings.resize_every;
        }
        top_up(&engine, &pools, now).await;
        let wake = (now + settings.check_every).min(next_resize);
        tokio::select! {
            _ = token.cancelled() => return,
            _ = sleep_until(wake) => {}
            _ = engine.pool_taken().notified() => {}
        }
    }
}

/// One pass: starts every pool's whole deficit at once. Returns how many refills started.
pub(crate) async fn top_up(engine: &Engine, pools: &Pools, now: Instant) -> u64 {
    // A store that cannot hand answers out now (unreachable, or hand-outs not confirmed durable)
    // gets no refills: no caller could take them before they expire.
    if engine.store().degraded() {
        return 0;
    }
    let max_backoff = pools.settings().max_backoff;
    let mut started = 0;
    for pool in pools.list() {
        if pool.paused(now) {
            continue;
        }
        let refills = match engine.refill(pool.spec.req.clone(), pool.size()).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(target = ?pool.target, error = %e, "pool refill could not start");
                continue;
            }
        };
        for done in refills {
            started += 1;
            let pool: Arc<Pool> = pool.clone();
            tokio::spawn(async move {
                // Unsent only when shutdown cut the task short: nothing to learn.
                if let Ok(done) = done.await {
                    pool.record(done, Instant::now(), max_backoff);
                }
            });
        }
    }
    started
}
