//! `slack`: the solve path only (no pool). Waves of concurrent callers each cause one upstream
//! task; the figure is the delay between the moment the simulator marked a task ready (the ready
//! time inside its token) and the moment the caller held the token, plus how many `res.php`
//! requests the batched poller spent per task.

use futures::future::join_all;

use super::load::{self, Latencies, TargetSpec};
use super::report::{Goal, RunResult};
use super::rig::{GatewaySpec, GatewayUnderTest, SimServer, secs};
use super::{BenchError, Opts};
use crate::model::now_ms;

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    let (callers, waves, latency, interval) = if opts.quick {
        (20, 1, secs(0.1, 0.3), 0.05)
    } else {
        // The simulator's reCAPTCHA v2 default and the `--provider sim` poll interval.
        (200, 2, secs(2.0, 5.0), 0.25)
    };
    let sim = SimServer::start(callers as u32 + 50, latency).await?;
    let mut spec = GatewaySpec::new(callers as u32 + 50, latency.min.as_secs_f64(), interval);
    spec.redis_url = opts.redis_url.clone();
    let gw = GatewayUnderTest::in_process(&spec, &sim).await?;
    let client = load::client(callers);
    let target = TargetSpec::unique("slack");
    let mut result = RunResult::default();
    let mut slack = Latencies::default();
    let bar = load::bar((callers * waves) as u64, "slack: callers served");
    for _ in 0..waves {
        let answers = join_all((0..callers).map(|_| {
            let (client, base, body, bar) = (&client, &gw.base, target.solve_body(), &bar);
            async move {
                let r = load::solve(client, base, body).await;
                bar.inc(1);
                (r, now_ms())
            }
        }))
        .await;
        for (answer, received) in answers {
            match answer {
                Ok(s) => match load::ready_at(&sim.sim, &s.token) {
                    Ok(ready) => slack.record(std::time::Duration::from_millis(
                        received.saturating_sub(ready),
                    )),
                    Err(v) => result.fail(format!("token not valid at the simulator: {v:?}")),
                },
                Err(e) => result.fail(format!("a caller got an error: {e}")),
            }
        }
    }
    bar.finish_and_clear();
    let stats = sim.sim.stats();
    gw.stop().await;
    let tasks = stats.submits.max(1) as f64;
    result.goal(
        "upstream_tasks",
        stats.submits as f64,
        "tasks",
        Goal::Exactly((callers * waves) as f64),
    );
    result.goal(
        "slack_p50",
        slack.quantile_ms(0.5) / 1000.0,
        "s",
        Goal::AtMost(0.3),
    );
    result.info("slack_p90", slack.quantile_ms(0.9) / 1000.0, "s");
    result.info("slack_p99", slack.quantile_ms(0.99) / 1000.0, "s");
    result.goal(
        "res_php_per_task",
        stats.res_calls as f64 / tasks,
        "requests",
        Goal::AtMost(0.5),
    );
    // The provider's limit is per task; the simulator counts ids asked about, so this is the
    // average number of checks per task (each check of a batch counts once for its task).
    result.goal(
        "checks_per_task",
        stats.ids_polled as f64 / tasks,
        "checks",
        Goal::AtMost(20.0),
    );
    result.info("concurrent_tasks", callers as f64, "tasks");
    result.info("poll_interval", interval, "s");
    Ok(result)
}
