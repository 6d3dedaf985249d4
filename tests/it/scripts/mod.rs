//! The single-use target scripts run by hand on a real redis-server, the way their faults are
//! found: each test is one fault's regression test at the script level (a lost reply run
//! again, a lapse, a stale hand-off, skewed clocks, a refill race). Key names and argument orders
//! follow the contract headers in `lua/` and the key list in docs/REDIS.md.

use captcha_gateway::engine::store::redis::call::{
    AnnounceCall, FinishOutcome, Prelude, TargetCall, TaskCall,
};
use redis::Value;
use redis::aio::MultiplexedConnection;

use crate::support::redis::RedisServer;

mod held;

const LEASE: u64 = 15_000;
const MIN_REMAINING: u64 = 10_000;

/// One target on one server, its scripts called with the prelude's arguments.
struct Target {
    conn: MultiplexedConnection,
    id: &'static str,
    /// `Some(ms)`: the scripts' explicit clock; `None`: Redis `TIME`.
    clock: Option<u64>,
    /// When the operations were issued (`None`: not known, never refused as too old).
    issued: Option<u64>,
    poolable: Option<bool>,
}

impl Target {
    async fn on(redis: &RedisServer, id: &'static str) -> Target {
        let client = redis::Client::open(redis.url()).unwrap();
        Target {
            conn: client.get_multiplexed_async_connection().await.unwrap(),
            id,
            clock: Some(10_000_000),
            issued: None,
            poolable: Some(true),
        }
    }

    fn key(&self, name: &str) -> String {
        format!("cg:{{t:{}}}:{name}", self.id)
    }

    async fn run(&mut self, op: &str, call: TargetCall) -> Vec<Value> {
        let file = call.file();
        self.try_run(op, call)
            .await
            .unwrap_or_else(|e| panic!("{file}: {e}"))
    }

    /// `call` as the store makes it (keys, prelude and arguments from the same type), its reply
    /// recorded under `op`.
    async fn try_run(&mut self, op: &str, call: TargetCall) -> redis::RedisResult<Vec<Value>> {
        call.invocation(self.id, op, &self.prelude())
            .invoke_async::<Vec<Value>>(&mut self.conn)
            .await
    }

    /// The prelude's arguments every call of this target carries.
    fn prelude(&self) -> Prelude {
        Prelude {
            op_ttl_ms: 600_000,
            min_remaining_ms: MIN_REMAINING,
            mail_ttl_ms: 30_000,
            lease_ms: LEASE,
            poolable: self.poolable,
            clock: self.clock,
            issued: self.issued,
        }
    }

    async fn zset(&mut self, name: &str) -> Vec<(String, f64)> {
        redis::cmd("ZRANGE")
            .arg(self.key(name))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut self.conn)
            .await
            .unwrap()
    }

    async fn members(&mut self, name: &str) -> Vec<String> {
        self.zset(name).await.into_iter().map(|(m, _)| m).collect()
    }

    async fn mbox(&mut self) -> Vec<(String, String)> {
        redis::cmd("HGETALL")
            .arg(self.key("mbox"))
            .query_async(&mut self.conn)
            .await
            .unwrap()
    }

    async fn stat(&mut self, field: &str) -> u64 {
        redis::cmd("HGET")
            .arg(self.key("stats"))
            .arg(field)
            .query_async::<Option<u64>>(&mut self.conn)
            .await
            .unwrap()
            .unwrap_or(0)
    }

    /// Arrives `waiter`; returns the reply's code.
    async fn arrive(&mut self, op: &str, waiter: &str, claim: &str) -> i64 {
        int(&self.run(op, arrive(waiter, claim)).await[0])
    }

    async fn finish_answer(&mut self, op: &str, claim: &str, left: u64, json: &str) -> Vec<Value> {
        let outcome = FinishOutcome::Answer {
            remaining_ms: left as i64,
            json: json.into(),
        };
        self.run(op, finish(claim, outcome)).await
    }
}

fn arrive(waiter: &str, claim: &str) -> TargetCall {
    TargetCall::Arrive {
        waiter: waiter.into(),
        claim: claim.into(),
        release: None,
        hold: None,
    }
}

/// A finish whose restart claim (if waiters are left uncovered) is `restart`.
fn finish(claim: &str, outcome: FinishOutcome) -> TargetCall {
    TargetCall::Finish {
        claim: claim.into(),
        outcome,
        restart: "restart".into(),
    }
}

fn take(waiter: &str, arrived: Option<u64>) -> TargetCall {
    TargetCall::Take {
        waiter: waiter.into(),
        arrived,
    }
}

fn put(remaining_ms: i64, json: &str) -> TargetCall {
    TargetCall::Put {
        remaining_ms,
        answer_json: json.into(),
    }
}

fn abandon(waiter: &str, passed_on: Option<(i64, &str)>) -> TargetCall {
    TargetCall::Abandon {
        waiter: waiter.into(),
        passed_on: passed_on.map(|(left, json)| (left, json.to_owned())),
    }
}

fn renew(waiters: Vec<(String, u64)>, claims: &[&str]) -> TargetCall {
    TargetCall::Renew {
        label: "label".into(),
        waiters,
        claims: ids(claims),
    }
}

fn ids(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn int(v: &Value) -> i64 {
    redis::from_redis_value_ref(v).unwrap()
}

fn strings(values: &[Value]) -> Vec<String> {
    values
        .iter()
        .filter_map(|v| redis::from_redis_value_ref::<String>(v).ok())
        .collect()
}

/// A past fault: `finish` sent twice (a Cluster client re-sending after a dropped connection)
/// put one token in two waiters' mailboxes. Under one op id the second run changes nothing and
/// answers what the first did.
#[tokio::test]
async fn a_finish_run_twice_hands_its_answer_out_once() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "twice").await;
    assert_eq!(t.arrive("a1", "i:1", "c1").await, 3);
    assert_eq!(t.arrive("a2", "i:2", "c2").await, 3);
    let first = t
        .finish_answer("f1", "c1", 60_000, "{\"text\":\"X\"}")
        .await;
    let again = t
        .finish_answer("f1", "c1", 60_000, "{\"text\":\"X\"}")
        .await;
    assert_eq!(strings(&first[1..]), ["i:1"]);
    assert_eq!(again, first, "the second run answers what the first did");
    let mbox = t.mbox().await;
    assert_eq!(mbox.len(), 1, "one mailbox holds the token: {mbox:?}");
    assert_eq!(
        t.members("waiters").await,
        ["i:2"],
        "the second caller still waits"
    );
}

/// A claim finished again under a new operation, as its instance does when the first finish's
/// outcome was lost with a master change (`refinish` in single.rs): where the first landed, the
/// second delivers nothing, starts nothing and counts no waste.
#[tokio::test]
async fn a_claim_finished_again_after_its_first_finish_landed_changes_nothing() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "refinish").await;
    assert_eq!(t.arrive("a1", "i:1", "c1").await, 3);
    assert_eq!(t.arrive("a2", "i:2", "c2").await, 3);
    t.finish_answer("f1", "c1", 60_000, "{\"text\":\"X\"}")
        .await;
    let again = t.run("f2", finish("c1", FinishOutcome::Stale)).await;
    assert_eq!(int(&again[0]), 0, "no task restarted");
    assert_eq!(
        t.stat("expired_unused").await,
        0,
        "no answer counted as waste"
    );
    assert_eq!(t.mbox().await.len(), 1, "the first caller's answer stays");
    assert_eq!(t.members("waiters").await, ["i:2"]);
    assert_eq!(t.members("inflight").await, ["c2"]);
}

/// A pool hit keeps no reply record (one key written and expired per hit otherwise). Run again
/// under the same op id, as after a lost reply, it takes the next answer: the first is waste,
/// never a second caller's.
#[tokio::test]
async fn a_pool_hit_run_again_takes_another_answer_and_keeps_no_record() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "hit-again").await;
    t.run("p1", put(60_000, "{\"text\":\"X\"}")).await;
    t.run("p2", put(60_000, "{\"text\":\"Y\"}")).await;
    let first = t.run("a1", arrive("i:1", "c1")).await;
    let again = t.run("a1", arrive("i:1", "c1")).await;
    assert_eq!(
        (int(&first[0]), int(&again[0])),
        (1, 1),
        "both hit the pool"
    );
    let (a, b) = (strings(&first[2..3]), strings(&again[2..3]));
    assert_ne!(a, b, "the second run took the other answer");
    assert!(t.zset("pool").await.is_empty(), "each answer taken once");
    let recorded: bool = redis::cmd("EXISTS")
        .arg(t.key("op:a1"))
        .query_async(&mut t.conn)
        .await
        .unwrap();
    assert!(!recorded, "a pool hit writes no record");
}

/// A past fault: `take` deleted the mail and, its reply lost, the answer was gone. Run again
/// under the same op id it returns the same mail; another op finds none (no second handout).
#[tokio::test]
async fn a_take_whose_reply_was_lost_returns_the_same_mail_when_run_again() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "take").await;
    t.arrive("a1", "i:1", "c1").await;
    t.finish_answer("f1", "c1", 60_000, "{\"text\":\"X\"}")
        .await;
    let arrived = Some(10_000_000);
    let taken = t.run("t1", take("i:1", arrived)).await;
    let again = t.run("t1", take("i:1", arrived)).await;
    assert_eq!(int(&taken[0]), 1);
    assert_eq!(again, taken);
    assert!(strings(&taken[1..2])[0].ends_with("{\"text\":\"X\"}"));
    let other = t.run("t2", take("i:1", arrived)).await;
    assert_eq!(int(&other[0]), 0, "taken once");
}

/// A past fault: `put` and `abandon` with an answer, sent twice, placed it twice.
#[tokio::test]
async fn put_and_abandon_run_twice_place_their_answer_once() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "put").await;
    for _ in 0..2 {
        t.run("p1", put(60000, "{\"text\":\"P\"}")).await;
    }
    assert_eq!(t.members("pool").await.len(), 1);
    t.arrive("a1", "i:1", "c1").await; // takes P
    assert_eq!(t.arrive("a2", "i:2", "c2").await, 3);
    assert_eq!(t.arrive("a3", "i:3", "c3").await, 3);
    // i:2 leaves with an answer it had taken; it goes to i:3, once.
    for _ in 0..2 {
        t.run("x1", abandon("i:2", Some((60000, "{\"text\":\"Q\"}"))))
            .await;
    }
    assert_eq!(t.mbox().await.len(), 1);
    assert!(t.members("pool").await.is_empty());
}

/// A past fault: a lapse (Redis paused or cut off longer than a lease, or restarted empty) removed
/// every live waiter and claim, and renewal extended nothing. Renewal now restores them at their
/// original places, never a waiter that was served or left, never a claim whose task finished;
/// pooled answers then go to the restored waiters.
#[tokio::test]
async fn renewal_restores_what_a_lapse_removed_and_nothing_that_ended() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "lapse").await;
    let at = 10_000_000u64;
    t.arrive("a1", "i:1", "c1").await;
    t.arrive("a2", "i:2", "c2").await;
    t.arrive("a3", "i:3", "c3").await;
    // i:3 left; c3 finished (its answer reached i:1, who took it).
    t.run("x3", abandon("i:3", None)).await;
    t.finish_answer("f3", "c3", 60_000, "{\"text\":\"A\"}")
        .await;
    t.run("t1", take("i:1", Some(at))).await;
    // Two leases later nothing was renewed: the next script reaps the lapsed entries.
    t.clock = Some(at + 2 * LEASE);
    t.run("n", TargetCall::Counts).await;
    assert!(t.members("waiters").await.is_empty());
    assert!(t.members("inflight").await.is_empty());
    // A refill answered meanwhile sits in the pool.
    t.run("p1", put(60000, "{\"text\":\"R\"}")).await;
    // The instances still hold i:1..3 and c1..c3 as live (a renewal snapshot racing their end).
    let waiters = ["i:1", "i:2", "i:3"].map(|w| (w.to_owned(), at)).to_vec();
    let reply = t.run("r1", renew(waiters, &["c1", "c2", "c3"])).await;
    assert_eq!(
        (int(&reply[0]), int(&reply[1])),
        (1, 2),
        "i:2, c1 and c2 come back"
    );
    assert_eq!(int(&reply[2]), 2);
    assert_eq!(
        strings(&reply[3..5]),
        ["i:1", "i:3"],
        "i:1 was served and i:3 left: reported ended, for their instance to let go"
    );
    assert_eq!(
        strings(&reply[5..]),
        ["i:2"],
        "the pooled answer goes to the restored waiter"
    );
    let inflight = t.members("inflight").await;
    assert_eq!(inflight, ["c1", "c2"], "c3 finished: never resurrected");
    assert!(t.members("pool").await.is_empty());
}

/// A past fault: hand-offs checked only that an answer had not expired. Every hand-off now applies
/// `min_remaining`: a finished answer, a leaving caller's pass-on, mail passed on after its
/// deadline, and mail taken late (the waiter goes back to its place instead).
#[tokio::test]
async fn no_hand_off_gives_out_an_answer_with_less_than_min_remaining() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "fresh").await;
    let at = 10_000_000u64;
    t.arrive("a1", "i:1", "c1").await;
    t.arrive("a2", "i:2", "c2").await;
    // Finished with 5 s left: stale, and the waiter keeps waiting (a restart covers it).
    let reply = t
        .finish_answer("f1", "c1", 5_000, "{\"text\":\"short\"}")
        .await;
    assert_eq!(int(&reply[0]), 1, "a restart for the uncovered waiter");
    assert!(t.mbox().await.is_empty());
    // A leaving caller's answer with 5 s left is waste, not the next caller's.
    t.run("x1", abandon("i:9", Some((5000, "{\"text\":\"passed\"}"))))
        .await;
    assert!(t.mbox().await.is_empty());
    // Mail taken 25 s after it was delivered with 30 s left: the waiter goes back, no handout.
    t.finish_answer("f2", "c2", 30_000, "{\"text\":\"late\"}")
        .await;
    assert_eq!(t.mbox().await.len(), 1);
    t.clock = Some(at + 25_000);
    let taken = t.run("t1", take("i:1", Some(at))).await;
    assert_eq!(int(&taken[0]), 2, "requeued");
    assert_eq!(
        t.zset("waiters").await[0],
        ("i:1".into(), at as f64),
        "at its own place"
    );
    // Mail nobody took by its deadline is passed on only if it still has enough life.
    t.arrive("a3", "i:3", "c3").await;
    t.finish_answer("f3", "c3", 40_000, "{\"text\":\"unclaimed\"}")
        .await;
    t.clock = Some(at + 25_000 + 31_000);
    t.run("n", TargetCall::Counts).await;
    assert!(t.mbox().await.is_empty(), "9 s left: waste");
    assert!(t.members("pool").await.is_empty());
    assert_eq!(t.stat("expired_unused").await, 4);
}

/// A past fault: a sweep (which does not know a target's kind) pooled mail passed on from a
/// GeeTest target. The kind recorded by the callers that know it decides.
#[tokio::test]
async fn a_sweep_never_pools_an_answer_of_a_kind_that_cannot_be_pooled() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "geetest").await;
    t.poolable = Some(false);
    t.arrive("a1", "i:1", "c1").await;
    t.finish_answer("f1", "c1", 100_000, "{\"text\":\"G\"}")
        .await;
    t.poolable = None;
    t.clock = Some(10_000_000 + 31_000);
    t.run("n", TargetCall::Counts).await;
    assert!(t.members("pool").await.is_empty());
    assert_eq!(t.stat("expired_unused").await, 1);
}

/// A past fault: the shortfall was read by `counts` and reserved by separate calls, so two
/// instances topping up at once both started it. `reserve` now counts and claims in one step.
#[tokio::test]
async fn two_refills_of_one_pool_at_once_claim_its_shortfall_once() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "refill").await;
    t.run("p1", put(60000, "{\"text\":\"P\"}")).await;
    let one = t
        .run(
            "r1",
            TargetCall::Reserve {
                size: 4,
                candidates: ids(&["x1", "x2", "x3", "x4"]),
            },
        )
        .await;
    let two = t
        .run(
            "r2",
            TargetCall::Reserve {
                size: 4,
                candidates: ids(&["y1", "y2", "y3", "y4"]),
            },
        )
        .await;
    assert_eq!((int(&one[0]), int(&two[0])), (3, 0));
    assert_eq!(t.members("inflight").await.len(), 3);
}

/// A past fault: scripts took `now` from the calling instance. On Redis time, leases and arrivals
/// are stamped by the server whatever the instances' clocks say.
#[tokio::test]
async fn leases_and_arrivals_follow_redis_time_not_the_callers_clock() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "time").await;
    t.clock = None;
    let mut conn = t.conn.clone();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let before = secs * 1000 + micros / 1000;
    t.arrive("a1", "i:1", "c1").await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let after = secs * 1000 + micros / 1000;
    let arrived = t.zset("waiters").await[0].1 as u64;
    let lease = t.zset("wlease").await[0].1 as u64;
    assert!(
        (before..=after).contains(&arrived),
        "{before} {arrived} {after}"
    );
    assert_eq!(lease - arrived, LEASE);
    // An answer is stamped from its remaining life, not from the solving instance's clock.
    t.finish_answer("f1", "c1", 60_000, "{\"text\":\"X\"}")
        .await;
    let mail = t.mbox().await.remove(0).1;
    let exp: u64 = mail.split('|').nth(1).unwrap().parse().unwrap();
    assert!(exp >= after + 60_000, "{exp} from {after}");
}

/// A past fault: an inbox's `RPUSH` and `PEXPIRE` were two commands; one lost left an inbox that
/// never expires. `announce.lua` does both at once.
#[tokio::test]
async fn an_announced_inbox_always_expires() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let inbox = "cg:{i:abc}:inbox";
    let call = AnnounceCall {
        target_id: "t".into(),
        waiter: "w".into(),
        inbox_ttl_ms: 60_000,
    };
    call.invocation("abc")
        .invoke_async::<i64>(&mut conn)
        .await
        .unwrap();
    let announced: Vec<String> = redis::cmd("LRANGE")
        .arg(inbox)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(announced, ["t w"]);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(inbox)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
}

/// A past fault: a task record finished while Redis had restarted empty was dropped silently; it is
/// written again whole from its instance's copy.
#[tokio::test]
async fn a_task_record_lost_by_redis_is_written_again_at_its_finish() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = "cg:{k:42}:task";
    let finish = |record: &str| {
        let call = TaskCall::Finish {
            state_json: "{\"ok\":1}".into(),
            finished_at: 5,
            retention_ms: 60_000,
            record_json: record.into(),
        };
        call.invocation("42")
    };
    let r: i64 = finish("").invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, 0, "nothing to write it from");
    let r: i64 = finish("{\"id\":\"42\"}")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, 2);
    let (record, state): (String, String) = redis::cmd("HMGET")
        .arg(key)
        .arg("record")
        .arg("state")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        (record.as_str(), state.as_str()),
        ("{\"id\":\"42\"}", "{\"ok\":1}")
    );
    let r: i64 = finish("{\"id\":\"42\"}")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, 0, "written once");
}

/// The provider task a claim noted, as `note.lua` stores it: keep-until, account, task id.
fn noted_task(note: &str) -> (String, String) {
    let mut parts = note.splitn(3, '\n');
    let _keep = parts.next();
    let account = parts.next().unwrap_or_default().to_owned();
    (account, parts.next().unwrap_or_default().to_owned())
}

impl Target {
    async fn note(&mut self, claim: &str, task: &str) -> i64 {
        let call = TargetCall::Note {
            claim: claim.into(),
            keep_ms: 600_000,
            account: "acc".into(),
            task_id: task.into(),
        };
        let reply = self.run("n", call).await;
        int(&reply[0])
    }

    async fn hash(&mut self, name: &str) -> Vec<(String, String)> {
        redis::cmd("HGETALL")
            .arg(self.key(name))
            .query_async(&mut self.conn)
            .await
            .unwrap()
    }
}

/// An instance died while its provider task ran: the next claim of the target adopts that
/// provider task (once), and the dead claim's late outcome (its instance was only paused)
/// delivers nothing, so the answer is handed out once, by the adopter.
#[tokio::test]
async fn a_lapsed_claims_provider_task_is_adopted_once_and_its_late_outcome_dropped() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "adopt").await;
    let at = 10_000_000u64;
    assert_eq!(t.arrive("a1", "i:1", "c1").await, 3);
    assert_eq!(t.note("c1", "T1").await, 1);
    t.clock = Some(at + 2 * LEASE);
    let reply = t.run("a2", arrive("j:1", "d1")).await;
    assert_eq!(
        int(&reply[0]),
        3,
        "the dead one's waiter and claim are gone"
    );
    let note = strings(&reply[2..3]).remove(0);
    assert_eq!(noted_task(&note), ("acc".into(), "T1".into()));
    assert!(t.members("orphans").await.is_empty());
    assert_eq!(t.members("adopted").await, ["c1"]);
    let notes = t.hash("notes").await;
    assert_eq!(notes.len(), 1);
    assert_eq!(
        notes[0].0, "d1",
        "noted again under the adopter: adoptable if it dies too"
    );
    let reply = t.run("a3", arrive("j:2", "d2")).await;
    assert_eq!(int(&reply[0]), 3);
    assert_eq!(
        strings(&reply[2..3]),
        [""],
        "one provider task, adopted once"
    );

    // The paused instance comes back (its caller gave up meanwhile): its renewal does not
    // restore c1, and its answer goes nowhere.
    let reply = t.run("r1", renew(Vec::new(), &["c1"])).await;
    assert_eq!(int(&reply[1]), 0, "an adopted claim is never restored");
    let late = t
        .finish_answer("f1", "c1", 60_000, "{\"text\":\"T1\"}")
        .await;
    assert_eq!(int(&late[0]), 0);
    assert!(t.mbox().await.is_empty(), "the late outcome reached nobody");
    t.finish_answer("f2", "d1", 60_000, "{\"text\":\"T1\"}")
        .await;
    let mail = t.mbox().await;
    assert_eq!(mail.len(), 1);
    assert_eq!(
        mail[0].0, "j:1",
        "the adopter's answer goes to the oldest waiter"
    );
    assert!(
        t.hash("notes").await.is_empty(),
        "a finished claim's note goes"
    );
}

/// A claim that lapsed only because its instance was cut off, and is renewed before anyone
/// adopted its provider task, keeps it.
#[tokio::test]
async fn a_claim_renewed_before_adoption_keeps_its_provider_task() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "keep").await;
    let at = 10_000_000u64;
    t.arrive("a1", "i:1", "c1").await;
    t.note("c1", "T1").await;
    t.clock = Some(at + 2 * LEASE);
    t.run("n", TargetCall::Counts).await;
    assert_eq!(t.members("orphans").await, ["c1"]);
    let reply = t
        .run("r1", renew(vec![("i:1".to_owned(), at)], &["c1"]))
        .await;
    assert_eq!(int(&reply[1]), 1, "c1 comes back");
    assert!(t.members("orphans").await.is_empty());
    let reply = t
        .run(
            "v1",
            TargetCall::Cover {
                candidates: ids(&["e1"]),
            },
        )
        .await;
    assert_eq!(
        int(&reply[0]),
        0,
        "c1 covers i:1 again: nothing to start or adopt"
    );
}

/// A stopping instance hands its claim back (`R`): the provider still works on the task, and
/// the claim that covers the waiter next adopts it instead of submitting again.
#[tokio::test]
async fn a_requeued_claims_provider_task_goes_to_the_claim_that_covers_its_waiter() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "requeue").await;
    t.arrive("a1", "i:1", "c1").await;
    t.note("c1", "T1").await;
    t.run("f1", finish("c1", FinishOutcome::Requeue)).await;
    assert_eq!(t.members("orphans").await, ["c1"]);
    let reply = t
        .run(
            "v1",
            TargetCall::Cover {
                candidates: ids(&["e1", "e2"]),
            },
        )
        .await;
    assert_eq!(int(&reply[0]), 1, "one waiter, one claim");
    let adopted = strings(&reply[1..2]).remove(0);
    assert_eq!(noted_task(&adopted), ("acc".into(), "T1".into()));
    assert_eq!(t.members("inflight").await, ["e1"]);
}

/// A note that arrives after its claim ended records nothing (it would never be cleared).
#[tokio::test]
async fn a_note_for_a_claim_no_longer_in_flight_is_not_kept() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "late-note").await;
    t.arrive("a1", "i:1", "c1").await;
    t.finish_answer("f1", "c1", 60_000, "{\"text\":\"X\"}")
        .await;
    assert_eq!(t.note("c1", "T1").await, 0);
    assert!(t.hash("notes").await.is_empty());
}

/// A retry that comes after its operation's record may have expired (its process was paused
/// longer than the record lives) must not run afresh: the first run may have handed the token
/// to a waiter already. The script compares the operation's issue time with Redis time and
/// refuses; a retry whose record is still there answers from it however old it is.
#[tokio::test]
async fn an_operation_older_than_its_record_refuses_to_run_afresh() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "expired-op").await;
    let now = t.clock.unwrap();
    // Issued ten minutes ago: the record's lifetime in this harness.
    let long_ago = Some(now - 600_000);
    t.arrive("a1", "i:1", "c1").await;
    let first = t
        .finish_answer("f1", "c1", 60_000, "{\"text\":\"X\"}")
        .await;
    assert_eq!(strings(&first[1..]), ["i:1"]);

    // Its record still there, the retry answers from it.
    t.issued = long_ago;
    let again = t
        .finish_answer("f1", "c1", 60_000, "{\"text\":\"X\"}")
        .await;
    assert_eq!(again, first);

    // The record gone (expired): the same retry is refused and changes nothing.
    let _: () = redis::cmd("DEL")
        .arg(t.key("op:f1"))
        .query_async(&mut t.conn)
        .await
        .unwrap();
    t.issued = None;
    t.arrive("a2", "i:2", "c2").await;
    t.issued = long_ago;
    let refused = t
        .try_run(
            "f1",
            finish(
                "c1",
                FinishOutcome::Answer {
                    remaining_ms: 60_000,
                    json: "{\"text\":\"X\"}".into(),
                },
            ),
        )
        .await
        .expect_err("an expired retry is refused");
    assert_eq!(refused.code(), Some("CGEXPIRED"), "{refused}");
    assert_eq!(t.mbox().await.len(), 1, "the token is in one mailbox only");
    assert_eq!(
        t.members("waiters").await,
        ["i:2"],
        "the second caller still waits"
    );
    assert!(t.zset("pool").await.is_empty(), "nor is it pooled");

    // A fresh operation of the same age is refused too (its process paused before sending
    // it); one issued a little earlier than the record's lifetime runs, its answer's life
    // counted from its issue (an answer with 60 s left then would be dead now).
    let late = t.try_run("p1", put(60000, "{\"text\":\"Y\"}")).await;
    assert_eq!(late.unwrap_err().code(), Some("CGEXPIRED"));
    t.issued = Some(now - 500_000);
    t.run("p2", put(60000, "{\"text\":\"Y\"}")).await;
    assert_eq!(
        t.mbox().await.len(),
        1,
        "an answer dead by now reaches nobody"
    );
    t.run("p3", put(600_000, "{\"text\":\"Y\"}")).await;
    assert_eq!(
        t.mbox().await.len(),
        2,
        "the put reached the waiting caller"
    );
}

/// `WAIT` confirms the writes made earlier on its connection; a replay that only read its
/// record would leave the first run (made on another connection, before a reconnect)
/// unconfirmed. So a replay writes: it renews the record.
#[tokio::test]
async fn a_replayed_operation_writes_so_a_wait_after_it_covers_the_first_run() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "replay-writes").await;
    t.arrive("a1", "i:1", "c1").await;
    let _: () = redis::cmd("PEXPIRE")
        .arg(t.key("op:a1"))
        .arg(5_000)
        .query_async(&mut t.conn)
        .await
        .unwrap();
    t.arrive("a1", "i:1", "c1").await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(t.key("op:a1"))
        .query_async(&mut t.conn)
        .await
        .unwrap();
    assert!(
        ttl > 500_000,
        "the replay renewed the record (PTTL {ttl} ms)"
    );
}

/// A take whose write was not confirmed durable is given back: the mail is in the waiter's
/// mailbox again with a fresh deadline, and a later take gets it.
#[tokio::test]
async fn untaken_mail_is_back_in_the_mailbox_for_the_next_take() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "untake").await;
    t.arrive("a1", "i:1", "c1").await;
    t.finish_answer("f1", "c1", 60_000, "{\"text\":\"X\"}")
        .await;
    let arrived = Some(10_000_000);
    let taken = t.run("t1", take("i:1", arrived)).await;
    let mail = strings(&taken[1..2]).remove(0);
    assert!(t.mbox().await.is_empty());
    assert_eq!(t.members("gone").await, ["i:1"]);
    t.clock = Some(t.clock.unwrap() + 20_000);
    t.run(
        "u1",
        TargetCall::Untake {
            waiter: "i:1".into(),
            mail: mail.clone(),
        },
    )
    .await;
    assert_eq!(t.mbox().await, [("i:1".to_owned(), mail.clone())]);
    assert!(t.members("gone").await.is_empty());
    let deadline = t.zset("mlease").await;
    assert_eq!(
        deadline,
        [("i:1".to_owned(), (t.clock.unwrap() + 30_000) as f64)]
    );
    let again = t.run("t2", take("i:1", arrived)).await;
    assert_eq!(int(&again[0]), 1);
    assert_eq!(strings(&again[1..2]), [mail]);
}
