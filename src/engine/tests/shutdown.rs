//! The engine at shutdown: a task cut short hands its work back (a requeue, no failure for any
//! caller), and callers still waiting at the cut are told the instance is stopping.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::png_request;
use crate::engine::store::{Arrival, ClaimId, Finished, SharedArrival, TaskOutcome, WaiterId};
use crate::engine::store::{
    Backend, Housekeeping, IdempotencyKeys, Reusable, SingleUse, TaskRecords,
};
use crate::engine::*;
use crate::eventually::eventually;
use crate::model::{Answer, Millis, SolveRequest, Target, UpstreamRef, now_ms};

type Release = oneshot::Sender<Result<Solution, SolveFailure>>;

/// Each solve parks until the test ends it.
struct ParkedSolver {
    parked: Mutex<Vec<Release>>,
    started: watch::Sender<usize>,
}

impl ParkedSolver {
    async fn started(&self, n: usize) {
        let mut rx = self.started.subscribe();
        rx.wait_for(|s| *s >= n).await.unwrap();
    }

    fn end_all(&self, outcome: Result<Solution, SolveFailure>) {
        for tx in self.parked.lock().unwrap().drain(..) {
            let _ = tx.send(outcome.clone());
        }
    }
}

#[async_trait]
impl Solver for ParkedSolver {
    async fn solve(
        &self,
        _req: &SolveRequest,
        _deadline: Instant,
        _priority: Priority,
    ) -> Result<Solution, SolveFailure> {
        let (tx, rx) = oneshot::channel();
        self.parked.lock().unwrap().push(tx);
        self.started.send_modify(|n| *n += 1);
        rx.await
            .unwrap_or_else(|_| Err(SolveFailure::new("ERROR_TEST", "dropped")))
    }

    async fn report(&self, _task: &UpstreamRef, _good: bool) -> Result<(), SolveFailure> {
        Ok(())
    }
}

/// The memory store, with a record of how every task ended; with `lease`, it passes for a store
/// other instances share (task records under run leases).
#[derive(Default)]
struct RecordingStore {
    inner: MemoryStore,
    finished: Mutex<Vec<&'static str>>,
    shared_finished: Mutex<Vec<bool>>,
    lease: Option<Duration>,
}

impl Backend for RecordingStore {
    fn instance(&self) -> &str {
        self.inner.instance()
    }

    fn lease(&self) -> Option<Duration> {
        self.lease
    }
}

#[async_trait]
impl SingleUse for RecordingStore {
    async fn arrive(
        &self,
        t: &Target,
        w: &WaiterId,
        now: Millis,
        min: u64,
    ) -> Result<Arrival, StoreError> {
        self.inner.arrive(t, w, now, min).await
    }

    async fn finish(
        &self,
        t: &Target,
        claim: &ClaimId,
        outcome: TaskOutcome,
        poolable: bool,
        now: Millis,
    ) -> Result<Finished, StoreError> {
        let name = match &outcome {
            TaskOutcome::Answer(_) => "answer",
            TaskOutcome::Failed(_) => "failed",
            TaskOutcome::Stale => "stale",
            TaskOutcome::Requeue => "requeue",
            TaskOutcome::Withdrawn => "withdrawn",
        };
        self.finished.lock().unwrap().push(name);
        self.inner.finish(t, claim, outcome, poolable, now).await
    }

    async fn abandon(
        &self,
        t: &Target,
        w: &WaiterId,
        delivered: Option<Delivery>,
        poolable: bool,
        now: Millis,
    ) -> Result<(), StoreError> {
        self.inner.abandon(t, w, delivered, poolable, now).await
    }

    async fn put(&self, t: &Target, a: Answer, now: Millis) -> Result<(), StoreError> {
        self.inner.put(t, a, now).await
    }

    async fn reserve(
        &self,
        t: &Target,
        size: u32,
        now: Millis,
    ) -> Result<Vec<ClaimId>, StoreError> {
        self.inner.reserve(t, size, now).await
    }

    async fn cover(&self, t: &Target, now: Millis) -> Result<Vec<ClaimId>, StoreError> {
        self.inner.cover(t, now).await
    }

    async fn counts(&self, t: &Target, now: Millis, min: u64) -> Result<TargetCounts, StoreError> {
        self.inner.counts(t, now, min).await
    }
}

#[async_trait]
impl Reusable for RecordingStore {
    async fn shared_arrive(
        &self,
        t: &Target,
        now: Millis,
        min: u64,
    ) -> Result<SharedArrival, StoreError> {
        self.inner.shared_arrive(t, now, min).await
    }

    async fn shared_finish(
        &self,
        t: &Target,
        lead: u64,
        outcome: Result<Answer, SolveFailure>,
        now: Millis,
    ) -> Result<(), StoreError> {
        self.shared_finished.lock().unwrap().push(outcome.is_ok());
        self.inner.shared_finish(t, lead, outcome, now).await
    }

    async fn shared_takeover(
        &self,
        t: &Target,
        now: Millis,
        min: u64,
    ) -> Result<Option<u64>, StoreError> {
        self.inner.shared_takeover(t, now, min).await
    }

    async fn shared_evict(&self, id: &str) -> Result<(), StoreError> {
        self.inner.shared_evict(id).await
    }
}

#[async_trait]
impl TaskRecords for RecordingStore {
    async fn create_task(&self, r: TaskRecord) -> Result<(), StoreError> {
        self.inner.create_task(r).await
    }

    async fn finish_task(&self, id: &str, s: TaskState, now: Millis) -> Result<(), StoreError> {
        self.inner.finish_task(id, s, now).await
    }

    async fn mark_reported(&self, id: &str) -> Result<bool, StoreError> {
        self.inner.mark_reported(id).await
    }

    async fn get_task(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        self.inner.get_task(id).await
    }

    async fn wait_task(&self, id: &str, w: Duration) -> Result<Option<TaskRecord>, StoreError> {
        self.inner.wait_task(id, w).await
    }
}

#[async_trait]
impl IdempotencyKeys for RecordingStore {
    async fn bound_key(&self, scoped: &str, now: Millis) -> Result<Option<String>, StoreError> {
        self.inner.bound_key(scoped, now).await
    }

    async fn bind_key(
        &self,
        scoped: &str,
        expected: Option<&str>,
        value: &str,
        ttl_ms: u64,
        now: Millis,
    ) -> Result<bool, StoreError> {
        self.inner
            .bind_key(scoped, expected, value, ttl_ms, now)
            .await
    }
}

#[async_trait]
impl Housekeeping for RecordingStore {
    async fn sweep(&self, now: Millis, r: u64, p: u64) -> Result<usize, StoreError> {
        self.inner.sweep(now, r, p).await
    }

    async fn retire(&self, now: Millis, keep: &HashSet<String>) -> Result<usize, StoreError> {
        self.inner.retire(now, keep).await
    }

    async fn figures(&self) -> Result<Vec<TargetFigures>, StoreError> {
        self.inner.figures().await
    }
}

struct Rig {
    engine: Engine,
    solver: Arc<ParkedSolver>,
    store: Arc<RecordingStore>,
    cut: CancellationToken,
}

fn rig() -> Rig {
    rig_on(Arc::new(RecordingStore::default()))
}

/// An engine with its own solver and cut on `store`, which other rigs may share.
fn rig_on(store: Arc<RecordingStore>) -> Rig {
    let solver = Arc::new(ParkedSolver {
        parked: Mutex::default(),
        started: watch::Sender::new(0),
    });
    let cut = CancellationToken::new();
    let engine = Engine::new(
        store.clone(),
        solver.clone(),
        EngineSettings::default(),
        TaskTracker::new(),
    )
    .cut_short_by(cut.clone());
    Rig {
        engine,
        solver,
        store,
        cut,
    }
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(600)
}

const HANG: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_task_cut_short_by_shutdown_is_requeued_and_fails_no_caller() {
    let Rig {
        engine,
        solver,
        store,
        cut,
    } = rig();
    let req = SolveRequest::recaptcha_v2("6Le-stop", "https://example.com/");
    let target = engine.target(&req);
    let caller = tokio::spawn({
        let e = engine.clone();
        async move { e.solve(req, far()).await }
    });
    solver.started(1).await;
    solver.end_all(Err(SolveFailure::shutting_down()));
    eventually(HANG, "the task to finish", || async {
        !store.finished.lock().unwrap().is_empty()
    })
    .await;
    assert_eq!(*store.finished.lock().unwrap(), ["requeue"]);
    let counts = store.counts(&target, now_ms(), 0).await.unwrap();
    assert_eq!((counts.in_flight, counts.waiting), (0, 1), "claim released");

    // The caller got nothing from it; at the cut it is told the instance is stopping, and its
    // wait is given up.
    cut.cancel();
    assert_eq!(caller.await.unwrap(), Err(SolveError::ShuttingDown));
    eventually(HANG, "the wait to be abandoned", || async {
        store.counts(&target, now_ms(), 0).await.unwrap().waiting == 0
    })
    .await;
}

#[tokio::test]
async fn other_failures_still_fail_their_waiter() {
    let Rig {
        engine,
        solver,
        store,
        ..
    } = rig();
    let caller = tokio::spawn({
        let e = engine.clone();
        let req = SolveRequest::recaptcha_v2("6Le-fail", "https://example.com/");
        async move { e.solve(req, far()).await }
    });
    solver.started(1).await;
    solver.end_all(Err(SolveFailure::new("ERROR_CAPTCHA_UNSOLVABLE", "test")));
    let err = caller.await.unwrap().unwrap_err();
    assert_eq!(err.code(), "ERROR_CAPTCHA_UNSOLVABLE");
    assert_eq!(*store.finished.lock().unwrap(), ["failed"]);
}

#[tokio::test]
async fn a_reusable_leader_cut_short_records_nothing_for_its_followers() {
    let Rig {
        engine,
        solver,
        store,
        cut,
    } = rig();
    let image = png_request(200, 9);
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let (e, r) = (engine.clone(), image.clone());
            tokio::spawn(async move { e.solve(r, far()).await })
        })
        .collect();
    solver.started(1).await;
    solver.end_all(Err(SolveFailure::shutting_down()));
    // The leader's task is over; the only thing still to end the callers is the cut.
    eventually(
        HANG,
        "the leader's task to be spawned and ended",
        || async { engine.tracker.is_empty() },
    )
    .await;
    assert!(store.shared_finished.lock().unwrap().is_empty());
    assert!(
        callers.iter().all(|c| !c.is_finished()),
        "nobody was failed"
    );
    cut.cancel();
    for c in callers {
        assert_eq!(c.await.unwrap(), Err(SolveError::ShuttingDown));
    }
}

#[tokio::test]
async fn a_task_id_cut_short_with_a_shared_store_is_left_for_another_instance_to_take_over() {
    let store = Arc::new(RecordingStore {
        lease: Some(Duration::from_secs(30)),
        ..RecordingStore::default()
    });
    let stopping = rig_on(store.clone());
    let other = rig_on(store.clone());
    let req = SolveRequest::recaptcha_v2("6Le-left", "https://example.com/");
    let id = stopping
        .engine
        .submit("t", req, Duration::from_secs(600), ())
        .await
        .unwrap();
    stopping.solver.started(1).await;

    // The signal, then the cut before the answer came.
    stopping.engine.tracker.close();
    stopping.cut.cancel();
    stopping.solver.end_all(Err(SolveFailure::shutting_down()));
    eventually(HANG, "the stopping instance's work to end", || async {
        stopping.engine.tracker.is_empty()
    })
    .await;
    let record = store.get_task(&id).await.unwrap().unwrap();
    assert_eq!(record.state, TaskState::Pending, "the task was not failed");

    // A long poll on the stopping instance answers at once with the task as it is, and the
    // stopping instance does not take the task over itself.
    let read = tokio::time::timeout(
        HANG,
        stopping.engine.task("t", &id, Duration::from_secs(600)),
    )
    .await
    .expect("a stopping instance does not hold a long poll");
    assert_eq!(read.unwrap().unwrap().state, TaskState::Pending);
    assert_eq!(*stopping.solver.started.borrow(), 1);

    // Read on another instance, it is taken over at once (its run lease was let go), and
    // answered there.
    let reader = tokio::spawn({
        let e = other.engine.clone();
        let id = id.clone();
        async move { e.task("t", &id, Duration::from_secs(600)).await }
    });
    other.solver.started(1).await;
    other.solver.end_all(Ok(Solution {
        text: "token-left".into(),
        user_agent: None,
        upstream: UpstreamRef {
            account: "test".into(),
            task_id: "1".into(),
        },
        solved_at: now_ms(),
    }));
    let record = reader.await.unwrap().unwrap().unwrap();
    let TaskState::Ready(handout) = record.state else {
        panic!("the task taken over was answered: {:?}", record.state);
    };
    assert_eq!(handout.answer.text, "token-left");
}
