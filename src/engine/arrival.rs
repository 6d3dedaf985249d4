//! A caller's arrival at the store, bounded by the caller's deadline (a slow or stalled store
//! must not hold a caller past it).
//!
//! The store call runs as its own task. When the store is slower than the caller's patience
//! (Redis blackholed or stalled: each call waits out its response timeout), the caller gets its
//! timeout at its deadline instead of seconds later, and the arrival finishes in the background
//! as for a caller who left at once: a pooled answer goes back, a registered wait is given up
//! through the usual departure, a claimed task still starts (its answer serves the next caller
//! or the pool). The same departure runs when the caller's request is dropped mid-arrival, so
//! nothing the store registered for it is stranded.
//!
//! Owns that bound and that hand-off. Does not own what an arrival means (the engine's solve
//! paths) or the store calls themselves.

use std::future::Future;

use futures::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, Span};

use super::StoreError;
use super::solve::Engine;
use super::store::{Arrival, SharedArrival, WaiterId};
use super::types::Priority;
use crate::model::{SolveRequest, Target, now_ms};

/// What to do with an arrival whose caller has gone.
type Departure<T> = Box<dyn FnOnce(T) -> BoxFuture<'static, ()> + Send>;

/// A store arrival in progress for one caller.
pub(super) struct Arriving<T: Send + 'static> {
    call: Option<JoinHandle<Result<T, StoreError>>>,
    departure: Option<Departure<T>>,
    tracker: TaskTracker,
    /// The caller's span: a task its departure starts still names the request that caused it.
    span: Span,
}

impl<T: Send + 'static> Arriving<T> {
    /// Starts `arrive` on `tracker`; `departure` handles its result if the caller is gone by then.
    pub fn start(
        tracker: &TaskTracker,
        arrive: impl Future<Output = Result<T, StoreError>> + Send + 'static,
        departure: impl FnOnce(T) -> BoxFuture<'static, ()> + Send + 'static,
    ) -> Self {
        let span = Span::current();
        Arriving {
            call: Some(tracker.spawn(arrive.instrument(span.clone()))),
            departure: Some(Box::new(departure)),
            tracker: tracker.clone(),
            span,
        }
    }

    /// The store's answer, or `None` when `deadline` passes first (the departure then runs in
    /// the background once the store answers).
    pub async fn by(mut self, deadline: Instant) -> Option<Result<T, StoreError>> {
        let call = self.call.as_mut()?;
        let joined = tokio::time::timeout_at(deadline, call).await.ok()?;
        self.call = None;
        Some(joined.unwrap_or_else(|e| Err(StoreError::Unavailable(format!("store call: {e}")))))
    }
}

impl<T: Send + 'static> Drop for Arriving<T> {
    fn drop(&mut self) {
        let (Some(call), Some(departure)) = (self.call.take(), self.departure.take()) else {
            return;
        };
        let departing = async move {
            if let Ok(Ok(arrival)) = call.await {
                departure(arrival).await;
            }
        };
        self.tracker.spawn(departing.instrument(self.span.clone()));
    }
}

impl Engine {
    /// A single-use caller's arrival; if it has left by the store's answer, it departs.
    pub(super) fn arrive_single_use(
        &self,
        target: &Target,
        req: &SolveRequest,
        waiter: &WaiterId,
        poolable: bool,
        priority: Priority,
    ) -> Arriving<Arrival> {
        let (store, engine) = (self.store.clone(), self.clone());
        let (t, w, now, min) = (
            target.clone(),
            waiter.clone(),
            now_ms(),
            self.min_remaining_ms(),
        );
        let (gone_target, gone_req, gone_waiter) = (target.clone(), req.clone(), waiter.clone());
        Arriving::start(
            &self.tracker,
            async move { store.arrive(&t, &w, now, min).await },
            move |arrival| {
                Box::pin(async move {
                    engine
                        .depart_on_arrival(
                            gone_target,
                            gone_req,
                            gone_waiter,
                            arrival,
                            poolable,
                            priority,
                        )
                        .await;
                })
            },
        )
    }

    /// A reusable target's arrival; if its caller has left by the store's answer and it was
    /// made leader, it still solves for its followers.
    pub(super) fn arrive_shared(
        &self,
        target: &Target,
        req: &SolveRequest,
        priority: Priority,
    ) -> Arriving<SharedArrival> {
        let (store, engine) = (self.store.clone(), self.clone());
        let (t, now, min) = (target.clone(), now_ms(), self.min_remaining_ms());
        let (gone_target, gone_req) = (target.clone(), req.clone());
        Arriving::start(
            &self.tracker,
            async move { store.shared_arrive(&t, now, min).await },
            move |arrival| {
                Box::pin(async move {
                    // A leader must still solve: its followers on other callers wait on it.
                    if let SharedArrival::Lead(_, lead) = arrival {
                        engine.lead_shared(gone_target, gone_req, lead, priority);
                    }
                })
            },
        )
    }
}
