//! The road to Redis breaking (the fault proxy between gateway and Redis): the gateway
//! degrades, keeps every waiting caller (answered once Redis says where its answer went), and
//! recovers.

use super::*;
use crate::support::fault_proxy::{FaultProxy, Mode};
use crate::support::fleet::client;
use crate::support::metric_sum_where;
use crate::support::redis::RedisServer;

/// A gateway on a simulator with slow solves, its Redis behind a fault proxy.
struct RedisRig {
    _redis: RedisServer,
    proxy: FaultProxy,
    sim: SimServer,
    gw: GatewayProcess,
    http: reqwest::Client,
}

/// A failing round shows what the gateway logged (warnings and errors): its log file is
/// otherwise gone with the test, and a fault that shows once in many runs needs it.
impl Drop for RedisRig {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the gateway's log:\n{}", self.gw.log());
        }
    }
}

impl RedisRig {
    async fn start(extra_toml: &str) -> RedisRig {
        let redis = RedisServer::start();
        let proxy = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
        // Solves slow enough that callers are still waiting when the proxy breaks the road.
        let sim = SimServer::start(LatencyRange::fixed(Duration::from_millis(1_500)), 200).await;
        let url = format!("redis://127.0.0.1:{}/", proxy.port());
        let gw = logged_gateway(&sim, &url, extra_toml).await;
        RedisRig {
            _redis: redis,
            proxy,
            sim,
            gw,
            http: client(),
        }
    }

    async fn health_is(&self, want: &str, context: &str) {
        eventually_showing(SOON, &format!("{context}: /health says {want}"), || async {
            let now = health(&self.http, &self.gw.base).await;
            (now == want, now)
        })
        .await;
    }
}

/// Each way of breaking the road on a rig of its own, all at once: the modes share nothing, so
/// the test takes as long as the slowest.
#[tokio::test]
async fn with_redis_blackholed_reset_or_stalled_the_gateway_degrades_loses_no_caller_and_recovers()
{
    join_all(
        [Mode::Blackhole, Mode::Reset, Mode::Stall]
            .into_iter()
            .enumerate()
            .map(|(i, mode)| redis_road_broken(i, mode)),
    )
    .await;
}

async fn redis_road_broken(i: usize, mode: Mode) {
    let rig = RedisRig::start("redis_lease_s = 3").await;
    let (http, base) = (&rig.http, rig.gw.base.as_str());
    let context = format!("redis {mode:?}");
    assert_serves_again(http, base, &format!("6Le-redis-before-{i}"), &context).await;
    rig.health_is("healthy", &format!("{context}: before the fault"))
        .await;
    // Callers already waiting on their tasks when Redis goes away: none may be lost.
    let sitekey = format!("6Le-redis-{i}");
    let before = rig.sim.sim.stats().submits;
    let solved_before = metric(http, base, "captcha_gateway_upstream_tasks_total").await;
    let waiting: Vec<_> = (0..5)
        .map(|_| {
            let (http, base, body) = (http.clone(), base.to_owned(), body(&sitekey, 20.0));
            tokio::spawn(async move { solve(&http, &base, body).await })
        })
        .collect();
    eventually_showing(
        SOON,
        &format!("{context}: the waiters' tasks started"),
        || async {
            let submits = rig.sim.sim.stats().submits - before;
            (submits >= 5, submits)
        },
    )
    .await;
    rig.proxy.set(mode);
    // A finish that got no reply (blackholed, reset after it was sent, stalled) may have
    // run: its answer is held until Redis says where it went, never handed out on a guess.
    // Only a refused connection proves it never ran (the outage tests
    // in `fleet.rs` kill Redis: there the own waiters get it at once).
    eventually_showing(
        SOON,
        &format!("{context}: the waiters' tasks ended"),
        || async {
            let solved =
                metric(http, base, "captcha_gateway_upstream_tasks_total").await - solved_before;
            (solved >= 5.0, solved)
        },
    )
    .await;

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
    // The held outcomes are known now: each waiter gets its answer, once.
    for w in waiting {
        assert_answered(w, &format!("{context}, held until Redis answered")).await;
    }
    // On a site of its own, so its pool's figure is its own: the callers above may leave
    // answers pooled too.
    let pooled = |timeout_s| {
        let mut b = body(&format!("6Le-redis-pool-{i}"), timeout_s);
        b["pageurl"] = format!("https://pool-{i}.example.com/login").into();
        b
    };
    let ready = format!("target=\"recaptcha_v2:pool-{i}.example.com\"");
    let (status, _) = solve(http, base, pooled(0.01)).await;
    assert_eq!(status, 504, "{context}: a caller who leaves at once");
    eventually_showing(
        SOON,
        &format!("{context}: the left answer is pooled"),
        || async {
            let size = metric_sum_where(http, base, "captcha_gateway_pool_ready", &[&ready]).await;
            (size >= 1, size)
        },
    )
    .await;
    let (status, v) = within(SOON, &context, solve(http, base, pooled(20.0))).await;
    assert_eq!(
        (status, v["source"].as_str()),
        (200, Some("pool")),
        "{context}: the pool serves again: {v}"
    );
    assert_slots_return(http, base, &context).await;
    assert_never_panicked(&rig.gw);
}

/// A caller waiting on `w` got an answer.
async fn assert_answered(w: tokio::task::JoinHandle<(u16, serde_json::Value)>, context: &str) {
    let (status, v) = within(SOON, &format!("{context}: a waiting caller"), w)
        .await
        .expect("the caller's task");
    assert_eq!(
        status, 200,
        "{context}: a caller waiting when Redis broke: {v}"
    );
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
    eventually_showing(SOON, "required: solving again after pass", || async {
        let (status, v) = solve(http, base, body("6Le-req", 20.0)).await;
        (status == 200, (status, v))
    })
    .await;
    assert_slots_return(http, base, "required").await;
    assert_never_panicked(&rig.gw);
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
        eventually_showing(
            SOON,
            &format!("{mode:?}: no waiter left behind"),
            || async {
                let waiting = metric(http, base, "captcha_gateway_target_waiting").await;
                (waiting == 0.0, waiting)
            },
        )
        .await;
        assert_slots_return(http, base, &format!("{mode:?}")).await;
        assert_serves_again(http, base, "6Le-deadline-after", &format!("{mode:?}")).await;
    }
    assert_never_panicked(&rig.gw);
}

/// `res.php` on the compatible API while Redis is paused (SIGSTOP, longer than a lease): the
/// polling client hears `CAPCHA_NOT_READY` or its answer, never an error its library would take
/// as final (2captcha-python gave up on `ERROR_SERVER_ERROR` within seconds), also after the
/// task ended upstream; once Redis is back it gets the answer. (Whether the answer comes during
/// the pause depends on where the pause caught the task: a finish whose reply is lost is held
/// until Redis says where it went.)
#[tokio::test]
async fn res_php_keeps_a_polling_client_going_while_redis_is_paused() {
    let redis = RedisServer::start();
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_millis(1_500)), 50).await;
    let gw = logged_gateway(&sim, &redis.url(), "redis_lease_s = 3").await;
    let (http, base) = (client(), gw.base.as_str());
    let res_php = |id: String| {
        let http = http.clone();
        let url = format!("{base}/res.php?key={KEY}&action=get&id={id}");
        async move { http.get(url).send().await.unwrap().text().await.unwrap() }
    };
    let submitted = http
        .get(format!(
            "{base}/in.php?key={KEY}&method=userrecaptcha&googlekey=6Le-paused&pageurl=https://example.com/login"
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let id = submitted
        .strip_prefix("OK|")
        .unwrap_or_else(|| panic!("in.php: {submitted}"))
        .to_owned();

    redis.pause();
    let solved_before = sim.sim.stats().solved;
    let mut early = None;
    let mut polls_after_solve = 0;
    within(
        SOON,
        "the task ending upstream while Redis is paused",
        async {
            while polls_after_solve < 3 {
                let got = res_php(id.clone()).await;
                assert!(
                    got == "CAPCHA_NOT_READY" || got.starts_with("OK|"),
                    "res.php while Redis is paused: {got}"
                );
                if got.starts_with("OK|") {
                    early = Some(got);
                }
                if sim.sim.stats().solved > solved_before || early.is_some() {
                    polls_after_solve += 1;
                }
                // A client's polling interval.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        },
    )
    .await;
    redis.resume();
    let answer = within(SOON, "the answer once Redis is back", async {
        loop {
            let got = res_php(id.clone()).await;
            if got != "CAPCHA_NOT_READY" {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    if let Some(early) = early {
        assert_eq!(early, answer, "the same answer during the pause and after");
    }
    let token = answer
        .strip_prefix("OK|")
        .unwrap_or_else(|| panic!("res.php once Redis is back: {answer}"))
        .to_owned();
    let verdict = sim.verify(&http, &token).await;
    assert_eq!(verdict["success"], true, "{verdict}");
    assert_never_panicked(&gw);
}
