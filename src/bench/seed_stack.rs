//! `seed-stack`: the gateway's pool hit path against "the seed stack" the seeds describe, on one
//! machine, in one run. The seed stack is seed 002's Flask worker on gunicorn (2 processes x 32
//! threads, `gthread`), whose `/solve` takes a cached token from a Redis list written seed 000's
//! way (`bench/seed_stack/app.py`). The gateway is set up exactly as `hit` sets it up (its own
//! `serve` process, pool filled through `POST /v1/pools/tokens`).
//!
//! Both run against the same `redis-server`, under the same load generator (`conn.rs`, a closed
//! loop of `--concurrency` keep-alive connections) for the same `--duration`, back to back and
//! alternated: gateway, seed stack, gateway, seed stack. Each system's better round is reported,
//! with its latency percentiles and the CPU of the system, Redis and the load generator during
//! it. Every token either hands out is checked with the simulator (valid, never twice), and a
//! seed-stack answer that is not a cached token (a `CACHE_MISS`, an error) fails the run.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::conn;
use super::gunicorn::{self, SeedStack, Shape};
use super::hit;
use super::load::{self, Checked, Latencies, TargetSpec};
use super::report::{Goal, RunResult};
use super::rig::{self, GatewayUnderTest, RedisServer, SimServer};
use super::{BenchError, Opts};
use crate::model::{Kind, now_ms};

/// Rounds per run, each the gateway then the seed stack: alternating puts the machine's noise on
/// both, and the better of two rounds leaves out a round slowed by something else.
const ROUNDS: usize = 2;

/// The seed stack as the comparison runs it: seed 002 on gunicorn, two worker processes of 32
/// threads, its `MAX_CONCURRENT` (per process) above the threads so it never refuses.
const SHAPE: Shape = Shape {
    workers: 2,
    threads: 32,
    max_concurrent: 64,
};

/// Tokens cached per second of a seed-stack phase: a Flask request costs a few hundred
/// microseconds of one core under the GIL, so two processes stay far below this on any machine
/// and the list never runs dry (which would fail the run, not measure it).
const SEED_TOKENS_PER_S: f64 = 15_000.0;

/// Seed 000's TTL for a reCAPTCHA list: about 120 s of token life less a 40 s margin.
const SEED_TTL_S: u64 = 80;

/// Tokens pushed per `RPUSH`.
const PUSH_BATCH: usize = 1000;

/// One system's phase of one round.
struct Phase {
    rate: f64,
    latencies: Latencies,
    /// Cores used during the phase by the system under test, Redis and the load generator.
    system_cores: f64,
    redis_cores: f64,
    loadgen_cores: f64,
}

/// What every phase runs against and with.
struct Rig<'a> {
    sim: &'a SimServer,
    gw: &'a GatewayUnderTest,
    seed: &'a SeedStack,
    redis_pid: u32,
    client: reqwest::Client,
    con: redis::aio::MultiplexedConnection,
    concurrency: usize,
    duration: Duration,
}

impl Rig<'_> {
    /// CPU seconds so far: the load generator (this process), the gateway, gunicorn's group,
    /// Redis.
    fn cpu_now(&self) -> [f64; 4] {
        [
            rig::cpu_seconds(std::process::id()),
            rig::cpu_seconds(self.gw.pid()),
            self.seed.cpu_seconds(),
            rig::cpu_seconds(self.redis_pid),
        ]
    }

    /// Cores each of those used between `before` and now, over `wall` seconds.
    fn cores_since(&self, before: [f64; 4], wall: f64) -> [f64; 4] {
        let now = self.cpu_now();
        std::array::from_fn(|i| (now[i] - before[i]) / wall)
    }
}

/// Correctness over every round of one system.
#[derive(Default)]
struct Tally {
    answered: usize,
    /// Gateway: answers not from the pool. Seed stack: cached tokens popped but never answered.
    missing: usize,
    /// Seed stack: answers that were tokens the bench cached for that phase.
    cached: usize,
    checked: Checked,
}

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    if opts.redis_url.is_some() || opts.durable.is_some() {
        return Err(BenchError::Setup(
            "seed-stack starts its own redis-server for both systems: --redis-url and --durable \
             are for hit"
                .into(),
        ));
    }
    let dir = gunicorn::app_dir(&opts.seed_stack_dir)?;
    gunicorn::check_python(&opts.python, &opts.seed_stack_dir).await?;
    let redis = RedisServer::start().await?;
    let (sim, gw) = hit::gateway(&redis.url(), None).await?;
    let seed = SeedStack::start(&opts.python, &dir, redis.port, SHAPE).await?;
    let concurrency = opts.concurrency.unwrap_or(if opts.quick { 8 } else { 50 });
    let duration = Duration::from_secs_f64(opts.duration_or(0.5, 5.0));
    let (gw_budget, seed_budget) = if opts.quick {
        (2_000, 1_000)
    } else {
        let s = duration.as_secs_f64();
        (
            (s * hit::PEAK_TOKENS_PER_S) as usize,
            (s * SEED_TOKENS_PER_S) as usize,
        )
    };
    // The list outlives the phase and its filling, whatever --duration says.
    let ttl = SEED_TTL_S.max(duration.as_secs() + 60);
    let rig = Rig {
        sim: &sim,
        gw: &gw,
        seed: &seed,
        redis_pid: redis.pid(),
        client: load::client(concurrency * 2),
        con: redis::Client::open(redis.url())?
            .get_multiplexed_async_connection()
            .await?,
        concurrency,
        duration,
    };
    let mut result = RunResult::default();
    let (mut gw_tally, mut seed_tally) = (Tally::default(), Tally::default());
    let (mut gw_phases, mut seed_phases) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let g = gateway_phase(&rig, gw_budget, &mut gw_tally, &mut result, round).await?;
        gw_phases.push(g);
        let s = seed_phase(&rig, seed_budget, ttl, &mut seed_tally, &mut result, round).await?;
        seed_phases.push(s);
    }
    drop(rig);
    drop(seed);
    gw.stop().await;

    let rounds: Vec<String> = gw_phases
        .iter()
        .zip(&seed_phases)
        .map(|(g, s)| format!("gateway {:.0}/s, seed stack {:.0}/s", g.rate, s.rate))
        .collect();
    result.notes.push(format!(
        "each round (the better one of each system is reported): {}",
        rounds.join("; ")
    ));
    let better = |phases: Vec<Phase>| {
        phases
            .into_iter()
            .max_by(|a, b| a.rate.total_cmp(&b.rate))
            .expect("at least one round")
    };
    let (mut g, mut s) = (better(gw_phases), better(seed_phases));
    result.info("gateway_hits_per_s", g.rate, "/s");
    result.info("seed_answers_per_s", s.rate, "/s");
    result.goal(
        "ratio_gateway_to_seed",
        g.rate / s.rate,
        "ratio",
        Goal::AtLeast(10.0),
    );
    result.info("gateway_p50_ms", g.latencies.quantile_ms(0.5), "ms");
    result.info("gateway_p99_ms", g.latencies.quantile_ms(0.99), "ms");
    result.info("seed_p50_ms", s.latencies.quantile_ms(0.5), "ms");
    result.info("seed_p99_ms", s.latencies.quantile_ms(0.99), "ms");
    result.info("gateway_cores", g.system_cores, "cores");
    result.info("gateway_phase_redis_cores", g.redis_cores, "cores");
    result.info("gateway_phase_loadgen_cores", g.loadgen_cores, "cores");
    result.info("seed_gunicorn_cores", s.system_cores, "cores");
    result.info("seed_phase_redis_cores", s.redis_cores, "cores");
    result.info("seed_phase_loadgen_cores", s.loadgen_cores, "cores");
    result.info(
        "gateway_cpu_us_per_hit",
        g.system_cores / g.rate * 1e6,
        "us",
    );
    result.info(
        "seed_cpu_us_per_answer",
        s.system_cores / s.rate * 1e6,
        "us",
    );
    result.goal(
        "gateway_pool_hit_rate",
        1.0 - gw_tally.missing as f64 / gw_tally.answered.max(1) as f64,
        "share",
        Goal::Exactly(1.0),
    );
    result.goal(
        "gateway_tokens_handed_out_twice",
        gw_tally.checked.duplicate as f64,
        "tokens",
        Goal::Exactly(0.0),
    );
    result.goal(
        "seed_cached_share",
        seed_tally.cached as f64 / seed_tally.answered.max(1) as f64,
        "share",
        Goal::Exactly(1.0),
    );
    result.goal(
        "seed_tokens_handed_out_twice",
        seed_tally.checked.duplicate as f64,
        "tokens",
        Goal::Exactly(0.0),
    );
    result.goal(
        "seed_tokens_lost",
        seed_tally.missing as f64,
        "tokens",
        Goal::Exactly(0.0),
    );
    result.info("concurrency", concurrency as f64, "conns");
    for f in gw_tally.checked.failures() {
        result.fail(format!("gateway: {f}"));
    }
    for f in seed_tally.checked.failures() {
        result.fail(format!("seed stack: {f}"));
    }
    if seed_tally.missing > 0 {
        result.fail(format!(
            "seed stack: {} cached tokens popped but never answered",
            seed_tally.missing
        ));
    }
    Ok(result)
}

/// The gateway's phase: fresh tokens imported into a new target's pool, then `hit`'s peak loop.
async fn gateway_phase(
    rig: &Rig<'_>,
    budget: usize,
    tally: &mut Tally,
    result: &mut RunResult,
    round: usize,
) -> Result<Phase, BenchError> {
    let target = TargetSpec::unique("seed-stack-gw");
    let base = &rig.gw.base;
    hit::import(&rig.client, base, rig.sim, &target, budget).await?;
    let addr = base.trim_start_matches("http://").to_owned();
    let req = Arc::new(conn::post_json(&addr, "/v1/solve", &target.solve_body()));
    let before = rig.cpu_now();
    let out = hit::closed_solves(
        &addr,
        &req,
        rig.concurrency,
        budget,
        rig.duration,
        "seed-stack",
    )
    .await;
    let [loadgen, gateway, _, redis] = rig.cores_since(before, out.elapsed.as_secs_f64());
    // Checked when the phase ends, outside the measured window, well within the tokens' life.
    tally.checked.add(Checked::tokens(
        &rig.sim.sim,
        out.tokens.iter().map(String::as_str),
    ));
    tally.answered += out.done;
    tally.missing += out.misses;
    hit::note_errors(
        result,
        &format!("gateway /v1/solve (round {round})"),
        out.errors,
        &out.first_errors,
    );
    Ok(Phase {
        rate: out.rate(),
        latencies: out.latencies,
        system_cores: gateway,
        redis_cores: redis,
        loadgen_cores: loadgen,
    })
}

/// The seed stack's phase: fresh tokens pushed onto a new target's list seed 000's way, then the
/// same closed loop on its `POST /solve`.
async fn seed_phase(
    rig: &Rig<'_>,
    budget: usize,
    ttl: u64,
    tally: &mut Tally,
    result: &mut RunResult,
    round: usize,
) -> Result<Phase, BenchError> {
    let mut con = rig.con.clone();
    let target = TargetSpec::unique("seed-stack");
    let key = format!("captcha:token:{}:{}", target.sitekey, target.pageurl);
    // One batch over the budget: the seed's take drops the token that empties the list (its TTL
    // is read after the pop, when the key is gone).
    let pushed = fill(&mut con, rig.sim, &key, budget + PUSH_BATCH, ttl).await?;
    let n_pushed = pushed.len();
    let addr = rig.seed.addr.clone();
    let body = json!({"sitekey": target.sitekey, "pageurl": target.pageurl}).to_string();
    let req = Arc::new(conn::post_json(&addr, "/solve", body.as_bytes()));
    let members = rig.seed.processes();
    let before = rig.cpu_now();
    let bar = load::bar(budget as u64, "seed-stack: seed /solve");
    let out = load::closed_loop(
        rig.concurrency,
        budget,
        rig.duration,
        &bar,
        || None,
        move |c| {
            let (addr, req) = (addr.clone(), req.clone());
            async move { conn::exchange(c, &addr, &req, seed_answer).await }
        },
    )
    .await;
    bar.finish_and_clear();
    let [loadgen, _, gunicorn, redis] = rig.cores_since(before, out.elapsed.as_secs_f64());
    if rig.seed.processes() != members {
        result.notes.push(
            "gunicorn's processes changed during a phase (a worker restarted): its CPU figure \
             misses the exited worker's time"
                .into(),
        );
    }
    let left: usize = redis::cmd("LLEN").arg(&key).query_async(&mut con).await?;
    let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut con).await?;
    tally.checked.add(Checked::tokens(
        &rig.sim.sim,
        out.tokens.iter().map(String::as_str),
    ));
    tally.answered += out.done;
    tally.cached += out.tokens.iter().filter(|t| pushed.contains(*t)).count();
    tally.missing += n_pushed.saturating_sub(out.done + left);
    hit::note_errors(
        result,
        &format!("seed stack /solve (round {round})"),
        out.errors,
        &out.first_errors,
    );
    Ok(Phase {
        rate: out.rate(),
        latencies: out.latencies,
        system_cores: gunicorn,
        redis_cores: redis,
        loadgen_cores: loadgen,
    })
}

/// Pushes `n` fresh simulator tokens onto the list `key` as seed 000's cache does (`RPUSH`,
/// then `EXPIRE`), a batch per round trip. Returns the tokens pushed.
async fn fill(
    con: &mut redis::aio::MultiplexedConnection,
    sim: &SimServer,
    key: &str,
    n: usize,
    ttl: u64,
) -> Result<HashSet<String>, BenchError> {
    let bar = load::bar(n as u64, "caching tokens in Redis");
    let (mut len, mut pushed) = (0, HashSet::with_capacity(n));
    for start in (0..n).step_by(PUSH_BATCH) {
        let now = now_ms();
        let batch: Vec<String> = (start..n.min(start + PUSH_BATCH))
            .map(|_| {
                sim.sim
                    .mint_token(Kind::RecaptchaV2, now)
                    .expect("reCAPTCHA answers are tokens")
            })
            .collect();
        (len,) = redis::pipe()
            .cmd("RPUSH")
            .arg(key)
            .arg(&batch)
            .cmd("EXPIRE")
            .arg(key)
            .arg(ttl)
            .ignore()
            .query_async(con)
            .await?;
        bar.inc(batch.len() as u64);
        pushed.extend(batch);
    }
    bar.finish_and_clear();
    if len < n {
        return Err(BenchError::Setup(format!(
            "the seed stack's list holds {len} of {n} cached tokens"
        )));
    }
    Ok(pushed)
}

/// A seed-stack answer: 200 with a cached token; anything else (a `CACHE_MISS`, at capacity) is
/// an error of the run.
fn seed_answer(status: u16, body: &[u8]) -> Result<(String, bool), String> {
    #[derive(Deserialize)]
    struct Answer {
        token: String,
    }
    match status {
        200 => serde_json::from_slice::<Answer>(body)
            .map(|a| (a.token, true))
            .map_err(|e| format!("unreadable answer: {e}")),
        _ => Err(format!("{status}: {}", String::from_utf8_lossy(body))),
    }
}
