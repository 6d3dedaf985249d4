//! The one queue worker, whatever the queue's format: it keeps up to `concurrency` entries in
//! flight, takes as many as there are free slots from its [`Source`], runs each to its end on
//! the engine at queued priority ([`solve`]), keeps its claims alive while it runs, and on a stop
//! takes no more, lets what is in flight end, then hands back what it still holds.
//!
//! Sources: the Redis stream with its consumer group (`queue::stream`) and seed 003's lists
//! (`queue::seed`). A source owns its keys, how it claims and renews entries and how an entry
//! ends; this module owns the loop, the slots, the in-flight count and the order of a stop.

mod name;
mod solve;
mod source;

pub use name::consumer_name;
pub use solve::{Solved, solve_queued};
pub use source::Source;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The first pause after a failed take; doubled per failure up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between failed takes (Redis down, restarting, failing over).
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// What every worker counts, whatever its source.
#[derive(Debug, Default)]
pub struct WorkerFigures {
    /// Entries taken from the source (new, reclaimed or recovered).
    pub taken: AtomicU64,
    /// Entries being processed now.
    pub in_flight: AtomicU64,
    /// Takes that failed (retried after a pause).
    pub take_errors: AtomicU64,
}

impl WorkerFigures {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// A worker consuming its source: [`Running::start`] it, then on a stop wait for
/// [`Running::in_flight_done`] (within the grace period) and [`Running::close`] it.
pub struct Running<S: Source> {
    source: Arc<S>,
    figures: Arc<WorkerFigures>,
    tracker: TaskTracker,
    taking: JoinHandle<()>,
    life: CancellationToken,
    keep_alive: JoinHandle<()>,
}

impl<S: Source> Running<S> {
    /// Starts taking entries (until `stop`) and keeping this consumer's claims alive (until
    /// [`close`](Self::close)). Entries run on `tracker`, so a process's shutdown waits for them.
    pub fn start(
        source: Arc<S>,
        concurrency: usize,
        figures: Arc<WorkerFigures>,
        tracker: TaskTracker,
        stop: CancellationToken,
    ) -> Self {
        let life = CancellationToken::new();
        let keep_alive = tokio::spawn(source.clone().keep_alive(life.clone()));
        let slots = Arc::new(Semaphore::new(concurrency.max(1)));
        let taking = tokio::spawn(take_loop(
            source.clone(),
            slots,
            figures.clone(),
            tracker.clone(),
            stop,
        ));
        Self {
            source,
            figures,
            tracker,
            taking,
            life,
            keep_alive,
        }
    }

    pub fn source(&self) -> &Arc<S> {
        &self.source
    }

    /// Entries being processed now.
    pub fn in_flight(&self) -> u64 {
        WorkerFigures::get(&self.figures.in_flight)
    }

    /// Resolves once the take loop has stopped (after `stop`) and every entry it started ended.
    pub async fn in_flight_done(&mut self) {
        let _ = (&mut self.taking).await;
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Ends the keep-alive (its last call included, so nothing renews or beats for this
    /// consumer after), then hands back what it still holds.
    pub async fn close(self) {
        self.taking.abort();
        self.life.cancel();
        let _ = self.keep_alive.await;
        self.source.hand_back().await;
    }
}

/// Takes entries while there are free slots, until `stop`.
async fn take_loop<S: Source>(
    source: Arc<S>,
    slots: Arc<Semaphore>,
    figures: Arc<WorkerFigures>,
    tracker: TaskTracker,
    stop: CancellationToken,
) {
    let mut pause = FIRST_PAUSE;
    loop {
        let Some(mut permits) = take_slots(&slots, &stop).await else {
            return;
        };
        match source.take(permits.len(), &stop).await {
            Ok(entries) => {
                pause = FIRST_PAUSE;
                figures
                    .taken
                    .fetch_add(entries.len() as u64, Ordering::Relaxed);
                for entry in entries {
                    let Some(permit) = permits.pop() else {
                        // A source never returns more than asked; a surplus is its bug.
                        tracing::error!("a queue source returned more entries than free slots");
                        break;
                    };
                    start(&source, entry, permit, &figures, &tracker);
                }
            }
            Err(e) => {
                drop(permits);
                figures.take_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "taking queue entries failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = stop.cancelled() => return,
                }
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
        if stop.is_cancelled() {
            return;
        }
    }
}

fn start<S: Source>(
    source: &Arc<S>,
    entry: S::Entry,
    permit: OwnedSemaphorePermit,
    figures: &Arc<WorkerFigures>,
    tracker: &TaskTracker,
) {
    figures.in_flight.fetch_add(1, Ordering::Relaxed);
    let (source, figures) = (source.clone(), figures.clone());
    tracker.spawn(async move {
        source.process(entry).await;
        figures.in_flight.fetch_sub(1, Ordering::Relaxed);
        drop(permit);
    });
}

/// At least one free slot (waiting for it), plus every other free one; `None` on `stop`.
async fn take_slots(
    slots: &Arc<Semaphore>,
    stop: &CancellationToken,
) -> Option<Vec<OwnedSemaphorePermit>> {
    let first = tokio::select! {
        p = slots.clone().acquire_owned() => p.ok()?,
        () = stop.cancelled() => return None,
    };
    let mut permits = vec![first];
    let more = slots.available_permits() as u32;
    if more > 0 {
        if let Ok(mut rest) = slots.clone().try_acquire_many_owned(more) {
            while rest.num_permits() > 1 {
                if let Some(one) = rest.split(1) {
                    permits.push(one);
                }
            }
            permits.push(rest);
        }
    }
    Some(permits)
}

#[cfg(test)]
mod tests;
