//! `steady`: Poisson demand of `lambda` callers per second on a target with an `auto` pool,
//! simulator solve time `W`. After a one-minute warm-up (the pool measures demand within about
//! 10 s of the first callers and fills within a solve time after that), nearly every caller
//! should get a pooled token at once, and nearly no pooled token should expire unused.

use std::time::Duration;

use rand::Rng;
use serde_json::Value;
use tokio::time::Instant;

use super::load::{self, Checked, Latencies, TargetSpec};
use super::report::{Goal, RunResult};
use super::rig::{GatewaySpec, GatewayUnderTest, SimServer, secs};
use super::{BenchError, Opts};

/// Expired-unused and produced answers of the pool's target, and the size it is kept at now,
/// from `GET /v1/pools`.
async fn pool_figures(client: &reqwest::Client, base: &str) -> Result<(f64, f64, f64), BenchError> {
    let v: Value = client
        .get(format!("{base}/v1/pools"))
        .bearer_auth(load::KEY)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| BenchError::Setup(format!("/v1/pools: {}", e.without_url())))?
        .json()
        .await
        .map_err(|e| BenchError::Setup(format!("/v1/pools: {e}")))?;
    let pool = v
        .as_array()
        .and_then(|a| a.iter().find(|p| p["mode"] == "auto"))
        .ok_or_else(|| BenchError::Setup(format!("no auto pool in /v1/pools: {v}")))?;
    let n = |k: &str| pool[k].as_f64().unwrap_or(0.0);
    Ok((
        n("expired_unused"),
        n("new_tasks") - n("in_flight") + n("imported"),
        n("target_size"),
    ))
}

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    let (lambda, latency, interval) = if opts.quick {
        (20.0, secs(0.1, 0.2), 0.025)
    } else {
        (5.0, secs(2.0, 4.0), 0.25)
    };
    let duration = Duration::from_secs_f64(opts.duration_or(8.0, 180.0));
    // The pool's demand estimate is bias-corrected, so it reads the true rate about 10 s after
    // the first callers; a minute leaves it several times that (and the rest of the pool's
    // first minute is reported on its own). Only callers after the warm-up count for the goals.
    let warm_up = duration.mul_f64(0.5).min(Duration::from_secs(60));
    let sim = SimServer::start(50, latency).await?;
    let target = TargetSpec::unique("steady");
    let mut spec = GatewaySpec::new(50, latency.min.as_secs_f64(), interval);
    spec.redis_url = opts.redis_url.clone();
    spec.tables = target.auto_pool_toml(40);
    let gw = GatewayUnderTest::in_process(&spec, &sim).await?;
    let client = load::client(64);

    let bar = load::bar(duration.as_secs(), "steady: seconds");
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    let mut figures_at_warm_up = None;
    let mut next = start;
    while next < start + duration {
        tokio::time::sleep_until(next).await;
        if figures_at_warm_up.is_none() && next >= start + warm_up {
            figures_at_warm_up = Some(pool_figures(&client, &gw.base).await?);
        }
        bar.set_position(start.elapsed().as_secs());
        let (client, base, body) = (client.clone(), gw.base.clone(), target.solve_body());
        let after_warm_up = next >= start + warm_up;
        let sim = sim.sim.clone();
        set.spawn(async move {
            let t = std::time::Instant::now();
            let answer = load::solve(&client, &base, body).await;
            let took = t.elapsed();
            // Checked on receipt, as the caller would use it: a long run outlives early tokens.
            let checked = match &answer {
                Ok(s) => Checked::tokens(&sim, [s.token.as_str()]),
                Err(_) => Checked::default(),
            };
            (answer, checked, after_warm_up, took)
        });
        // Exponential gaps: a Poisson process of rate lambda.
        let u: f64 = rand::rng().random_range(f64::EPSILON..1.0);
        next += Duration::from_secs_f64(-u.ln() / lambda);
    }
    let (mut arrivals, mut hits, mut lat) = (0u64, 0u64, Latencies::default());
    let (mut early_arrivals, mut early_hits) = (0u64, 0u64);
    let mut checked = Checked::default();
    let mut result = RunResult::default();
    while let Some(Ok((answer, c, after, took))) = set.join_next().await {
        checked.add(c);
        match answer {
            Ok(s) if after => {
                arrivals += 1;
                hits += u64::from(s.source == "pool");
                lat.record(took);
            }
            Ok(s) => {
                early_arrivals += 1;
                early_hits += u64::from(s.source == "pool");
            }
            Err(e) => result.fail(format!("a caller got an error: {e}")),
        }
    }
    bar.finish_and_clear();
    let (expired_end, produced_end, size_end) = pool_figures(&client, &gw.base).await?;
    let (expired_0, produced_0, size_0) = figures_at_warm_up.unwrap_or_default();
    gw.stop().await;
    for f in checked.failures() {
        result.fail(f);
    }
    let produced = (produced_end - produced_0).max(1.0);
    result.info("lambda", lambda, "/s");
    result.info(
        "solve_time_mean",
        (latency.min + latency.max).as_secs_f64() / 2.0,
        "s",
    );
    result.info("callers_after_warm_up", arrivals as f64, "callers");
    result.goal(
        "hit_rate_after_warm_up",
        hits as f64 / arrivals.max(1) as f64,
        "share",
        Goal::AtLeast(0.95),
    );
    result.goal(
        "waste_after_warm_up",
        (expired_end - expired_0) / produced,
        "share",
        Goal::AtMost(0.05),
    );
    result.info("solve_p50_after_warm_up", lat.quantile_ms(0.5), "ms");
    result.info("solve_p99_after_warm_up", lat.quantile_ms(0.99), "ms");
    result.info("warm_up", warm_up.as_secs_f64(), "s");
    // How the pool does while it learns the demand, from the very first caller (not a goal).
    result.info(
        "hit_rate_during_warm_up",
        early_hits as f64 / early_arrivals.max(1) as f64,
        "share",
    );
    // Little's law without a margin: the pool size at which about half the callers would wait.
    result.info(
        "lambda_times_solve_time",
        lambda * (latency.min + latency.max).as_secs_f64() / 2.0,
        "answers",
    );
    result.info("pool_size_at_warm_up", size_0, "answers");
    result.info("pool_size_at_end", size_end, "answers");
    Ok(result)
}
