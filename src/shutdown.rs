//! Graceful shutdown: one [`CancellationToken`] everyone listens to and one [`TaskTracker`]
//! holding the work that must finish (upstream tasks, pollers).

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Clone, Default)]
pub struct Shutdown {
    pub token: CancellationToken,
    pub tracker: TaskTracker,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// Resolves on ctrl-c or SIGTERM, then cancels the token.
    pub async fn on_signal(self) {
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {},
            _ = term => {},
            _ = self.token.cancelled() => {},
        }
        self.token.cancel();
    }

    /// Waits for tracked work, at most `grace`; says what was cut short.
    pub async fn drain(&self, grace: Duration) {
        self.drain_until(Instant::now() + grace).await;
    }

    /// Waits for tracked work until `deadline` at the latest; says what was cut short.
    pub async fn drain_until(&self, deadline: Instant) {
        self.tracker.close();
        if tokio::time::timeout_at(deadline, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                still_running = self.tracker.len(),
                "shutdown grace period over; stopping unfinished tasks"
            );
        }
    }
}
