use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::store::{Arrival, ClaimId, Finished, Store, TaskOutcome, WaiterId};
use super::{Delivery, Handout, Priority, RefillDone, SolveError, SolveFailure};
use crate::model::{
    Answer, Kind, Reuse, SolveRequest, Source, Target, TargetPolicy, UpstreamRef, now_ms,
};

/// The failure a caller sees when its upstream task panicked (a bug of ours, not the provider's):
/// the code providers use for their own internal errors, which every client handles.
const INTERNAL: &str = "ERROR_INTERNAL_SERVER_ERROR";

/// What an upstream solve produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Solution {
    pub text: String,
    pub user_agent: Option<String>,
    pub upstream: UpstreamRef,
    /// When the provider reported it ready (ms since epoch).
    pub solved_at: u64,
}

/// The engine's view of the providers: run one upstream task to its end, report an answer.
/// Retries, thread caps and polling happen behind this seam.
#[async_trait]
pub trait Solver: Send + Sync + 'static {
    async fn solve(
        &self,
        req: &SolveRequest,
        deadline: Instant,
        priority: Priority,
    ) -> Result<Solution, SolveFailure>;
    async fn report(&self, task: &UpstreamRef, good: bool) -> Result<(), SolveFailure>;

    /// Why `req` cannot be solved here at all (no account solves its kind, or it would pass
    /// through with pass-through off), asked before a task is accepted so its caller hears it
    /// at once; `None` where some account may.
    fn refuses(&self, req: &SolveRequest) -> Option<SolveFailure> {
        let _ = req;
        None
    }

    /// [`solve`](Self::solve) for a task whose provider work another instance may adopt:
    /// `submitted` hears each provider task as soon as it exists, and `resume` (a provider task a
    /// dead instance submitted for the same target) is polled to its end instead of submitting
    /// the work again, where the account that holds it is configured here. Not submitted by
    /// `start_by` (its caller gone), the task ends with [`SolveFailure::unstarted`]. A solver
    /// that cannot do these just solves.
    async fn solve_tracked(
        &self,
        req: &SolveRequest,
        start_by: Instant,
        deadline: Instant,
        priority: Priority,
        resume: Option<UpstreamRef>,
        submitted: &(dyn Fn(UpstreamRef) + Send + Sync),
    ) -> Result<Solution, SolveFailure> {
        let _ = (start_by, resume, submitted);
        self.solve(req, deadline, priority).await
    }
}

/// The engine's knobs; every default is in `impl Default` with its reason.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// No answer is handed out with less than this left (promise 2).
    pub min_remaining: Duration,
    /// Answer lifetimes per kind, counted from the provider's ready time.
    pub lifetimes: HashMap<Kind, Duration>,
    pub target_policy: TargetPolicy,
    /// How long one upstream task may run before we stop waiting for it.
    pub task_timeout: Duration,
    /// How long finished task records stay readable.
    pub result_retention: Duration,
    /// Refuse to solve while the store is unreachable, instead of solving without the pool.
    pub store_required: bool,
    /// A target with nothing pooled, in flight or waiting is retired after this long unused
    /// (every page a scraper visits is a target: per-target state must shrink again).
    /// Configured pools are never retired.
    pub target_idle: Duration,
    /// Targets `/metrics`, `/` and `GET /v1/pools` show one by one besides configured pools;
    /// the rest are summed under `other`, so a scraper's thousands of pages cost a bounded scrape.
    pub metrics_top_targets: usize,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            // docs/ARCHITECTURE.md promise 2's default: enough for a worker to put the token into
            // a form.
            min_remaining: Duration::from_secs(10),
            lifetimes: Kind::ALL
                .iter()
                .map(|k| (*k, k.default_lifetime()))
                .collect(),
            target_policy: TargetPolicy::default(),
            // The official CaptchaAI SDK's poll deadline; reCAPTCHA rarely takes longer.
            task_timeout: Duration::from_secs(180),
            // docs/PROTOCOL.md item 14: pollable >= 15 minutes after completion (2captcha takes
            // reports for 15 minutes); a little more so a report at minute 15 still finds it.
            result_retention: Duration::from_secs(20 * 60),
            // Degrade rather than fail: callers still get answers, only pooling is lost.
            store_required: false,
            // Fifteen minutes: far above any solve (task_timeout 180 s) or answer lifetime that
            // keeps a quiet target busy, and short enough that a week of one-off pages is
            // forgotten within the quarter hour.
            target_idle: Duration::from_secs(15 * 60),
            // Fifty: a readable table and a scrape of a few kilobytes per family, and more than
            // the sites one fleet usually works at once.
            metrics_top_targets: 50,
        }
    }
}

/// The solve orchestration. Cheap to clone; every clone shares the store, solver and tasks.
#[derive(Clone)]
pub struct Engine {
    pub(super) store: Arc<dyn Store>,
    pub(super) solver: Arc<dyn Solver>,
    pub(super) settings: Arc<EngineSettings>,
    /// Upstream tasks outlive the callers that started them (a leaving caller's answer still goes
    /// to the next caller or the pool), so they run here, where shutdown can wait for them.
    pub(super) tracker: TaskTracker,
    /// Fired when the shutdown grace period is nearly over: callers still waiting here are
    /// told this instance is stopping (and give up their wait the usual way).
    pub(super) cut: CancellationToken,
    /// This process's name in waiter and claim ids shared with other instances.
    instance: Arc<str>,
    /// Targets this process has callers waiting on, with a request to start tasks for them.
    pub(super) active: Arc<super::active::Active>,
    next_waiter: Arc<AtomicU64>,
    /// Woken after a caller takes a pooled answer, so a pool refiller can top up at once
    /// instead of at its next tick.
    pool_taken: Arc<Notify>,
    /// Every handout counted once, for `/metrics` and the status page alike.
    pub(super) figures: Arc<super::EngineFigures>,
}

impl Engine {
    pub fn new(
        store: Arc<dyn Store>,
        solver: Arc<dyn Solver>,
        settings: EngineSettings,
        tracker: TaskTracker,
    ) -> Self {
        let store_instance = store.instance().to_owned();
        Self {
            store,
            solver,
            settings: Arc::new(settings),
            tracker,
            cut: CancellationToken::new(),
            instance: store_instance.into(),
            active: Arc::default(),
            next_waiter: Arc::new(AtomicU64::new(1)),
            pool_taken: Arc::new(Notify::new()),
            figures: Arc::default(),
        }
    }

    /// Callers still waiting when `cut` fires get [`SolveError::ShuttingDown`] (the shutdown's
    /// cut, see `crate::shutdown`); without it they wait for their answer or deadline.
    pub fn cut_short_by(mut self, cut: CancellationToken) -> Self {
        self.cut = cut;
        self
    }

    /// Answers, solve errors and delays (`/metrics` and the status page read the same).
    pub fn figures(&self) -> &super::EngineFigures {
        &self.figures
    }

    /// This process's id in the store (random per boot, never reused, so a restarted instance
    /// cannot mistake a dead predecessor's waiters for its own).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Whether this instance's shutdown cut has fired (its callers get `ShuttingDown`).
    pub fn is_cut(&self) -> bool {
        self.cut.is_cancelled()
    }

    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Notified (one stored wake-up, like [`Notify::notify_one`]) whenever a caller takes a
    /// pooled answer of any target.
    pub fn pool_taken(&self) -> &Notify {
        &self.pool_taken
    }

    pub fn target(&self, req: &SolveRequest) -> Target {
        Target::of(req, self.settings.target_policy)
    }

    pub fn lifetime(&self, kind: Kind) -> Duration {
        self.settings
            .lifetimes
            .get(&kind)
            .copied()
            .unwrap_or_else(|| kind.default_lifetime())
    }

    pub(super) fn min_remaining_ms(&self) -> u64 {
        self.settings.min_remaining.as_millis() as u64
    }

    /// Hands one answer to this caller, or says why not by `deadline`.
    pub fn solve(
        &self,
        req: SolveRequest,
        deadline: Instant,
    ) -> impl Future<Output = Result<Handout, SolveError>> + Send + '_ {
        // Not an `async fn` around `solve_at`: that would be one more layer of every waiting
        // caller's future, holding its own copy of the arguments.
        self.solve_at(req, deadline, Priority::Interactive)
    }

    /// [`solve`](Self::solve) for a caller of another rank: upstream tasks this caller starts
    /// wait for a thread behind callers of higher rank (the queue's tasks rank below
    /// interactive callers and above pool refills). Pool, coalescing and exact demand apply
    /// as for any caller.
    pub async fn solve_at(
        &self,
        req: SolveRequest,
        deadline: Instant,
        priority: Priority,
    ) -> Result<Handout, SolveError> {
        let kind = req.kind();
        let target = self.target(&req);
        let poolable = kind.reuse() == (Reuse::SingleUse { poolable: true });
        let caller = self.figures.caller(&target, poolable);
        let result = match kind.reuse() {
            Reuse::SingleUse { poolable } => {
                self.single_use(&target, req, deadline, poolable, priority)
                    .await
            }
            Reuse::Reusable => self.shared(&target, req, deadline, priority).await,
        };
        caller.ended(&result);
        result
    }

    async fn single_use(
        &self,
        target: &Target,
        req: SolveRequest,
        deadline: Instant,
        poolable: bool,
        priority: Priority,
    ) -> Result<Handout, SolveError> {
        let kind = target.kind;
        if self.store.degraded() {
            return self.degraded(req, deadline, priority).await;
        }
        if poolable {
            let min = self.min_remaining_ms();
            if let Some(answer) = self.store.arrive_at_once(target, now_ms(), min) {
                return Ok(self.pooled(kind, answer));
            }
        }
        let seq = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        let waiter = WaiterId::new(&self.instance, seq);
        let arriving = self.arrive_single_use(target, &req, &waiter, poolable, priority);
        let arrival = match arriving.by(deadline).await {
            Some(Ok(a)) => a,
            Some(Err(_)) => return self.degraded(req, deadline, priority).await,
            None => return Err(SolveError::Timeout),
        };
        let rx = match arrival {
            Arrival::Pooled(answer) => return Ok(self.pooled(kind, answer)),
            Arrival::Wait(rx) => {
                super::trace::joined(target);
                if poolable {
                    // It may have claimed a pool's refill, leaving the pool short: the refiller
                    // tops it up now, as after a take, not at its next look.
                    self.pool_taken.notify_one();
                }
                rx
            }
            Arrival::Start(rx, claim) => {
                let task = req.clone();
                // Started for this caller: not worth starting once it has gone.
                let task_for = TaskFor::Caller(deadline, priority);
                self.start_single_use(target.clone(), task, poolable, claim, task_for, None);
                rx
            }
        };
        let _active = self.active.enter(target, &req, priority);
        let mut guard = WaitGuard {
            engine: self.clone(),
            target,
            waiter,
            rx: Some(rx),
            poolable,
        };
        let delivery = match guard.wait(deadline).await {
            // The store let this caller go (it cannot hand its answer out safely now): solved
            // alone, as when the store is away.
            Err(SolveError::Unavailable) => return self.degraded(req, deadline, priority).await,
            waited => waited?,
        };
        delivery
            .map(|answer| {
                super::trace::handed(&answer, Source::Solved);
                Handout {
                    kind,
                    answer,
                    source: Source::Solved,
                }
            })
            .map_err(SolveError::Failed)
    }

    /// A pooled answer handed to its caller.
    fn pooled(&self, kind: Kind, answer: Answer) -> Handout {
        self.pool_taken.notify_one();
        super::trace::handed(&answer, Source::Pool);
        Handout {
            kind,
            answer,
            source: Source::Pool,
        }
    }

    /// Starts the upstream tasks, at refill priority, that a pool of `size` lacks for `target`
    /// (each fills the pool, or serves the target's next caller). Returns once they are counted
    /// in flight; each receiver says how its upstream solve went (dropped unsent only if the task
    /// is cut short by shutdown).
    pub async fn refill(
        &self,
        req: SolveRequest,
        size: u32,
    ) -> Result<Vec<oneshot::Receiver<RefillDone>>, SolveError> {
        let target = self.target(&req);
        let claims = self
            .store
            .reserve(&target, size, now_ms())
            .await
            .map_err(|_| SolveError::Unavailable)?;
        let mut done = Vec::with_capacity(claims.len());
        // Refills are nobody's request: their tasks log under this span instead.
        let refill = tracing::info_span!(parent: None, "refill", pool = %target.label);
        let _in_refill = refill.enter();
        for claim in claims {
            let (tx, rx) = oneshot::channel();
            let (t, r) = (target.clone(), req.clone());
            self.start_single_use(
                t,
                r,
                true,
                claim,
                TaskFor::Anyone(Priority::Refill),
                Some(tx),
            );
            done.push(rx);
        }
        Ok(done)
    }

    fn start_single_use(
        &self,
        target: Target,
        req: SolveRequest,
        poolable: bool,
        mut claim: ClaimId,
        mut task_for: TaskFor,
        mut done: Option<oneshot::Sender<RefillDone>>,
    ) {
        let engine = self.clone();
        let priority = task_for.priority();
        let span = super::trace::upstream_task(&target, priority);
        let mut adopted = self.store.adopted(&claim);
        let task = async move {
            loop {
                let started = Instant::now();
                // A panic below must still end the task in the store: otherwise its claim stays
                // in this instance's renewal set, counted in flight forever.
                let run = engine.run_claimed(&target, &claim, &req, task_for, adopted.take());
                let outcome = AssertUnwindSafe(run)
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| {
                        Err(SolveFailure::new(INTERNAL, "the upstream task failed"))
                    });
                let cut_short = matches!(&outcome, Err(f) if f.is_shutting_down());
                if let Some(done) = done.take().filter(|_| !cut_short) {
                    // Only the first run is the refill's own solve; a restart serves a waiter.
                    let _ = done.send(RefillDone {
                        took: started.elapsed(),
                        answered: outcome.is_ok(),
                    });
                }
                let outcome = match outcome {
                    Ok(answer) if answer.fresh_at(now_ms(), engine.min_remaining_ms()) => {
                        TaskOutcome::Answer(answer)
                    }
                    Ok(_) => TaskOutcome::Stale,
                    // Its caller left before a thread or the provider took it: nothing was spent.
                    Err(f) if f.is_unstarted() => TaskOutcome::Withdrawn,
                    // Stopping is not the task's failure: whoever it covered, on any instance, is
                    // covered again by their own instance instead of failed.
                    Err(_) if cut_short => TaskOutcome::Requeue,
                    Err(failure) => TaskOutcome::Failed(failure),
                };
                match engine
                    .store
                    .finish(&target, &claim, outcome, poolable, now_ms())
                    .await
                {
                    Ok(Finished::Restart(next)) => {
                        // Now for a waiter this instance may not know: runs as long as any task.
                        claim = next;
                        task_for = TaskFor::Anyone(priority);
                    }
                    Ok(Finished::Done) => break,
                    Err(e) => {
                        tracing::warn!(target = ?target, error = %e, "could not record a finished task");
                        break;
                    }
                }
            }
        };
        self.tracker.spawn(task.instrument(span));
    }

    /// One upstream task, its answer stamped with the kind's lifetime.
    pub(super) async fn run_upstream(
        &self,
        req: &SolveRequest,
        priority: Priority,
    ) -> Result<Answer, SolveFailure> {
        let deadline = Instant::now() + self.settings.task_timeout;
        let solved = self.solver.solve(req, deadline, priority).await;
        self.stamped(req, solved)
    }

    /// The upstream task of a claim on a single-use target: its provider task is noted in the
    /// store as soon as it exists, so another instance adopts it if this one dies; `adopted` is
    /// a dead instance's provider task this claim took over, polled instead of submitting.
    async fn run_claimed(
        &self,
        target: &Target,
        claim: &ClaimId,
        req: &SolveRequest,
        task_for: TaskFor,
        adopted: Option<UpstreamRef>,
    ) -> Result<Answer, SolveFailure> {
        let deadline = Instant::now() + self.settings.task_timeout;
        let (start_by, priority) = match task_for {
            TaskFor::Caller(gone_at, priority) => (gone_at.min(deadline), priority),
            TaskFor::Anyone(priority) => (deadline, priority),
        };
        // Long enough that any answer this instance could still deliver late (after a pause)
        // has expired by the time the note goes, so an adopter and this claim never both
        // hand out the same answer.
        let keep = self.settings.task_timeout + self.lifetime(req.kind());
        let submitted = |task: UpstreamRef| {
            let (store, target, claim) = (self.store.clone(), target.clone(), claim.clone());
            self.tracker.spawn(async move {
                if let Err(e) = store.note_upstream(&target, &claim, &task, keep).await {
                    tracing::debug!(error = %e, "could not note a provider task for adoption");
                }
            });
        };
        if let Some(task) = &adopted {
            tracing::info!(account = %task.account, provider_task = %task.task_id, "adopting a provider task a stopped instance submitted");
        }
        let solved = self
            .solver
            .solve_tracked(req, start_by, deadline, priority, adopted, &submitted)
            .await;
        self.stamped(req, solved)
    }

    /// An upstream outcome as the engine hands it on: the answer stamped with its lifetime.
    fn stamped(
        &self,
        req: &SolveRequest,
        solved: Result<Solution, SolveFailure>,
    ) -> Result<Answer, SolveFailure> {
        let solution = match solved {
            Ok(s) => s,
            Err(failure) => {
                tracing::debug!(code = %failure.code, "upstream task failed");
                return Err(failure);
            }
        };
        tracing::debug!(
            account = %solution.upstream.account,
            provider_task = %solution.upstream.task_id,
            "upstream task solved"
        );
        Ok(Answer {
            text: solution.text,
            user_agent: solution.user_agent,
            solved_at: solution.solved_at,
            expires_at: solution.solved_at + self.lifetime(req.kind()).as_millis() as u64,
            upstream: Some(solution.upstream),
        })
    }

    /// The caller left while its arrival was still with the store: hand a pooled answer back,
    /// start a claimed task anyway, and give up the wait the usual way (the guard's drop).
    pub(super) async fn depart_on_arrival(
        &self,
        target: Target,
        req: SolveRequest,
        waiter: WaiterId,
        arrival: Arrival,
        poolable: bool,
        priority: Priority,
    ) {
        let rx = match arrival {
            Arrival::Pooled(answer) => {
                if let Err(e) = self.store.put(&target, answer, now_ms()).await {
                    tracing::warn!(error = %e, "could not return a pooled answer its caller left");
                }
                return;
            }
            Arrival::Wait(rx) => rx,
            Arrival::Start(rx, claim) => {
                let task_for = TaskFor::Anyone(priority);
                self.start_single_use(target.clone(), req, poolable, claim, task_for, None);
                rx
            }
        };
        drop(WaitGuard {
            engine: self.clone(),
            target: &target,
            waiter,
            rx: Some(rx),
            poolable,
        });
    }

    /// The store cannot be reached: unless it is required, solve for this caller alone, without
    /// pool, demand matching or coalescing (promise 7). Taken at once while the store is known to
    /// be away, so no caller waits out its timeouts (its health check notices its return). The
    /// answer is this caller's; if it leaves first, the answer is lost, which is the price of
    /// degrading.
    ///
    /// Boxed: it holds a whole upstream solve, and every waiting caller's future would otherwise
    /// keep room for this rare path (docs/BENCHMARKS.md "Hot path and capacity").
    pub(super) fn degraded(
        &self,
        req: SolveRequest,
        deadline: Instant,
        priority: Priority,
    ) -> BoxFuture<'_, Result<Handout, SolveError>> {
        Box::pin(async move {
            if self.settings.store_required {
                return Err(SolveError::Unavailable);
            }
            let kind = req.kind();
            match tokio::time::timeout_at(deadline, self.run_upstream(&req, priority)).await {
                Ok(Ok(answer)) => Ok(Handout {
                    kind,
                    answer,
                    source: Source::Solved,
                }),
                Ok(Err(failure)) if failure.is_shutting_down() => Err(SolveError::ShuttingDown),
                Ok(Err(failure)) => Err(SolveError::Failed(failure)),
                Err(_elapsed) => Err(SolveError::Timeout),
            }
        })
    }

    /// Starts the tasks a dead instance's waiting demand lacks, for every target this instance
    /// has callers waiting on (the store claims at most what is missing, fleet-wide), and takes
    /// over reusable targets whose leader died (at most one instance starts the task). Each task
    /// ranks as the most urgent caller here waiting on its target.
    pub async fn cover_waiting(&self) {
        for (target, req, priority) in self.active.snapshot() {
            if target.kind.reuse() == Reuse::Reusable {
                self.take_over(target, req, priority).await;
                continue;
            }
            let claims = match self.store.cover(&target, now_ms()).await {
                Ok(c) => c,
                Err(_) => continue,
            };
            // Only poolable kinds may leave an answer nobody took in a pool (GeeTest may not).
            let poolable = matches!(target.kind.reuse(), Reuse::SingleUse { poolable: true });
            for claim in claims {
                tracing::info!(target = ?target, "starting a task for demand a lost instance held");
                let (t, r) = (target.clone(), req.clone());
                self.start_single_use(t, r, poolable, claim, TaskFor::Anyone(priority), None);
            }
        }
    }

    /// Answers obtained elsewhere go to waiters or the pool of their target.
    pub async fn import(&self, target: &Target, answer: Answer) -> Result<(), SolveError> {
        self.store
            .put(target, answer, now_ms())
            .await
            .map_err(|_| SolveError::Unavailable)
    }

    pub async fn report(&self, task: &UpstreamRef, good: bool) -> Result<(), SolveFailure> {
        self.solver.report(task, good).await
    }
}

/// Who an upstream task of a single-use target is started for.
#[derive(Debug, Clone, Copy)]
enum TaskFor {
    /// The caller whose arrival started it, which leaves at this deadline: a task the provider
    /// has not taken by then is withdrawn (a waiter it covered is covered again, see
    /// [`TaskOutcome::Withdrawn`]).
    Caller(Instant, Priority),
    /// A pool, a waiter of another instance, or a caller already gone: runs its whole course.
    Anyone(Priority),
}

impl TaskFor {
    fn priority(self) -> Priority {
        match self {
            TaskFor::Caller(_, p) | TaskFor::Anyone(p) => p,
        }
    }
}

/// A caller waiting for a delivery. If the caller leaves (deadline, or its HTTP request is dropped
/// mid-wait), the guard takes whatever already reached the mailbox and passes it on, so a leaving
/// caller never wastes an answer (promise 3).
struct WaitGuard<'t> {
    engine: Engine,
    target: &'t Target,
    waiter: WaiterId,
    rx: Option<oneshot::Receiver<Delivery>>,
    poolable: bool,
}

impl WaitGuard<'_> {
    async fn wait(&mut self, deadline: Instant) -> Result<Delivery, SolveError> {
        let rx = self.rx.as_mut().expect("wait is called once, before drop");
        let delivered = tokio::select! {
            // An answer that came is handed over even if the cut came too.
            biased;
            delivered = tokio::time::timeout_at(deadline, rx) => delivered,
            // This instance is stopping: the caller is told so now, and its wait is given up
            // on drop like a timeout's, handing on anything that reached its mailbox.
            () = self.engine.cut.cancelled() => return Err(SolveError::ShuttingDown),
        };
        match delivered {
            Ok(Ok(delivery)) => {
                self.rx = None;
                Ok(delivery)
            }
            Ok(Err(_closed)) => {
                self.rx = None;
                Err(SolveError::Unavailable)
            }
            // The caller is answered now; the departure (handing on whatever reached the mailbox)
            // runs in the background on drop, so a slow store cannot delay the timeout.
            Err(_elapsed) => Err(SolveError::Timeout),
        }
    }

    fn take_delivered(&mut self) -> Option<Option<Delivery>> {
        let mut rx = self.rx.take()?;
        // Closing first makes any later send fail, so the deliverer re-routes it instead.
        rx.close();
        Some(rx.try_recv().ok())
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        let Some(delivered) = self.take_delivered() else {
            return;
        };
        let store = self.engine.store.clone();
        let (target, waiter, poolable) = (self.target.clone(), self.waiter.clone(), self.poolable);
        self.engine.tracker.spawn(async move {
            if let Err(err) = store
                .abandon(&target, &waiter, delivered, poolable, now_ms())
                .await
            {
                tracing::warn!(error = %err, "could not hand on a dropped caller's answer");
            }
        });
    }
}
