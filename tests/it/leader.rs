//! A reusable target's leader that dies or loses its Redis state, through the engine and real
//! Redis: the engine's coverer takes a dead leader's target over and its
//! callers get the new leader's answer; a live leader whose lock Redis lost takes it back; and
//! the real binary: a gateway leading an image is killed and another takes over.
//!
//! The followers' count and the lock are read straight from Redis (key names from
//! `src/engine/store/redis/keys.rs`) only to know a caller has joined before the leader dies.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use captcha_gateway::engine::store::SharedArrival;
use captcha_gateway::engine::store::prelude::*;
use captcha_gateway::engine::store::redis::{RedisSettings, RedisStore};
use captcha_gateway::engine::{Engine, EngineSettings, Priority, Solution, SolveFailure, Solver};
use captcha_gateway::model::{SolveRequest, Source, Target, UpstreamRef, now_ms};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::support::eventually::eventually;
use crate::support::redis::RedisServer;

const LEASE: Duration = Duration::from_millis(1_500);

/// Answers every solve with `<name>-<n>`, or never (`park`), counting the solves it started and
/// noting the priority each ran at.
struct Provider {
    name: &'static str,
    park: bool,
    started: AtomicU64,
    priorities: std::sync::Mutex<Vec<Priority>>,
}

impl Provider {
    fn new(name: &'static str, park: bool) -> Arc<Self> {
        Arc::new(Provider {
            name,
            park,
            started: AtomicU64::new(0),
            priorities: std::sync::Mutex::default(),
        })
    }
}

#[async_trait]
impl Solver for Provider {
    async fn solve(
        &self,
        _req: &SolveRequest,
        _deadline: Instant,
        priority: Priority,
    ) -> Result<Solution, SolveFailure> {
        self.priorities.lock().unwrap().push(priority);
        let n = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        if self.park {
            std::future::pending::<()>().await;
        }
        Ok(Solution {
            text: format!("{}-{n}", self.name),
            user_agent: None,
            upstream: UpstreamRef {
                account: self.name.into(),
                task_id: n.to_string(),
            },
            solved_at: now_ms(),
        })
    }

    async fn report(&self, _task: &UpstreamRef, _good: bool) -> Result<(), SolveFailure> {
        Ok(())
    }
}

async fn store(server: &RedisServer) -> (Arc<RedisStore>, CancellationToken) {
    let mut settings = RedisSettings::new(vec![server.url()], false);
    settings.lease = LEASE;
    let life = CancellationToken::new();
    let store = RedisStore::connect(settings, life.clone()).await.unwrap();
    (Arc::new(store), life)
}

fn image() -> SolveRequest {
    let mut body = b"\x89PNG\r\n\x1a\n".to_vec();
    body.extend_from_slice(format!("leader-{}", now_ms()).as_bytes());
    body.extend_from_slice(&rand_bytes());
    crate::support::image_request(&body)
}

fn rand_bytes() -> [u8; 8] {
    use rand::Rng;
    rand::rng().random()
}

async fn redis_conn(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Live followers of a reusable target, as Redis lists them.
async fn followers(conn: &mut redis::aio::MultiplexedConnection, t: &Target) -> u64 {
    redis::cmd("ZCOUNT")
        .arg(format!("cg:{{t:{}}}:followed", t.id))
        .arg(now_ms())
        .arg("+inf")
        .query_async(conn)
        .await
        .unwrap()
}

/// Instance A's engine leads and its gateway dies (renewals stop, its provider never answers);
/// instance B's caller, following, is taken over by B's coverer and answered by B's own task.
#[tokio::test]
async fn an_engine_takes_over_a_reusable_target_whose_leader_died() {
    let server = RedisServer::start();
    let (store_a, life_a) = store(&server).await;
    let (store_b, _life_b) = store(&server).await;
    let (dead, alive) = (Provider::new("a", true), Provider::new("b", false));
    let engine_a = Engine::new(
        store_a,
        dead.clone(),
        EngineSettings::default(),
        TaskTracker::new(),
    );
    let engine_b = Engine::new(
        store_b,
        alive.clone(),
        EngineSettings::default(),
        TaskTracker::new(),
    );
    let req = image();
    let t = engine_a.target(&req);
    let deadline = Instant::now() + Duration::from_secs(120);
    let (e, r) = (engine_a.clone(), req.clone());
    let _on_a = tokio::spawn(async move { e.solve(r, deadline).await });
    eventually(Duration::from_secs(30), "A to lead", || async {
        dead.started.load(Ordering::SeqCst) == 1
    })
    .await;
    let (e, r) = (engine_b.clone(), req.clone());
    let on_b = tokio::spawn(async move { e.solve(r, deadline).await });
    let conn = redis_conn(&server).await;
    eventually(Duration::from_secs(30), "B's caller to follow A", || {
        let (mut conn, t) = (conn.clone(), &t);
        async move { followers(&mut conn, t).await == 2 }
    })
    .await;
    // While A lives, B's coverer finds nothing to take over.
    engine_b.cover_waiting().await;
    assert_eq!(
        alive.started.load(Ordering::SeqCst),
        0,
        "B solved while A led"
    );

    life_a.cancel();
    // B's coverer runs every third of a lease in `serve`; here, until it takes over.
    eventually(Duration::from_secs(30), "B to take over", || {
        let (e, alive) = (&engine_b, &alive);
        async move {
            e.cover_waiting().await;
            alive.started.load(Ordering::SeqCst) > 0
        }
    })
    .await;
    let handout = tokio::time::timeout(Duration::from_secs(30), on_b)
        .await
        .expect("B's caller answered")
        .unwrap()
        .unwrap();
    assert_eq!(handout.answer.text, "b-1");
    assert_eq!(handout.source, Source::Shared);
    // Cached for later callers; B's provider solved it once.
    let later = engine_b.solve(req, deadline).await.unwrap();
    assert_eq!(
        (later.answer.text.as_str(), later.source),
        ("b-1", Source::Shared)
    );
    assert_eq!(alive.started.load(Ordering::SeqCst), 1);
}

/// Instances A (whose provider never answers) and B (whose provider answers at once) on one
/// Redis; `life_a` ends A's renewals, as its death would.
struct TwoInstances {
    server: RedisServer,
    life_a: CancellationToken,
    _life_b: CancellationToken,
    dead: Arc<Provider>,
    alive: Arc<Provider>,
    a: Engine,
    b: Engine,
}

async fn two_instances() -> TwoInstances {
    let server = RedisServer::start();
    let (store_a, life_a) = store(&server).await;
    let (store_b, _life_b) = store(&server).await;
    let (dead, alive) = (Provider::new("a", true), Provider::new("b", false));
    let engine = |store: Arc<RedisStore>, provider: &Arc<Provider>| {
        Engine::new(
            store,
            provider.clone(),
            EngineSettings::default(),
            TaskTracker::new(),
        )
    };
    let (a, b) = (engine(store_a, &dead), engine(store_b, &alive));
    TwoInstances {
        server,
        life_a,
        _life_b,
        dead,
        alive,
        a,
        b,
    }
}

impl TwoInstances {
    /// A dies; B covers what it left (`cover_waiting`, as its coverer does every third of a
    /// lease) with one task, which answers B's queued caller `on_b` at queue priority.
    async fn b_covers_at_queue_priority(
        &self,
        on_b: tokio::task::JoinHandle<
            Result<captcha_gateway::engine::Handout, captcha_gateway::engine::SolveError>,
        >,
    ) {
        self.life_a.cancel();
        eventually(
            Duration::from_secs(30),
            "B to cover what A left",
            || async {
                self.b.cover_waiting().await;
                self.alive.started.load(Ordering::SeqCst) > 0
            },
        )
        .await;
        let handout = tokio::time::timeout(Duration::from_secs(30), on_b)
            .await
            .expect("B's caller answered")
            .unwrap()
            .unwrap();
        assert_eq!(handout.answer.text, "b-1");
        assert_eq!(*self.alive.priorities.lock().unwrap(), [Priority::Queued]);
    }
}

/// A task B starts for a dead A's target ranks as B's own callers there: a queue worker's caller
/// waiting on a single-use task A started (its own caller left) is covered at queue priority,
/// not ahead of interactive callers.
#[tokio::test]
async fn demand_a_dead_instance_left_is_covered_at_its_waiting_callers_priority() {
    let two = two_instances().await;
    let req = SolveRequest::recaptcha_v2("6Le-priority", format!("https://p.example/{}", now_ms()));
    // A's caller leaves at once; the task it started runs on, for whoever comes next.
    let left = two
        .a
        .solve(req.clone(), Instant::now() + Duration::from_millis(300))
        .await;
    assert!(left.is_err(), "A's caller left before an answer: {left:?}");
    assert_eq!(two.dead.started.load(Ordering::SeqCst), 1);
    let far = Instant::now() + Duration::from_secs(120);
    let (e, r) = (two.b.clone(), req.clone());
    let on_b = tokio::spawn(async move { e.solve_at(r, far, Priority::Queued).await });
    two.b_covers_at_queue_priority(on_b).await;
}

/// The same for a reusable target whose leader died: B's queued follower takes it over at queue
/// priority.
#[tokio::test]
async fn a_reusable_target_taken_over_for_a_queued_follower_runs_at_queue_priority() {
    let two = two_instances().await;
    let req = image();
    let t = two.a.target(&req);
    let far = Instant::now() + Duration::from_secs(120);
    let (e, r) = (two.a.clone(), req.clone());
    let _on_a = tokio::spawn(async move { e.solve(r, far).await });
    eventually(Duration::from_secs(30), "A to lead", || async {
        two.dead.started.load(Ordering::SeqCst) == 1
    })
    .await;
    let (e, r) = (two.b.clone(), req.clone());
    let on_b = tokio::spawn(async move { e.solve_at(r, far, Priority::Queued).await });
    let conn = redis_conn(&two.server).await;
    eventually(Duration::from_secs(30), "B's caller to follow A", || {
        let (mut conn, t) = (conn.clone(), &t);
        async move { followers(&mut conn, t).await == 2 }
    })
    .await;
    two.b_covers_at_queue_priority(on_b).await;
}

/// Redis restarts empty while A's task solves: A's next renewal takes its lock back (no newer
/// leader was appointed) and B's renews B's follower, so A's outcome still reaches B's caller,
/// and a failure reaches it too (only a lock holder's failure is delivered).
#[tokio::test]
async fn a_live_leader_takes_its_lock_back_after_redis_restarts_empty() {
    let mut server = RedisServer::start();
    let (a, _life_a) = store(&server).await;
    let (b, _life_b) = store(&server).await;
    let req = image();
    let t = Target::of(&req, EngineSettings::default().target_policy);
    let min = 10_000;
    let (token, _on_a) = match a.shared_arrive(&t, now_ms(), min).await.unwrap() {
        SharedArrival::Lead(rx, token) => (token, rx),
        other => panic!("expected to lead, got {other:?}"),
    };
    let on_b = match b.shared_arrive(&t, now_ms(), min).await.unwrap() {
        SharedArrival::Follow(rx) => rx,
        other => panic!("expected to follow, got {other:?}"),
    };
    server.restart();
    let conn = redis_conn(&server).await;
    eventually(
        Duration::from_secs(30),
        "the lock and both followers to be renewed back",
        || {
            let (mut conn, t) = (conn.clone(), &t);
            async move {
                let lock: Option<u64> = redis::cmd("GET")
                    .arg(format!("cg:{{t:{}}}:lead", t.id))
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                lock == Some(token) && followers(&mut conn, t).await == 2
            }
        },
    )
    .await;
    assert_eq!(b.shared_takeover(&t, now_ms(), min).await.unwrap(), None);
    let failure = SolveFailure::new("ERROR_CAPTCHA_UNSOLVABLE", "restored");
    a.shared_finish(&t, token, Err(failure), now_ms())
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(30), on_b)
        .await
        .expect("B's follower told")
        .unwrap();
    assert_eq!(got.unwrap_err().code, "ERROR_CAPTCHA_UNSOLVABLE");
    // Finished: the lock is free, and a renewal racing the finish cannot restore it.
    match b.shared_arrive(&t, now_ms(), min).await.unwrap() {
        SharedArrival::Lead(_, newer) => assert!(newer > token),
        other => panic!("expected to lead, got {other:?}"),
    }
}

/// The real binary: three gateways on one Redis, a slow simulator. The gateway leading an image
/// is killed (`SIGKILL`) mid-solve while callers on the other two follow it; one of them takes
/// over within about a lease and everyone is answered, with one upstream task besides the lost
/// one.
#[tokio::test]
async fn a_killed_gateway_leading_an_image_is_taken_over_by_another() {
    use crate::support::KEY;
    use crate::support::fleet::{SimServer, client};
    use crate::support::gateway::GatewayProcess;
    use captcha_gateway::sim::LatencyRange;
    use serde_json::{Value, json};

    async fn solve(http: &reqwest::Client, base: &str, body: Value) -> (u16, Value) {
        // A caller of the killed gateway loses its connection: status 0.
        let Ok(res) = http
            .post(format!("{base}/v1/solve"))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
        else {
            return (0, Value::Null);
        };
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    let redis = RedisServer::start();
    // Slow solves: the leader must still be solving when it dies.
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_secs(4)), 100).await;
    let lease = "redis_lease_s = 2";
    let mut a = GatewayProcess::start(&sim, &redis.url(), lease, 0.5).await;
    let b = GatewayProcess::start(&sim, &redis.url(), lease, 0.5).await;
    let c = GatewayProcess::start(&sim, &redis.url(), lease, 0.5).await;
    let http = client();
    // A PNG signature and 312 bytes: a file a provider accepts.
    let image = "iVBORw0KGgpsZWFkZXIta2lsbGVkbGVhZGVyLWtpbGxlZGxlYWRlci1raWxsZWRsZWFkZXIta2lsbGVkbGVhZGVyLWtpbGxlZGxlYWRlci1raWxsZWRsZWFkZXIta2lsbGVkbGVhZGVyLWtpbGxlZGxlYWRlci1raWxsZWRsZWFkZXIta2lsbGVkbGVhZGVyLWtpbGxlZGxlYWRlci1raWxsZWRsZWFkZXIta2lsbGVkbGVhZGVyLWtpbGxlZGxlYWRlci1raWxsZWRsZWFkZXIta2lsbGVkbGVhZGVyLWtpbGxlZGxlYWRlci1raWxsZWRsZWFkZXIta2lsbGVkbGVhZGVyLWtpbGxlZGxlYWRlci1raWxsZWRsZWFkZXIta2lsbGVkbGVhZGVyLWtpbGxlZGxlYWRlci1raWxsZWQ=";
    let body = json!({"kind": "image", "body": image, "timeout_s": 60});
    let on = |base: &str| {
        let (http, base, body) = (http.clone(), base.to_owned(), body.clone());
        tokio::spawn(async move { solve(&http, &base, body).await })
    };
    let _dies_with_a = on(&a.base);
    eventually(Duration::from_secs(30), "A to submit the image", || async {
        sim.sim.stats().submits == 1
    })
    .await;
    let followers_on_b_and_c = [on(&b.base), on(&c.base)];
    let conn = redis_conn(&redis).await;
    eventually(
        Duration::from_secs(30),
        "B's and C's callers to follow A",
        || {
            let mut conn = conn.clone();
            async move {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg("cg:*:followed")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let Some(key) = keys.first() else {
                    return false;
                };
                let n: u64 = redis::cmd("ZCOUNT")
                    .arg(key)
                    .arg(now_ms())
                    .arg("+inf")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                n == 3
            }
        },
    )
    .await;

    a.kill().await;
    let mut texts = std::collections::HashSet::new();
    for caller in followers_on_b_and_c {
        let (status, v) = caller.await.unwrap();
        assert_eq!(status, 200, "{v}");
        texts.insert(v["token"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(texts.len(), 1, "one shared answer: {texts:?}");
    assert_eq!(sim.sim.stats().submits, 2, "one task taken over, no more");
    // A caller arriving now gets the new leader's cached answer.
    let (status, v) = solve(&http, &c.base, body.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert!(
        texts.contains(v["token"].as_str().unwrap_or_default()),
        "{v}"
    );
    assert_eq!(sim.sim.stats().submits, 2);
}
