//! The one bounded wait of the tests: poll a condition until it holds, or fail naming what was
//! awaited. A test waits on a condition, never on a sleep; the deadline only ends a hang.
//!
//! Part of the library only so the unit tests and the integration tests (`tests/it`) share one;
//! nothing in the product calls it.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` until it returns true; panics with `what` once `deadline` has passed.
pub async fn eventually<F, Fut>(deadline: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let checked = poll(deadline, || {
        let tried = check();
        async move { (tried.await, ()) }
    })
    .await;
    if checked.is_err() {
        panic!("timed out after {deadline:?} waiting for {what}");
    }
}

/// [`eventually`] for a check that also reports what it saw, so a failure shows the last value.
pub async fn eventually_showing<T, F, Fut>(deadline: Duration, what: &str, check: F)
where
    T: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = (bool, T)>,
{
    if let Err(seen) = poll(deadline, check).await {
        panic!("timed out after {deadline:?} waiting for {what} (last seen: {seen:?})");
    }
}

/// How long it rests between two tries: short, so a condition is seen soon after it holds; a
/// real pause, so a check that starts a process (`redis-cli`, `ss`) is not run back to back,
/// loading both cores during the very fault a test times, and the runtime's other tasks (and its
/// I/O, on a single-threaded runtime) get their turn.
const PAUSE: Duration = Duration::from_millis(10);

/// The loop behind both: `Err` with the last value seen (none if the first try hung) once the
/// deadline has passed.
///
/// Between tries it rests [`PAUSE`] on the wall clock, on a blocking thread: a paused test clock
/// (`start_paused` tests) does not advance meanwhile, as tokio holds its auto-advance while a
/// blocking task runs. The deadline is wall-clock time, checked both between tries and around
/// each try, so a paused clock or a hung check cannot make it unbounded.
async fn poll<T, F, Fut>(deadline: Duration, mut check: F) -> Result<(), Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = (bool, T)>,
{
    let started = Instant::now();
    let mut seen = None;
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(seen);
        }
        match tokio::time::timeout(left, check()).await {
            Ok((true, _)) => return Ok(()),
            Ok((false, value)) => {
                seen = Some(value);
                rest().await;
            }
            Err(_) => return Err(seen),
        }
    }
}

async fn rest() {
    // Joined only to wait; a panic in `sleep` cannot happen.
    let _ = tokio::task::spawn_blocking(|| std::thread::sleep(PAUSE)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A check that holds after 200 ms of wall time is tried at most once per pause (21 times),
    /// however fast the machine: without the rest between tries it ran thousands of times.
    #[tokio::test]
    async fn a_wait_rests_between_tries() {
        let tries = AtomicU32::new(0);
        let started = Instant::now();
        eventually(Duration::from_secs(10), "200 ms to pass", || {
            tries.fetch_add(1, Ordering::Relaxed);
            async { started.elapsed() >= Duration::from_millis(200) }
        })
        .await;
        let tries = tries.into_inner();
        assert!((2..=21).contains(&tries), "{tries} tries in 200 ms");
    }
}
