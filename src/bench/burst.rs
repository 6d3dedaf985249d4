//! `burst`: seed 000's story. 40 workers ask for one target at the same moment, pool empty.
//! Exact demand means 40 upstream tasks, 40 distinct tokens, none expired, and the last token
//! arrives about one solve time after the burst (all 40 solve in parallel).

use std::time::Instant;

use futures::future::join_all;

use super::load::{self, Checked, TargetSpec};
use super::report::{Goal, RunResult};
use super::rig::{GatewaySpec, GatewayUnderTest, SimServer, secs};
use super::{BenchError, Opts};

/// Seed 000's fleet.
const CALLERS: usize = 40;

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    // The simulator's reCAPTCHA v2 default (2-5 s); `quick` keeps the story, not the wait.
    let latency = if opts.quick {
        secs(0.05, 0.15)
    } else {
        secs(2.0, 5.0)
    };
    let sim = SimServer::start(50, latency).await?;
    // First check at the earliest ready time, then a short interval: what `--provider sim` does.
    let interval = if opts.quick { 0.025 } else { 0.25 };
    let mut spec = GatewaySpec::new(50, latency.min.as_secs_f64(), interval);
    spec.redis_url = opts.redis_url.clone();
    let gw = GatewayUnderTest::in_process(&spec, &sim).await?;
    let client = load::client(CALLERS);
    let target = TargetSpec::unique("burst");
    let bar = load::bar(CALLERS as u64, "burst: callers served");

    let start = Instant::now();
    let answers = join_all((0..CALLERS).map(|_| {
        let (client, base, body, bar) = (&client, &gw.base, target.solve_body(), &bar);
        async move {
            let r = load::solve(client, base, body).await;
            bar.inc(1);
            (r, start.elapsed())
        }
    }))
    .await;
    bar.finish_and_clear();

    let mut result = RunResult::default();
    let mut tokens = Vec::new();
    let mut last = std::time::Duration::ZERO;
    for (answer, at) in answers {
        match answer {
            Ok(s) => {
                tokens.push(s.token);
                last = last.max(at);
            }
            Err(e) => result.fail(format!("a caller got an error: {e}")),
        }
    }
    let checked = Checked::tokens(&sim.sim, tokens.iter().map(String::as_str));
    for f in checked.failures() {
        result.fail(f);
    }
    let stats = sim.sim.stats();
    gw.stop().await;

    let served = tokens.len() as f64;
    result.goal(
        "callers_served",
        served,
        "callers",
        Goal::Exactly(CALLERS as f64),
    );
    result.goal(
        "upstream_tasks",
        stats.submits as f64,
        "tasks",
        Goal::Exactly(CALLERS as f64),
    );
    result.goal(
        "tokens_handed_out_twice",
        checked.duplicate as f64,
        "tokens",
        Goal::Exactly(0.0),
    );
    result.goal(
        "expired",
        checked.expired as f64,
        "tokens",
        Goal::Exactly(0.0),
    );
    result.info("time_to_last_token", last.as_secs_f64(), "s");
    // "About one solve time": the slowest of 40 draws is near the range's top, plus at most
    // one poll interval and the handout.
    let one_solve = latency.max.as_secs_f64() + interval;
    result.goal(
        "last_token_over_one_solve",
        last.as_secs_f64() / one_solve,
        "ratio",
        Goal::AtMost(1.1),
    );
    result.info("res_php_calls", stats.res_calls as f64, "requests");
    result.notes.push(format!(
        "one solve = the simulator's slowest draw {:.2} s + one poll interval {interval} s",
        latency.max.as_secs_f64()
    ));
    Ok(result)
}
