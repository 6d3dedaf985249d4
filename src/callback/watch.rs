//! Waiting for a task to end, then delivering its callback. Runs on the shutdown tracker and
//! stops when shutdown begins (an undelivered callback is logged, by host only).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::{CallbackUrl, Callbacks, Payload};
use crate::engine::{Engine, TaskRecord, TaskState};

/// Past the task's own timeout, how long to keep waiting for its record (a store that was away,
/// an instance that took the task over).
const GRACE: Duration = Duration::from_secs(60);
/// One long-poll on the task record; short enough to notice shutdown promptly.
const POLL: Duration = Duration::from_secs(30);
/// Pause after a store error before asking again.
const STORE_RETRY: Duration = Duration::from_secs(1);
/// Deliveries that may wait per sending slot. Tasks end at the plan's solve rate whatever the
/// receiver does, so a receiver that hangs would otherwise pile results up here without bound;
/// past this many the newest are dropped (and logged), the results stay readable by id.
pub const QUEUE_PER_SLOT: usize = 64;

/// A place among the pending deliveries, given back when dropped.
struct Pending<'a>(&'a AtomicUsize);

impl<'a> Pending<'a> {
    fn take(counter: &'a AtomicUsize, max: usize) -> Option<Self> {
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Pending(counter))
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Callbacks {
    /// Watches task `id` of `tenant` (which runs for at most `timeout`) and delivers
    /// `render(record)` to `url` once it is ready or failed.
    pub fn after_task(
        self: &Arc<Self>,
        engine: Engine,
        tenant: String,
        id: String,
        url: CallbackUrl,
        timeout: Duration,
        render: impl Fn(&TaskRecord) -> Payload + Send + 'static,
    ) {
        let this = self.clone();
        // Only finished tasks take a place in the delivery queue: waiting tasks are already
        // bounded by admission (max_concurrent), and a long one must not hold a place.
        self.tracker.spawn(async move {
            let Some(record) = this.wait_finished(&engine, &tenant, &id, timeout).await else {
                tracing::warn!(
                    host = url.host(),
                    "callback dropped: the task did not end in time"
                );
                return;
            };
            let max = this.settings.max_concurrent.max(1) * QUEUE_PER_SLOT;
            let Some(_place) = Pending::take(&this.pending, max) else {
                tracing::warn!(
                    host = url.host(),
                    "callback dropped: {max} deliveries already pending"
                );
                return;
            };
            match this.deliver(&url, &render(&record)).await {
                Ok(()) => tracing::debug!(host = url.host(), "callback delivered"),
                Err(e) => tracing::warn!(host = url.host(), error = %e, "callback not delivered"),
            }
        });
    }

    async fn wait_finished(
        &self,
        engine: &Engine,
        tenant: &str,
        id: &str,
        timeout: Duration,
    ) -> Option<TaskRecord> {
        let deadline = Instant::now() + timeout + GRACE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let asked = tokio::select! {
                _ = self.shutdown.cancelled() => return None,
                r = engine.task(tenant, id, left.min(POLL)) => r,
            };
            match asked {
                Ok(Some(record)) if !matches!(record.state, TaskState::Pending) => {
                    return Some(record);
                }
                Ok(Some(_)) => {}
                // Expired or never stored: nothing will ever end.
                Ok(None) => return None,
                Err(_) => {
                    tokio::select! {
                        _ = self.shutdown.cancelled() => return None,
                        _ = tokio::time::sleep(STORE_RETRY) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_places_are_bounded_and_given_back() {
        let counter = AtomicUsize::new(0);
        let a = Pending::take(&counter, 2).unwrap();
        let b = Pending::take(&counter, 2).unwrap();
        assert!(Pending::take(&counter, 2).is_none(), "full at 2");
        drop(a);
        let c = Pending::take(&counter, 2).expect("a place was given back");
        drop((b, c));
        assert_eq!(counter.load(Ordering::Relaxed), 0);
    }
}
