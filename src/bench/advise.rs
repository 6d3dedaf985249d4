//! `advise`: how long the plan advisor takes on a busy day of history, replay included (the
//! issue's "runs in seconds on a day of history"). A day of 5-minute buckets in which a fleet
//! asks 10 reCAPTCHA answers a second (864,000 callers), a third of them for four busy targets,
//! threads held 15 s a solve, is advised and replayed under a 120-thread plan; the figures are
//! the wall time and what the replay found.

use std::time::{Duration, Instant};

use super::report::{Goal, RunResult};
use super::{BenchError, Opts};
use crate::model::Kind;
use crate::status::advice::prices::Prices;
use crate::status::advice::{self, Plan, PoolPlan, Scope};
use crate::status::demand::{Bucket, KindDemand, SolveTimes, TargetDemand};

const BUCKET_S: u64 = 300;
const PER_S: u64 = 10;
const HELD_S: f64 = 15.0;

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    let hours = if opts.quick { 1 } else { 24 };
    let buckets = day(hours);
    let plan = Plan {
        bucket: Duration::from_secs(BUCKET_S),
        window: Duration::from_secs(hours * 3600),
        scope: Scope::Instance,
        now_ms: hours * 3_600_000,
        cap: 120,
        accounts: Vec::new(),
        prices: Prices::default(),
        pools: PoolPlan {
            hit_rate: advice::pools::DEFAULT_HIT_RATE,
            shelf_s: vec![(Kind::RecaptchaV2, 110.0)],
            configured: Vec::new(),
            // The refiller's default look, once a second.
            refill_look_s: 1.0,
        },
        wait_target: None,
        limits: advice::replay::Limits::default(),
    };
    let started = Instant::now();
    let a = tokio::task::spawn_blocking(move || advice::advise(&buckets, &plan))
        .await
        .map_err(|e| BenchError::Setup(format!("the advice panicked: {e}")))?;
    let took = started.elapsed().as_secs_f64();
    let mut result = RunResult::default();
    let Some(replay) = &a.replay else {
        result.fail("the advice has no replay");
        return Ok(result);
    };
    result.info("hours_of_history", hours as f64, "h");
    result.info("callers", replay.now.callers as f64, "callers");
    result.goal("advise_s", took, "s", Goal::AtMost(10.0));
    result.info(
        "threads_recommended",
        a.threads.recommended as f64,
        "threads",
    );
    result.info("pools_advised", a.pools.len() as f64, "pools");
    for (name, r) in [("now", &replay.now), ("recommended", &replay.recommended)] {
        let (waited, hits) = match name {
            "now" => ("replay_now_waited", "replay_now_pool_hit_rate"),
            _ => (
                "replay_recommended_waited",
                "replay_recommended_pool_hit_rate",
            ),
        };
        result.info(waited, r.waited as f64, "callers");
        result.info(hits, r.pool_hit_rate.unwrap_or(0.0), "share");
    }
    if !replay.complete {
        result.fail("the replay was cut short");
    }
    Ok(result)
}

/// `hours` of buckets: 10 callers a second, a third of them for four targets, their solve
/// times recorded as a reCAPTCHA's are (most 7.6-19 s, a fifth 19-48 s).
fn day(hours: u64) -> Vec<Bucket> {
    let callers = PER_S * BUCKET_S;
    let mut times = [0; 15];
    (times[9], times[10]) = (callers - callers / 5, callers / 5);
    (0..hours * 3600 / BUCKET_S)
        .map(|i| Bucket {
            kinds: vec![(
                Kind::RecaptchaV2,
                KindDemand {
                    callers,
                    solved: callers,
                    solves: callers,
                    solve_seconds: callers as f64 * (HELD_S - 1.0),
                    solve_times: SolveTimes::between(&times, &[0; 15]),
                    thread_seconds: callers as f64 * HELD_S,
                    ..KindDemand::default()
                },
            )],
            threads_peak: 100,
            threads_cap: 120,
            targets: (0..4)
                .map(|t| TargetDemand {
                    id: format!("{t:032x}"),
                    label: format!("recaptcha_v2:shop{t}.example"),
                    kind: Kind::RecaptchaV2,
                    callers: callers / 12,
                    pool_hits: 0,
                    expired: 0,
                })
                .collect(),
            ..Bucket::empty(i * BUCKET_S * 1000)
        })
        .collect()
}
