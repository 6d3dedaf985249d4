//! Giving threads back: a lease dropped by its task, or a waiter's place withdrawn, is released
//! in the background, many per script call; a lease found gone when given back was lost.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::sleep;

use super::reply::Released;
use super::{BudgetCall, Shared, saturate};

/// Releases per script call at most.
const MAX_RELEASES: usize = 256;

impl Shared {
    /// Gives `id` back (a lease, or a waiter's place) soon: releases asked for while one call
    /// is under way go together in the next (one round trip and one wake-up for many).
    /// `was_held`: a lease this process held, so finding it gone means it was lost. Outside a
    /// runtime nothing can be sent: the lease lapses within one lease.
    pub(super) fn release_soon(self: &Arc<Self>, id: String, was_held: bool) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let start = {
            let mut releasing = self.releasing.lock().unwrap_or_else(|e| e.into_inner());
            releasing.0.push((id, was_held));
            !std::mem::replace(&mut releasing.1, true)
        };
        if start {
            let inner = self.clone();
            rt.spawn(async move { inner.send_releases().await });
        }
    }

    async fn send_releases(self: Arc<Self>) {
        loop {
            let batch: Vec<(String, bool)> = {
                let mut releasing = self.releasing.lock().unwrap_or_else(|e| e.into_inner());
                if releasing.0.is_empty() {
                    releasing.1 = false;
                    return;
                }
                let n = releasing.0.len().min(MAX_RELEASES);
                releasing.0.drain(..n).collect()
            };
            self.release(&batch).await;
        }
    }

    /// Gives `batch` back in one call, retrying a lost reply a few times; what is never
    /// released lapses within one lease.
    async fn release(&self, batch: &[(String, bool)]) {
        let ids: Vec<String> = batch.iter().map(|(id, _)| id.clone()).collect();
        let mut pause = Duration::from_millis(50);
        for attempt in 0..5 {
            match self.call(BudgetCall::Release { ids: ids.clone() }).await {
                Ok(reply) => {
                    match Released::read(reply, batch.len()) {
                        Ok(Released { in_use, removed }) => {
                            self.in_use.store(saturate(in_use), Ordering::Relaxed);
                            self.note_release(batch, &removed, attempt);
                        }
                        Err(e) => {
                            tracing::warn!(account = %self.account, error = %e, "releasing thread leases")
                        }
                    }
                    break;
                }
                Err(e) => {
                    tracing::debug!(account = %self.account, error = %e, "releasing thread leases");
                    sleep(pause).await;
                    pause *= 2;
                }
            }
        }
        self.freed.notify_waiters();
    }

    /// Counts leases this process held that were gone when given back. After an unknown first
    /// attempt, "not there" may be our own release, so only the first attempt's answer counts.
    fn note_release(&self, batch: &[(String, bool)], removed: &[bool], attempt: u32) {
        for ((id, was_held), removed) in batch.iter().zip(removed) {
            if *was_held && !removed && attempt == 0 {
                // Its task ran on after the lease lapsed, like a loss at renewal.
                self.over_admissions.fetch_add(1, Ordering::Relaxed);
                self.lost(id, "at release");
            }
        }
    }

    pub(super) fn lost(&self, id: &str, when: &str) {
        self.leases_lost.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            account = %self.account,
            lease = id,
            when,
            "a thread lease lapsed while its task ran: the fleet may exceed the account's threads until it ends"
        );
    }
}

/// A granted lease: dropping it releases the thread in the background.
pub(super) struct RedisLease {
    pub(super) inner: Arc<Shared>,
    pub(super) id: String,
}

impl Drop for RedisLease {
    fn drop(&mut self) {
        // Not held any more: a renewal found it lost and counted it; nothing to give back.
        if !self.inner.held().remove(&self.id) {
            return;
        }
        self.inner.release_soon(std::mem::take(&mut self.id), true);
    }
}

/// A waiter's place in Redis, withdrawn when its acquire is given up (and any grant a lost
/// reply made under its id released).
pub(super) struct Place {
    pub(super) inner: Arc<Shared>,
    pub(super) id: String,
    pub(super) armed: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.inner.release_soon(std::mem::take(&mut self.id), false);
    }
}
