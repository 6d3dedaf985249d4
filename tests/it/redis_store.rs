//! The Redis store against real servers (one per test, and a real 3-master Cluster): the same
//! promises as the embedded store, checked at the `Store` seam with explicit clocks, and a
//! property test against a model.

use std::sync::atomic::{AtomicU64, Ordering};

use captcha_gateway::engine::SolveFailure;
use captcha_gateway::engine::store::redis::{RedisSettings, RedisStore};
use captcha_gateway::engine::store::{Arrival, ClaimId, Finished, Store, TaskOutcome, WaiterId};
use captcha_gateway::model::{Answer, SolveRequest, Target, TargetPolicy, TaskParams};
use proptest::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::support::redis::{RedisCluster, RedisServer};

const MIN_REMAINING: u64 = 10_000;
static NEXT: AtomicU64 = AtomicU64::new(1);

async fn store(urls: String, cluster: bool) -> RedisStore {
    store_with(urls, cluster, |_| {}).await
}

async fn store_with(
    urls: String,
    cluster: bool,
    tweak: impl FnOnce(&mut RedisSettings),
) -> RedisStore {
    let mut settings = RedisSettings::new(urls.split(',').map(str::to_owned).collect(), cluster);
    tweak(&mut settings);
    RedisStore::connect(settings, CancellationToken::new())
        .await
        .expect("redis store")
}

/// A fresh target per call, so cases never share keys.
fn target() -> Target {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let req = SolveRequest::recaptcha_v2(format!("6Le-prop-{n}"), "https://example.com/");
    Target::of(&req, TargetPolicy::default())
}

fn answer(text: String, now: u64, left: u64) -> Answer {
    Answer {
        text,
        user_agent: None,
        solved_at: now,
        expires_at: now + left,
        upstream: None,
    }
}

/// A caller's arrival that must be served from the pool; the answer's text.
async fn pooled_text(store: &RedisStore, t: &Target, now: u64) -> String {
    match store
        .arrive(t, &waiter(store), now, MIN_REMAINING)
        .await
        .unwrap()
    {
        Arrival::Pooled(a) => a.text,
        other => panic!("expected a pooled answer, got {other:?}"),
    }
}

fn waiter(store: &RedisStore) -> WaiterId {
    WaiterId(format!(
        "{}:{}",
        store.instance(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Once, fresh and exact demand at the seam, with time passed in.
async fn promises_hold(store: RedisStore) {
    let t = target();
    let now = 1_000_000;
    // Exact demand: three callers, nothing pooled or running -> three claims.
    let mut claims = Vec::new();
    let mut mailboxes = Vec::new();
    for _ in 0..3 {
        match store
            .arrive(&t, &waiter(&store), now, MIN_REMAINING)
            .await
            .unwrap()
        {
            Arrival::Start(rx, claim) => {
                claims.push(claim);
                mailboxes.push(rx);
            }
            other => panic!("expected a new task, got {other:?}"),
        }
    }
    // Three answers for three waiters: each gets exactly one, oldest first.
    for (i, claim) in claims.iter().enumerate() {
        let a = answer(format!("tok-{i}"), now, 100_000);
        assert_eq!(
            store
                .finish(&t, claim, TaskOutcome::Answer(a), true, now)
                .await
                .unwrap(),
            Finished::Done
        );
    }
    let mut got = Vec::new();
    for rx in mailboxes {
        got.push(rx.await.unwrap().unwrap().text);
    }
    assert_eq!(got, ["tok-0", "tok-1", "tok-2"]);

    // Fresh: pooled answers too close to expiry are never handed out, and count as waste.
    store
        .put(&t, answer("dying".into(), now, MIN_REMAINING - 1), now)
        .await
        .unwrap();
    store
        .put(&t, answer("fresh".into(), now, 60_000), now)
        .await
        .unwrap();
    assert_eq!(pooled_text(&store, &t, now).await, "fresh");
    let figures = store.figures().await.unwrap();
    let f = figures.iter().find(|f| f.id == t.id).unwrap();
    assert_eq!((f.pool_hits, f.new_tasks, f.expired_unused), (1, 3, 1));

    // A failure goes only to a waiter no remaining task covers.
    let (rx1, c1) = match store
        .arrive(&t, &waiter(&store), now, MIN_REMAINING)
        .await
        .unwrap()
    {
        Arrival::Start(rx, c) => (rx, c),
        other => panic!("{other:?}"),
    };
    let (rx2, c2) = match store
        .arrive(&t, &waiter(&store), now, MIN_REMAINING)
        .await
        .unwrap()
    {
        Arrival::Start(rx, c) => (rx, c),
        other => panic!("{other:?}"),
    };
    let failure = SolveFailure::new("ERROR_CAPTCHA_UNSOLVABLE", "x");
    store
        .finish(&t, &c1, TaskOutcome::Failed(failure), true, now)
        .await
        .unwrap();
    assert_eq!(
        rx1.await.unwrap().unwrap_err().code,
        "ERROR_CAPTCHA_UNSOLVABLE"
    );
    store
        .finish(
            &t,
            &c2,
            TaskOutcome::Answer(answer("last".into(), now, 60_000)),
            true,
            now,
        )
        .await
        .unwrap();
    assert_eq!(rx2.await.unwrap().unwrap().text, "last");

    // A caller that leaves hands its delivered answer on: here to the pool.
    let w = waiter(&store);
    let Arrival::Start(rx, c) = store.arrive(&t, &w, now, MIN_REMAINING).await.unwrap() else {
        panic!()
    };
    drop(rx);
    store.abandon(&t, &w, None, true, now).await.unwrap();
    store
        .finish(
            &t,
            &c,
            TaskOutcome::Answer(answer("orphan".into(), now, 60_000)),
            true,
            now,
        )
        .await
        .unwrap();
    assert_eq!(pooled_text(&store, &t, now).await, "orphan");
}

#[tokio::test]
async fn promises_hold_on_one_redis() {
    let server = RedisServer::start();
    promises_hold(store(server.url(), false).await).await;
}

#[tokio::test]
async fn promises_hold_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    promises_hold(store(cluster.urls(), true).await).await;
}

#[tokio::test]
async fn a_waiter_on_one_instance_gets_an_answer_finished_on_another() {
    let server = RedisServer::start();
    let (a, b) = (
        store(server.url(), false).await,
        store(server.url(), false).await,
    );
    let t = target();
    let now = 1_000_000;
    // A starts a task; its caller leaves; B's caller is covered by A's task.
    let wa = waiter(&a);
    let Arrival::Start(rx_a, claim) = a.arrive(&t, &wa, now, MIN_REMAINING).await.unwrap() else {
        panic!()
    };
    drop(rx_a);
    a.abandon(&t, &wa, None, true, now).await.unwrap();
    let Arrival::Wait(rx_b) = b.arrive(&t, &waiter(&b), now, MIN_REMAINING).await.unwrap() else {
        panic!("B's caller should wait for A's running task");
    };
    a.finish(
        &t,
        &claim,
        TaskOutcome::Answer(answer("cross".into(), now, 60_000)),
        true,
        now,
    )
    .await
    .unwrap();
    // Woken through B's inbox, not by polling.
    assert_eq!(rx_b.await.unwrap().unwrap().text, "cross");
}

#[derive(Debug, Clone)]
enum Op {
    /// An answer with this much life left arrives in the pool.
    Put(u64),
    /// A caller arrives and leaves at once (so no waiter lingers between ops).
    Take,
    /// The oldest running task ends with an answer with this much life left.
    Finish(u64),
    /// Time passes.
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u64..120_000).prop_map(Op::Put),
        Just(Op::Take),
        (1u64..120_000).prop_map(Op::Finish),
        (1u64..60_000).prop_map(Op::Advance),
    ]
}

/// What the store must do, in plain Rust: pool of expiries, running-task count, waste count.
#[derive(Default)]
struct Model {
    pool: Vec<u64>,
    running: usize,
    waste: u64,
}

async fn run_case(store: &RedisStore, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let t = target();
    let mut now = 10_000_000u64;
    let mut model = Model::default();
    let mut claims: Vec<ClaimId> = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Put(left) => {
                store
                    .put(&t, answer(format!("p{i}"), now, left), now)
                    .await
                    .unwrap();
                if left > 0 {
                    model.pool.push(now + left);
                }
            }
            Op::Finish(left) => {
                let Some(claim) = claims.first().cloned() else {
                    continue;
                };
                claims.remove(0);
                store
                    .finish(
                        &t,
                        &claim,
                        TaskOutcome::Answer(answer(format!("f{i}"), now, left)),
                        true,
                        now,
                    )
                    .await
                    .unwrap();
                model.running -= 1;
                model.pool.push(now + left);
            }
            Op::Advance(dt) => now += dt,
            Op::Take => {
                let before = model.pool.len();
                model.pool.retain(|&e| e >= now + MIN_REMAINING);
                model.waste += (before - model.pool.len()) as u64;
                let expected = model
                    .pool
                    .iter()
                    .copied()
                    .enumerate()
                    .min_by_key(|(_, e)| *e);
                let w = waiter(store);
                match store.arrive(&t, &w, now, MIN_REMAINING).await.unwrap() {
                    Arrival::Pooled(a) => {
                        let (idx, exp) = expected
                            .ok_or_else(|| TestCaseError::fail("pooled answer the model lacks"))?;
                        prop_assert_eq!(a.expires_at, exp, "earliest fresh expiry first");
                        model.pool.remove(idx);
                    }
                    Arrival::Wait(rx) => {
                        prop_assert!(
                            expected.is_none() && model.running > 0,
                            "waited with pool {:?} running {}",
                            model.pool,
                            model.running
                        );
                        drop(rx);
                        store.abandon(&t, &w, None, true, now).await.unwrap();
                    }
                    Arrival::Start(rx, claim) => {
                        prop_assert!(
                            expected.is_none() && model.running == 0,
                            "started with pool {:?} running {}",
                            model.pool,
                            model.running
                        );
                        model.running += 1;
                        claims.push(claim);
                        drop(rx);
                        store.abandon(&t, &w, None, true, now).await.unwrap();
                    }
                }
            }
        }
    }
    let figures = store.figures().await.unwrap();
    if let Some(f) = figures.iter().find(|f| f.id == t.id) {
        prop_assert_eq!(f.expired_unused, model.waste);
    }
    Ok(())
}

fn check_against_model(urls: String, cluster: bool) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Leases far longer than any sequence's clock: the model has no crashed instances.
    let lease = std::time::Duration::from_secs(30 * 24 * 3600);
    let store = rt.block_on(store_with(urls, cluster, |s| s.lease = lease));
    let config = ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in proptest::collection::vec(op(), 1..40))| {
        rt.block_on(run_case(&store, ops))?;
    });
}

#[test]
fn random_take_put_expire_abandon_sequences_match_the_model() {
    let server = RedisServer::start();
    check_against_model(server.url(), false);
}

#[test]
fn random_sequences_match_the_model_on_a_cluster() {
    let cluster = RedisCluster::start();
    check_against_model(cluster.urls(), true);
}

#[tokio::test]
async fn reusable_answers_are_solved_once_fleet_wide_under_a_fenced_lock() {
    use captcha_gateway::engine::store::SharedArrival;
    use captcha_gateway::model::ImageOptions;
    let server = RedisServer::start();
    // A lock shorter than the test, so a second leader can take over from a slow first one.
    let short_lock = |s: &mut RedisSettings| s.lock_ttl = std::time::Duration::from_millis(300);
    let (a, b) = (
        store_with(server.url(), false, short_lock).await,
        store_with(server.url(), false, short_lock).await,
    );
    let mut body = b"\x89PNG\r\n\x1a\n".to_vec();
    body.resize(300, NEXT.fetch_add(1, Ordering::Relaxed) as u8);
    let req = SolveRequest::new(TaskParams::Image {
        body: body.into(),
        options: ImageOptions::default(),
    });
    let t = Target::of(&req, TargetPolicy::default());
    let now = captcha_gateway::model::now_ms();

    let SharedArrival::Lead(rx_a, first) = a.shared_arrive(&t, now, MIN_REMAINING).await.unwrap()
    else {
        panic!("first caller leads")
    };
    let SharedArrival::Follow(rx_b) = b.shared_arrive(&t, now, MIN_REMAINING).await.unwrap() else {
        panic!("second caller follows")
    };
    // The first leader's lock runs out; a new caller leads with a newer fencing token.
    let lock_gone = async {
        let client = redis::Client::open(server.url()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        loop {
            let exists: bool =
                redis::AsyncCommands::exists(&mut c, format!("cg:{{t:{}}}:lead", t.id))
                    .await
                    .unwrap();
            if !exists {
                break;
            }
            tokio::task::yield_now().await;
        }
    };
    lock_gone.await;
    let SharedArrival::Lead(rx_c, second) = b.shared_arrive(&t, now, MIN_REMAINING).await.unwrap()
    else {
        panic!("a new leader after the lock expired")
    };
    assert!(second > first, "fencing tokens increase");

    // The stale leader finishes first: everyone waiting gets its answer, but it must not release
    // the new leader's lock.
    let text = answer("OCR1".into(), now, 3_600_000);
    a.shared_finish(&t, first, Ok(text), now).await.unwrap();
    for rx in [rx_a, rx_b, rx_c] {
        assert_eq!(rx.await.unwrap().unwrap().text, "OCR1");
    }
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let lock: Option<String> = redis::AsyncCommands::get(&mut c, format!("cg:{{t:{}}}:lead", t.id))
        .await
        .unwrap();
    assert_eq!(
        lock,
        Some(second.to_string()),
        "the stale leader left the new lock alone"
    );
    // Later callers share the cached answer without a task.
    match a.shared_arrive(&t, now, MIN_REMAINING).await.unwrap() {
        SharedArrival::Cached(ans) => assert_eq!(ans.text, "OCR1"),
        other => panic!("expected the cached answer, got {other:?}"),
    }
}
