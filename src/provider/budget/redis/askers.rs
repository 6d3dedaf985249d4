//! The callers of one class queued behind the thread budget's turn in this process
//! (`budget.rs`): the caller whose turn it is asks Redis for itself and for those queued behind
//! it in the same call (`lua/budget_acquire.lua`, followers), all in order of first arrival, so
//! a task asking again after a refusal goes ahead of callers that came since. A follower granted
//! that way gets its lease through its ticket without waiting for the turn, so one round trip
//! serves a whole queue instead of one caller each.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Follower;
use crate::provider::Lease;

/// Followers asked for in one call at most: keeps the script short.
pub(super) const MAX_FOLLOWERS: usize = 64;

/// One queued caller: its lease id, when it first asked, where its lease goes.
type Asker = (String, Instant, oneshot::Sender<Lease>);

/// One class's queue of callers waiting for the turn, by first arrival, earliest first.
#[derive(Default)]
pub(super) struct Askers {
    queue: Mutex<VecDeque<Asker>>,
}

impl Askers {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Asker>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues lease id `id`, first asked at `since`; the receiver gets its lease if a turn
    /// holder's ask grants it.
    pub(super) fn join(&self, id: &str, since: Instant) -> oneshot::Receiver<Lease> {
        let (tx, rx) = oneshot::channel();
        let mut queue = self.lock();
        let at = queue.partition_point(|(_, first, _)| *first <= since);
        queue.insert(at, (id.to_owned(), since, tx));
        rx
    }

    /// Leaves the queue (its own turn came, or it gave up); later asks no longer name it.
    pub(super) fn withdraw(&self, id: &str) {
        self.lock().retain(|(queued, _, _)| queued != id);
    }

    /// Up to `max` callers at the front of the queue, to ask for as followers.
    pub(super) fn front(&self, max: usize) -> Vec<Follower> {
        let now = Instant::now();
        self.lock()
            .iter()
            .take(max)
            .map(|(id, since, _)| Follower {
                id: id.clone(),
                age_ms: super::ms(now.saturating_duration_since(*since)),
            })
            .collect()
    }

    /// Hands `lease` (granted under `id`) to its caller. A caller that already left, or leaves
    /// before reading it, drops the lease, which releases the thread.
    pub(super) fn deliver(&self, id: &str, lease: Lease) {
        let sender = {
            let mut queue = self.lock();
            let at = queue.iter().position(|(queued, _, _)| queued == id);
            at.and_then(|i| queue.remove(i)).map(|(_, _, tx)| tx)
        };
        if let Some(tx) = sender {
            // Refused only when the caller is gone: the lease comes back and is dropped here.
            let _ = tx.send(lease);
        }
    }
}
