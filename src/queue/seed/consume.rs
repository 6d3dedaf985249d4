//! One consumer of a seed-style queue as the worker's [`Source`]: takes (with a reread of its
//! own processing list when a reply was lost), each entry's solve and result, the heartbeat that
//! recovers dead consumers' entries, and the retention sweep.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::entry::{self, Entry};
use super::lists::Lists;
use super::{SeedSettings, SeedStats, outcome};
use crate::engine::Engine;
use crate::queue::worker::{Solved, Source, solve_queued};
use crate::redis_base::Conn;

/// How many dead consumers one beat lists; the next beat lists the rest.
const DEAD_PER_BEAT: usize = 20;
/// How many results one sweep call removes: bounded work per script, repeated until done.
const SWEEP_BATCH: usize = 500;
/// Every this many beats (ten leases), a scan for processing lists nobody beats for.
const ADOPT_EVERY: u32 = 30;
/// The longest pause after a failed Redis call before trying again.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// One seed consumer's state.
pub struct Seed {
    engine: Engine,
    lists: Lists,
    blocking: Conn,
    settings: SeedSettings,
    stats: Arc<SeedStats>,
    /// Entries this process holds, with how many copies (a producer may push one twice).
    held: Mutex<HashMap<Vec<u8>, usize>>,
    /// Set when this consumer's processing list may hold entries it does not know of (a take or
    /// a finish whose outcome is unknown): the next take then rereads the list.
    reread: AtomicBool,
}

impl Source for Seed {
    /// An entry exactly as the producer pushed it: the scripts remove it by its bytes.
    type Entry = Vec<u8>;

    async fn take(
        &self,
        most: usize,
        _stop: &CancellationToken,
    ) -> redis::RedisResult<Vec<Vec<u8>>> {
        // Not cut by `stop`: a blocking take dropped mid-way could still move an entry after
        // this consumer handed its list back; it blocks a second at most.
        let taken = if self.reread.swap(false, Ordering::Relaxed) {
            self.reread_own(most).await
        } else {
            self.take_new(most).await
        };
        match taken {
            Ok(entries) => {
                let mut held = self.held();
                for raw in &entries {
                    *held.entry(raw.clone()).or_default() += 1;
                }
                Ok(entries)
            }
            Err(e) => {
                self.stats.add(&self.stats.redis_errors, 1);
                self.reread.store(true, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    async fn process(self: Arc<Self>, raw: Vec<u8>) {
        self.process_entry(&raw).await;
        let mut held = self.held();
        if let Some(n) = held.get_mut(&raw) {
            *n -= 1;
            if *n == 0 {
                held.remove(&raw);
            }
        }
    }

    async fn keep_alive(self: Arc<Self>, life: CancellationToken) {
        tokio::join!(
            heartbeat(
                self.lists.clone(),
                self.settings.lease,
                self.stats.clone(),
                life.clone()
            ),
            sweeper(
                self.lists.clone(),
                self.settings.retention,
                self.settings.sweep_every,
                self.stats.clone(),
                life
            ),
        );
    }

    async fn hand_back(&self) {
        match self.lists.hand_back().await {
            Ok(n) => tracing::info!(handed_back = n, "seed queue: stopped"),
            Err(e) => {
                tracing::warn!(error = %e, "seed queue: hand-back failed; other workers recover the entries after a lease")
            }
        }
    }
}

impl Seed {
    pub(super) fn new(
        engine: Engine,
        lists: Lists,
        blocking: Conn,
        settings: SeedSettings,
        stats: Arc<SeedStats>,
    ) -> Arc<Self> {
        Arc::new(Self {
            engine,
            lists,
            blocking,
            settings,
            stats,
            held: Mutex::new(HashMap::new()),
            // A consumer starts by reading its list: empty under a new name, but never assumed.
            reread: AtomicBool::new(true),
        })
    }

    pub fn consumer(&self) -> &str {
        self.lists.consumer()
    }

    pub fn stats(&self) -> &Arc<SeedStats> {
        &self.stats
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, usize>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Up to `most` new entries, blocking for one when the queue is empty.
    async fn take_new(&self, most: usize) -> redis::RedisResult<Vec<Vec<u8>>> {
        let mut entries = self.lists.take(most).await?;
        if entries.is_empty() {
            let Some(one) = self
                .lists
                .wait_take(&self.blocking, self.settings.block)
                .await?
            else {
                return Ok(entries);
            };
            entries.push(one);
            // The beat and the queue length after a blocking take, and whatever else came.
            entries.extend(self.lists.take(most - 1).await?);
        }
        Ok(entries)
    }

    /// Up to `most` entries of this consumer's processing list that it does not hold (taken by
    /// a call whose reply was lost); a next reread picks up the rest.
    async fn reread_own(&self, most: usize) -> redis::RedisResult<Vec<Vec<u8>>> {
        let listed = self.lists.own_entries().await?;
        let mut counts: HashMap<Vec<u8>, usize> = HashMap::new();
        for raw in listed {
            *counts.entry(raw).or_default() += 1;
        }
        let mut missing: Vec<Vec<u8>> = {
            let held = self.held();
            counts
                .into_iter()
                .flat_map(|(raw, n)| {
                    let extra = n.saturating_sub(held.get(&raw).copied().unwrap_or(0));
                    std::iter::repeat_n(raw, extra)
                })
                .collect()
        };
        if !missing.is_empty() {
            tracing::info!(
                entries = missing.len(),
                "seed queue: picking up entries found in this consumer's processing list"
            );
        }
        if missing.len() > most {
            missing.truncate(most);
            self.reread.store(true, Ordering::Relaxed);
        }
        Ok(missing)
    }

    /// Solves one entry and writes its result, or drops it; leaves it in the processing list
    /// only when shutdown cut its solve short (handed back at exit).
    async fn process_entry(&self, raw: &[u8]) {
        let started = Instant::now();
        let worker = self.lists.consumer();
        // Counted once the entry is finished, so a figure never runs ahead of the lists.
        let mut outcome_counter = &self.stats.solved;
        let parsed = match std::str::from_utf8(raw) {
            Ok(text) => entry::parse(text),
            Err(_) => Entry::Unreadable("the entry is not UTF-8 text".into()),
        };
        let result = match parsed {
            Entry::Unreadable(why) => {
                outcome_counter = &self.stats.unreadable;
                tracing::warn!(reason = %why, bytes = raw.len(), "seed queue: dropping an unreadable entry");
                None
            }
            Entry::Refused { id, code, message } => {
                outcome_counter = &self.stats.refused;
                tracing::info!(task = %id, code, reason = %message, "seed queue: task refused");
                Some((id, outcome::error(code, worker)))
            }
            Entry::Task { id, request } => {
                let deadline = Instant::now() + self.settings.solve_timeout;
                match solve_queued(&self.engine, *request, deadline).await {
                    Solved::Answer(handout) => {
                        let took = started.elapsed();
                        Some((
                            id,
                            outcome::success(handout.kind, &handout.answer, took, worker),
                        ))
                    }
                    // Left in the processing list: handed back when the worker stops.
                    Solved::HandBack => return,
                    Solved::Failed(e) => {
                        outcome_counter = &self.stats.failed;
                        tracing::info!(task = %id, code = e.code(), reason = %e, "seed queue: task failed");
                        Some((id, outcome::error(e.code(), worker)))
                    }
                }
            }
        };
        self.finish(raw, result).await;
        self.stats.add(outcome_counter, 1);
    }

    /// Writes the result and removes the entry, retrying a lost reply (safe: see `lists.rs`)
    /// for up to a lease; after that the entry stays listed and is picked up again.
    async fn finish(&self, raw: &[u8], result: Option<(String, String)>) {
        let result = result
            .as_ref()
            .map(|(id, json)| (id.as_str(), json.as_str()));
        let give_up = Instant::now() + self.settings.lease;
        let mut pause = Duration::from_millis(50);
        loop {
            match self.lists.finish(raw, result).await {
                Ok(done) => {
                    if result.is_some() && !done.written {
                        self.stats.add(&self.stats.duplicates, 1);
                    }
                    if !done.removed {
                        self.stats.add(&self.stats.lost, 1);
                    }
                    return;
                }
                Err(e) if Instant::now() + pause < give_up => {
                    self.stats.add(&self.stats.redis_errors, 1);
                    tracing::warn!(error = %e, "seed queue: finish failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                Err(e) => {
                    self.stats.add(&self.stats.redis_errors, 1);
                    tracing::error!(error = %e, "seed queue: finish failed; the entry stays listed and will be solved again");
                    self.reread.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

/// Beats every third of a lease, and gives dead consumers' entries back to the queue. A consumer
/// is dead once silent for its lease and one more beat, as in the stream mode
/// (`QueueSettings::taken_for_dead`): its instance's lease in the store has lapsed by then, so
/// the worker that takes an entry adopts its provider task instead of paying for another.
async fn heartbeat(lists: Lists, lease: Duration, stats: Arc<SeedStats>, life: CancellationToken) {
    let beat = (lease / 3).max(Duration::from_millis(10));
    let dead_after = lease + beat;
    let mut tick = tokio::time::interval(beat);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut first = true;
    let mut beats: u32 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {},
            () = life.cancelled() => return,
        }
        // At start too, so a fleet that restarts finds such lists at once.
        if beats % ADOPT_EVERY == 0 {
            recover_all(
                &lists,
                &unregistered(&lists, &stats).await,
                dead_after,
                &stats,
            )
            .await;
        }
        beats = beats.wrapping_add(1);
        let dead = match lists.beat(dead_after, DEAD_PER_BEAT).await {
            Ok((registered, dead)) => {
                if !registered && !first {
                    stats.add(&stats.taken_for_dead, 1);
                    tracing::warn!(
                        consumer = lists.consumer(),
                        "seed queue: this worker was taken for dead (paused or cut off past its lease); its entries went back to the queue, and a task finished twice still gets one result"
                    );
                }
                first = false;
                dead
            }
            Err(e) => {
                stats.add(&stats.redis_errors, 1);
                tracing::warn!(error = %e, "seed queue: heartbeat failed");
                continue;
            }
        };
        recover_all(&lists, &dead, dead_after, &stats).await;
    }
}

/// Gives each of `consumers`' entries back to the queue, if it is still silent.
async fn recover_all(lists: &Lists, consumers: &[String], silent: Duration, stats: &SeedStats) {
    for consumer in consumers {
        match lists.recover(consumer, silent).await {
            Ok(Some(moved)) => {
                stats.add(&stats.recovered, moved);
                tracing::info!(
                    consumer,
                    moved,
                    "seed queue: gave a dead consumer's entries back to the queue"
                );
            }
            Ok(None) => {}
            Err(e) => {
                stats.add(&stats.redis_errors, 1);
                tracing::warn!(error = %e, consumer, "seed queue: recovery failed; the next beat tries again");
            }
        }
    }
}

/// Consumers with a processing list and no beat (see [`Lists::unregistered`]), at most a few
/// hundred per scan; an error ends the scan until the next.
async fn unregistered(lists: &Lists, stats: &SeedStats) -> Vec<String> {
    let mut found = Vec::new();
    let mut cursor = 0;
    loop {
        match lists.unregistered(cursor).await {
            Ok((next, mut more)) => {
                found.append(&mut more);
                if next == 0 || found.len() >= 500 {
                    return found;
                }
                cursor = next;
            }
            Err(e) => {
                stats.add(&stats.redis_errors, 1);
                tracing::warn!(error = %e, "seed queue: scan for unbeaten processing lists failed");
                return found;
            }
        }
    }
}

/// Removes results older than the retention, now and every `every`.
async fn sweeper(
    lists: Lists,
    retention: Duration,
    every: Duration,
    stats: Arc<SeedStats>,
    life: CancellationToken,
) {
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {},
            () = life.cancelled() => return,
        }
        loop {
            match lists.sweep(retention, SWEEP_BATCH).await {
                Ok(n) => {
                    stats.add(&stats.swept, n);
                    if n < SWEEP_BATCH as u64 {
                        break;
                    }
                }
                Err(e) => {
                    stats.add(&stats.redis_errors, 1);
                    tracing::warn!(error = %e, "seed queue: retention sweep failed; retrying at the next");
                    break;
                }
            }
        }
    }
}
