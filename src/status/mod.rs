//! The live status behind the dashboard at `/`, `GET /v1/status` and `captcha-gateway status`
//! (docs/API.md "Status"). Figures come from their owners (the store's per-target counters
//! through `Pools`, the upstream accounts, admission, the queue) plus a small [`Recorder`] the
//! engine feeds at every handout; a sampler keeps a bounded ring of readings so a page opened now
//! shows the last minutes. With Redis, each instance publishes its own figures under a key that
//! expires (`fleet.rs`) and the report adds up every live instance.

mod build;
pub mod cli;
mod fleet;
pub mod histogram;
mod instance;
pub mod page;
mod recorder;
pub mod report;
mod ring;

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use recorder::Recorder;
pub use report::StatusReport;

use crate::engine::store::redis::RedisTarget;
use crate::http::AppState;
use crate::shutdown::Shutdown;
use instance::InstanceFigures;
use ring::Ring;

/// How often the sampler reads figures and publishes them (`Settings::status_every`).
pub const DEFAULT_EVERY: Duration = Duration::from_secs(5);
/// History kept: 15 minutes at the default interval.
pub(crate) const HISTORY: usize = 180;
/// Percentiles and per-class error rates cover this much of the history.
const WINDOW: Duration = Duration::from_secs(300);
/// Bounds on what a report lists, whatever the fleet publishes.
pub(crate) const MAX_ACCOUNTS: usize = 64;
pub(crate) const MAX_ERROR_CLASSES: usize = 64;

/// One per process: the history ring and the fleet's last published figures. The handouts
/// themselves are counted by the engine's [`Recorder`].
pub struct Status {
    every: Duration,
    ring: Mutex<Ring>,
    /// Other instances' figures as last read from Redis (empty with the embedded store).
    others: Mutex<Vec<InstanceFigures>>,
    fleet: Option<fleet::Fleet>,
    /// `redis` or `memory`, as the report names the store.
    store: &'static str,
}

impl Status {
    /// `redis`: where to publish and read the fleet's figures; `None` for the embedded store.
    pub async fn new(every: Duration, redis: Option<&RedisTarget>) -> Arc<Status> {
        let every = every.max(Duration::from_millis(100));
        let fleet = match redis {
            Some(target) => fleet::Fleet::open(target, every).await,
            None => None,
        };
        Arc::new(Status {
            every,
            ring: Mutex::new(Ring::new(HISTORY, crate::model::now_ms())),
            others: Mutex::new(Vec::new()),
            fleet,
            store: if redis.is_some() { "redis" } else { "memory" },
        })
    }

    /// Reads figures every interval (on wall-clock multiples of it, so instances' history
    /// points line up), publishes this instance's and reads the fleet's, until shutdown.
    pub fn spawn_sampler(self: &Arc<Self>, state: AppState, shutdown: &Shutdown) {
        let status = self.clone();
        let token = shutdown.token.clone();
        tokio::spawn(async move {
            loop {
                let every = status.every.as_millis().max(1) as u64;
                let now = crate::model::now_ms();
                let wait = every - now % every;
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                }
                status.sample(&state).await;
            }
        });
    }

    async fn sample(&self, state: &AppState) {
        let sample = build::sample(state);
        lock(&self.ring).push(sample);
        if let Some(fleet) = &self.fleet {
            let mine = self.local_figures(state);
            let others = fleet.exchange(&mine).await;
            *lock(&self.others) = others;
        }
    }

    fn local_figures(&self, state: &AppState) -> InstanceFigures {
        let now = build::live_counts(state);
        build::instance_figures(state, &now, &lock(&self.ring), WINDOW)
    }

    /// The report as of now: live gauges and totals, the ring's history, the fleet's sums.
    pub async fn report(&self, state: &AppState) -> StatusReport {
        let store_totals = build::store_rows(state).await;
        let mine = self.local_figures(state);
        let others = lock(&self.others).clone();
        let ring = lock(&self.ring).clone();
        build::report(build::Inputs {
            state,
            every: self.every,
            ring: &ring,
            rows: store_totals,
            mine,
            others,
            store: self.store,
        })
        .await
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
