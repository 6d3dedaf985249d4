//! `hit`: the pool hit path on the Redis store. Imported tokens sit in one target's pool; the
//! bench takes them as fast as it can through `POST /v1/solve` (peak), then at half that rate
//! on a fixed schedule (latency percentiles without queueing in the load generator), then
//! through the compatible `in.php` + `res.php` pair. In the same run `redis-benchmark` runs an
//! equivalent Lua pop against the same `redis-server`, so the gateway's rate is quoted as a
//! ratio to what Redis itself does on this machine.
//!
//! The gateway is a separate process, so its CPU is its own; the report gives the CPU cores
//! used by the gateway, Redis and the load generator during the peak phase.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::conn::{self, ConnPool, RawConn};
use super::load::{self, Checked, Latencies, LoopOutcome, Solved, TargetSpec};
use super::redis_pop;
use super::report::{Goal, RunResult};
use super::rig::{self, GatewaySpec, GatewayUnderTest, RedisServer, SimServer, secs};
use super::{BenchError, Opts};
use crate::cli::Durable;

/// A replica of `master`, once its first sync is done.
async fn replica_of(master: &RedisServer) -> Result<RedisServer, BenchError> {
    let port = master.port.to_string();
    let replica =
        RedisServer::start_with(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]).await?;
    let client =
        redis::Client::open(replica.url()).map_err(|e| BenchError::Setup(e.to_string()))?;
    for _ in 0..500 {
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| BenchError::Setup(e.to_string()))?;
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .map_err(|e| BenchError::Setup(e.to_string()))?;
        if info.contains("master_link_status:up") {
            return Ok(replica);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(BenchError::Setup("the replica never synced".into()))
}

/// Tokens imported per second of the peak phase: above any rate this machine reaches, so the
/// pool never runs dry (a dry pool would start upstream solves and measure something else).
pub(super) const PEAK_TOKENS_PER_S: f64 = 40_000.0;

/// The simulator and the gateway of `hit`, on the Redis at `redis_url`: a separate `serve`
/// process with a 50-thread plan and 2-5 s solves (never reached while the pool holds tokens).
/// `seed-stack` starts its gateway with this too, so the two scenarios measure the same one.
pub(super) async fn gateway(
    redis_url: &str,
    durable: Option<Durable>,
) -> Result<(SimServer, GatewayUnderTest), BenchError> {
    let sim = SimServer::start(50, secs(2.0, 5.0)).await?;
    let mut spec = GatewaySpec::new(50, 2.0, 0.25);
    spec.redis_url = Some(redis_url.to_owned());
    spec.top = match durable {
        Some(Durable::Fsync) => "redis_handout_fsync = true\n".into(),
        Some(Durable::Replica) => "redis_handout_replicas = 1\n".into(),
        None => String::new(),
    };
    let gw = GatewayUnderTest::process(&spec, &sim).await?;
    Ok((sim, gw))
}

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    let own_redis = match (&opts.redis_url, opts.durable) {
        (Some(_), _) => None,
        (None, Some(Durable::Fsync)) => Some(
            RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).await?,
        ),
        (None, _) => Some(RedisServer::start().await?),
    };
    let redis_url = match (&opts.redis_url, &own_redis) {
        (Some(url), _) => url.clone(),
        (None, Some(r)) => r.url(),
        (None, None) => unreachable!("a server was started when no URL was given"),
    };
    // The replica `--durable replica` waits for, synced before the load starts.
    let _replica = match (&own_redis, opts.durable) {
        (Some(master), Some(Durable::Replica)) => Some(replica_of(master).await?),
        _ => None,
    };
    let (sim, gw) = gateway(&redis_url, opts.durable).await?;
    let concurrency = opts.concurrency.unwrap_or(if opts.quick { 8 } else { 64 });
    let duration = Duration::from_secs_f64(opts.duration_or(0.5, 5.0));
    let client = load::client(concurrency * 2);
    let target = TargetSpec::unique("hit");
    let mut result = RunResult::default();

    // Peak: closed loop on /v1/solve.
    let budget = if opts.quick {
        2_000
    } else {
        (duration.as_secs_f64() * PEAK_TOKENS_PER_S) as usize
    };
    import(&client, &gw.base, &sim, &target, budget).await?;
    let pids = [
        std::process::id(),
        gw.pid(),
        own_redis.as_ref().map_or(0, |r| r.pid()),
    ];
    let cpu_before = pids.map(rig::cpu_seconds);
    let addr = gw.base.trim_start_matches("http://").to_owned();
    let solve_req = Arc::new(conn::post_json(&addr, "/v1/solve", &target.solve_body()));
    let peak = closed_solves(&addr, &solve_req, concurrency, budget, duration, "hit").await;
    let wall = peak.elapsed.as_secs_f64();
    let cores = |i: usize| (rig::cpu_seconds(pids[i]) - cpu_before[i]) / wall;
    let (bench_cores, gw_cores, redis_cores) = (cores(0), cores(1), cores(2));
    let peak_rate = peak.rate();
    // Each phase's tokens are checked when it ends, well within their lifetime however long
    // the run, and outside the measured window.
    let mut checked = Checked::tokens(&sim.sim, peak.tokens.iter().map(String::as_str));
    note_errors(
        &mut result,
        "/v1/solve (peak)",
        peak.errors,
        &peak.first_errors,
    );

    // Half the peak rate on a fixed schedule; latency counts from when a request was due.
    let rate = (peak_rate / 2.0).max(1.0);
    let n = ((rate * duration.as_secs_f64()) as usize).max(1);
    import(&client, &gw.base, &sim, &target, n + n / 10).await?;
    let (mut half, half_errors, half_tokens) = paced(&addr, &solve_req, rate, n).await;
    checked.add(Checked::tokens(
        &sim.sim,
        half_tokens.iter().map(String::as_str),
    ));
    note_errors(
        &mut result,
        "/v1/solve (half rate)",
        half_errors.len(),
        &half_errors,
    );

    // The compatible pair.
    let pair_budget = if opts.quick { 500 } else { budget / 4 };
    import(&client, &gw.base, &sim, &target, pair_budget).await?;
    let bar = load::bar(pair_budget as u64, "hit: in.php + res.php");
    let res_calls = Arc::new(AtomicU64::new(0));
    let pairs = {
        let in_req = conn::get(&addr, &format!("/in.php?{}", target.in_query()));
        let (addr, in_req, res_calls) = (addr.clone(), Arc::new(in_req), res_calls.clone());
        load::closed_loop(
            concurrency,
            pair_budget,
            duration,
            &bar,
            || None,
            move |c| {
                let (addr, in_req, res_calls) = (addr.clone(), in_req.clone(), res_calls.clone());
                async move { compat_pair(c, &addr, &in_req, &res_calls).await }
            },
        )
        .await
    };
    bar.finish_and_clear();
    note_errors(
        &mut result,
        "in.php + res.php",
        pairs.errors,
        &pairs.first_errors,
    );

    let misses = peak.misses + pairs.misses;
    let served = peak.done + half_tokens.len() + pairs.done;
    checked.add(Checked::tokens(
        &sim.sim,
        pairs.tokens.iter().map(String::as_str),
    ));
    gw.stop().await;
    for f in checked.failures() {
        result.fail(f);
    }

    let redis_rps = redis_pop::redis_benchmark(&redis_url, opts.quick, &mut result).await?;
    let mut peak_lat = peak.latencies;
    result.goal("solves_per_s", peak_rate, "/s", Goal::AtLeast(25_000.0));
    result.info("peak_p50_ms", peak_lat.quantile_ms(0.5), "ms");
    result.info("peak_p99_ms", peak_lat.quantile_ms(0.99), "ms");
    result.info("half_rate", rate, "/s");
    result.info("half_rate_p50_ms", half.quantile_ms(0.5), "ms");
    result.goal(
        "half_rate_p99_ms",
        half.quantile_ms(0.99),
        "ms",
        Goal::AtMost(5.0),
    );
    result.info("compat_pairs_per_s", pairs.rate(), "/s");
    result.info(
        "res_php_per_pair",
        res_calls.load(Ordering::Relaxed) as f64 / pairs.done.max(1) as f64,
        "requests",
    );
    if let Some(rps) = redis_rps {
        result.info("redis_benchmark_pop_per_s", rps, "/s");
        result.goal(
            "ratio_to_redis",
            peak_rate / rps,
            "ratio",
            Goal::AtLeast(0.3),
        );
    }
    result.goal(
        "pool_hit_rate",
        1.0 - misses as f64 / served.max(1) as f64,
        "share",
        Goal::Exactly(1.0),
    );
    result.goal(
        "tokens_handed_out_twice",
        checked.duplicate as f64,
        "tokens",
        Goal::Exactly(0.0),
    );
    result.info("gateway_cores", gw_cores, "cores");
    result.info("redis_cores", redis_cores, "cores");
    result.info("loadgen_cores", bench_cores, "cores");
    result.info("concurrency", concurrency as f64, "conns");
    if opts.redis_url.is_some() {
        result
            .notes
            .push("redis_cores is not measured for a Redis given by --redis-url".into());
    }
    Ok(result)
}

/// Imports `n` fresh simulator tokens into `target`'s pool; fewer accepted is a setup error.
pub(super) async fn import(
    client: &reqwest::Client,
    base: &str,
    sim: &SimServer,
    target: &TargetSpec,
    n: usize,
) -> Result<(), BenchError> {
    let bar = load::bar(n as u64, "importing tokens");
    let accepted = load::import_tokens(client, base, &sim.sim, target, n)
        .await
        .map_err(|e| BenchError::Setup(format!("token import failed: {e}")))?;
    bar.finish_and_clear();
    if accepted < n {
        return Err(BenchError::Setup(format!(
            "the gateway accepted {accepted} of {n} imported tokens"
        )));
    }
    Ok(())
}

/// Fails the run when a phase had errors, quoting the first few.
pub(super) fn note_errors(result: &mut RunResult, phase: &str, n: usize, first: &[String]) {
    if n > 0 {
        result.fail(format!("{phase}: {n} errors, first: {first:?}"));
    }
}

/// The peak phase: a closed loop of `concurrency` connections on `POST /v1/solve` (`req`, for
/// the gateway at `addr`) until `budget` calls have started or `duration` has passed.
pub(super) async fn closed_solves(
    addr: &str,
    req: &Arc<Vec<u8>>,
    concurrency: usize,
    budget: usize,
    duration: Duration,
    scenario: &str,
) -> LoopOutcome {
    let bar = load::bar(budget as u64, &format!("{scenario}: /v1/solve, peak"));
    let (addr, req) = (addr.to_owned(), req.clone());
    let outcome = load::closed_loop(
        concurrency,
        budget,
        duration,
        &bar,
        || None,
        move |c| {
            let (addr, req) = (addr.clone(), req.clone());
            async move { raw_solve(c, &addr, &req).await }
        },
    )
    .await;
    bar.finish_and_clear();
    outcome
}

/// One `/v1/solve` on a raw connection (opened on first use, dropped after an error): the
/// token, and whether it came from the pool.
async fn raw_solve(
    conn: Option<RawConn>,
    addr: &str,
    req: &[u8],
) -> (Option<RawConn>, Result<(String, bool), String>) {
    conn::exchange(conn, addr, req, |status, body| match status {
        200 => serde_json::from_slice::<Solved>(body)
            .map(|s| (s.token, s.source == "pool"))
            .map_err(|e| format!("unreadable answer: {e}")),
        _ => Err(format!("{status}: {}", String::from_utf8_lossy(body))),
    })
    .await
}

/// `n` `/v1/solve` calls at `rate` per second, each sent when due however slow the others are
/// (open loop, at most 4096 outstanding); latency counts from when a call was due.
async fn paced(
    addr: &str,
    req: &Arc<Vec<u8>>,
    rate: f64,
    n: usize,
) -> (Latencies, Vec<String>, Vec<String>) {
    let bar = load::bar(n as u64, "hit: /v1/solve, half rate");
    let pool = Arc::new(ConnPool::new(addr));
    let limit = Arc::new(Semaphore::new(4096));
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due).await;
        let permit = limit.clone().acquire_owned().await.expect("never closed");
        let (pool, req, addr, bar) = (pool.clone(), req.clone(), addr.to_owned(), bar.clone());
        set.spawn(async move {
            let conn = pool.take().await.ok();
            let (conn, r) = raw_solve(conn, &addr, &req).await;
            let took = due.elapsed();
            if let Some(c) = conn {
                pool.give(c);
            }
            drop(permit);
            bar.inc(1);
            (r, took)
        });
    }
    let (mut lat, mut errors, mut tokens) = (Latencies::default(), Vec::new(), Vec::new());
    while let Some(Ok((r, took))) = set.join_next().await {
        match r {
            Ok((token, _)) => {
                lat.record(took);
                tokens.push(token);
            }
            Err(e) => errors.push(e),
        }
    }
    bar.finish_and_clear();
    (lat, errors, tokens)
}

/// One `in.php` submit and `res.php` reads until the answer is there, on one connection.
async fn compat_pair(
    conn: Option<RawConn>,
    addr: &str,
    in_req: &[u8],
    res_calls: &AtomicU64,
) -> (Option<RawConn>, Result<(String, bool), String>) {
    let mut conn = match conn {
        Some(c) => c,
        None => match RawConn::connect(addr).await {
            Ok(c) => c,
            Err(e) => return (None, Err(format!("connect: {e}"))),
        },
    };
    let read = |body: &[u8]| serde_json::from_slice::<serde_json::Value>(body).unwrap_or_default();
    let v = match conn.send(in_req).await {
        Ok((_, body)) => read(body),
        Err(e) => return (None, Err(format!("in.php: {e}"))),
    };
    let id = match (v["status"].as_u64(), v["request"].as_str()) {
        (Some(1), Some(id)) => id.to_owned(),
        _ => return (Some(conn), Err(format!("in.php: {v}"))),
    };
    let path = format!("/res.php?key={}&action=get&json=1&id={id}", load::KEY);
    let res_req = conn::get(addr, &path);
    for _ in 0..1000 {
        res_calls.fetch_add(1, Ordering::Relaxed);
        let v = match conn.send(&res_req).await {
            Ok((_, body)) => read(body),
            Err(e) => return (None, Err(format!("res.php: {e}"))),
        };
        match (v["status"].as_u64(), v["request"].as_str()) {
            (Some(1), Some(token)) => return (Some(conn), Ok((token.to_owned(), true))),
            (_, Some("CAPCHA_NOT_READY")) => tokio::time::sleep(Duration::from_millis(2)).await,
            _ => return (Some(conn), Err(format!("res.php: {v}"))),
        }
    }
    let e = format!("res.php: task {id} not ready after 1000 reads");
    (Some(conn), Err(e))
}
