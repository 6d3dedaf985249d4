//! Refill passes, backoff, sizing from figures, import rules and views, against a solver the
//! test releases by hand (nothing depends on timing).

use std::sync::Mutex as StdMutex;

use async_trait::async_trait;
use tokio::sync::{oneshot, watch};
use tokio_util::task::TaskTracker;

use super::refiller::top_up;
use super::*;
use crate::engine::store::deficit;
use crate::engine::{
    EngineSettings, MemoryStore, Priority, Solution, SolveFailure, Solver, TargetCounts,
};
use crate::eventually::eventually;
use crate::model::{SolveRequest, Source, UpstreamRef, now_ms};
use crate::wire::inphp::{Params, parse_submit};

type Release = oneshot::Sender<Result<Solution, SolveFailure>>;

/// Every solve parks until the test ends it; `started` counts solves begun.
struct ParkedSolver {
    parked: StdMutex<Vec<(Priority, Release)>>,
    started: watch::Sender<usize>,
}

impl ParkedSolver {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            parked: StdMutex::default(),
            started: watch::Sender::new(0),
        })
    }

    async fn wait_started(&self, n: usize) {
        self.started
            .subscribe()
            .wait_for(|s| *s >= n)
            .await
            .unwrap();
    }

    fn priorities(&self) -> Vec<Priority> {
        self.parked
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| *p)
            .collect()
    }

    /// Ends every parked solve with a fresh answer (or a failure); returns how many.
    fn finish_all(&self, ok: bool) -> usize {
        let parked: Vec<_> = self.parked.lock().unwrap().drain(..).collect();
        let n = parked.len();
        for (_, tx) in parked {
            let _ = tx.send(if ok {
                Ok(Solution {
                    text: format!("pooled-{}", rand::random::<u64>()),
                    user_agent: None,
                    upstream: UpstreamRef {
                        account: "test".into(),
                        task_id: "1".into(),
                    },
                    solved_at: now_ms(),
                })
            } else {
                Err(SolveFailure::new("ERROR_ZERO_BALANCE", "scripted"))
            });
        }
        n
    }
}

#[async_trait]
impl Solver for ParkedSolver {
    async fn solve(
        &self,
        _req: &SolveRequest,
        _deadline: Instant,
        priority: Priority,
    ) -> Result<Solution, SolveFailure> {
        let (tx, rx) = oneshot::channel();
        self.parked.lock().unwrap().push((priority, tx));
        self.started.send_modify(|n| *n += 1);
        rx.await
            .unwrap_or_else(|_| Err(SolveFailure::new("ERROR_TEST", "dropped")))
    }

    async fn report(&self, _task: &UpstreamRef, _good: bool) -> Result<(), SolveFailure> {
        Ok(())
    }
}

fn request() -> SolveRequest {
    parse_submit(&Params::from_pairs([
        ("method", "userrecaptcha"),
        ("googlekey", "6Le-pool-test"),
        ("pageurl", "https://example.com/login"),
    ]))
    .unwrap()
}

fn setup(size: PoolSize) -> (Arc<ParkedSolver>, Engine, Arc<Pools>) {
    let solver = ParkedSolver::new();
    let engine = Engine::new(
        Arc::new(MemoryStore::new()),
        solver.clone(),
        EngineSettings::default(),
        TaskTracker::new(),
    );
    let spec = PoolSpec {
        req: request(),
        size,
    };
    let pools = Pools::new(&engine, vec![spec], RefillSettings::default());
    (solver, engine, pools)
}

async fn counts(engine: &Engine, pools: &Pools) -> TargetCounts {
    let target = &pools.list()[0].target;
    engine
        .store()
        .counts(target, now_ms(), 10_000)
        .await
        .unwrap()
}

async fn until_pooled(engine: &Engine, pools: &Pools, n: u64) {
    eventually(
        Duration::from_secs(30),
        &format!("{n} answers in the pool"),
        || async { counts(engine, pools).await.pooled >= n },
    )
    .await;
}

#[test]
fn the_deficit_counts_only_answers_that_will_reach_the_pool() {
    let c = |pooled, in_flight, waiting| TargetCounts {
        pooled,
        in_flight,
        waiting,
    };
    assert_eq!(deficit(20, c(0, 0, 0)), 20);
    assert_eq!(deficit(20, c(5, 3, 0)), 12);
    // Three tasks run for three waiting callers: none of them will fill the pool.
    assert_eq!(deficit(20, c(0, 3, 3)), 20);
    assert_eq!(deficit(20, c(25, 0, 0)), 0);
    assert_eq!(deficit(0, c(0, 0, 0)), 0);
}

#[tokio::test]
async fn a_pass_starts_the_whole_deficit_at_once_at_refill_priority() {
    let (solver, engine, pools) = setup(PoolSize::Fixed(5));
    assert_eq!(top_up(&engine, &pools, Instant::now()).await, 5);
    solver.wait_started(5).await;
    assert_eq!(solver.priorities(), [Priority::Refill; 5]);
    // In flight counts as coming: a second pass starts nothing.
    assert_eq!(top_up(&engine, &pools, Instant::now()).await, 0);

    assert_eq!(solver.finish_all(true), 5);
    until_pooled(&engine, &pools, 5).await;
    for _ in 0..3 {
        let h = engine
            .solve(request(), Instant::now() + Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(h.source, Source::Pool);
    }
    // Three taken: three refills, together.
    assert_eq!(top_up(&engine, &pools, Instant::now()).await, 3);
    solver.wait_started(8).await;
}

#[tokio::test(start_paused = true)]
async fn failing_refills_back_off_and_an_answer_ends_the_backoff() {
    let (solver, engine, pools) = setup(PoolSize::Fixed(2));
    let pool = pools.list()[0].clone();
    assert_eq!(top_up(&engine, &pools, Instant::now()).await, 2);
    solver.wait_started(2).await;
    solver.finish_all(false);
    eventually(
        Duration::from_secs(30),
        "two failed refills, none in flight",
        || async { pool.failures() >= 2 && counts(&engine, &pools).await.in_flight == 0 },
    )
    .await;
    assert!(pool.paused(Instant::now()));
    assert_eq!(
        top_up(&engine, &pools, Instant::now()).await,
        0,
        "held back"
    );
    // Two failures in a row: 2 s of backoff.
    let later = Instant::now() + Duration::from_secs(2);
    assert!(!pool.paused(later));
    assert_eq!(top_up(&engine, &pools, later).await, 2);
    solver.wait_started(4).await;
    pool.record(
        RefillDone {
            took: Duration::from_secs(3),
            answered: true,
        },
        Instant::now(),
        Duration::from_secs(60),
    );
    assert!(!pool.paused(Instant::now()));
}

#[tokio::test]
async fn auto_pools_follow_their_targets_figures() {
    let (_solver, _engine, pools) = setup(PoolSize::Auto {
        min: 1,
        max: 50,
        predict: false,
    });
    let id = pools.list()[0].target.id.clone();
    assert_eq!(pools.target_size(&id), Some((1, "auto")));
    let figures = |hits: u64, expired: u64| {
        vec![TargetFigures {
            id: id.clone(),
            pool_hits: hits,
            expired_unused: expired,
            ..TargetFigures::default()
        }]
    };
    // One caller a second for ten minutes, 15 s prior solve time: 15 + 2 x sqrt(15) + 1 = 23.7.
    for s in 0..=600 {
        pools.resize(&figures(s, 0), Duration::from_secs(s));
    }
    assert_eq!(pools.target_size(&id), Some((24, "auto")));
    // 8 answers expired unused: the size drops below what wasted by that many.
    pools.resize(&figures(601, 8), Duration::from_secs(601));
    assert_eq!(pools.target_size(&id), Some((16, "auto")));
}

fn token(text: &str, age_s: u64) -> Result<ImportToken, String> {
    Ok(ImportToken {
        token: text.to_owned(),
        solved_at: now_ms() - age_s * 1000,
        user_agent: None,
    })
}

#[tokio::test]
async fn imports_obey_freshness_and_once() {
    let (_solver, engine, pools) = setup(PoolSize::Fixed(1));
    let req = request();
    let outcome = import(
        &engine,
        &pools,
        &req,
        vec![
            token("fresh", 10),
            // reCAPTCHA lives 120 s: 115 s old leaves 5 s, under min_remaining (10 s).
            token("too-old", 115),
            token("", 0),
            Err("solved_at is missing".to_owned()),
            token("fresh", 10),
            Ok(ImportToken {
                token: "from-the-future".into(),
                solved_at: now_ms() + 3_600_000,
                user_agent: None,
            }),
        ],
    )
    .await
    .unwrap();
    assert_eq!(outcome.accepted, 1);
    let indexes: Vec<usize> = outcome.rejected.iter().map(|(i, _)| *i).collect();
    assert_eq!(indexes, [1, 2, 3, 4, 5]);
    assert!(
        outcome.rejected[0].1.contains("min_remaining"),
        "{outcome:?}"
    );
    assert!(outcome.rejected[3].1.contains("already"), "{outcome:?}");

    let h = engine
        .solve(req.clone(), Instant::now() + Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!((h.answer.text.as_str(), h.source), ("fresh", Source::Pool));
    assert_eq!(h.answer.expires_at - h.answer.solved_at, 120_000);

    let mut image = req.clone();
    image.params =
        crate::model::TaskParams::declared_of(crate::model::Kind::Text, &[("textcaptcha", "2+2")]);
    let e = import(&engine, &pools, &image, vec![token("x", 1)]).await;
    assert_eq!(e, Err(ImportError::NotPoolable(crate::model::Kind::Text)));

    let views = pools.views(engine.store().figures().await.unwrap());
    assert_eq!(views.len(), 1);
    let v = &views[0];
    assert_eq!((v.imported, v.figures.pool_hits, v.arrivals), (1, 1, 1));
    assert_eq!(v.hit_rate, Some(1.0));
    assert_eq!(v.waste_rate, Some(0.0));
    assert_eq!((v.target_size, v.mode), (Some(1), Some("fixed")));
}

#[tokio::test]
async fn configured_pools_show_before_any_figures() {
    let (_solver, engine, pools) = setup(PoolSize::Fixed(7));
    let views = pools.views(engine.store().figures().await.unwrap());
    assert_eq!(views.len(), 1);
    let v = &views[0];
    assert_eq!(v.figures.label, "recaptcha_v2:example.com");
    assert_eq!(v.kind, Some(crate::model::Kind::RecaptchaV2));
    assert_eq!(
        (v.target_size, v.hit_rate, v.waste_rate),
        (Some(7), None, None)
    );
}
