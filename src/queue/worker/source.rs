//! What a queue format gives the worker: entries to take, how one runs to its end, what keeps
//! this consumer's claims alive, and what it hands back when it stops.

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// One queue format, as one consumer sees it.
pub trait Source: Send + Sync + 'static {
    /// One claimed entry, as `take` hands it over.
    type Entry: Send + 'static;

    /// Claims up to `most` entries (at least one is wanted), waiting a short while (the
    /// source's block time) when none are there; returns early, possibly with none, on `stop`.
    /// An error is paused on and the take tried again.
    fn take(
        &self,
        most: usize,
        stop: &CancellationToken,
    ) -> impl Future<Output = redis::RedisResult<Vec<Self::Entry>>> + Send;

    /// Runs one entry to its end: its result written, a retry scheduled, handed back (the
    /// engine was stopping), or left for another consumer to recover (its claim was lost, or
    /// Redis could not be told). Never fails: what it cannot do it logs and counts.
    fn process(self: Arc<Self>, entry: Self::Entry) -> impl Future<Output = ()> + Send;

    /// Keeps this consumer's claims alive and the queue tidy (renewals or heartbeats, taking
    /// over dead consumers' entries, moving due retries, sweeping old results) until `life`,
    /// which ends after the entries in flight did.
    fn keep_alive(self: Arc<Self>, life: CancellationToken) -> impl Future<Output = ()> + Send;

    /// Gives back what this consumer still holds, at its exit, so others take it at once
    /// instead of after a lease.
    fn hand_back(&self) -> impl Future<Output = ()> + Send;
}
