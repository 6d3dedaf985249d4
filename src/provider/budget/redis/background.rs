//! What runs beside the callers: the lease renewer, the listener that wakes waiters when a
//! thread frees anywhere in the fleet, and the cap's changes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt as _;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

use super::reply::{Renewed, capped};
use super::{BudgetCall, CAP_MEMORY, CapChange, Lease, Shared, ms, saturate};

impl Shared {
    /// Changes the cap in the background; `lease`, if any, is given back once it has run.
    pub(super) fn spawn_cap(self: &Arc<Self>, change: CapChange, lease: Option<Lease>) {
        let inner = self.clone();
        tokio::spawn(async move {
            let _lease = lease;
            let call = BudgetCall::Cap {
                change: change.clone(),
                memory_ms: ms(CAP_MEMORY),
            };
            // A few tries: running it again is harmless (a second cut inside the gap and a
            // second plan change nothing), and a lost signal only waits for the next refusal.
            for _ in 0..3 {
                match inner.call(call.clone()).await {
                    Ok(reply) => {
                        match capped(reply) {
                            Ok(cap) => inner.cap.store(saturate(cap), Ordering::Relaxed),
                            Err(e) => {
                                tracing::warn!(account = %inner.account, error = %e, ?change, "budget cap")
                            }
                        }
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(account = %inner.account, error = %e, ?change, "budget cap");
                        sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
    }
}

/// Renews this process's leases every third of a lease and refreshes its view of the fleet.
/// A lease found gone is counted lost (and an over-admission: its task still runs) and dropped
/// from the renewal set, never asked for again.
pub(super) async fn renewer(inner: Arc<Shared>, cut: CancellationToken) {
    loop {
        let ids: Vec<String> = inner.held().iter().cloned().collect();
        match inner.call(BudgetCall::Renew { ids }).await {
            Ok(reply) => match Renewed::read(reply) {
                Ok(Renewed { in_use, cap, lost }) => {
                    inner.note(in_use, cap);
                    for id in lost {
                        if inner.held().remove(&id) {
                            inner.over_admissions.fetch_add(1, Ordering::Relaxed);
                            inner.lost(&id, "at renewal");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(account = %inner.account, error = %e, "renewing thread leases")
                }
            },
            Err(e) => {
                tracing::debug!(account = %inner.account, error = %e, "renewing thread leases")
            }
        }
        tokio::select! {
            _ = sleep(inner.lease / 3) => {}
            _ = cut.cancelled() => return,
        }
    }
}

/// Wakes this process's waiters when any instance frees a thread. Reconnects after a drop;
/// while it is down, waiters still ask again every recheck.
pub(super) async fn listener(inner: Arc<Shared>, client: redis::Client, cut: CancellationToken) {
    loop {
        if let Ok(mut pubsub) = client.get_async_pubsub().await {
            if pubsub.subscribe(&inner.channel).await.is_ok() {
                // Anything freed while we were not listening is found by the waiters' next ask.
                inner.freed.notify_waiters();
                let mut messages = pubsub.on_message();
                loop {
                    tokio::select! {
                        m = messages.next() => match m {
                            Some(_) => inner.freed.notify_waiters(),
                            None => break,
                        },
                        _ = cut.cancelled() => return,
                    }
                }
            }
        }
        tokio::select! {
            _ = sleep(Duration::from_secs(1)) => {}
            _ = cut.cancelled() => return,
        }
    }
}
