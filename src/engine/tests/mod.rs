//! Engine promises against a scripted solver: the test decides when each upstream task ends.

mod shutdown;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::*;
use crate::eventually::eventually;
use crate::model::{Answer, Kind, SolveRequest, Source, TaskParams, UpstreamRef, now_ms};

type Release = oneshot::Sender<Result<Solution, SolveFailure>>;

/// Each `solve` parks until the test releases it, so nothing depends on timing.
#[derive(Default)]
struct ScriptedSolver {
    parked: Mutex<Vec<Release>>,
    /// The priority of every solve, in start order.
    priorities: Mutex<Vec<Priority>>,
    /// The `start_by` and deadline of every tracked solve, in start order.
    schedules: Mutex<Vec<(Instant, Instant)>>,
    started: Mutex<Option<watch::Sender<usize>>>,
}

impl ScriptedSolver {
    fn new() -> (Arc<Self>, watch::Receiver<usize>) {
        let (tx, rx) = watch::channel(0);
        let s = Self {
            parked: Mutex::default(),
            priorities: Mutex::default(),
            schedules: Mutex::default(),
            started: Mutex::new(Some(tx)),
        };
        (Arc::new(s), rx)
    }

    /// Ends every parked task with a fresh distinct answer; returns how many.
    fn release_all(&self, lifetime_left: Duration) -> usize {
        let parked: Vec<_> = self.parked.lock().unwrap().drain(..).collect();
        let n = parked.len();
        for tx in parked {
            let _ = tx.send(Ok(solution(lifetime_left)));
        }
        n
    }

    fn fail_one(&self, code: &str) {
        let tx = self.parked.lock().unwrap().remove(0);
        let _ = tx.send(Err(SolveFailure::new(code, "scripted")));
    }
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn solution(lifetime_left: Duration) -> Solution {
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // solved_at is placed so that exactly `lifetime_left` remains of the 120 s reCAPTCHA life.
    let solved_at = now_ms() + lifetime_left.as_millis() as u64 - 120_000;
    Solution {
        text: format!("token-{n}"),
        user_agent: None,
        upstream: UpstreamRef {
            account: "test".into(),
            task_id: n.to_string(),
        },
        solved_at,
    }
}

#[async_trait]
impl Solver for ScriptedSolver {
    async fn solve(
        &self,
        _req: &SolveRequest,
        _deadline: Instant,
        priority: Priority,
    ) -> Result<Solution, SolveFailure> {
        self.priorities.lock().unwrap().push(priority);
        let (tx, rx) = oneshot::channel();
        self.parked.lock().unwrap().push(tx);
        if let Some(started) = self.started.lock().unwrap().as_ref() {
            started.send_modify(|n| *n += 1);
        }
        rx.await
            .unwrap_or_else(|_| Err(SolveFailure::new("ERROR_TEST", "dropped")))
    }

    async fn report(&self, _task: &UpstreamRef, _good: bool) -> Result<(), SolveFailure> {
        Ok(())
    }

    async fn solve_tracked(
        &self,
        req: &SolveRequest,
        start_by: Instant,
        deadline: Instant,
        priority: Priority,
        _resume: Option<UpstreamRef>,
        _submitted: &(dyn Fn(UpstreamRef) + Send + Sync),
    ) -> Result<Solution, SolveFailure> {
        self.schedules.lock().unwrap().push((start_by, deadline));
        self.solve(req, deadline, priority).await
    }
}

fn engine(solver: Arc<ScriptedSolver>) -> Engine {
    Engine::new(
        Arc::new(MemoryStore::new()),
        solver,
        EngineSettings::default(),
        TaskTracker::new(),
    )
}

/// An image task: a PNG signature padded with `fill` to `len` bytes (one reusable target per
/// length and fill).
pub(super) fn png_request(len: usize, fill: u8) -> SolveRequest {
    let mut body = b"\x89PNG\r\n\x1a\n".to_vec();
    body.resize(len, fill);
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(body);
    SolveRequest::new(TaskParams::declared_of(Kind::Image, &[("body", &body)]))
}

fn recaptcha() -> SolveRequest {
    SolveRequest::recaptcha_v2("6Le-test", "https://example.com/login")
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(600)
}

async fn started_at_least(rx: &mut watch::Receiver<usize>, n: usize) {
    rx.wait_for(|started| *started >= n).await.unwrap();
}

#[tokio::test]
async fn forty_callers_cause_forty_tasks_and_get_forty_distinct_answers() {
    let (solver, mut started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    let callers: Vec<_> = (0..40)
        .map(|_| {
            let e = engine.clone();
            tokio::spawn(async move { e.solve(recaptcha(), far()).await })
        })
        .collect();
    started_at_least(&mut started, 40).await;
    assert_eq!(solver.release_all(Duration::from_secs(110)), 40);
    let mut tokens = HashSet::new();
    for c in callers {
        let h = c.await.unwrap().unwrap();
        assert_eq!(h.source, Source::Solved);
        tokens.insert(h.answer.text);
    }
    assert_eq!(tokens.len(), 40, "every caller owns its own answer");
    assert_eq!(
        *started.borrow(),
        40,
        "exactly one upstream task per caller"
    );
}

#[tokio::test]
async fn pooled_answers_are_taken_once_and_never_stale() {
    let (solver, started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    let target = engine.target(&recaptcha());
    let now = now_ms();
    let mk = |text: &str, left_ms: u64| Answer {
        text: text.into(),
        user_agent: None,
        solved_at: now,
        expires_at: now + left_ms,
        upstream: None,
    };
    engine.import(&target, mk("stale", 5_000)).await.unwrap();
    engine.import(&target, mk("fresh", 60_000)).await.unwrap();
    let first = engine.solve(recaptcha(), far()).await.unwrap();
    assert_eq!(
        (first.answer.text.as_str(), first.source),
        ("fresh", Source::Pool)
    );
    // The stale one must not be handed out: the next caller needs an upstream task.
    let e = engine.clone();
    let second = tokio::spawn(async move { e.solve(recaptcha(), far()).await });
    let mut started = started;
    started_at_least(&mut started, 1).await;
    solver.release_all(Duration::from_secs(100));
    assert_eq!(second.await.unwrap().unwrap().source, Source::Solved);
    let figures = engine.store().figures().await.unwrap();
    assert_eq!(figures[0].expired_unused, 1);
    assert_eq!(figures[0].pool_hits, 1);
}

/// A caller of `recaptcha()` whose call is dropped once its upstream task has started.
async fn leaves_while_its_task_runs(engine: &Engine, started: &mut watch::Receiver<usize>) {
    let e = engine.clone();
    let a = tokio::spawn(async move { e.solve(recaptcha(), far()).await });
    started_at_least(started, 1).await;
    a.abort();
    let _ = a.await;
}

#[tokio::test]
async fn a_leaving_callers_task_serves_the_next_caller_without_a_new_task() {
    let (solver, mut started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    // Caller A gives up while its task runs.
    leaves_while_its_task_runs(&engine, &mut started).await;
    // Caller B arrives: the in-flight task is not spoken for, so B waits for it.
    let e = engine.clone();
    let b = tokio::spawn(async move { e.solve(recaptcha(), far()).await });
    // Let B register before the task ends; B's arrival is observable in the store.
    eventually(
        Duration::from_secs(30),
        "caller B to wait in the store",
        || async { engine.store().figures().await.unwrap()[0].waiting == 1 },
    )
    .await;
    solver.release_all(Duration::from_secs(100));
    let got = b.await.unwrap().unwrap();
    assert_eq!(got.source, Source::Solved);
    assert_eq!(*started.borrow(), 1, "B inherited A's task");
}

#[tokio::test]
async fn an_answer_nobody_waits_for_goes_to_the_pool() {
    let (solver, mut started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    let err = engine.solve(recaptcha(), Instant::now()).await.unwrap_err();
    assert_eq!(err, SolveError::Timeout);
    started_at_least(&mut started, 1).await;
    solver.release_all(Duration::from_secs(100));
    engine.tracker.close();
    engine.tracker.wait().await;
    let got = engine.solve(recaptcha(), far()).await.unwrap();
    assert_eq!(got.source, Source::Pool);
}

#[tokio::test]
async fn a_failed_task_fails_only_the_uncovered_waiter() {
    let (solver, mut started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    let spawn = |e: Engine| tokio::spawn(async move { e.solve(recaptcha(), far()).await });
    let first = spawn(engine.clone());
    started_at_least(&mut started, 1).await;
    let second = spawn(engine.clone());
    started_at_least(&mut started, 2).await;
    solver.fail_one("ERROR_CAPTCHA_UNSOLVABLE");
    let failed = first.await.unwrap().unwrap_err();
    assert_eq!(failed.code(), "ERROR_CAPTCHA_UNSOLVABLE");
    solver.release_all(Duration::from_secs(100));
    assert_eq!(second.await.unwrap().unwrap().source, Source::Solved);
}

#[tokio::test]
async fn a_task_must_start_by_its_callers_deadline_and_a_withdrawn_one_restarts_for_its_waiter() {
    let (solver, mut started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    // Caller A's task may wait for a thread only as long as A waits.
    let a_leaves = Instant::now() + Duration::from_secs(60);
    let e = engine.clone();
    let a = tokio::spawn(async move { e.solve(recaptcha(), a_leaves).await });
    started_at_least(&mut started, 1).await;
    let (start_by, deadline) = solver.schedules.lock().unwrap()[0];
    assert_eq!(start_by, a_leaves);
    assert!(
        deadline > a_leaves,
        "once submitted, it runs its whole course"
    );
    a.abort();
    let _ = a.await;
    // B arrives while A's task is still unsubmitted: it waits on that task.
    let e = engine.clone();
    let b = tokio::spawn(async move { e.solve(recaptcha(), far()).await });
    eventually(
        Duration::from_secs(30),
        "caller B to wait in the store",
        || async { engine.store().figures().await.unwrap()[0].waiting == 1 },
    )
    .await;
    // A's deadline passes before the task is submitted: withdrawn, which is not B's failure.
    solver.fail_one("UNSTARTED");
    started_at_least(&mut started, 2).await;
    let (start_by, deadline) = solver.schedules.lock().unwrap()[1];
    assert_eq!(
        start_by, deadline,
        "the restart is for a waiter it knows nothing of"
    );
    solver.release_all(Duration::from_secs(100));
    assert_eq!(b.await.unwrap().unwrap().source, Source::Solved);
    let figures = &engine.store().figures().await.unwrap()[0];
    assert_eq!(figures.expired_unused, 0, "a withdrawn task wasted nothing");
}

#[tokio::test]
async fn identical_image_requests_share_one_task() {
    let (solver, mut started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    let image = png_request(200, 7);
    let callers: Vec<_> = (0..10)
        .map(|_| {
            let (e, r) = (engine.clone(), image.clone());
            tokio::spawn(async move { e.solve(r, far()).await })
        })
        .collect();
    started_at_least(&mut started, 1).await;
    // Wait until all ten joined: the one leader plus nine followers.
    solver.release_all(Duration::from_secs(100));
    let mut texts = HashSet::new();
    for c in callers {
        let h = c.await.unwrap().unwrap();
        assert_eq!(h.kind, Kind::Image);
        texts.insert(h.answer.text);
    }
    assert_eq!(texts.len(), 1);
    // Late callers get the cached answer without a task.
    let late = engine.solve(image, far()).await.unwrap();
    assert_eq!(late.source, Source::Shared);
    assert_eq!(*started.borrow(), 1);
}

#[tokio::test]
async fn async_tasks_are_tenant_scoped_and_reported_once() {
    let (solver, mut started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    let id = engine
        .submit("alice", recaptcha(), Duration::from_secs(60), ())
        .await
        .unwrap();
    assert!(id.bytes().all(|b| b.is_ascii_digit()));
    assert!(
        engine
            .task("bob", &id, Duration::ZERO)
            .await
            .unwrap()
            .is_none()
    );
    started_at_least(&mut started, 1).await;
    solver.release_all(Duration::from_secs(100));
    let done = engine
        .task("alice", &id, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(done.state, TaskState::Ready(_)));
    assert_eq!(
        engine.report_task("alice", &id, false).await.unwrap(),
        ReportOutcome::Recorded
    );
    assert_eq!(
        engine.report_task("alice", &id, false).await.unwrap(),
        ReportOutcome::Duplicate
    );
    assert_eq!(
        engine.report_task("bob", &id, true).await.unwrap(),
        ReportOutcome::UnknownTask
    );
}

#[tokio::test]
async fn a_refill_fills_the_pool_reports_its_solve_and_a_take_leaves_a_wake_up() {
    let (solver, mut started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    let target = engine.target(&recaptcha());
    let mut done = engine.refill(recaptcha(), 1).await.unwrap();
    assert_eq!(done.len(), 1, "a pool of one lacks one answer");
    let done = done.remove(0);
    started_at_least(&mut started, 1).await;
    let counts = |e: Engine| {
        let t = target.clone();
        async move { e.store().counts(&t, now_ms(), 10_000).await.unwrap() }
    };
    assert_eq!(counts(engine.clone()).await.in_flight, 1);
    assert_eq!(*solver.priorities.lock().unwrap(), [Priority::Refill]);

    solver.release_all(Duration::from_secs(100));
    assert!(done.await.unwrap().answered);
    eventually(
        Duration::from_secs(30),
        "the refill's answer in the pool",
        || {
            let pooled = counts(engine.clone());
            async { pooled.await.pooled >= 1 }
        },
    )
    .await;
    use futures::FutureExt as _;
    assert!(
        engine.pool_taken().notified().now_or_never().is_none(),
        "no take yet"
    );
    let handout = engine.solve(recaptcha(), far()).await.unwrap();
    assert_eq!(handout.source, Source::Pool);
    assert!(engine.pool_taken().notified().now_or_never().is_some());
    let figures = engine.store().figures().await.unwrap();
    assert_eq!((figures[0].refills, figures[0].pool_hits), (1, 1));
}

/// A caller that claims a refill in flight leaves the pool short as a take does, so it wakes the
/// refiller too: waiting for the refiller's next look, a busy pool served half what it could
/// (docs/BENCHMARKS.md "A pool's refills and the refiller's look").
#[tokio::test]
async fn a_caller_that_claims_a_refill_leaves_a_wake_up_too() {
    let (solver, mut started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    let target = engine.target(&recaptcha());
    let done = engine.refill(recaptcha(), 1).await.unwrap();
    started_at_least(&mut started, 1).await;
    use futures::FutureExt as _;
    assert!(engine.pool_taken().notified().now_or_never().is_none());

    let caller = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.solve(recaptcha(), far()).await })
    };
    eventually(
        Duration::from_secs(30),
        "the caller claimed the refill",
        || {
            let (e, t) = (engine.clone(), target.clone());
            async move {
                e.store()
                    .counts(&t, now_ms(), 10_000)
                    .await
                    .unwrap()
                    .waiting
                    == 1
            }
        },
    )
    .await;
    assert!(
        engine.pool_taken().notified().now_or_never().is_some(),
        "the claim woke the refiller"
    );
    solver.release_all(Duration::from_secs(100));
    let handout = caller.await.unwrap().unwrap();
    assert_eq!(handout.source, Source::Solved);
    assert!(done.into_iter().next().unwrap().await.unwrap().answered);
    assert_eq!(
        *solver.priorities.lock().unwrap(),
        [Priority::Refill],
        "the caller was served by the refill it claimed, starting nothing of its own"
    );
}

/// A provider seam that panics (a bug of ours, say in parsing a reply).
struct PanickingSolver;

#[async_trait]
impl Solver for PanickingSolver {
    async fn solve(
        &self,
        _req: &SolveRequest,
        _deadline: Instant,
        _priority: Priority,
    ) -> Result<Solution, SolveFailure> {
        panic!("a bug in the provider seam");
    }

    async fn report(&self, _task: &UpstreamRef, _good: bool) -> Result<(), SolveFailure> {
        Ok(())
    }
}

/// A panicking task must not leave its claim counted in flight (and, on Redis, in its
/// instance's renewal set) forever: the task ends as a failure, its caller is told, and the
/// target has nothing in flight.
#[tokio::test]
async fn a_panicking_upstream_task_fails_its_caller_and_leaves_no_claim() {
    let engine = Engine::new(
        Arc::new(MemoryStore::new()),
        Arc::new(PanickingSolver),
        EngineSettings::default(),
        TaskTracker::new(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    match engine.solve(recaptcha(), deadline).await {
        Err(SolveError::Failed(f)) => assert_eq!(f.code, "ERROR_INTERNAL_SERVER_ERROR"),
        other => panic!("expected the internal failure, got {other:?}"),
    }
    let target = engine.target(&recaptcha());
    let counts = engine.store().counts(&target, now_ms(), 0).await.unwrap();
    assert_eq!((counts.in_flight, counts.waiting), (0, 0));
}

/// Promise 2 on the follower path: an answer a reusable target's task delivers with less than
/// `min_remaining` left is handed to nobody; its callers ask again, and the next task's fresh
/// answer reaches them all.
#[tokio::test]
async fn a_shared_answer_too_close_to_expiry_is_solved_again_not_handed_out() {
    let (solver, mut started) = ScriptedSolver::new();
    let mut settings = EngineSettings::default();
    // The scripted answers' 120 s life, so `release_all` says how much of it is left.
    settings
        .lifetimes
        .insert(Kind::Image, Duration::from_secs(120));
    let engine = Engine::new(
        Arc::new(MemoryStore::new()),
        solver.clone(),
        settings,
        TaskTracker::new(),
    );
    let image = png_request(300, 9);
    let callers: Vec<_> = (0..3)
        .map(|_| {
            let (e, r) = (engine.clone(), image.clone());
            tokio::spawn(async move { e.solve(r, far()).await })
        })
        .collect();
    started_at_least(&mut started, 1).await;
    // Five seconds left, under the ten-second minimum.
    assert_eq!(solver.release_all(Duration::from_secs(5)), 1);
    started_at_least(&mut started, 2).await;
    assert_eq!(solver.release_all(Duration::from_secs(100)), 1);
    let mut texts = HashSet::new();
    for c in callers {
        let h = c.await.unwrap().unwrap();
        assert!(h.answer.fresh_at(now_ms(), 10_000), "{h:?}");
        texts.insert(h.answer.text);
    }
    assert_eq!(texts.len(), 1, "one fresh answer shared: {texts:?}");
}

#[tokio::test]
async fn a_queued_caller_starts_its_upstream_task_at_queue_priority() {
    let (solver, mut started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    let single = {
        let e = engine.clone();
        tokio::spawn(async move { e.solve_at(recaptcha(), far(), Priority::Queued).await })
    };
    started_at_least(&mut started, 1).await;
    let shared = {
        let e = engine.clone();
        tokio::spawn(async move {
            e.solve_at(png_request(50, 3), far(), Priority::Queued)
                .await
        })
    };
    started_at_least(&mut started, 2).await;
    assert_eq!(
        *solver.priorities.lock().unwrap(),
        [Priority::Queued, Priority::Queued],
        "single-use and reusable kinds alike"
    );
    solver.release_all(Duration::from_secs(100));
    assert_eq!(single.await.unwrap().unwrap().source, Source::Solved);
    assert_eq!(shared.await.unwrap().unwrap().source, Source::Solved);
}

#[tokio::test]
async fn every_caller_is_counted_once_when_its_call_ends_and_one_that_left_as_departed() {
    let (solver, mut started) = ScriptedSolver::new();
    let engine = engine(solver.clone());
    // A leaves (its future dropped, as when its client hangs up) while its task runs.
    leaves_while_its_task_runs(&engine, &mut started).await;
    // Its answer goes to the pool when it comes, and B takes it from there.
    solver.release_all(Duration::from_secs(100));
    engine.tracker.close();
    engine.tracker.wait().await;
    let b = engine.solve(recaptcha(), far()).await.unwrap();
    assert_eq!(b.source, Source::Pool);
    let kind = engine.target(&recaptcha()).kind;
    let counted = engine.figures().by_kind()[kind.index()];
    assert_eq!(
        (counted.departed, counted.answers.pool, counted.failed),
        (1, 1, 0)
    );
    let targets = engine.figures().take_busy_targets();
    assert_eq!(targets.len(), 1);
    assert_eq!((targets[0].callers, targets[0].pool_hits), (2, 1));
}
