//! Graceful shutdown in two phases (docs/CONFIGURATION.md, "Shutdown"): on the signal, `token`
//! stops new work while what already runs goes on (upstream tasks keep being polled); when the
//! grace period is nearly over, `cut` cuts short whatever still runs, which hands its work back
//! (a claim released for another instance to cover, a caller told the instance is stopping).
//! [`TaskTracker`] holds the work that must finish (upstream tasks, pollers, hand-backs).

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The most of the grace period kept back, after the cut, for cut-short work to hand itself
/// back (one store call each): enough for a few round trips to a slow Redis.
const HAND_BACK: Duration = Duration::from_secs(2);

#[derive(Clone, Default)]
pub struct Shutdown {
    /// Cancelled on the signal: stop taking new work.
    pub token: CancellationToken,
    /// Cancelled when the grace period is nearly over: cut short what still runs.
    pub cut: CancellationToken,
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

    /// Waits for tracked work until `deadline` at the latest. What still runs a quarter of the
    /// remaining time (at most [`HAND_BACK`]) before it is cut short, so it can hand its work
    /// back by `deadline`; says what was cut short.
    pub async fn drain_until(&self, deadline: Instant) {
        self.tracker.close();
        let remaining = deadline.saturating_duration_since(Instant::now());
        let cut_at = deadline - (remaining / 4).min(HAND_BACK);
        if tokio::time::timeout_at(cut_at, self.tracker.wait())
            .await
            .is_ok()
        {
            // Nothing is left to cut; background loops that serve the hand-back stop here too.
            self.cut.cancel();
            return;
        }
        tracing::warn!(
            still_running = self.tracker.len(),
            "shutdown grace period nearly over; cutting short unfinished tasks"
        );
        self.cut.cancel();
        if tokio::time::timeout_at(deadline, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                still_running = self.tracker.len(),
                "shutdown grace period over; stopping without them"
            );
        }
    }
}
