//! `capacity`: 10,000 callers waiting at once on slow solves in one gateway process (its own
//! process, embedded store). Every caller must be served with a valid token; the figures are
//! the gateway's peak resident memory and the handout delay: from the simulator's `res.php`
//! reply that first carried a task's answer to the caller holding it. The delay from the ready
//! time inside the token is reported too; it adds up to one poll interval of noticing.

use std::time::Duration;

use tokio::time::Instant;

use super::load::{self, Latencies, TargetSpec};
use super::report::{Goal, RunResult};
use super::rig::{self, GatewaySpec, GatewayUnderTest, SimServer, secs};
use super::{BenchError, Opts};
use crate::model::now_ms;

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    let (callers, ramp, latency, interval) = if opts.quick {
        (200usize, 0.2, secs(0.5, 0.6), 0.025)
    } else {
        // Arrivals spread over 5 s and solves of 10 s: from 5 s to 10 s all callers wait.
        (10_000, 5.0, secs(10.0, 10.5), 0.05)
    };
    let sim = SimServer::start(callers as u32 + 2_000, latency).await?;
    let mut spec = GatewaySpec::new(callers as u32 + 2_000, latency.min.as_secs_f64(), interval);
    // A poll budget that lets 100-id batches keep up with 10,000 tasks at this interval.
    spec.max_requests_per_second = 2_000.0;
    spec.redis_url = opts.redis_url.clone();
    let gw = GatewayUnderTest::process(&spec, &sim).await?;
    let pid = gw.pid();
    let cpu_before = rig::cpu_seconds(pid);
    let client = load::client(callers);
    let target = TargetSpec::unique("capacity");
    let bar = load::bar(callers as u64, "capacity: callers served");
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..callers {
        tokio::time::sleep_until(start + Duration::from_secs_f64(ramp * i as f64 / callers as f64))
            .await;
        let (client, base, body, bar) = (
            client.clone(),
            gw.base.clone(),
            target.solve_body(),
            bar.clone(),
        );
        set.spawn(async move {
            let r = load::solve(&client, &base, body).await;
            bar.inc(1);
            (r, now_ms())
        });
    }
    let mut result = RunResult::default();
    let (mut served, mut errors) = (0u64, Vec::new());
    let (mut delay, mut since_ready) = (Latencies::default(), Latencies::default());
    while let Some(Ok((answer, received))) = set.join_next().await {
        let s = match answer {
            Ok(s) => s,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let ready = match load::ready_at(&sim.sim, &s.token) {
            Ok(ready) => ready,
            Err(v) => {
                result.fail(format!("token not valid at the simulator: {v:?}"));
                continue;
            }
        };
        let Some(delivered) = s.task_id.as_deref().and_then(|id| sim.sim.delivered_at(id)) else {
            result.fail(format!("a token of no delivered task: {:?}", s.task_id));
            continue;
        };
        served += 1;
        let after = |t: u64| Duration::from_millis(received.saturating_sub(t));
        delay.record(after(delivered));
        since_ready.record(after(ready));
    }
    bar.finish_and_clear();
    let rss = rig::peak_rss_mb(pid);
    let cpu = rig::cpu_seconds(pid) - cpu_before;
    let stats = sim.sim.stats();
    gw.stop().await;
    if !errors.is_empty() {
        result.fail(format!(
            "{} callers got an error, first: {:?}",
            errors.len(),
            errors.first()
        ));
    }
    result.goal(
        "callers_served",
        served as f64,
        "callers",
        Goal::Exactly(callers as f64),
    );
    result.goal("gateway_peak_rss", rss, "MB", Goal::AtMost(200.0));
    result.info("handout_delay_p50", delay.quantile_ms(0.5), "ms");
    result.goal(
        "handout_delay_p99",
        delay.quantile_ms(0.99),
        "ms",
        Goal::AtMost(50.0),
    );
    result.info("handout_delay_max", delay.quantile_ms(1.0), "ms");
    result.info("ready_to_handout_p50", since_ready.quantile_ms(0.5), "ms");
    result.info("ready_to_handout_p99", since_ready.quantile_ms(0.99), "ms");
    result.info("gateway_cpu", cpu, "s");
    result.info("upstream_tasks", stats.submits as f64, "tasks");
    result.info("res_php_calls", stats.res_calls as f64, "requests");
    result.info("poll_interval", interval * 1000.0, "ms");
    Ok(result)
}
