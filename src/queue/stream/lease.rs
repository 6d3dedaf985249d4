//! Leases of the entries this worker holds: renewed every third of a lease by one owner-checked
//! script; an entry whose renewal finds it gone or owned by another consumer is lost, and its
//! work is abandoned without writing anything.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::Stream;
use crate::queue::QueueError;
use crate::queue::calls::RenewCall;

/// Ids renewed per script call: keeps each call short on a busy worker.
const RENEW_BATCH: usize = 200;

/// The entries held now: stream id -> the token cancelled when its lease is lost.
#[derive(Default)]
pub struct InFlight {
    held: Mutex<HashMap<String, CancellationToken>>,
}

/// One held entry; dropping it stops renewing.
pub struct Held {
    stream: Arc<Stream>,
    stream_id: String,
    pub lost: CancellationToken,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.stream.held.lock().remove(&self.stream_id);
    }
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ids(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    fn lose(&self, id: &str) -> bool {
        match self.lock().get(id) {
            Some(token) if !token.is_cancelled() => {
                token.cancel();
                true
            }
            _ => false,
        }
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Stream {
    /// Starts renewing `stream_id` (just delivered, so its idle time is zero now).
    pub(super) fn hold(self: &Arc<Self>, stream_id: &str) -> Held {
        let lost = CancellationToken::new();
        self.held.lock().insert(stream_id.to_owned(), lost.clone());
        Held {
            stream: self.clone(),
            stream_id: stream_id.to_owned(),
            lost,
        }
    }

    /// Renews every held entry each third of a lease until `stop`.
    pub(super) async fn renew_loop(self: Arc<Self>, stop: CancellationToken) {
        let every = self.queue.settings().beat();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let ids = self.held.ids();
            for batch in ids.chunks(RENEW_BATCH) {
                let call = RenewCall {
                    consumer: &self.consumer,
                    stream_ids: batch,
                };
                let reply = call
                    .invocation(self.queue.keys())
                    .invoke_async::<redis::Value>(&mut self.queue.conn())
                    .await;
                match reply
                    .map_err(QueueError::from)
                    .and_then(|r| Ok(RenewCall::read(r)?))
                {
                    Ok(lost) => {
                        for id in lost {
                            if self.held.lose(&id) {
                                tracing::info!(stream_id = %id, "lease lost: another worker has the task now");
                                self.metrics.leases_lost.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    // Not renewed this time: the next beat tries again; two missed beats are
                    // within a lease.
                    Err(e) => tracing::warn!(error = %e, "renewing leases failed"),
                }
            }
        }
    }
}
