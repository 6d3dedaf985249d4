//! Runs one connection until it ends, until the listener's hard stop, or until its
//! [`Activity`]'s deadline passes: one timer per connection, moved only when the deadline comes
//! closer.
//!
//! Every phase change happens while the connection's future is polled, so the deadline is read
//! again right after each poll: a change that brings it closer resets the timer at once, one that
//! pushes it later is only seen when the timer fires (and then re-armed). While a response is
//! being produced there is no deadline; the timer then waits a day between looks.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Activity, ConnSettings, Phase};

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

/// Drives `work` (the connection) until it ends, `stop` is cancelled, or `activity`'s deadline
/// under `limits` passes; the caller's dropping `work` closes the socket. `work` comes pinned
/// where the caller keeps it: taken by value and pinned here, the connection's future would be
/// stored twice in this one (an argument and a local), and every connection's task would carry
/// the second copy (docs/BENCHMARKS.md).
pub async fn watch<F: Future<Output = ()> + ?Sized>(
    mut work: Pin<&mut F>,
    activity: &Activity,
    limits: &ConnSettings,
    stop: &CancellationToken,
) -> Ended {
    let mut stopped = pin!(stop.cancelled());
    let mut armed = activity
        .deadline(limits)
        .unwrap_or_else(|| Instant::now() + NOTHING_DUE);
    let mut timer = pin!(tokio::time::sleep_until(armed));
    poll_fn(|cx| {
        if work.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ended::Finished);
        }
        if stopped.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ended::Stopped);
        }
        loop {
            if let Some(due) = activity.deadline(limits).filter(|due| *due < armed) {
                armed = due;
                timer.as_mut().reset(due);
            }
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            armed = match activity.deadline(limits) {
                Some(due) if due <= now => return Poll::Ready(Ended::TimedOut(activity.phase())),
                Some(due) => due,
                None => now + NOTHING_DUE,
            };
            timer.as_mut().reset(armed);
        }
    })
    .await
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
    async fn run(activity: &Activity, work: impl Future<Output = ()>) -> (Ended, Duration) {
        let start = Instant::now();
        let ended = watch(pin!(work), activity, &limits(), &CancellationToken::new()).await;
        (ended, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_cut_at_the_header_timeout() {
        let activity = Activity::new(Instant::now());
        let (ended, at) = run(&activity, pending()).await;
        assert_eq!(
            (ended, at),
            (Ended::TimedOut(Phase::Head), Duration::from_secs(20))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_however_long_is_never_cut_and_the_idle_timeout_follows_it() {
        let activity = Activity::new(Instant::now());
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
        let activity = Activity::new(Instant::now());
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
        let activity = Activity::new(Instant::now());
        let (ended, _) = run(&activity, async {}).await;
        assert_eq!(ended, Ended::Finished);
        let stop = CancellationToken::new();
        stop.cancel();
        let ended = watch(pin!(pending()), &activity, &limits(), &stop).await;
        assert_eq!(ended, Ended::Stopped);
    }
}
