//! 429 `fleet_busy`: the fleet-wide thread budget is exhausted and this instance already has
//! `max_thread_waiters` callers waiting for a thread (docs/DEPLOY.md "Load balancing").
//!
//! Why only then: a caller that waits for a thread keeps its place in the fleet's FIFO and gets
//! its answer as soon as a thread frees, which serves it better than a refusal it must retry
//! (and that every other caller refused at the same moment retries too). Past the bound the
//! wait is long enough that telling the caller to back off is the kinder answer; and since the
//! budget is the fleet's, the answer is a 429 (retrying on another instance does not help), not
//! a 503.

use axum::http::StatusCode;

use super::AppState;
use super::error::ApiError;

/// The `Retry-After` sent: about a short solve's time, so the retry finds threads freed.
pub const RETRY_AFTER_S: u64 = 5;

/// Whether a new solve must be refused now.
pub(super) fn refused(state: &AppState) -> bool {
    let Some(bound) = state.limits.max_thread_waiters else {
        return false;
    };
    let refused =
        state.upstream.callers_waiting_for_threads() >= bound && state.upstream.threads_exhausted();
    if refused {
        state.upstream.refuse_for_threads();
    }
    refused
}

/// The native API's refusal.
pub(super) fn native() -> ApiError {
    ApiError {
        retry_after: Some(RETRY_AFTER_S),
        ..ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "fleet_busy",
            "every provider thread of the fleet is taken and callers already wait for one; retry later",
        )
    }
}

/// [`native`] as an early return for handlers that answer in the native shape.
pub(super) fn check_native(state: &AppState) -> Result<(), ApiError> {
    if refused(state) {
        Err(native())
    } else {
        Ok(())
    }
}
