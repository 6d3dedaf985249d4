//! Graceful shutdown in two phases (docs/CONFIGURATION.md, "Shutdown"): on the signal, `token`
//! stops new work while what already runs goes on (upstream tasks keep being polled); when the
//! grace period is nearly over, `cut` cuts short whatever still runs, which hands its work back
//! (a claim released for another instance to cover, a caller told the instance is stopping).
//! [`TaskTracker`] holds the work that must finish (upstream tasks, pollers, hand-backs).

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long in-flight work may take to finish after a shutdown signal (`shutdown_grace_s`): long
/// enough for a pool hit or a nearly finished solve to reach its caller, short enough for an
/// orchestrator's stop timeout (Kubernetes waits 30 s before SIGKILL). What is still running
/// near its end is handed back (see below), not failed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

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
        self.drain_until(Instant::now() + grace, async {}).await;
    }

    /// Waits for tracked work and `open` (what else must end, such as requests still being
    /// served) until `deadline` at the latest, and returns `open`'s output if it ended. What
    /// still runs a quarter of the remaining time (at most [`HAND_BACK`]) before the deadline is
    /// cut short, so it can hand its work back by then; says what was cut short.
    pub async fn drain_until<F: Future>(&self, deadline: Instant, open: F) -> Option<F::Output> {
        self.tracker.close();
        let remaining = deadline.saturating_duration_since(Instant::now());
        let cut_at = deadline - (remaining / 4).min(HAND_BACK);
        let mut open = std::pin::pin!(open);
        let mut out = None;
        let settled = settle(&mut open, &mut out, &self.tracker);
        if tokio::time::timeout_at(cut_at, settled).await.is_err() {
            tracing::warn!(
                still_running = self.tracker.len(),
                "shutdown grace period nearly over; cutting short unfinished work"
            );
            self.cut.cancel();
            let settled = settle(&mut open, &mut out, &self.tracker);
            if tokio::time::timeout_at(deadline, settled).await.is_err() {
                tracing::warn!(
                    still_running = self.tracker.len(),
                    "shutdown grace period over; stopping without it"
                );
            }
        }
        // Whatever is left (background loops that served the hand-back) stops here.
        self.cut.cancel();
        out
    }
}

/// Runs `open` to its end unless it already ended (its output is in `out`), then waits for the
/// tracker.
async fn settle<F: Future>(
    open: &mut std::pin::Pin<&mut F>,
    out: &mut Option<F::Output>,
    tracker: &TaskTracker,
) {
    if out.is_none() {
        *out = Some(open.as_mut().await);
    }
    tracker.wait().await;
}
