//! Waiting for a task to end, then delivering its callback. Runs on the shutdown tracker and
//! stops when shutdown begins (an undelivered callback is logged, by host only).

use std::sync::Arc;
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
        self.tracker.spawn(async move {
            let Some(record) = this.wait_finished(&engine, &tenant, &id, timeout).await else {
                tracing::warn!(
                    host = url.host(),
                    "callback dropped: the task did not end in time"
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
