//! Admission: how many solves this process holds at once (`max_concurrent`, seed 002). Beyond it a
//! caller is refused at once with a reply that says "try elsewhere" (503 + `Retry-After`), which
//! a load balancer may safely move to another instance.
//!
//! Slow start (`warmup_s`, docs/DEPLOY.md "Load balancing"): for `warmup` after the process
//! starts, the number of solves that may *run* ramps linearly from 1 to `max_concurrent`. A
//! caller admitted beyond the ramp is not refused: it waits here until the ramp (or a finished
//! solve) lets it run. Refusing would turn a restart into the seed's "burst of failures" (NGINX
//! does not move a refused POST); waiting keeps the caller's connection open on this instance,
//! which is exactly what `least_conn` counts, so new traffic goes to the others while this one
//! warms up. Held solves still never exceed `max_concurrent`, so the wait is bounded too.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

#[derive(Debug)]
pub struct Admission {
    /// Admitted and not finished: running, or waiting for the ramp. At most `max`.
    active: AtomicU64,
    max: u64,
    ramp: Option<Ramp>,
    /// Callers refused because `max` were held, since start (the plan advisor's demand).
    refused: AtomicU64,
}

/// One admitted solve; leaving the scope releases it, whatever way the handler ends (a caller
/// that hangs up while waiting for the ramp releases its place too).
#[derive(Debug)]
pub struct Permit {
    admission: Arc<Admission>,
    _running: Option<OwnedSemaphorePermit>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.admission.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The slow-start ramp: a semaphore of running solves whose permits a driver task adds as time
/// passes (one task for all waiters, so a crowd waiting on the ramp costs no timers).
#[derive(Debug)]
struct Ramp {
    started: Instant,
    warmup: Duration,
    running: Arc<Semaphore>,
}

/// Solves that may run `elapsed` after start: 1 at start, `max` from `warmup` on.
pub fn limit_at(max: u64, warmup: Duration, elapsed: Duration) -> u64 {
    if elapsed >= warmup {
        return max;
    }
    let ramped = (max as f64 * elapsed.as_secs_f64() / warmup.as_secs_f64()).ceil() as u64;
    ramped.clamp(1, max)
}

impl Admission {
    /// No slow start: every admitted solve runs at once.
    pub fn new(max: u64) -> Arc<Self> {
        Self::warming_up(max, Duration::ZERO)
    }

    /// Ramps the running limit over `warmup`, counted from now. Within a Tokio runtime (it
    /// spawns the task that widens the ramp; that task ends with the warm-up).
    pub fn warming_up(max: u64, warmup: Duration) -> Arc<Self> {
        // A semaphore holds at most `MAX_PERMITS`; a larger `max` is far beyond what a process
        // can hold anyway, so the limit stops there.
        let max = max.clamp(1, Semaphore::MAX_PERMITS as u64);
        let ramp = (!warmup.is_zero()).then(|| {
            let ramp = Ramp {
                started: Instant::now(),
                warmup,
                running: Arc::new(Semaphore::new(1)),
            };
            tokio::spawn(widen(ramp.running.clone(), ramp.started, warmup, max));
            ramp
        });
        Arc::new(Self {
            active: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            max,
            ramp,
        })
    }

    /// A place for one solve, or `None` at once when `max` are held. During the warm-up the
    /// place may wait for the ramp before it is returned.
    pub async fn admit(self: &Arc<Self>) -> Option<Permit> {
        if self
            .active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_err()
        {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // From here a dropped future must give the place back: the permit owns it at once.
        let mut permit = Permit {
            admission: self.clone(),
            _running: None,
        };
        if let Some(ramp) = &self.ramp {
            // The semaphore is never closed; were it, the solve would simply run unthrottled.
            permit._running = ramp.running.clone().acquire_owned().await.ok();
        }
        Some(permit)
    }

    /// Callers refused at once since start (`max` held).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Acquire)
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// Solves that may run now: below `max` only while warming up.
    pub fn limit_now(&self) -> u64 {
        match &self.ramp {
            Some(ramp) => limit_at(self.max, ramp.warmup, ramp.started.elapsed()),
            None => self.max,
        }
    }

    pub fn warming_up_now(&self) -> bool {
        self.limit_now() < self.max
    }

    /// Load as seed 002's `/health` reports it: active / max.
    pub fn load(&self) -> f64 {
        self.active() as f64 / self.max as f64
    }
}

/// Adds permits to `running` as the limit grows, from 1 at `started` to `max` at `warmup`.
/// Each permit added wakes the oldest waiter.
async fn widen(running: Arc<Semaphore>, started: Instant, warmup: Duration, max: u64) {
    let mut granted = 1;
    while granted < max {
        // `ceil(max * t / warmup)` passes `granted` just after `t = warmup * granted / max`.
        let next = warmup.mul_f64(granted as f64 / max as f64) + Duration::from_millis(1);
        tokio::time::sleep_until(started + next.min(warmup)).await;
        let limit = limit_at(max, warmup, started.elapsed());
        if limit > granted {
            running.add_permits((limit - granted) as usize);
            granted = limit;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn admits_up_to_max_and_releases_on_drop() {
        let a = Admission::new(2);
        let p1 = a.admit().await.unwrap();
        let _p2 = a.admit().await.unwrap();
        assert!(a.admit().await.is_none());
        drop(p1);
        assert!(a.admit().await.is_some());
    }

    #[test]
    fn the_limit_ramps_linearly_from_one_to_max_over_the_warmup() {
        let w = Duration::from_secs(10);
        assert_eq!(limit_at(100, w, Duration::ZERO), 1);
        assert_eq!(limit_at(100, w, Duration::from_millis(1)), 1);
        assert_eq!(limit_at(100, w, Duration::from_secs(1)), 10);
        assert_eq!(limit_at(100, w, Duration::from_millis(5001)), 51);
        assert_eq!(limit_at(100, w, w), 100);
        assert_eq!(limit_at(100, w, Duration::from_secs(3600)), 100);
        assert_eq!(limit_at(3, w, Duration::from_secs(9)), 3);
        assert_eq!(limit_at(1, w, Duration::ZERO), 1);
    }

    // Paused time: the clock moves only when every task waits, so the steps are exact.
    #[tokio::test(start_paused = true)]
    async fn while_warming_up_callers_beyond_the_ramp_wait_instead_of_being_refused() {
        let a = Admission::warming_up(4, Duration::from_secs(4));
        assert!(a.warming_up_now());
        let first = a.admit().await.expect("one runs at once");
        let started = Instant::now();
        let second = a
            .admit()
            .await
            .expect("admitted, after waiting for the ramp");
        // The limit reaches 2 just after 1 s of the 4 s warm-up.
        assert!(started.elapsed() >= Duration::from_secs(1));
        assert_eq!(a.limit_now(), 2);
        let (_third, _fourth) = tokio::join!(a.admit(), a.admit());
        assert_eq!(a.active(), 4);
        assert!(
            !a.warming_up_now(),
            "all four run only at the end of the warm-up"
        );
        assert!(a.admit().await.is_none(), "max still refuses at once");
        drop((first, second));
        assert_eq!(a.active(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_solve_lets_a_waiting_one_run_before_the_ramp_grows() {
        let a = Admission::warming_up(10, Duration::from_secs(100));
        let first = a.admit().await.unwrap();
        let waiting = tokio::spawn({
            let a = a.clone();
            async move { a.admit().await.map(|_| Instant::now()) }
        });
        tokio::task::yield_now().await;
        let freed_at = Instant::now();
        drop(first);
        let ran_at = waiting.await.unwrap().expect("admitted");
        assert_eq!(ran_at, freed_at, "no wait for the next step (10 s away)");
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_gives_up_while_waiting_frees_its_place() {
        let a = Admission::warming_up(2, Duration::from_secs(60));
        let _running = a.admit().await.unwrap();
        let gave_up = tokio::time::timeout(Duration::from_secs(1), a.admit()).await;
        assert!(gave_up.is_err());
        assert_eq!(a.active(), 1);
    }
}
