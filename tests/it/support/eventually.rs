//! The one bounded wait of the tests: poll a condition until it holds, or fail naming what was
//! awaited. A test waits on a condition, never on a sleep; the deadline only ends a hang.
//!
//! Standalone (std and tokio only) so the crate's unit tests include the same file.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` until it returns true; panics with `what` once `deadline` has passed.
///
/// Between tries it yields to the runtime instead of sleeping, so it neither advances a paused
/// clock (`start_paused` tests) nor adds latency. The deadline is wall-clock time, checked both
/// between tries and around each try, so a paused clock or a hung check cannot make it unbounded.
pub async fn eventually<F, Fut>(deadline: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    let give_up = || -> ! { panic!("timed out after {deadline:?} waiting for {what}") };
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            give_up();
        }
        match tokio::time::timeout(left, check()).await {
            Ok(true) => return,
            Ok(false) => tokio::task::yield_now().await,
            Err(_) => give_up(),
        }
    }
}
