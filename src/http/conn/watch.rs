//! Runs one connection until it ends, until the listener's hard stop, or until its
//! [`Activity`]'s deadline passes: one timer per connection, moved only when the deadline comes
//! closer.
//!
//! Every phase change happens while the connection's future is polled, so the deadline is read
//! again right after each poll: a change that brings it closer resets the timer at once, one that
//! pushes it later is only seen when the timer fires (and then re-armed). While a response is
//! being produced there is no deadline; the timer then waits a day between looks.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::{Activity, ConnSettings, Connections, Phase};

/// How a watched connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The connection finished by itself (closed by either side, or an error).
    Finished,
    /// The listener's grace period ran out.
    Stopped,
    /// The client took too long in this phase; the connection was dropped.
    TimedOut(Phase),
}

/// How far ahead the timer is set while nothing is due: far enough to cost nothing, near enough
/// for any timer wheel.
const NOTHING_DUE: Duration = Duration::from_secs(24 * 3600);

/// Where a watched connection's limits come from: the listener's settings (a pointer shared by
/// every connection) or limits of its own (a connection past the cap).
pub trait Limits {
    fn limits(&self) -> &ConnSettings;
}

impl Limits for ConnSettings {
    fn limits(&self) -> &ConnSettings {
        self
    }
}

impl Limits for Connections {
    fn limits(&self) -> &ConnSettings {
        self.settings()
    }
}

pin_project! {
    /// A connection under watch: the future a connection's task runs, so it owns what it
    /// watches. Each of the 10,000 waiting callers a process is sized for holds one, and an
    /// `async` wrapper around the connection stored it (and what it captured) twice
    /// (docs/BENCHMARKS.md).
    #[must_use = "a watch does nothing unless polled"]
    pub struct Watch<F, L> {
        #[pin]
        work: F,
        #[pin]
        stopped: WaitForCancellationFutureOwned,
        #[pin]
        timer: Sleep,
        armed: Instant,
        activity: Arc<Activity>,
        limits: L,
    }
}

/// Drives `work` (the connection) until it ends, `stop` is cancelled, or `activity`'s deadline
/// under `limits` passes. Dropping the watch drops `work`, which closes the socket.
pub fn watch<F, L>(
    work: F,
    activity: Arc<Activity>,
    limits: L,
    stop: CancellationToken,
) -> Watch<F, L>
where
    F: Future<Output = ()>,
    L: Limits,
{
    let armed = activity
        .deadline(limits.limits())
        .unwrap_or_else(|| Instant::now() + NOTHING_DUE);
    Watch {
        work,
        stopped: stop.cancelled_owned(),
        timer: tokio::time::sleep_until(armed),
        armed,
        activity,
        limits,
    }
}

impl<F: Future<Output = ()>, L: Limits> Future for Watch<F, L> {
    type Output = Ended;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ended> {
        let mut this = self.project();
        if this.work.poll(cx).is_ready() {
            return Poll::Ready(Ended::Finished);
        }
        if this.stopped.poll(cx).is_ready() {
            return Poll::Ready(Ended::Stopped);
        }
        let limits = this.limits.limits();
        loop {
            if let Some(due) = this
                .activity
                .deadline(limits)
                .filter(|due| due < this.armed)
            {
                *this.armed = due;
                this.timer.as_mut().reset(due);
            }
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            *this.armed = match this.activity.deadline(limits) {
                Some(due) if due <= now => {
                    return Poll::Ready(Ended::TimedOut(this.activity.phase()));
                }
                Some(due) => due,
                None => now + NOTHING_DUE,
            };
            this.timer.as_mut().reset(*this.armed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::pending;

    use super::*;

    /// The shipped timeouts, with room for ten connections.
    fn limits() -> ConnSettings {
        ConnSettings {
            max_connections: 10,
            ..ConnSettings::default()
        }
    }

    /// Watches `work` on a fresh connection; returns how it ended and when (virtual time).
    async fn run(activity: &Arc<Activity>, work: impl Future<Output = ()>) -> (Ended, Duration) {
        let start = Instant::now();
        let ended = watch(work, activity.clone(), limits(), CancellationToken::new()).await;
        (ended, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_cut_at_the_header_timeout() {
        let activity = Arc::new(Activity::new(Instant::now()));
        let (ended, at) = run(&activity, pending()).await;
        assert_eq!(
            (ended, at),
            (Ended::TimedOut(Phase::Head), Duration::from_secs(20))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_however_long_is_never_cut_and_the_idle_timeout_follows_it() {
        let activity = Arc::new(Activity::new(Instant::now()));
        let work = async {
            let request = activity.request_began(false);
            // A caller waiting ten minutes for its solve, then its response written.
            tokio::time::sleep(Duration::from_secs(600)).await;
            activity.request_ended(request);
            pending::<()>().await;
        };
        let (ended, at) = run(&activity, work).await;
        assert_eq!(
            (ended, at),
            (Ended::TimedOut(Phase::Idle), Duration::from_secs(675))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_below_the_rate_is_cut_when_its_allowance_runs_out() {
        let activity = Arc::new(Activity::new(Instant::now()));
        let work = async {
            let request = activity.request_began(true);
            // 100 bytes every 10 s: 10 bytes/s, never silent for 20 s.
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                activity.body_read(request, 100);
            }
        };
        let (ended, at) = run(&activity, work).await;
        // 20 s of grace, and each 100 bytes earn 200 ms more: the 200 bytes in by 20 s stretch
        // it to 20.4 s, and the next 100 would only come at 30 s.
        assert_eq!(ended, Ended::TimedOut(Phase::Body));
        assert_eq!(at, Duration::from_millis(20_400));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_finishes_or_is_stopped_ends_so() {
        let activity = Arc::new(Activity::new(Instant::now()));
        let (ended, _) = run(&activity, async {}).await;
        assert_eq!(ended, Ended::Finished);
        let stop = CancellationToken::new();
        stop.cancel();
        let ended = watch(pending(), activity, limits(), stop).await;
        assert_eq!(ended, Ended::Stopped);
    }
}
