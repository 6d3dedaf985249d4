//! The gateway under faults (issue 8, item 7): the provider misbehaving (the simulator's injected
//! faults), the network to the provider and to Redis breaking (a TCP fault proxy in between).
//! Under each: no panic (the process keeps answering), every caller gets an answer or a clear
//! error in its protocol, nobody waiting is lost, and once load stops no upstream thread stays
//! taken. With Redis unreachable the gateway degrades and recovers by itself (promise 7).
//!
//! Every wait is bounded by a deadline and says what it waited for.

use std::future::Future;
use std::time::Duration;

use captcha_gateway::sim::{Faults, LatencyRange};
use futures::future::join_all;
use serde_json::{Value, json};

use crate::support::KEY;
use crate::support::fault_proxy::{FaultProxy, Mode};
use crate::support::fleet::{GatewayProcess, SimServer, client};
use crate::support::redis::RedisServer;

/// What a caller asks for, in seconds: short, so every fault runs into it.
const CALLER_TIMEOUT_S: f64 = 3.0;

/// Bound on anything that should happen "soon" (a caller's answer beyond its own deadline is
/// measured separately): generous, since it only ends a hung test.
const SOON: Duration = Duration::from_secs(30);

/// Waits for `fut`, failing with `what` if `limit` passes first.
async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {limit:?}"))
}

/// Checks `cond` until it holds, failing with `what` and the last value seen after `limit`.
async fn eventually<T: std::fmt::Debug, F: Future<Output = (bool, T)>>(
    limit: Duration,
    what: &str,
    mut cond: impl FnMut() -> F,
) {
    let start = tokio::time::Instant::now();
    loop {
        let (ok, seen) = cond().await;
        if ok {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: still not so after {limit:?} (last seen: {seen:?})"
        );
        // A polling interval, not a synchronisation: the condition is checked again after it.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A simulator with quick solves and room for every test's tasks, served in this process.
async fn simulator() -> SimServer {
    SimServer::start(
        LatencyRange {
            min: Duration::from_millis(100),
            max: Duration::from_millis(300),
        },
        200,
    )
    .await
}

/// The simulator behind `sim`, reachable at `addr` instead (a proxy in front of it).
fn behind(sim: &SimServer, addr: std::net::SocketAddr) -> SimServer {
    SimServer {
        sim: sim.sim.clone(),
        addr,
    }
}

fn body(sitekey: &str, timeout_s: f64) -> Value {
    json!({"kind": "recaptcha_v2", "sitekey": sitekey, "pageurl": "https://example.com/login", "timeout_s": timeout_s})
}

/// One native solve: status and body, the body `Null` if it was not JSON.
async fn solve(http: &reqwest::Client, base: &str, body: Value) -> (u16, Value) {
    let res = http
        .post(format!("{base}/v1/solve"))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("the gateway answers /v1/solve: {e}"));
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// One compatible submit and its result, through `in.php` and `res.php?action=get`: the
/// submit's id, then the first answer other than `CAPCHA_NOT_READY`.
async fn solve_compat(http: &reqwest::Client, base: &str, sitekey: &str) -> String {
    let submitted = http
        .get(format!(
            "{base}/in.php?key={KEY}&method=userrecaptcha&googlekey={sitekey}&pageurl=https://example.com/login"
        ))
        .send()
        .await
        .expect("the gateway answers in.php")
        .text()
        .await
        .expect("a body");
    let Some(id) = submitted.strip_prefix("OK|") else {
        return submitted;
    };
    loop {
        let got = http
            .get(format!("{base}/res.php?key={KEY}&action=get&id={id}"))
            .send()
            .await
            .expect("the gateway answers res.php")
            .text()
            .await
            .expect("a body");
        if got != "CAPCHA_NOT_READY" {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A native answer is a token or a protocol error: 200 with a token, else a documented status
/// with `{"error": {"code", "message"}}`.
fn assert_answer_or_clear_error(status: u16, v: &Value, context: &str) {
    if status == 200 {
        assert!(
            v["token"].as_str().is_some(),
            "{context}: 200 without a token: {v}"
        );
        return;
    }
    assert!(
        [422, 502, 503, 504].contains(&status),
        "{context}: undocumented status {status}: {v}"
    );
    assert!(
        v["error"]["code"].as_str().is_some() && v["error"]["message"].as_str().is_some(),
        "{context}: {status} without a protocol error body: {v}"
    );
}

/// A compatible answer is a token or an `ERROR_...` code (never a transport failure).
fn assert_compat_answer(answer: &str, context: &str) {
    assert!(
        answer.starts_with("OK|") || answer.starts_with("ERROR_"),
        "{context}: not a compatible answer: {answer:?}"
    );
}

/// Sum of one metric's samples on a gateway's `/metrics`.
async fn metric(http: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("the gateway answers /metrics")
        .text()
        .await
        .expect("a body");
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Once load stops, no solve is held and no upstream thread stays taken.
async fn assert_slots_return(http: &reqwest::Client, base: &str, context: &str) {
    eventually(SOON, &format!("{context}: in-flight back to 0"), || async {
        let in_flight = metric(http, base, "upstream_in_flight").await;
        let active = metric(http, base, "gateway_active_solves").await;
        (in_flight == 0.0 && active == 0.0, (in_flight, active))
    })
    .await;
}

async fn health(http: &reqwest::Client, base: &str) -> String {
    http.get(format!("{base}/health"))
        .send()
        .await
        .expect("the gateway answers /health")
        .json::<Value>()
        .await
        .expect("JSON health")["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Alive and solving: `/livez` answers and a patient caller gets a token.
async fn assert_serves_again(http: &reqwest::Client, base: &str, sitekey: &str, context: &str) {
    let live = http.get(format!("{base}/livez")).send().await;
    assert_eq!(
        live.map(|r| r.status().as_u16()).ok(),
        Some(200),
        "{context}: the process is alive"
    );
    let (status, v) = within(SOON, context, solve(http, base, body(sitekey, 25.0))).await;
    assert_eq!(status, 200, "{context}: solving again: {v}");
}

/// A gateway process whose log goes to a file, so the test can check it never panicked.
async fn logged_gateway(
    sim: &SimServer,
    redis_url: &str,
    extra_toml: &str,
) -> (GatewayProcess, tempfile::NamedTempFile) {
    let log = tempfile::NamedTempFile::new().expect("a log file");
    let file = log.reopen().expect("the log file opens");
    let gw = GatewayProcess::start_logging_to(sim, redis_url, extra_toml, 0.05, file.into()).await;
    (gw, log)
}

/// No thread of the gateway panicked (a panic in a spawned task leaves the process up, so only
/// its log tells).
fn assert_never_panicked(log: &tempfile::NamedTempFile) {
    let text = std::fs::read_to_string(log.path()).expect("the log file reads");
    let panics: Vec<&str> = text.lines().filter(|l| l.contains("panicked")).collect();
    assert!(
        panics.is_empty(),
        "the gateway panicked:\n{}",
        panics.join("\n")
    );
}

/// `n` native callers and `n` compatible ones at once; every one gets its answer or a clear
/// error, the native ones by their deadline (plus the time the HTTP exchange itself takes).
async fn load(http: &reqwest::Client, base: &str, sitekey: &str, n: usize, context: &str) {
    let native = join_all((0..n).map(|_| solve(http, base, body(sitekey, CALLER_TIMEOUT_S))));
    let compat = join_all((0..n).map(|_| solve_compat(http, base, sitekey)));
    let limit = Duration::from_secs_f64(CALLER_TIMEOUT_S) + Duration::from_secs(5);
    let native = within(
        limit,
        &format!("{context}: native callers answered"),
        native,
    )
    .await;
    for (status, v) in &native {
        assert_answer_or_clear_error(*status, v, context);
    }
    // A compatible task runs for the compatible task timeout, not the caller's; bounded anyway.
    let compat = within(
        SOON * 8,
        &format!("{context}: compat callers answered"),
        compat,
    )
    .await;
    for answer in &compat {
        assert_compat_answer(answer, context);
    }
}

#[tokio::test]
async fn every_injected_provider_fault_gets_callers_an_answer_and_frees_every_slot() {
    let redis = RedisServer::start();
    let sim = simulator().await;
    let (gw, log) = logged_gateway(&sim, &redis.url(), "compat_task_timeout_s = 5").await;
    let http = client();
    let off = Faults::default();
    let faults = [
        (
            "capacity errors",
            Faults {
                capacity_error_rate: 1.0,
                ..off
            },
        ),
        (
            "zero balance",
            Faults {
                zero_balance_rate: 1.0,
                ..off
            },
        ),
        (
            "HTML 502 pages",
            Faults {
                html_error_rate: 1.0,
                ..off
            },
        ),
        (
            "server errors",
            Faults {
                server_error_rate: 1.0,
                ..off
            },
        ),
        (
            "malformed JSON",
            Faults {
                malformed_rate: 1.0,
                ..off
            },
        ),
        (
            "dropped connections",
            Faults {
                drop_rate: 1.0,
                ..off
            },
        ),
        (
            "slow replies",
            Faults {
                slow_rate: 1.0,
                slow_ms: 5_000,
                ..off
            },
        ),
        (
            "a bit of everything",
            Faults {
                capacity_error_rate: 0.1,
                html_error_rate: 0.1,
                drop_rate: 0.15,
                malformed_rate: 0.15,
                slow_rate: 0.2,
                slow_ms: 1_000,
                ..off
            },
        ),
    ];
    for (i, (name, fault)) in faults.into_iter().enumerate() {
        sim.sim.set_faults(fault).expect("valid faults");
        let sitekey = format!("6Le-fault-{i}");
        load(&http, &gw.base, &sitekey, 8, name).await;
        sim.sim.set_faults(off).expect("valid faults");
        assert_slots_return(&http, &gw.base, name).await;
        assert_serves_again(&http, &gw.base, &format!("6Le-after-{i}"), name).await;
    }
    let stats = sim.sim.stats();
    assert!(
        stats.injected_errors > 0
            && stats.dropped_connections > 0
            && stats.malformed_replies > 0
            && stats.slow_replies > 0,
        "every fault was injected: {stats:?}"
    );
    assert_never_panicked(&log);
}

#[tokio::test]
async fn a_broken_road_to_the_provider_gets_callers_an_answer_and_frees_every_slot() {
    let redis = RedisServer::start();
    let sim = simulator().await;
    let proxy = FaultProxy::start(sim.addr).await;
    let (gw, log) = logged_gateway(
        &behind(&sim, proxy.addr),
        &redis.url(),
        "compat_task_timeout_s = 5",
    )
    .await;
    let http = client();
    assert_serves_again(&http, &gw.base, "6Le-road-before", "before any fault").await;
    for (i, mode) in [Mode::Blackhole, Mode::Reset, Mode::Stall]
        .into_iter()
        .enumerate()
    {
        let context = format!("provider road {mode:?}");
        proxy.set(mode);
        load(&http, &gw.base, &format!("6Le-road-{i}"), 6, &context).await;
        proxy.set(Mode::Pass);
        assert_slots_return(&http, &gw.base, &context).await;
        assert_serves_again(&http, &gw.base, &format!("6Le-road-after-{i}"), &context).await;
    }
    assert_never_panicked(&log);
}

/// A gateway on a simulator with slow solves, its Redis behind a fault proxy.
struct RedisRig {
    log: tempfile::NamedTempFile,
    _redis: RedisServer,
    proxy: FaultProxy,
    sim: SimServer,
    gw: GatewayProcess,
    http: reqwest::Client,
}

impl RedisRig {
    async fn start(extra_toml: &str) -> RedisRig {
        let redis = RedisServer::start();
        let proxy = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
        // Solves slow enough that callers are still waiting when the proxy breaks the road.
        let sim = SimServer::start(LatencyRange::fixed(Duration::from_millis(1_500)), 200).await;
        let url = format!("redis://127.0.0.1:{}/", proxy.port());
        let (gw, log) = logged_gateway(&sim, &url, extra_toml).await;
        RedisRig {
            log,
            _redis: redis,
            proxy,
            sim,
            gw,
            http: client(),
        }
    }

    async fn health_is(&self, want: &str, context: &str) {
        eventually(SOON, &format!("{context}: /health says {want}"), || async {
            let now = health(&self.http, &self.gw.base).await;
            (now == want, now)
        })
        .await;
    }
}

#[tokio::test]
async fn with_redis_blackholed_reset_or_stalled_the_gateway_degrades_loses_no_caller_and_recovers()
{
    let rig = RedisRig::start("redis_lease_s = 3").await;
    let (http, base) = (&rig.http, rig.gw.base.as_str());
    assert_serves_again(http, base, "6Le-redis-before", "before any fault").await;
    rig.health_is("healthy", "before any fault").await;

    for (i, mode) in [Mode::Blackhole, Mode::Reset, Mode::Stall]
        .into_iter()
        .enumerate()
    {
        let context = format!("redis {mode:?}");
        // Callers already waiting on their tasks when Redis goes away: none may be lost.
        let sitekey = format!("6Le-redis-{i}");
        let before = rig.sim.sim.stats().submits;
        let waiting: Vec<_> = (0..5)
            .map(|_| {
                let (http, base, body) = (http.clone(), base.to_owned(), body(&sitekey, 20.0));
                tokio::spawn(async move { solve(&http, &base, body).await })
            })
            .collect();
        eventually(
            SOON,
            &format!("{context}: the waiters' tasks started"),
            || async {
                let submits = rig.sim.sim.stats().submits - before;
                (submits >= 5, submits)
            },
        )
        .await;
        rig.proxy.set(mode);
        for w in waiting {
            let (status, v) = within(SOON, &format!("{context}: a waiting caller"), w)
                .await
                .expect("the caller's task");
            assert_eq!(
                status, 200,
                "{context}: a caller waiting when Redis broke: {v}"
            );
        }

        // New callers are served without the pool while Redis is away (promise 7).
        let fresh = join_all((0..5).map(|_| solve(http, base, body(&sitekey, 20.0))));
        for (status, v) in within(SOON, &format!("{context}: new callers"), fresh).await {
            assert_eq!(status, 200, "{context}: solving continues degraded: {v}");
        }
        let compat = within(SOON, &context, solve_compat(http, base, &sitekey)).await;
        assert!(
            compat.starts_with("OK|"),
            "{context}: compatible API while degraded: {compat}"
        );
        rig.health_is("degraded", &context).await;

        // Passing again, the gateway finds Redis by itself and the pool works again.
        rig.proxy.set(Mode::Pass);
        rig.health_is("healthy", &format!("{context}, then pass"))
            .await;
        let pooled = format!("6Le-redis-pool-{i}");
        let (status, _) = solve(http, base, body(&pooled, 0.01)).await;
        assert_eq!(status, 504, "{context}: a caller who leaves at once");
        eventually(
            SOON,
            &format!("{context}: the left answer is pooled"),
            || async {
                let size = metric(http, base, "gateway_pool_size").await;
                (size >= 1.0, size)
            },
        )
        .await;
        let (status, v) = within(SOON, &context, solve(http, base, body(&pooled, 20.0))).await;
        assert_eq!(
            (status, v["source"].as_str()),
            (200, Some("pool")),
            "{context}: the pool serves again: {v}"
        );
        assert_slots_return(http, base, &context).await;
    }
    assert_never_panicked(&rig.log);
}

#[tokio::test]
async fn with_redis_required_a_broken_redis_gets_callers_a_clear_refusal_and_recovers() {
    let rig = RedisRig::start("redis_required = true").await;
    let (http, base) = (&rig.http, rig.gw.base.as_str());
    assert_serves_again(http, base, "6Le-required-before", "before any fault").await;
    rig.proxy.set(Mode::Reset);
    let (status, v) = within(
        SOON,
        "required, reset",
        solve(http, base, body("6Le-req", 20.0)),
    )
    .await;
    assert_eq!(
        status, 503,
        "a required store that is away refuses clearly: {v}"
    );
    assert_answer_or_clear_error(status, &v, "required, reset");
    rig.proxy.set(Mode::Pass);
    eventually(SOON, "required: solving again after pass", || async {
        let (status, v) = solve(http, base, body("6Le-req", 20.0)).await;
        (status == 200, (status, v))
    })
    .await;
    assert_slots_return(http, base, "required").await;
    assert_never_panicked(&rig.log);
}

/// The Redis store's response timeout (`RedisSettings::new`): an answer that waited on a
/// blackholed Redis cannot come sooner than this.
const REDIS_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

#[tokio::test]
async fn with_redis_blackholed_or_stalled_a_callers_timeout_comes_at_its_deadline() {
    let rig = RedisRig::start("redis_lease_s = 3").await;
    let (http, base) = (&rig.http, rig.gw.base.as_str());
    assert_serves_again(http, base, "6Le-deadline-before", "before any fault").await;
    for mode in [Mode::Blackhole, Mode::Stall] {
        rig.proxy.set(mode);
        for _ in 0..3 {
            let asked = std::time::Instant::now();
            let (status, v) = solve(http, base, body("6Le-deadline", 0.2)).await;
            let took = asked.elapsed();
            assert_answer_or_clear_error(status, &v, &format!("{mode:?}"));
            assert_eq!(status, 504, "{mode:?}: {v}");
            // Ten times the caller's deadline: only an answer that waited on Redis is this late.
            assert!(
                took < REDIS_RESPONSE_TIMEOUT,
                "{mode:?}: a caller with a 0.2 s deadline was answered after {took:?}: it waited \
                 on the store instead of its deadline"
            );
        }
        // Once the gateway knows Redis is away, a caller whose deadline is shorter than the
        // store's timeouts is still served, without the pool (promise 7).
        rig.health_is("degraded", &format!("{mode:?}")).await;
        let (status, v) = solve(http, base, body("6Le-deadline-degraded", 3.0)).await;
        assert_eq!(status, 200, "{mode:?}: a 3 s caller while degraded: {v}");
        rig.proxy.set(Mode::Pass);
        rig.health_is("healthy", &format!("{mode:?}, then pass"))
            .await;
        // The arrivals those callers left behind finished as departures: nobody waits on.
        eventually(
            SOON,
            &format!("{mode:?}: no waiter left behind"),
            || async {
                let waiting = metric(http, base, "gateway_target_waiting").await;
                (waiting == 0.0, waiting)
            },
        )
        .await;
        assert_slots_return(http, base, &format!("{mode:?}")).await;
        assert_serves_again(http, base, "6Le-deadline-after", &format!("{mode:?}")).await;
    }
    assert_never_panicked(&rig.log);
}

/// The proxy itself, against an echo server: passing echoes, a stalled stream resumes intact,
/// a reset connection reads an RST, and a blackholed one is closed when the proxy passes again
/// (what it swallowed is gone).
#[tokio::test]
async fn the_fault_proxy_passes_stalls_resets_and_blackholes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo_addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let proxy = FaultProxy::start(echo_addr).await;
    let connect = || tokio::net::TcpStream::connect(proxy.addr);
    let mut buf = [0u8; 5];

    let mut conn = connect().await.unwrap();
    conn.write_all(b"hello").await.unwrap();
    within(SOON, "echo through the proxy", conn.read_exact(&mut buf))
        .await
        .unwrap();
    assert_eq!(&buf, b"hello");

    proxy.set(Mode::Stall);
    conn.write_all(b"world").await.unwrap();
    proxy.set(Mode::Pass);
    within(SOON, "a stalled stream resumes", conn.read_exact(&mut buf))
        .await
        .unwrap();
    assert_eq!(&buf, b"world", "nothing lost while stalled");

    proxy.set(Mode::Reset);
    let read = within(SOON, "an existing connection reset", conn.read(&mut buf)).await;
    assert!(
        matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{read:?}"
    );
    let mut fresh = connect().await.unwrap();
    let read = within(SOON, "a new connection reset", fresh.read(&mut buf)).await;
    assert!(
        matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{read:?}"
    );

    proxy.set(Mode::Blackhole);
    let mut hole = connect().await.unwrap();
    hole.write_all(b"gone!").await.unwrap();
    eventually(SOON, "the proxy swallowed the bytes", || async {
        (proxy.swallowed() >= 5, proxy.swallowed())
    })
    .await;
    proxy.set(Mode::Pass);
    let read = within(SOON, "a blackholed connection ends", hole.read(&mut buf)).await;
    assert!(
        matches!(&read, Ok(0)) || read.is_err(),
        "no echo of swallowed bytes: {read:?}"
    );
    let mut after = connect().await.unwrap();
    after.write_all(b"again").await.unwrap();
    within(SOON, "passing again", after.read_exact(&mut buf))
        .await
        .unwrap();
    assert_eq!(&buf, b"again");
}

/// Callers already waiting on running tasks when the road to the provider breaks: once it heals
/// (before their deadlines), every one gets its answer; none is lost to a failed poll.
#[tokio::test]
async fn callers_waiting_when_the_road_to_the_provider_breaks_get_their_answers_once_it_heals() {
    let redis = RedisServer::start();
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_millis(1_500)), 200).await;
    let proxy = FaultProxy::start(sim.addr).await;
    let (gw, log) = logged_gateway(&behind(&sim, proxy.addr), &redis.url(), "").await;
    let http = client();
    for (i, mode) in [Mode::Blackhole, Mode::Reset, Mode::Stall]
        .into_iter()
        .enumerate()
    {
        let context = format!("provider road {mode:?} under waiting callers");
        let before = sim.sim.stats();
        let waiting: Vec<_> = (0..5)
            .map(|_| {
                let (http, base) = (http.clone(), gw.base.clone());
                let body = body(&format!("6Le-heal-{i}"), 25.0);
                tokio::spawn(async move { solve(&http, &base, body).await })
            })
            .collect();
        eventually(SOON, &format!("{context}: tasks started"), || async {
            let submits = sim.sim.stats().submits - before.submits;
            (submits >= 5, submits)
        })
        .await;
        proxy.set(mode);
        // The answers become ready upstream while the gateway cannot reach them.
        eventually(
            SOON,
            &format!("{context}: tasks ready upstream"),
            || async {
                let now = sim.sim.stats();
                let ready = now.solved - before.solved;
                (ready >= 5, ready)
            },
        )
        .await;
        if mode == Mode::Blackhole {
            // The gateway did try the road while it was broken (its polls went into the hole).
            eventually(SOON, &format!("{context}: polls swallowed"), || async {
                (proxy.swallowed() > 0, proxy.swallowed())
            })
            .await;
        }
        proxy.set(Mode::Pass);
        for w in waiting {
            let (status, v) = within(SOON, &context, w).await.expect("the caller's task");
            assert_eq!(status, 200, "{context}: {v}");
        }
        assert_slots_return(&http, &gw.base, &context).await;
    }
    // The log is really captured (so the panic check below reads something): the failed polls
    // were logged.
    let text = std::fs::read_to_string(log.path()).expect("the log file reads");
    assert!(text.contains("poll request failed"), "log:\n{text}");
    assert_never_panicked(&log);
}

/// The switch over HTTP on the gateway's own port (`--provider sim` serves the simulator under
/// `/sim`), and a dropped connection as a client really sees it on a socket.
#[tokio::test]
async fn sim_faults_switch_over_http_and_a_dropped_reply_fails_on_the_wire() {
    let gw = crate::support::TestGateway::start().await;
    let http = reqwest::Client::new();
    let set = |body: &'static str| {
        http.post(gw.url("/sim/faults"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let res = set(r#"{"drop_rate": 1}"#)
        .await
        .expect("the switch answers");
    assert_eq!(res.status(), 200);
    let res_php = format!("/res.php?key={}&action=getbalance", crate::support::KEY);
    let dropped = http.get(gw.sim_url(&res_php)).send().await;
    let failed = match dropped {
        Err(_) => true,
        Ok(r) => r.bytes().await.is_err(),
    };
    assert!(failed, "a dropped reply never completes on the wire");
    assert_eq!(gw.stat("dropped_connections").await, 1);

    let bad = set(r#"{"drop_rate": 2}"#)
        .await
        .expect("the switch answers");
    assert_eq!(bad.status(), 400);
    let current: Value = http
        .get(gw.url("/sim/faults"))
        .send()
        .await
        .expect("the switch answers")
        .json()
        .await
        .expect("JSON faults");
    assert_eq!(
        current["drop_rate"], 1.0,
        "a refused change changes nothing"
    );

    let cleared = http
        .delete(gw.url("/sim/faults"))
        .send()
        .await
        .expect("the switch answers");
    assert_eq!(cleared.status(), 200);
    let balance = http
        .get(gw.sim_url(&res_php))
        .send()
        .await
        .expect("served again")
        .text()
        .await
        .expect("a complete reply");
    assert_eq!(balance, "100.00");
}
