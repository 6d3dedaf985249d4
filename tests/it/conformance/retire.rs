//! Retiring idle targets (`Housekeeping::retire`) is a store promise like the others: an idle, empty
//! target goes, a pooled, running, waiting, recently used or configured one stays, and callers
//! racing a retirer keep every promise. The scenarios live in `crate::retire` (with the
//! Redis-only checks: keys left behind, lost replies, restarts); here they run on every backend.

use std::time::Duration;

use super::backend::{Backend, Tuning};

pub async fn idle_empty_targets_retire_and_busy_ones_stay<B: Backend>() {
    let backend = B::start(Tuning {
        target_idle: Duration::from_millis(crate::retire::IDLE_MS),
        ..Tuning::default()
    })
    .await;
    let store = backend.instance().await;
    crate::retire::retirement_keeps_what_is_needed(&*store).await;
}

pub async fn callers_racing_a_retirer_keep_every_promise<B: Backend>() {
    // Idle time zero: every empty target goes the moment the retirer passes.
    let backend = B::start(Tuning {
        target_idle: Duration::ZERO,
        ..Tuning::default()
    })
    .await;
    let store = backend.instance().await;
    crate::retire::callers_racing_retirement_keep_the_promises(store).await;
}
