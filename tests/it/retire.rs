//! Retiring idle targets at the `Store` seam, with explicit clocks. The
//! scenarios every backend must pass are run by the conformance suite
//! (`conformance::*::idle_empty_targets_retire_and_busy_ones_stay`,
//! `...::callers_racing_a_retirer_keep_every_promise`); here are what only Redis can show (the
//! keys retirement leaves, a lost reply, a second run, Redis restarted empty, another instance's
//! cache) and the short version of the soak, which pushes thousands of distinct pages through
//! and checks that live state and the bounded report stay flat.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use captcha_gateway::engine::MemoryStore;
use captcha_gateway::engine::store::Store;
use captcha_gateway::engine::store::prelude::*;
use captcha_gateway::engine::store::redis::{RedisSettings, RedisStore};
use captcha_gateway::engine::store::{Arrival, ClaimId, TaskOutcome, WaiterId};
use captcha_gateway::model::{Answer, SolveRequest, Target, TargetPolicy};
use captcha_gateway::pools::{GroupBy, OTHER, PoolView, bound};
use tokio_util::sync::CancellationToken;

use crate::support::redis::RedisServer;

pub(crate) const IDLE_MS: u64 = 60_000;
const MIN_REMAINING: u64 = 10_000;
static NEXT: AtomicU64 = AtomicU64::new(1);

fn page(site: &str, n: u64) -> Target {
    let req = SolveRequest::recaptcha_v2("6Le-retire", format!("https://{site}/page/{n}"));
    Target::of(&req, TargetPolicy::default())
}

fn fresh_target() -> Target {
    page("retire.example", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn answer(now: u64, left: u64) -> Answer {
    Answer {
        text: format!("tok-{}", NEXT.fetch_add(1, Ordering::Relaxed)),
        user_agent: None,
        solved_at: now,
        expires_at: now + left,
        upstream: None,
    }
}

fn waiter(store: &dyn Store) -> WaiterId {
    WaiterId(format!(
        "{}:{}",
        store.instance(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A Redis store retiring after `idle`, with leases far longer than any clock jump of these
/// tests (a lease is renewed on the real clock, which the tests do not advance).
async fn redis_store(urls: String, cluster: bool, idle: Duration) -> RedisStore {
    let mut settings = RedisSettings::new(urls.split(',').map(str::to_owned).collect(), cluster);
    // These checks run on an explicit clock (idle periods of minutes, no waiting).
    settings.explicit_clock = true;
    settings.target_idle = idle;
    settings.lease = Duration::from_secs(24 * 3600);
    RedisStore::connect(settings, CancellationToken::new())
        .await
        .expect("redis store")
}

async fn live(store: &dyn Store) -> HashSet<String> {
    store
        .figures()
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.id)
        .collect()
}

/// One caller served by its own task at `now`: arrive (start), finish, delivered.
async fn serve_one(store: &dyn Store, t: &Target, now: u64) -> String {
    let (rx, claim) = match store.arrive(t, &waiter(store), now, MIN_REMAINING).await {
        Ok(Arrival::Start(rx, claim)) => (rx, claim),
        other => panic!("expected a new task for {t:?}, got {other:?}"),
    };
    store
        .finish(
            t,
            &claim,
            TaskOutcome::Answer(answer(now, 100_000)),
            true,
            now,
        )
        .await
        .unwrap();
    rx.await.unwrap().unwrap().text
}

/// Idle and empty goes; pooled, in flight, waiting, recently used or configured stays.
pub(crate) async fn retirement_keeps_what_is_needed(store: &dyn Store) {
    let t0 = 10_000_000;
    let idle = fresh_target();
    serve_one(store, &idle, t0).await;
    let pooled = fresh_target();
    store
        .put(&pooled, answer(t0, 10 * IDLE_MS), t0)
        .await
        .unwrap();
    let running = fresh_target();
    let claim = store.reserve(&running, 1, t0).await.unwrap().remove(0);
    let waiting = fresh_target();
    let (mailbox, waiting_claim) = match store
        .arrive(&waiting, &waiter(store), t0, MIN_REMAINING)
        .await
    {
        Ok(Arrival::Start(rx, c)) => (rx, c),
        other => panic!("{other:?}"),
    };
    let configured = fresh_target();
    serve_one(store, &configured, t0).await;
    let recent = fresh_target();
    serve_one(store, &recent, t0 + IDLE_MS / 2).await;
    let keep: HashSet<String> = [configured.id.clone()].into();

    // Not idle long enough yet: nothing goes.
    assert_eq!(store.retire(t0 + IDLE_MS - 1, &keep).await.unwrap(), 0);
    let now = t0 + IDLE_MS;
    assert_eq!(
        store.retire(now, &keep).await.unwrap(),
        1,
        "only the idle, empty target retires"
    );
    let after = live(store).await;
    assert!(!after.contains(&idle.id), "the idle target is gone");
    for (name, t) in [
        ("pooled", &pooled),
        ("running", &running),
        ("waiting", &waiting),
        ("configured", &configured),
        ("recent", &recent),
    ] {
        assert!(after.contains(&t.id), "the {name} target stays");
    }
    // Running it again retires nothing more.
    assert_eq!(store.retire(now, &keep).await.unwrap(), 0);

    // The retired target starts afresh: its next caller starts exactly one task.
    assert!(serve_one(store, &idle, now + 1).await.starts_with("tok-"));
    let f = store.figures().await.unwrap();
    let f = f
        .iter()
        .find(|f| f.id == idle.id)
        .expect("registered again");
    assert_eq!((f.new_tasks, f.pool_hits), (1, 0), "counters started over");

    // Once the work is done and has sat idle, those go too (configured never).
    store
        .finish(&running, &claim, TaskOutcome::Stale, true, now)
        .await
        .unwrap();
    store
        .finish(
            &waiting,
            &waiting_claim,
            TaskOutcome::Answer(answer(now, 100_000)),
            true,
            now,
        )
        .await
        .unwrap();
    mailbox.await.unwrap().unwrap();
    // The pooled answer expires at t0 + 10 idle periods; the rest are idle after one more.
    let later = now + 2 * IDLE_MS;
    assert_eq!(store.retire(later, &keep).await.unwrap(), 4);
    assert_eq!(
        live(store).await,
        HashSet::from([pooled.id.clone(), configured.id.clone()])
    );
    let much_later = t0 + 12 * IDLE_MS;
    assert_eq!(store.retire(much_later, &keep).await.unwrap(), 1);
    assert_eq!(live(store).await, HashSet::from([configured.id.clone()]));
}

/// The conformance scenario on one Redis, then what only Redis can show: no key is left of a
/// retired target.
#[tokio::test]
async fn retired_targets_leave_no_keys_on_redis() {
    let server = RedisServer::start();
    let store = redis_store(server.url(), false, Duration::from_millis(IDLE_MS)).await;
    retirement_keeps_what_is_needed(&store).await;
    // Every key of the retired targets is gone: only the configured one's remain.
    let left = tagged_targets(&server.url()).await;
    assert_eq!(left.len(), 1, "keys of one target remain: {left:?}");
}

/// The distinct target tags (`{t:<id>}`) of every key on a single server, besides operation
/// records (`:op:`), which outlive their target on purpose (a retried operation must still find
/// its reply) and expire by themselves: each is checked to carry its expiry.
async fn tagged_targets(url: &str) -> HashSet<String> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("cg:{t:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let (ops, state): (Vec<&String>, Vec<&String>) = keys.iter().partition(|k| k.contains(":op:"));
    for key in ops {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        // -2: it expired between the listing and now.
        assert!(
            ttl > 0 || ttl == -2,
            "an operation record without an expiry: {key}"
        );
    }
    state
        .into_iter()
        .filter_map(|k| Some(k[k.find('{')?..=k.find('}')?].to_owned()))
        .collect()
}

/// Waves of callers of a few targets, all at once, while retirement runs in a loop with a zero
/// idle time (every empty target goes at once): every caller gets one answer of its own, every
/// answer a task produced is handed out or still pooled, and between waves the targets go.
pub(crate) async fn callers_racing_retirement_keep_the_promises(store: Arc<dyn Store>) {
    let now = 20_000_000;
    let targets: Vec<Target> = (0..8).map(|_| fresh_target()).collect();
    let (tasks, pool_hits) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let done = CancellationToken::new();
    let retirer = {
        let (store, done) = (store.clone(), done.clone());
        tokio::spawn(async move {
            while !done.is_cancelled() {
                store.retire(now, &HashSet::new()).await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let mut answers = HashSet::new();
    let mut callers_total = 0u64;
    let mut retired_between = 0;
    for _wave in 0..10 {
        let mut callers = Vec::new();
        for i in 0..40 {
            let (store, tasks, pool_hits) = (store.clone(), tasks.clone(), pool_hits.clone());
            let t = targets[i % targets.len()].clone();
            callers.push(tokio::spawn(async move {
                let arrival = store
                    .arrive(&t, &waiter(store.as_ref()), now, MIN_REMAINING)
                    .await
                    .unwrap();
                let rx = match arrival {
                    Arrival::Pooled(a) => {
                        pool_hits.fetch_add(1, Ordering::Relaxed);
                        return a.text;
                    }
                    Arrival::Wait(rx) => rx,
                    Arrival::Start(rx, claim) => {
                        tasks.fetch_add(1, Ordering::Relaxed);
                        finish_later(store.clone(), t.clone(), claim, now);
                        rx
                    }
                };
                rx.await.expect("a waiter is answered").unwrap().text
            }));
        }
        callers_total += callers.len() as u64;
        for c in callers {
            let text = tokio::time::timeout(Duration::from_secs(30), c)
                .await
                .expect("every caller is answered within 30 s (a retired waiter would hang)")
                .unwrap();
            assert!(answers.insert(text), "an answer was handed out twice");
        }
        retired_between += store.retire(now, &HashSet::new()).await.unwrap();
    }
    done.cancel();
    retirer.await.unwrap();
    let pooled: u64 = store
        .figures()
        .await
        .unwrap()
        .iter()
        .map(|f| f.pooled)
        .sum();
    let (tasks, pool_hits) = (
        tasks.load(Ordering::Relaxed),
        pool_hits.load(Ordering::Relaxed),
    );
    // Exact demand and nothing lost: each task's answer went to a waiting caller or the pool.
    assert_eq!(
        tasks,
        callers_total - pool_hits + pooled,
        "{tasks} tasks, {callers_total} callers, {pool_hits} served from the pool, {pooled} pooled"
    );
    // Every target without pooled answers went (between waves, or in the racing loop).
    let live: Vec<_> = store.figures().await.unwrap();
    assert!(
        live.iter().all(|f| f.pooled > 0),
        "empty targets remain: {live:?}"
    );
    assert!(
        retired_between > 0 || live.len() < targets.len(),
        "retirement never ran"
    );
}

fn finish_later(store: Arc<dyn Store>, t: Target, claim: ClaimId, now: u64) {
    tokio::spawn(async move {
        tokio::task::yield_now().await;
        store
            .finish(
                &t,
                &claim,
                TaskOutcome::Answer(answer(now, 100_000)),
                true,
                now,
            )
            .await
            .unwrap();
    });
}

/// The racing scenario again on a multi-threaded runtime, where the retirer and the callers run
/// truly at once against one Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_racing_retirement_on_redis_in_parallel() {
    let server = RedisServer::start();
    let store = Arc::new(redis_store(server.url(), false, Duration::ZERO).await);
    callers_racing_retirement_keep_the_promises(store).await;
}

/// Redis faults around retirement: a reply lost after the script ran (keys gone, id still
/// listed), the script run twice, Redis restarted empty, and another instance that registered
/// the target earlier and trusts its cache.
#[tokio::test]
async fn redis_retirement_survives_lost_replies_restarts_and_other_instances() {
    let mut server = RedisServer::start();
    let idle = Duration::from_millis(IDLE_MS);
    let a = redis_store(server.url(), false, idle).await;
    let b = redis_store(server.url(), false, idle).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut raw = client.get_multiplexed_async_connection().await.unwrap();
    let none = HashSet::new();
    let t0 = 30_000_000;

    // A lost reply: the script deleted the keys but the id stayed listed (put back on error).
    let lost = fresh_target();
    serve_one(&a, &lost, t0).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("cg:{{t:{}}}:*", lost.id))
        .query_async(&mut raw)
        .await
        .unwrap();
    redis::cmd("DEL")
        .arg(&keys)
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    assert!(
        live(&a).await.is_empty(),
        "figures skip a listed target without keys"
    );
    assert_eq!(
        a.retire(t0 + 1, &none).await.unwrap(),
        1,
        "the next pass unlists it"
    );
    assert_eq!(
        a.retire(t0 + 1, &none).await.unwrap(),
        0,
        "and a second pass finds nothing"
    );
    let listed: Vec<String> = redis::cmd("SMEMBERS")
        .arg("cg:targets")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(listed.is_empty(), "{listed:?}");

    // Another instance used the target within half an idle period and skips registering it:
    // its use keeps the target alive through a retirement pass on the first instance.
    let shared = fresh_target();
    serve_one(&b, &shared, t0).await;
    serve_one(&b, &shared, t0 + IDLE_MS / 4).await;
    assert_eq!(a.retire(t0 + IDLE_MS, &none).await.unwrap(), 0);
    assert!(
        live(&a).await.contains(&shared.id),
        "used a quarter period ago: kept"
    );
    // Idle a whole period: retired by the first instance; the other registers it again on use
    // (its cache is older than half a period), so the target is never live but unlisted.
    assert_eq!(
        a.retire(t0 + IDLE_MS / 4 + IDLE_MS, &none).await.unwrap(),
        1
    );
    serve_one(&b, &shared, t0 + 2 * IDLE_MS).await;
    assert!(
        live(&a).await.contains(&shared.id),
        "registered again by its next use"
    );

    // Redis restarted empty: the next calls register again, and retirement still works.
    server.restart();
    let back = fresh_target();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let now = t0 + 3 * IDLE_MS;
    loop {
        // The first call after the restart may fail on the dropped connection.
        match a.arrive(&back, &waiter(&a), now, MIN_REMAINING).await {
            Ok(Arrival::Start(rx, claim)) => {
                a.finish(
                    &back,
                    &claim,
                    TaskOutcome::Answer(answer(now, 100_000)),
                    true,
                    now,
                )
                .await
                .unwrap();
                rx.await.unwrap().unwrap();
                break;
            }
            Ok(other) => panic!("an empty Redis has nothing pooled or running: {other:?}"),
            Err(e) => assert!(
                tokio::time::Instant::now() < deadline,
                "Redis did not come back within 10 s: {e}"
            ),
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(live(&a).await, HashSet::from([back.id.clone()]));
    assert_eq!(a.retire(now + IDLE_MS, &none).await.unwrap(), 1);
    assert!(
        tagged_targets(&server.url()).await.is_empty(),
        "no target keys left"
    );
}

/// The soak in short (docs/BENCHMARKS.md has the long one): distinct pages of a few sites pass
/// through with the clock moving on, retirement runs as the sweeper would, and the live targets
/// and the bounded report stay flat instead of growing with every page.
async fn distinct_pages_leave_flat_state(store: &dyn Store, pages: u64) {
    const TOP: usize = 5;
    // One page every 100 ms of store time, so one idle period holds `IDLE_MS / 100` pages.
    let per_idle = IDLE_MS / 100;
    let sweep_every = 50;
    let mut now = 40_000_000;
    let mut most_live = 0;
    for n in 0..pages {
        let t = page(&format!("site{}.example", n % 7), n);
        serve_one(store, &t, now).await;
        now += 100;
        if n % sweep_every == sweep_every - 1 {
            store.retire(now, &HashSet::new()).await.unwrap();
            let figures = store.figures().await.unwrap();
            most_live = most_live.max(figures.len() as u64);
            assert!(
                figures.len() as u64 <= per_idle + sweep_every,
                "{} live targets after {} pages: retirement is not keeping up",
                figures.len(),
                n + 1
            );
            let views: Vec<PoolView> = figures
                .into_iter()
                .map(|f| PoolView {
                    arrivals: f.pool_hits + f.waits_served + f.new_tasks - f.refills,
                    figures: f,
                    ..PoolView::default()
                })
                .collect();
            let callers: u64 = views.iter().map(|v| v.arrivals).sum();
            let sites: HashSet<_> = views.iter().map(|v| v.figures.label.clone()).collect();
            let rows = bound(views, TOP, GroupBy::Label);
            assert!(rows.len() <= TOP + 1, "{} rows", rows.len());
            let labels: HashSet<_> = rows.iter().map(|r| r.figures.label.clone()).collect();
            assert_eq!(labels.len(), rows.len(), "one row per label");
            assert_eq!(
                rows.iter().map(|r| r.arrivals).sum::<u64>(),
                callers,
                "the bounded rows still add up to every live caller"
            );
            if sites.len() > TOP {
                assert_eq!(
                    rows.last().unwrap().figures.label,
                    OTHER,
                    "the rest are summed"
                );
            }
        }
    }
    assert!(
        pages < 2 * per_idle || most_live < pages / 2,
        "live targets grew with the pages: {most_live} of {pages}"
    );
}

#[tokio::test]
async fn distinct_pages_leave_flat_state_in_the_embedded_store() {
    let store = MemoryStore::with_target_idle(Duration::from_millis(IDLE_MS));
    distinct_pages_leave_flat_state(&store, 20_000).await;
}

#[tokio::test]
async fn distinct_pages_leave_flat_state_on_redis() {
    let server = RedisServer::start();
    let store = redis_store(server.url(), false, Duration::from_millis(IDLE_MS)).await;
    distinct_pages_leave_flat_state(&store, 3_000).await;
    let keys = tagged_targets(&server.url()).await.len() as u64;
    assert!(keys <= IDLE_MS / 100 + 50, "{keys} targets still hold keys");
}

/// `target_idle_s` and `metrics_top_targets` from the file: applied when sane, one line naming
/// the setting (exit code 2 from the binary) when not.
#[test]
fn bounded_state_settings_are_read_and_checked() {
    use captcha_gateway::cli::ServeArgs;
    use captcha_gateway::config;
    use captcha_gateway::provider::AccountProvider;
    let load = |toml: &str| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, toml).unwrap();
        let args = ServeArgs {
            config: Some(path),
            provider: Some(AccountProvider::Sim),
            ..ServeArgs::default()
        };
        config::load_serve(&args, &|_| None)
    };
    let defaults = load("").unwrap();
    assert_eq!(defaults.engine.target_idle, Duration::from_secs(900));
    assert_eq!(defaults.engine.metrics_top_targets, 50);
    let set = load("target_idle_s = 2.5\nmetrics_top_targets = 0\n").unwrap();
    assert_eq!(set.engine.target_idle, Duration::from_millis(2500));
    assert_eq!(set.engine.metrics_top_targets, 0);
    for (toml, setting) in [
        ("target_idle_s = 0.5\n", "target_idle_s"),
        ("target_idle_s = -1\n", "target_idle_s"),
        ("target_idle_s = 1e300\n", "target_idle_s"),
        ("metrics_top_targets = 20000\n", "metrics_top_targets"),
    ] {
        let e = load(toml).expect_err(toml);
        assert_eq!(e.setting, setting, "{toml}: {e}");
    }
    // The binary: exit code 2 and one line naming the setting.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, "target_idle_s = 0\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args([
            "serve",
            "--provider",
            "sim",
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&path)
        .env_clear()
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("target_idle_s"), "{stderr}");
}
