//! The fleet-wide thread budget (promise 5): gateway
//! processes on one Redis never hold more upstream tasks than the account's threads, a killed
//! holder's threads come back within one lease, a holder paused past its lease counts an
//! over-admission, and a caller in one instance goes before refills in another.

use std::sync::Arc;
use std::time::Duration;

use captcha_gateway::engine::store::redis::RedisSettings;
use captcha_gateway::provider::budget::RedisBudget;
use captcha_gateway::provider::{BudgetSettings, Priority, ThreadBudget};
use captcha_gateway::sim::LatencyRange;
use futures::future::join_all;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::eventually::eventually;
use crate::support::fleet::{SimServer, client};
use crate::support::gateway::{GatewayProcess, SimAccountConfig};
use crate::support::redis::RedisServer;
use crate::support::solve;
use crate::support::{KEY, metric_sum};

/// The leases of the gateways' one account (named after its provider).
const LEASES: &str = "cg:{b:captchaai}:leases";

async fn redis_conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn leases(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<(String, u64)> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(conn)
        .await
        .unwrap()
}

/// Redis server time in ms: the clock the leases are scored on.
async fn redis_now(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    s * 1000 + us / 1000
}

/// The compatible `threadsinfo` document of a gateway.
async fn threadsinfo(http: &reqwest::Client, base: &str) -> serde_json::Value {
    http.get(format!("{base}/res.php?key={KEY}&action=threadsinfo"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn task(i: usize) -> serde_json::Value {
    json!({"kind": "turnstile", "sitekey": format!("0x4-budget-{i}"), "pageurl": "https://example.com/budget"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_share_five_threads_without_a_capacity_error() {
    let redis = RedisServer::start();
    let sim = SimServer::start(
        LatencyRange {
            min: Duration::from_millis(50),
            max: Duration::from_millis(600),
        },
        5,
    )
    .await;
    let config = SimAccountConfig::new(sim.addr, &redis.url()).threads(5);
    let mut gateways = Vec::new();
    for _ in 0..3 {
        gateways.push(config.serve().start().await);
    }
    let http = client();
    let started = std::time::Instant::now();
    let calls = (0..300).map(|i| {
        let (http, base) = (&http, &gateways[i % 3].base);
        async move { solve(http, base, task(i)).await }
    });
    for (status, v) in join_all(calls).await {
        assert_eq!(status, 200, "every task completes: {v}");
        assert!(v["token"].is_string(), "{v}");
    }
    let stats = sim.sim.stats();
    // Figures for docs/BENCHMARKS.md, not assertions.
    eprintln!(
        "budget: 300 tasks in {:?}, peak {} of 5 threads",
        started.elapsed(),
        stats.peak_concurrent
    );
    assert!(
        stats.peak_concurrent <= 5,
        "peak {} tasks at once on a 5-thread plan",
        stats.peak_concurrent
    );
    assert_eq!(stats.capacity_rejections, 0, "no capacity error answered");
    let mut over = 0;
    for g in &gateways {
        over += metric_sum(
            &http,
            &g.base,
            "captcha_gateway_upstream_thread_over_admissions_total",
        )
        .await;
    }
    assert_eq!(over, 0);
}

/// A holder and a bystander on one Redis with 2 s leases; the holder takes all 5 threads with
/// tasks the simulator never finishes (and a poller slow enough not to give them up).
async fn holder_with_five_threads(
    redis: &RedisServer,
    sim: &SimServer,
) -> (GatewayProcess, GatewayProcess) {
    let config = SimAccountConfig::new(sim.addr, &redis.url())
        .threads(5)
        .top_level("redis_lease_s = 2")
        .poll_interval(5.0);
    let holder = config.serve().start().await;
    let bystander = config.serve().start().await;
    let http = client();
    for i in 0..5 {
        // Never answered: the holder is killed or paused under it, so errors are expected.
        let request = http
            .post(format!("{}/v1/solve", holder.base))
            .bearer_auth(KEY)
            .json(&task(i));
        tokio::spawn(async move { request.send().await.map(|_| ()) });
    }
    let conn = redis_conn(redis).await;
    eventually(
        Duration::from_secs(60),
        "the holder to hold 5 leases",
        || {
            let mut conn = conn.clone();
            async move { leases(&mut conn, LEASES).await.len() == 5 }
        },
    )
    .await;
    (holder, bystander)
}

async fn never_finishing_sim() -> SimServer {
    SimServer::start(LatencyRange::fixed(Duration::from_secs(3600)), 5).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_threads_return_within_one_lease() {
    let redis = RedisServer::start();
    let sim = never_finishing_sim().await;
    let (mut holder, bystander) = holder_with_five_threads(&redis, &sim).await;
    let mut conn = redis_conn(&redis).await;

    // The bystander holds none of them, yet reports the fleet's figures.
    let http = client();
    eventually(
        Duration::from_secs(60),
        "the bystander to see 5 in use",
        || {
            let (http, base) = (&http, &bystander.base);
            async move {
                let v = threadsinfo(http, base).await;
                v["upstream_working_threads"] == 5 && v["upstream_threads"] == 5
            }
        },
    )
    .await;

    holder.kill().await;
    let killed_at = redis_now(&mut conn).await;
    let held = leases(&mut conn, LEASES).await;
    assert_eq!(held.len(), 5);
    for (id, expiry) in &held {
        assert!(
            *expiry <= killed_at + 2_000,
            "lease {id} runs to {expiry}, past one lease after the kill at {killed_at}"
        );
    }
    // The bystander's renewals reap them; its view of the fleet shows the threads free.
    eventually(Duration::from_secs(60), "the leases to lapse", || {
        let mut conn = conn.clone();
        async move { leases(&mut conn, LEASES).await.is_empty() }
    })
    .await;
    eventually(
        Duration::from_secs(60),
        "the bystander to see 0 in use",
        || {
            let (http, base) = (&http, &bystander.base);
            async move {
                metric_sum(http, base, "captcha_gateway_upstream_threads_in_use").await == 0
                    && threadsinfo(http, base).await["upstream_working_threads"] == 0
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_past_its_lease_counts_an_over_admission() {
    let redis = RedisServer::start();
    let sim = never_finishing_sim().await;
    let (holder, _bystander) = holder_with_five_threads(&redis, &sim).await;
    let mut conn = redis_conn(&redis).await;
    let http = client();
    assert_eq!(
        metric_sum(
            &http,
            &holder.base,
            "captcha_gateway_upstream_thread_over_admissions_total"
        )
        .await,
        0
    );

    holder.signal("STOP");
    eventually(
        Duration::from_secs(60),
        "the paused leases to lapse",
        || {
            let mut conn = conn.clone();
            async move { leases(&mut conn, LEASES).await.is_empty() }
        },
    )
    .await;
    holder.signal("CONT");
    eventually(Duration::from_secs(60), "the loss to be counted", || {
        let (http, base) = (&http, &holder.base);
        async move {
            metric_sum(
                http,
                base,
                "captcha_gateway_upstream_thread_over_admissions_total",
            )
            .await
                == 5
                && metric_sum(
                    http,
                    base,
                    "captcha_gateway_upstream_thread_leases_lost_total",
                )
                .await
                    == 5
        }
    })
    .await;
    assert!(
        leases(&mut conn, LEASES).await.is_empty(),
        "a lost lease is never taken again silently"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_in_one_instance_gets_the_next_thread_before_refills_in_another() {
    let redis = RedisServer::start();
    let settings = RedisSettings::new(vec![redis.url()], false);
    let cut = CancellationToken::new();
    let budget = BudgetSettings {
        refill_reserve: 0,
        ..BudgetSettings::new(2)
    };
    let open = || RedisBudget::start(&settings.target, settings.lease, "acc", budget, cut.clone());
    let a = Arc::new(open().await.unwrap());
    let b = Arc::new(open().await.unwrap());
    let mut conn = redis_conn(&redis).await;
    let waiters = || {
        let mut conn = conn.clone();
        async move {
            redis::cmd("ZCARD")
                .arg("cg:{b:acc}:waiters")
                .query_async::<u64>(&mut conn)
                .await
                .unwrap()
        }
    };

    // Refills in A take every thread, and another refill queues there.
    let r1 = a.acquire(Priority::Refill).await;
    let r2 = a.acquire(Priority::Refill).await;
    let refill = tokio::spawn({
        let a = a.clone();
        async move { a.acquire(Priority::Refill).await }
    });
    eventually(Duration::from_secs(30), "the refill to wait", || async {
        waiters().await == 1
    })
    .await;
    // Then a caller arrives at B.
    let caller = tokio::spawn({
        let b = b.clone();
        async move { b.acquire(Priority::Interactive).await }
    });
    eventually(Duration::from_secs(30), "the caller to wait", || async {
        waiters().await == 2
    })
    .await;

    drop(r1);
    let caller_lease = caller.await.unwrap();
    assert_eq!(leases(&mut conn, "cg:{b:acc}:leases").await.len(), 2);
    assert!(!refill.is_finished(), "the refill still waits");
    drop(r2);
    let refill_lease = refill.await.unwrap();
    drop((caller_lease, refill_lease));
    eventually(Duration::from_secs(30), "every thread back", || {
        let mut conn = conn.clone();
        async move { leases(&mut conn, "cg:{b:acc}:leases").await.is_empty() }
    })
    .await;
    assert_eq!(a.stats().over_admissions + b.stats().over_admissions, 0);
    cut.cancel();
}

/// Two leases held in one instance with 600 ms leases (renewed every 200 ms).
async fn two_leases(
    redis: &RedisServer,
    cut: &CancellationToken,
) -> (RedisBudget, Vec<captcha_gateway::provider::Lease>) {
    let mut settings = RedisSettings::new(vec![redis.url()], false);
    settings.lease = Duration::from_millis(600);
    let budget = RedisBudget::start(
        &settings.target,
        settings.lease,
        "acc",
        BudgetSettings::new(2),
        cut.clone(),
    )
    .await
    .unwrap();
    let held = vec![
        budget.acquire(Priority::Interactive).await,
        budget.acquire(Priority::Interactive).await,
    ];
    (budget, held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_lost_to_a_redis_restarted_empty_are_counted_and_not_taken_again() {
    let mut redis = RedisServer::start();
    let cut = CancellationToken::new();
    let (budget, held) = two_leases(&redis, &cut).await;
    assert_eq!(budget.in_use(), 2);

    redis.restart();
    eventually(
        Duration::from_secs(30),
        "both leases counted lost",
        || async { budget.stats().leases_lost == 2 },
    )
    .await;
    assert_eq!(budget.stats().over_admissions, 2);
    let mut conn = redis_conn(&redis).await;
    assert!(
        leases(&mut conn, "cg:{b:acc}:leases").await.is_empty(),
        "not put back"
    );
    // The fleet's view starts over: both threads can be granted again.
    let again = budget.acquire(Priority::Interactive).await;
    assert_eq!(leases(&mut conn, "cg:{b:acc}:leases").await.len(), 1);
    drop((held, again));
    cut.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_threads_come_from_this_process_and_count_as_over_admissions() {
    let mut redis = RedisServer::start();
    let cut = CancellationToken::new();
    let (budget, held) = two_leases(&redis, &cut).await;
    redis.kill();
    drop(held);
    // Redis cannot be asked: after a third of a lease the grant comes from the local budget.
    let local = budget.acquire(Priority::Interactive).await;
    assert_eq!(budget.stats().over_admissions, 1);
    // Known down now: the next one does not wait out the grace again (counted all the same).
    let second = budget.acquire(Priority::Interactive).await;
    assert_eq!(budget.stats().over_admissions, 2);
    drop((local, second));
    cut.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_refills_holding_every_thread_a_caller_gets_the_next_free_one() {
    let redis = RedisServer::start();
    caller_before_refills(Some(RedisSettings::new(vec![redis.url()], false))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_on_the_embedded_store() {
    caller_before_refills(None).await;
}

async fn caller_before_refills(redis: Option<RedisSettings>) {
    use crate::support::{TestGateway, fast_settings};
    use captcha_gateway::model::{Kind, TargetPolicy};
    use captcha_gateway::pools::{PoolTable, specs};

    #[derive(serde::Deserialize)]
    struct File {
        pools: Vec<PoolTable>,
    }
    let mut settings = fast_settings();
    settings.redis = redis;
    settings.threads = Some(2);
    settings.refill_reserve = 0;
    // Refills take 2 s; the caller's own solve 100 ms. Checks every 200 ms cover both.
    settings.sim.latency.insert(
        Kind::RecaptchaV2,
        LatencyRange::fixed(Duration::from_secs(2)),
    );
    settings.sim.latency.insert(
        Kind::Turnstile,
        LatencyRange::fixed(Duration::from_millis(100)),
    );
    settings.poll.interval = Duration::from_millis(200);
    let file: File = toml::from_str(
        r#"[[pools]]
           kind = "recaptcha_v2"
           sitekey = "6Le-budget-pool"
           pageurl = "https://example.com/login"
           size = 20"#,
    )
    .unwrap();
    settings.pools = specs(&file.pools, TargetPolicy::default()).unwrap();
    let gw = TestGateway::with(settings).await;
    eventually(
        Duration::from_secs(60),
        "refills to hold both threads",
        || async { gw.stat("current_concurrent").await == 2 },
    )
    .await;

    let (status, v) = solve(&gw.http, &gw.url(""), task(0)).await;
    assert_eq!(status, 200, "{v}");
    // Eighteen refills were waiting before the caller; it went first all the same, so the pool
    // holds at most the two answers of the refills it waited for.
    let views: Vec<serde_json::Value> = gw
        .http
        .get(gw.url("/v1/pools"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pooled = views
        .iter()
        .find(|v| v["label"] == "recaptcha_v2:example.com")
        .map(|v| v["pooled"].as_u64().unwrap())
        .unwrap();
    assert!(pooled <= 2, "the caller waited for {pooled} refills");
    assert!(gw.stat("peak_concurrent").await <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_error_seen_by_one_instance_shrinks_the_cap_of_all() {
    let redis = RedisServer::start();
    let settings = RedisSettings::new(vec![redis.url()], false);
    let cut = CancellationToken::new();
    let open = || {
        RedisBudget::start(
            &settings.target,
            settings.lease,
            "acc",
            BudgetSettings::new(8),
            cut.clone(),
        )
    };
    let (a, b) = (open().await.unwrap(), open().await.unwrap());
    // A holds six threads and the sixth is refused: the plan is five.
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(a.acquire(Priority::Interactive).await);
    }
    a.refused(held.pop().unwrap());
    let conn = redis_conn(&redis).await;
    eventually(Duration::from_secs(30), "A's cut to reach Redis", || {
        let mut conn = conn.clone();
        async move {
            let after: Option<u32> = redis::cmd("HGET")
                .arg("cg:{b:acc}:cap")
                .arg("after_cut")
                .query_async(&mut conn)
                .await
                .unwrap();
            after == Some(5)
        }
    })
    .await;
    // B holds no lease and saw no error; its view comes from Redis within a renewal.
    eventually(
        Duration::from_secs(30),
        "B to see the smaller cap",
        || async { b.cap() < 8 },
    )
    .await;
    cut.cancel();
}

#[tokio::test]
async fn threadsinfo_lowers_the_cap_to_the_plan() {
    use crate::support::{TestGateway, fast_settings};
    let mut settings = fast_settings();
    // The gateway is told 10 threads; the provider's plan has 3.
    settings.threads = Some(10);
    settings.sim.threads = 3;
    let gw = TestGateway::with(settings).await;
    eventually(
        Duration::from_secs(30),
        "the cap to follow the plan",
        || async {
            metric_sum(
                &gw.http,
                &gw.url(""),
                "captcha_gateway_upstream_threads_cap",
            )
            .await
                == 3
        },
    )
    .await;
    let (_, body) = gw
        .get_text(&format!("/res.php?key={KEY}&action=threadsinfo"))
        .await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["upstream_threads"], 3, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_callers_of_one_instance_queued_at_once_never_exceed_the_threads_and_all_get_one() {
    let redis = RedisServer::start();
    let cut = CancellationToken::new();
    let settings = RedisSettings::new(vec![redis.url()], false);
    let budget = Arc::new(
        RedisBudget::start(
            &settings.target,
            settings.lease,
            "acc",
            BudgetSettings::new(8),
            cut.clone(),
        )
        .await
        .unwrap(),
    );
    let mut conn = redis_conn(&redis).await;
    let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // 200 callers at once: those behind the turn are granted by its holder's ask, in batches.
    let callers = (0..200).map(|_| {
        let (budget, peak) = (budget.clone(), peak.clone());
        let url = redis.url();
        async move {
            let lease = budget.acquire(Priority::Queued).await;
            let mut conn = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let held: usize = redis::cmd("ZCARD")
                .arg("cg:{b:acc}:leases")
                .query_async(&mut conn)
                .await
                .unwrap();
            peak.fetch_max(held, std::sync::atomic::Ordering::Relaxed);
            tokio::task::yield_now().await;
            drop(lease);
        }
    });
    join_all(callers).await;
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        (1..=8).contains(&peak),
        "at most the 8 threads held at once, saw {peak}"
    );
    eventually(Duration::from_secs(10), "every lease released", || async {
        leases(&mut redis_conn(&redis).await, "cg:{b:acc}:leases")
            .await
            .is_empty()
    })
    .await;
    assert_eq!(budget.stats().over_admissions, 0);
    let waiters: usize = redis::cmd("ZCARD")
        .arg("cg:{b:acc}:waiters")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(waiters, 0, "no place left behind");
    cut.cancel();
}
