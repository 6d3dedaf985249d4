//! What Redis can undo, at the `Store` seam on real servers: a hand-out whose write a replica
//! never confirmed (durable hand-outs withhold it and give it back), a retry that comes after
//! its operation's record expired (refused, never run afresh), and a restarted master that
//! retries must recognise on a Cluster as on a single server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use captcha_gateway::engine::Delivery;
use captcha_gateway::engine::store::Store;
use captcha_gateway::engine::store::prelude::*;
use captcha_gateway::engine::store::redis::{Durability, RedisSettings, RedisStore};
use captcha_gateway::engine::store::{Arrival, ClaimId, Finished, TaskOutcome, WaiterId};
use captcha_gateway::model::{Answer, SolveRequest, Target, TargetPolicy, now_ms};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::support::eventually::{eventually, eventually_showing};
use crate::support::fault_proxy::{FaultProxy, Mode};
use crate::support::redis::{RedisCluster, RedisServer};

const MIN_REMAINING: u64 = 10_000;
const SOON: Duration = Duration::from_secs(20);
static NEXT: AtomicU64 = AtomicU64::new(1);

fn target(name: &str) -> Target {
    let req = SolveRequest::recaptcha_v2(
        "6Le-durable",
        format!(
            "https://durable.example/{name}/{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ),
    );
    Target::of(&req, TargetPolicy::default())
}

fn answer() -> Answer {
    let now = now_ms();
    Answer {
        text: format!("tok-{}", NEXT.fetch_add(1, Ordering::Relaxed)),
        user_agent: None,
        solved_at: now,
        expires_at: now + 120_000,
        upstream: None,
    }
}

fn waiter(store: &dyn Store) -> WaiterId {
    WaiterId::new(store.instance(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A task in flight on `t` whose claim `finisher` holds, its own caller gone, and a caller of
/// `waiting` waiting for it: the claim, and that caller's wait.
async fn one_task_another_instance_waits_for(
    finisher: &RedisStore,
    waiting: &RedisStore,
    t: &Target,
    poolable: bool,
) -> (ClaimId, oneshot::Receiver<Delivery>) {
    let first = waiter(finisher);
    let Arrival::Start(_rx, claim) = finisher
        .arrive(t, &first, now_ms(), MIN_REMAINING)
        .await
        .unwrap()
    else {
        panic!("the first caller starts a task");
    };
    // Its caller leaves, so the finishing instance has nobody of its own to give the answer to.
    finisher
        .abandon(t, &first, None, poolable, now_ms())
        .await
        .unwrap();
    let next = waiter(waiting);
    let Ok(Arrival::Wait(rx)) = waiting.arrive(t, &next, now_ms(), MIN_REMAINING).await else {
        panic!("the other instance's caller waits for the task in flight");
    };
    (claim, rx)
}

/// A master and its replica, in sync.
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let synced = || {
        let info = crate::support::redis::cli(replica.port, &["info", "replication"]);
        info.contains("master_link_status:up")
    };
    let start = std::time::Instant::now();
    while !synced() {
        assert!(start.elapsed() < SOON, "the replica never synced");
        std::thread::sleep(Duration::from_millis(20));
    }
    (master, replica)
}

async fn store_with(url: String, tune: impl FnOnce(&mut RedisSettings)) -> Arc<RedisStore> {
    let mut settings = RedisSettings::new(vec![url], false);
    settings.lease = Duration::from_millis(1_500);
    tune(&mut settings);
    Arc::new(
        RedisStore::connect(settings, CancellationToken::new())
            .await
            .expect("redis store"),
    )
}

fn waiting_on_one_replica(s: &mut RedisSettings) {
    s.durability = Durability {
        replicas: 1,
        fsync: false,
        wait: Duration::from_millis(200),
    };
}

/// A pooled answer whose take the replica has not confirmed (it is frozen) is not handed out:
/// the caller is told the store is away (it solves alone), the answer is back in the pool, and
/// hand-outs count as unconfirmed until a probe confirms again. Without the setting the same
/// take is handed out at once: the write a failover to that replica would undo.
#[tokio::test]
async fn a_pool_take_a_replica_has_not_confirmed_is_withheld_and_given_back() {
    let (master, replica) = master_and_replica();
    let durable = store_with(master.url(), waiting_on_one_replica).await;
    let plain = store_with(master.url(), |_| {}).await;
    let (t, plain_t) = (target("pool"), target("plain"));
    durable.put(&t, answer(), now_ms()).await.unwrap();
    plain.put(&plain_t, answer(), now_ms()).await.unwrap();

    replica.pause();
    let arrival = durable
        .arrive(&t, &waiter(&*durable), now_ms(), MIN_REMAINING)
        .await;
    assert!(
        arrival.is_err(),
        "an unconfirmed pool take is not a hand-out"
    );
    let counts = durable.counts(&t, now_ms(), MIN_REMAINING).await.unwrap();
    assert_eq!(counts.pooled, 1, "the answer is back in the pool");
    let report = durable.server_report().unwrap();
    assert_eq!(report.handouts_withheld, 1);
    assert!(!report.handouts_confirmed);
    assert!(durable.degraded(), "callers are solved alone meanwhile");
    let unconfirmed = plain
        .arrive(&plain_t, &waiter(&*plain), now_ms(), MIN_REMAINING)
        .await
        .unwrap();
    assert!(
        matches!(unconfirmed, Arrival::Pooled(_)),
        "without the setting the take is handed out before any replica has it"
    );

    replica.resume();
    eventually(SOON, "hand-outs confirmed again", || async {
        !durable.degraded()
    })
    .await;
    let arrival = durable
        .arrive(&t, &waiter(&*durable), now_ms(), MIN_REMAINING)
        .await
        .unwrap();
    assert!(
        matches!(arrival, Arrival::Pooled(_)),
        "now it is handed out"
    );
    assert!(durable.server_report().unwrap().handouts_confirmed);
}

/// Mail whose take the replica has not confirmed is not handed over: it goes back to the
/// waiter's mailbox, and the caller is let go to be solved alone (its wait ends at once rather
/// than at its deadline). The mail's deadline then passes the answer on: once the replica is
/// back, the next caller gets it from the pool, exactly once.
#[tokio::test]
async fn mail_a_replica_has_not_confirmed_stays_in_redis_and_its_caller_is_let_go() {
    let (master, replica) = master_and_replica();
    let store = store_with(master.url(), |s| {
        waiting_on_one_replica(s);
        s.mail_ttl = Duration::from_secs(1);
    })
    .await;
    let t = target("mail");
    let w = waiter(&*store);
    let Arrival::Start(rx, claim) = store.arrive(&t, &w, now_ms(), MIN_REMAINING).await.unwrap()
    else {
        panic!("the first caller starts a task");
    };

    replica.pause();
    let token = answer();
    store
        .finish(
            &t,
            &claim,
            TaskOutcome::Answer(token.clone()),
            true,
            now_ms(),
        )
        .await
        .unwrap();
    assert!(
        rx.await.is_err(),
        "the caller's wait is closed: it is solved alone, not handed the unconfirmed take"
    );
    let report = store.server_report().unwrap();
    assert_eq!((report.handouts_withheld, report.callers_released), (1, 1));
    let mut conn = redis::Client::open(master.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mbox: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(format!("cg:{{t:{}}}:mbox", t.id))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(mbox.len(), 1, "the mail is back in the mailbox: {mbox:?}");
    assert!(mbox[0].1.contains(&token.text));

    replica.resume();
    eventually(SOON, "hand-outs confirmed again", || async {
        !store.degraded()
    })
    .await;
    // Past the mail's deadline a counting read passes it on to the pool.
    eventually(SOON, "the mail passed on to the pool", || async {
        store
            .counts(&t, now_ms(), MIN_REMAINING)
            .await
            .is_ok_and(|c| c.pooled == 1)
    })
    .await;
    let next = store
        .arrive(&t, &waiter(&*store), now_ms(), MIN_REMAINING)
        .await
        .unwrap();
    let Arrival::Pooled(got) = next else {
        panic!("the next caller gets the answer from the pool");
    };
    assert_eq!(got.text, token.text);
}

/// Hand-outs waiting for a replica that lags (it is frozen), on three gateway instances; their
/// master is demoted mid-wait (its blocked `WAIT`s fail, so the takes are withheld, and it
/// refuses their put-backs); then the failover: the lagging replica, which never saw the takes,
/// is promoted with every answer still pooled, and the old master syncs from it and takes its
/// place again at the same address. The put-backs, sent again until they run, land where the
/// originals still are. Each answer is in the pool once (before, a put-back was a second member:
/// the same token twice), and no caller holds one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_put_back_across_a_failover_that_kept_their_originals_are_pooled_once() {
    use crate::support::redis::cli;
    let (master, replica) = master_and_replica();
    let mut instances = Vec::new();
    for _ in 0..3 {
        let store = store_with(master.url(), |s| {
            s.durability = Durability {
                replicas: 1,
                fsync: false,
                wait: Duration::from_secs(30),
            };
        })
        .await;
        instances.push(store);
    }
    let t = target("failover-put-back");
    for _ in 0..4 {
        instances[0].put(&t, answer(), now_ms()).await.unwrap();
    }
    let pool = format!("cg:{{t:{}}}:pool", t.id);
    let pooled_on = |port: u16| {
        cli(port, &["zcard", &pool])
            .trim()
            .parse::<u64>()
            .unwrap_or(0)
    };
    eventually(SOON, "the replica holds the pool", || async {
        pooled_on(replica.port) == 4
    })
    .await;

    // Warm, as a running gateway is: the arrive script is in the server's cache (a first run
    // would wait out a `WAIT` before loading it).
    let warm = target("warm");
    for store in &instances {
        store
            .arrive(&warm, &waiter(&**store), now_ms(), MIN_REMAINING)
            .await
            .unwrap();
    }
    // The replica falls behind: frozen, and cut off, so nothing written from now on reaches it
    // (not even through its socket's buffer).
    replica.pause();
    assert!(cli(master.port, &["client", "kill", "type", "replica"]).contains('1'));
    let callers: Vec<_> = instances
        .iter()
        .map(|store| {
            let (store, t) = (store.clone(), t.clone());
            tokio::spawn(async move {
                store
                    .arrive(&t, &waiter(&*store), now_ms(), MIN_REMAINING)
                    .await
                    .map(|a| matches!(a, Arrival::Pooled(_)))
            })
        })
        .collect();
    eventually_showing(SOON, "three takes waiting for the replica", || async {
        let on_master = pooled_on(master.port);
        (on_master == 1, on_master)
    })
    .await;
    // Demoted mid-wait (a replica of a master not there yet): the `WAIT`s fail, the takes are
    // withheld, their put-backs refused.
    let nowhere = crate::support::redis::free_port().to_string();
    assert!(cli(master.port, &["replicaof", "127.0.0.1", &nowhere]).contains("OK"));
    eventually_showing(SOON, "the put-backs refused and sent again", || async {
        let seen: Vec<(u64, u64)> = instances
            .iter()
            .map(|s| {
                let r = s.server_report().unwrap_or_default();
                (r.handouts_withheld, r.operations_refused_retried)
            })
            .collect();
        (
            seen.iter()
                .all(|(withheld, refused)| *withheld == 1 && *refused >= 2),
            seen,
        )
    })
    .await;

    // The failover: the replica, never told of the takes, becomes the master; the old master
    // follows it (taking its data), then is promoted again.
    // Promoted as it wakes: the command is queued before it resumes, so it runs before the
    // replica could reconnect to its old master (and learn of the takes).
    let promote = {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", replica.port)).unwrap();
        conn.write_all(b"*3\r\n$9\r\nREPLICAOF\r\n$2\r\nNO\r\n$3\r\nONE\r\n")
            .unwrap();
        replica.resume();
        conn.set_read_timeout(Some(SOON)).unwrap();
        let mut reply = [0u8; 5];
        conn.read_exact(&mut reply).unwrap();
        reply
    };
    assert_eq!(&promote, b"+OK\r\n");
    let promoted = replica.port.to_string();
    assert!(cli(master.port, &["replicaof", "127.0.0.1", &promoted]).contains("OK"));
    eventually(
        SOON,
        "the old master synced from the promoted replica",
        || async {
            cli(master.port, &["info", "replication"]).contains("master_link_status:up")
                && pooled_on(master.port) == 4
        },
    )
    .await;
    assert!(cli(master.port, &["replicaof", "no", "one"]).contains("OK"));

    for caller in callers {
        let handed = caller.await.unwrap();
        assert!(
            !matches!(handed, Ok(true)),
            "a withheld take is no caller's: {handed:?}"
        );
    }
    // Each caller returned after its put-back ran, against the originals.
    let members = cli(master.port, &["zrange", &pool, "0", "-1"]);
    let members: Vec<&str> = members.lines().filter(|l| !l.is_empty()).collect();
    let mut texts: Vec<String> = members
        .iter()
        .map(|m| serde_json::from_str::<serde_json::Value>(m).unwrap()["text"].to_string())
        .collect();
    texts.sort();
    texts.dedup();
    assert_eq!(
        (members.len(), texts.len()),
        (4, 4),
        "each answer pooled once: {members:#?}"
    );
}

/// A retry of `finish` that comes after the operation's record expired (this process was frozen
/// between two tries, longer than the record lives) used to run afresh and place the same
/// token a second time. The script now sees the operation is older than its record can be and
/// refuses: the outcome stays unknown, and the token is in one place only.
#[tokio::test(flavor = "current_thread")]
async fn a_retry_after_a_pause_longer_than_its_record_does_not_run_afresh() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let op_ttl = Duration::from_secs(4);
    let store = store_with(format!("redis://127.0.0.1:{}/", proxy.port()), |s| {
        s.op_ttl = op_ttl;
        s.target.response_timeout = Duration::from_millis(500);
    })
    .await;
    let t = target("stall");
    let w = waiter(&*store);
    let Arrival::Start(_rx, claim) = store.arrive(&t, &w, now_ms(), MIN_REMAINING).await.unwrap()
    else {
        panic!("the first caller starts a task");
    };

    proxy.set(Mode::DropReplies);
    let finishing = {
        let (store, t) = (store.clone(), t.clone());
        tokio::spawn(async move {
            store
                .finish(&t, &claim, TaskOutcome::Answer(answer()), true, now_ms())
                .await
        })
    };
    eventually(SOON, "the finish ran and its reply was lost", || async {
        proxy.swallowed() > 0
    })
    .await;
    proxy.set(Mode::Pass);
    // The whole process frozen (this test's only thread blocked) past the record's life.
    std::thread::sleep(op_ttl + Duration::from_secs(1));

    let outcome = finishing.await.unwrap();
    assert!(outcome.is_err(), "the outcome stays unknown: {outcome:?}");
    let counts = store.counts(&t, now_ms(), MIN_REMAINING).await.unwrap();
    assert_eq!(counts.pooled, 0, "the token was not placed a second time");
    let report = store.server_report().unwrap();
    assert!(report.operations_expired >= 1, "{report:?}");
}

/// A finish whose reply was lost, on a master that then came back without it (here from a
/// snapshot taken before it; a lagging replica promoted is the same): its claim was left in
/// flight there, so the caller waiting on that task waited for the claim's lease to lapse,
/// under load past its deadline. The store now finishes the claim again without its outcome:
/// the waiter is covered by a new task at once, and the lost answer is handed to nobody.
#[tokio::test]
async fn a_finish_its_master_lost_covers_the_waiting_caller_again_at_once() {
    let mut redis = RedisServer::start();
    let proxy = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let store = store_with(format!("redis://127.0.0.1:{}/", proxy.port()), |s| {
        // Far longer than the test: only the store's own step can free the claim.
        s.lease = Duration::from_secs(120);
        s.target.response_timeout = Duration::from_millis(500);
    })
    .await;
    let t = target("lost-finish");
    let first = waiter(&*store);
    let Arrival::Start(_rx, claim) = store
        .arrive(&t, &first, now_ms(), MIN_REMAINING)
        .await
        .unwrap()
    else {
        panic!("the first caller starts a task");
    };
    // The first caller leaves; the next waits for the task already under way.
    store
        .abandon(&t, &first, None, false, now_ms())
        .await
        .unwrap();
    let next = waiter(&*store);
    let waiting = store.arrive(&t, &next, now_ms(), MIN_REMAINING).await;
    assert!(
        matches!(waiting, Ok(Arrival::Wait(_))),
        "the next caller waits for the task in flight"
    );
    let saved = crate::support::redis::cli(redis.port, &["save"]);
    assert!(saved.contains("OK"), "snapshot taken: {saved}");

    proxy.set(Mode::DropReplies);
    let finishing = {
        let (store, t) = (store.clone(), t.clone());
        tokio::spawn(async move {
            store
                .finish(&t, &claim, TaskOutcome::Answer(answer()), false, now_ms())
                .await
        })
    };
    eventually(SOON, "the finish ran and its reply was lost", || async {
        proxy.swallowed() > 0
    })
    .await;
    redis.restart();
    proxy.set(Mode::Pass);

    let outcome = finishing.await.unwrap();
    assert!(
        matches!(outcome, Ok(Finished::Restart(_))),
        "the waiting caller is covered by a new task: {outcome:?}"
    );
    let counts = store.counts(&t, now_ms(), MIN_REMAINING).await.unwrap();
    assert_eq!(
        (counts.pooled, counts.in_flight, counts.waiting),
        (0, 1, 1),
        "the lost answer is nowhere; one task (the new one) covers the one caller"
    );
}

/// A past fault: a waiter whose mail Redis passed on while its instance could not take it (cut
/// off past the mail's deadline here; a failover that lost the reply of its take leaves the same
/// state) is served in Redis and never restored, so its caller waited out its deadline (two
/// callers of a loaded fleet did across a lagging replica's failover). Renewal now reports such a
/// waiter ended, and its instance lets the caller go to be solved alone; the answer it missed is
/// pooled once, for the next caller.
#[tokio::test]
async fn a_waiter_whose_mail_passed_on_while_its_instance_was_cut_off_is_let_go() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let cut_off = store_with(format!("redis://127.0.0.1:{}/", proxy.port()), |s| {
        // Its waiter's lease outlives the cut by far: the mail reaches it, not the pool.
        s.lease = Duration::from_secs(6);
        s.target.response_timeout = Duration::from_millis(500);
    })
    .await;
    let other = store_with(redis.url(), |s| s.mail_ttl = Duration::from_secs(1)).await;
    let t = target("passed-on");
    let (claim, rx) = one_task_another_instance_waits_for(&other, &cut_off, &t, true).await;

    proxy.set(Mode::Blackhole);
    let token = answer();
    other
        .finish(
            &t,
            &claim,
            TaskOutcome::Answer(token.clone()),
            true,
            now_ms(),
        )
        .await
        .unwrap();
    eventually(
        SOON,
        "the mail passed on to the pool at its deadline",
        || async {
            other
                .counts(&t, now_ms(), MIN_REMAINING)
                .await
                .is_ok_and(|c| c.pooled == 1)
        },
    )
    .await;
    proxy.set(Mode::Pass);

    let waited = tokio::time::timeout(SOON, rx)
        .await
        .expect("the caller is let go, not left waiting for mail that went elsewhere");
    assert!(waited.is_err(), "its wait is closed: it is solved alone");
    assert_eq!(cut_off.server_report().unwrap().callers_released, 1);
    let Arrival::Pooled(got) = other
        .arrive(&t, &waiter(&*other), now_ms(), MIN_REMAINING)
        .await
        .unwrap()
    else {
        panic!("the next caller gets the answer from the pool");
    };
    assert_eq!(got.text, token.text);
}

/// A finish Redis refuses for a state a failover passes through (here `READONLY`: its server was
/// turned into a replica, as a master demoted mid-failover is) certainly did not run, so it is
/// sent again until the server takes writes, instead of its answer being dropped while a caller
/// of another instance waits for it. The answer keeps the life it had when the finish was
/// issued: the retries' delay is not added to it.
#[tokio::test]
async fn a_finish_refused_during_a_failover_runs_once_the_master_is_back() {
    let redis = RedisServer::start();
    let finisher = store_with(redis.url(), |_| {}).await;
    let other = store_with(redis.url(), |_| {}).await;
    let t = target("refused-finish");
    let (claim, rx) = one_task_another_instance_waits_for(&finisher, &other, &t, false).await;

    // A replica of a master that is not there: it keeps its data and refuses every write.
    let unused = crate::support::redis::free_port().to_string();
    let demoted = crate::support::redis::cli(redis.port, &["replicaof", "127.0.0.1", &unused]);
    assert!(demoted.contains("OK"), "{demoted}");
    let sent = answer();
    let finishing = {
        let (finisher, t, sent) = (finisher.clone(), t.clone(), sent.clone());
        tokio::spawn(async move {
            finisher
                .finish(&t, &claim, TaskOutcome::Answer(sent), false, now_ms())
                .await
        })
    };
    eventually(SOON, "the finish was refused and sent again", || async {
        finisher
            .server_report()
            .is_some_and(|r| r.operations_refused_retried >= 4)
    })
    .await;
    let promoted = crate::support::redis::cli(redis.port, &["replicaof", "no", "one"]);
    assert!(promoted.contains("OK"), "{promoted}");

    let outcome = finishing.await.unwrap();
    assert!(matches!(outcome, Ok(Finished::Done)), "{outcome:?}");
    let got = tokio::time::timeout(SOON, rx)
        .await
        .expect("the other instance's caller is answered")
        .expect("a delivery")
        .expect("an answer");
    assert_eq!(
        got.text, sent.text,
        "the refused finish's answer reached the caller"
    );
    // Restamped on the receiving instance's clock (the same host's); four retries took 750 ms
    // or more, which a life counted from the last try would have added.
    assert!(
        got.expires_at <= sent.expires_at + 100,
        "the answer's life was not lengthened by the retries: {} against {}",
        got.expires_at,
        sent.expires_at
    );
}

/// A Cluster master restarted (empty, inside the node timeout, so no failover) changes the
/// epoch retries compare: its `run_id` is read from every master, not only from a single
/// server as before.
#[tokio::test]
async fn a_restarted_cluster_master_is_recognised() {
    let mut cluster = RedisCluster::start();
    let mut settings =
        RedisSettings::new(cluster.urls().split(',').map(str::to_owned).collect(), true);
    settings.lease = Duration::from_millis(1_500);
    let store = RedisStore::connect(settings, CancellationToken::new())
        .await
        .unwrap();
    let before = store.server_report().unwrap().server.unwrap().run_ids;
    assert_eq!(before.len(), 3, "one run_id per master: {before:?}");
    cluster.nodes[0].restart();
    eventually(SOON, "the restarted master's new run_id", || async {
        let now = store
            .server_report()
            .and_then(|r| r.server)
            .map(|s| s.run_ids)
            .unwrap_or_default();
        now.len() == 3 && now != before
    })
    .await;
}
