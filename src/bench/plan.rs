//! `plan`: seed 000's cost story on a 15-thread plan. 40 callers ask for one target in a loop
//! for the whole run; the gateway must serve every one of them without ever surfacing a
//! capacity error and without more than 15 upstream tasks at once. The useful figure is tokens
//! per thread-minute: what the plan buys.

use std::time::Duration;

use super::load::{self, Checked, TargetSpec};
use super::report::{Goal, RunResult};
use super::rig::{GatewaySpec, GatewayUnderTest, SimServer, secs};
use super::{BenchError, Opts};

const CALLERS: usize = 40;
/// CaptchaAI's STANDARD plan.
const THREADS: u32 = 15;

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    let (latency, interval) = if opts.quick {
        (secs(0.05, 0.15), 0.025)
    } else {
        (secs(2.0, 5.0), 0.25)
    };
    let duration = Duration::from_secs_f64(opts.duration_or(2.0, 60.0));
    let sim = SimServer::start(THREADS, latency).await?;
    let mut spec = GatewaySpec::new(THREADS, latency.min.as_secs_f64(), interval);
    spec.redis_url = opts.redis_url.clone();
    let gw = GatewayUnderTest::in_process(&spec, &sim).await?;
    let client = load::client(CALLERS);
    let target = TargetSpec::unique("plan");
    // Each caller finishes the solve it started when time is up, so allow that many more.
    let bar = load::bar(0, "plan: tokens");
    let outcome = {
        let (client, base, body) = (client.clone(), gw.base.clone(), target.solve_body());
        let sim = sim.sim.clone();
        load::closed_loop(
            CALLERS,
            usize::MAX,
            duration,
            &bar,
            || (),
            move |()| {
                let (client, base, body) = (client.clone(), base.clone(), body.clone());
                let sim = sim.clone();
                async move {
                    let r = load::solve(&client, &base, body).await.and_then(|s| {
                        // Checked on receipt: a long run outlives the first tokens.
                        let failures = Checked::tokens(&sim, [s.token.as_str()]).failures();
                        match failures.is_empty() {
                            true => Ok((s.token, s.source == "pool")),
                            false => Err(format!("token check: {failures:?}")),
                        }
                    });
                    ((), r)
                }
            },
        )
        .await
    };
    bar.finish_and_clear();
    let stats = sim.sim.stats();
    gw.stop().await;

    let mut result = RunResult::default();
    if outcome.errors > 0 {
        result.fail(format!(
            "{} callers got an error, first: {:?}",
            outcome.errors, outcome.first_errors
        ));
    }
    let minutes = outcome.elapsed.as_secs_f64() / 60.0;
    let mut lat = outcome.latencies;
    result.goal(
        "errors_to_callers",
        outcome.errors as f64,
        "errors",
        Goal::Exactly(0.0),
    );
    result.info("tokens", outcome.done as f64, "tokens");
    result.goal(
        "peak_upstream_concurrency",
        stats.peak_concurrent as f64,
        "tasks",
        Goal::AtMost(f64::from(THREADS)),
    );
    result.info(
        "provider_capacity_rejections",
        stats.capacity_rejections as f64,
        "submits",
    );
    result.info(
        "tokens_per_thread_minute",
        outcome.done as f64 / (f64::from(THREADS) * minutes),
        "tokens",
    );
    result.info(
        "upstream_tasks_per_token",
        stats.submits as f64 / outcome.done.max(1) as f64,
        "tasks",
    );
    result.info("solve_p50", lat.quantile_ms(0.5) / 1000.0, "s");
    result.info("solve_p99", lat.quantile_ms(0.99) / 1000.0, "s");
    // An ideal plan does 60 / mean solve time tokens per thread-minute.
    let mean_solve = (latency.min + latency.max).as_secs_f64() / 2.0;
    result.info(
        "ideal_tokens_per_thread_minute",
        60.0 / mean_solve,
        "tokens",
    );
    Ok(result)
}
