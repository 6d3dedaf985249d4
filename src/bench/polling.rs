//! `polling`: the gateway as a user with a real provider runs it. A simulator serves `in.php` and
//! `res.php` on its own port with solve times the gateway is never told: the gateway is its own
//! process, configured as provider `captchaai` with `provider_url` pointing at the simulator and
//! no `[poll]` table, so every check it makes comes from what it learned from the answers.
//!
//! Two settings, one after the other: solves of 3-6 s and of 15-30 s. In each, 40 callers ask for
//! reCAPTCHA v2 tokens in a closed loop (no pool, so each caller is one upstream task). The first
//! 50 tasks are the warm-up; for the rest the figures are the delay from the ready time inside
//! each token (the moment the simulator made the answer available) to the moment the caller held
//! it, and the simulator's count of `res.php` requests and checked ids per answer fetched over the same window.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;

use super::load::{self, Latencies, TargetSpec};
use super::report::{Goal, RunResult};
use super::rig::{GatewaySpec, GatewayUnderTest, SimServer, secs};
use super::{BenchError, Opts};
use crate::model::now_ms;
use crate::sim::{LatencyRange, SimStats};

const CALLERS: usize = 40;
/// Above the callers, so neither the plan nor the gateway's own cap makes anyone queue.
const THREADS: u32 = 60;
const WARM_UP: usize = 50;

/// One setting: its solve times, how many tasks count after the warm-up, and its targets.
struct Setting {
    name: &'static str,
    latency: LatencyRange,
    measured: usize,
    p50_goal: f64,
    p90_goal: f64,
}

fn settings(quick: bool) -> [Setting; 2] {
    if quick {
        // Checks that the scenario runs end to end; the figures mean nothing at this size.
        return [
            Setting {
                name: "fast",
                latency: secs(0.1, 0.3),
                measured: 20,
                p50_goal: 0.3,
                p90_goal: 1.0,
            },
            Setting {
                name: "slow",
                latency: secs(0.3, 0.6),
                measured: 20,
                p50_goal: 1.0,
                p90_goal: 3.0,
            },
        ];
    }
    [
        Setting {
            name: "fast",
            latency: secs(3.0, 6.0),
            measured: 300,
            p50_goal: 0.3,
            p90_goal: 1.0,
        },
        Setting {
            name: "slow",
            latency: secs(15.0, 30.0),
            measured: 200,
            p50_goal: 1.0,
            p90_goal: 3.0,
        },
    ]
}

/// What one setting measured after its warm-up.
struct Figures {
    delays: Latencies,
    tasks: u64,
    res_calls: u64,
    ids_polled: u64,
    /// The simulator's mean wait from ready to the gateway's fetch (s): the polling part of the
    /// delay, without the hand-out to the caller.
    ready_to_fetch_mean: f64,
}

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    let mut result = RunResult::default();
    for setting in settings(opts.quick) {
        let mut f = run_setting(&setting, &mut result).await?;
        let tasks = f.tasks.max(1) as f64;
        let names = match setting.name {
            "fast" => (
                "fast_ready_to_caller_p50",
                "fast_ready_to_caller_p90",
                "fast_ready_to_caller_p99",
                "fast_res_php_per_task",
                "fast_checks_per_task",
                "fast_tasks_measured",
                "fast_callers_measured",
                "fast_ready_to_fetch_mean",
            ),
            _ => (
                "slow_ready_to_caller_p50",
                "slow_ready_to_caller_p90",
                "slow_ready_to_caller_p99",
                "slow_res_php_per_task",
                "slow_checks_per_task",
                "slow_tasks_measured",
                "slow_callers_measured",
                "slow_ready_to_fetch_mean",
            ),
        };
        let (p50, p90, p99, res, checks, tasks_name, callers, fetch) = names;
        result.info(callers, f.delays.0.len() as f64, "callers");
        result.info(fetch, f.ready_to_fetch_mean, "s");
        let quantile = |d: &mut Latencies, q| d.quantile_ms(q) / 1000.0;
        let p50_goal = Goal::AtMost(setting.p50_goal);
        result.goal(p50, quantile(&mut f.delays, 0.5), "s", p50_goal);
        let p90_goal = Goal::AtMost(setting.p90_goal);
        result.goal(p90, quantile(&mut f.delays, 0.9), "s", p90_goal);
        result.info(p99, quantile(&mut f.delays, 0.99), "s");
        result.goal(
            res,
            f.res_calls as f64 / tasks,
            "requests",
            Goal::AtMost(0.5),
        );
        // The simulator counts ids asked about: each check of a batch counts once for its task.
        result.goal(
            checks,
            f.ids_polled as f64 / tasks,
            "checks",
            Goal::AtMost(20.0),
        );
        result.info(tasks_name, f.tasks as f64, "tasks");
    }
    Ok(result)
}

/// Runs one setting on a fresh simulator and gateway.
async fn run_setting(setting: &Setting, result: &mut RunResult) -> Result<Figures, BenchError> {
    let sim = SimServer::start(THREADS, setting.latency).await?;
    let gw = GatewayUnderTest::process(&GatewaySpec::real_provider(THREADS), &sim).await?;
    let client = load::client(CALLERS);
    let target = TargetSpec::unique("polling");
    let total = WARM_UP + setting.measured;
    let bar = load::bar(total as u64, &format!("polling {}: tasks", setting.name));
    let started = Arc::new(AtomicUsize::new(0));
    // The simulator's counters when the first measured task starts: requests and checks are
    // counted from there, per answer fetched from there (a rate over the same window; counting
    // per measured task instead would need the simulator to tell whose requests were whose).
    let at_warm_up: Arc<Mutex<Option<SimStats>>> = Arc::default();
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let (client, base, body) = (client.clone(), gw.base.clone(), target.solve_body());
        let (sim, bar) = (sim.sim.clone(), bar.clone());
        let (started, at_warm_up) = (started.clone(), at_warm_up.clone());
        callers.spawn(async move {
            let mut delays = Latencies::default();
            let mut failures = Vec::new();
            loop {
                let index = started.fetch_add(1, Ordering::Relaxed);
                if index >= total {
                    break;
                }
                if index == WARM_UP {
                    *at_warm_up.lock().await = Some(sim.stats());
                }
                let answer = load::solve(&client, &base, body.clone()).await;
                let received = now_ms();
                bar.inc(1);
                let ready = answer.and_then(|s| {
                    load::ready_at(&sim, &s.token)
                        .map_err(|v| format!("token at the simulator: {v:?}"))
                });
                match ready {
                    Ok(ready) if index >= WARM_UP => {
                        delays.record(Duration::from_millis(received.saturating_sub(ready)));
                    }
                    Ok(_) => {}
                    Err(e) => failures.push(e),
                }
            }
            (delays, failures)
        });
    }
    let mut delays = Latencies::default();
    while let Some(joined) = callers.join_next().await {
        match joined {
            Ok((d, failures)) => {
                delays.extend(d);
                for f in failures {
                    result.fail(format!("{} solves: a caller got {f}", setting.name));
                }
            }
            Err(e) => result.fail(format!("a caller task ended: {e}")),
        }
    }
    bar.finish_and_clear();
    let end = sim.sim.stats();
    gw.stop().await;
    let start = at_warm_up.lock().await.unwrap_or_default();
    let tasks = end.answers_fetched.saturating_sub(start.answers_fetched);
    Ok(Figures {
        delays,
        tasks,
        res_calls: end.res_calls.saturating_sub(start.res_calls),
        ids_polled: end.ids_polled.saturating_sub(start.ids_polled),
        ready_to_fetch_mean: end
            .ready_to_fetch_ms_total
            .saturating_sub(start.ready_to_fetch_ms_total) as f64
            / 1000.0
            / end
                .answers_fetched
                .saturating_sub(start.answers_fetched)
                .max(1) as f64,
    })
}
