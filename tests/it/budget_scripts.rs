//! The thread budget's scripts run by hand on a real redis-server, on a clock the test sets:
//! lost replies and replays of acquire and release, lapses found by renewal, the class order
//! across instances, a place kept by first arrival, and the cap's cuts on refusals and regrowth.
//! Key and argument orders follow the contract header of `lua/lib/budget.lua`.

use captcha_gateway::provider::budget::redis::{
    BudgetCall, BudgetPrelude, CapChange, Follower, budget_channel, budget_keys,
};
use redis::Value;
use redis::aio::MultiplexedConnection;

use crate::support::redis::RedisServer;

const LEASE: u64 = 15_000;
const STEP: u64 = 5_000;
const INTERACTIVE: usize = 0;
const REFILL: usize = 2;

/// One account's budget of `threads`, its scripts called at `now`.
struct Account {
    conn: MultiplexedConnection,
    threads: u32,
    now: u64,
}

impl Account {
    async fn on(redis: &RedisServer, threads: u32) -> Account {
        let client = redis::Client::open(redis.url()).unwrap();
        Account {
            conn: client.get_multiplexed_async_connection().await.unwrap(),
            threads,
            now: 1_000_000,
        }
    }

    fn key(name: &str) -> String {
        format!("cg:{{b:acc}}:{name}")
    }

    /// `call` as the gateway makes it (keys, prelude and arguments from the same type), on the
    /// test's clock.
    async fn run(&mut self, call: BudgetCall) -> Vec<Value> {
        let prelude = BudgetPrelude {
            clock: Some(self.now),
            lease_ms: LEASE,
            threads: self.threads,
            increase_every_ms: STEP,
            channel: budget_channel("acc"),
        };
        call.invocation(&budget_keys("acc"), &prelude)
            .invoke_async::<Vec<Value>>(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("{call:?}: {e}"))
    }

    /// `{granted, fence, leases, cap}`.
    async fn acquire(&mut self, id: &str, class: usize, reserve: u32) -> [i64; 4] {
        let r = self.run(acquire(id, class, reserve, &[])).await;
        ints(&r)
    }

    /// `{removed, leases}`.
    async fn release(&mut self, id: &str) -> [i64; 2] {
        ints(&self.run(BudgetCall::Release { ids: ids(&[id]) }).await)
    }

    /// `(leases, cap, lost ids)`.
    async fn renew(&mut self, ids_: &[&str]) -> (i64, i64, Vec<String>) {
        let r = self.run(BudgetCall::Renew { ids: ids(ids_) }).await;
        let [leases, cap] = ints(&r);
        let lost = r[2..]
            .iter()
            .map(|v| redis::from_redis_value_ref::<String>(v).unwrap())
            .collect();
        (leases, cap, lost)
    }

    /// The provider refused the task holding `lease`, having lately taken one with `proven`
    /// others in flight: the cap after `budget_cap.lua` ran.
    async fn refused(&mut self, lease: &str, proven: u32) -> i64 {
        let change = CapChange::Refused {
            gap_ms: 2_000,
            lease: lease.into(),
            proven,
        };
        self.cap(change).await
    }

    async fn cap(&mut self, change: CapChange) -> i64 {
        let call = BudgetCall::Cap {
            change,
            memory_ms: 86_400_000,
        };
        let [cap] = ints(&self.run(call).await);
        cap
    }

    async fn card(&mut self, name: &str) -> i64 {
        redis::cmd("ZCARD")
            .arg(Self::key(name))
            .query_async(&mut self.conn)
            .await
            .unwrap()
    }
}

fn acquire(id: &str, class: usize, reserve: u32, followers: &[&str]) -> BudgetCall {
    let followers: Vec<(&str, u64)> = followers.iter().map(|f| (*f, 0)).collect();
    ask(id, 0, class, reserve, &followers)
}

/// An ask by `id`, which first asked `age_ms` ago, with followers that first asked when given.
fn acquire_aged(id: &str, age_ms: u64, class: usize, followers: &[(&str, u64)]) -> BudgetCall {
    ask(id, age_ms, class, 0, followers)
}

fn ask(id: &str, age_ms: u64, class: usize, reserve: u32, followers: &[(&str, u64)]) -> BudgetCall {
    BudgetCall::Acquire {
        id: id.into(),
        class,
        reserve,
        waiter_ttl_ms: 3_000,
        age_ms,
        followers: followers
            .iter()
            .map(|(id, age_ms)| Follower {
                id: (*id).into(),
                age_ms: *age_ms,
            })
            .collect(),
    }
}

fn ids(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn ints<const N: usize>(reply: &[Value]) -> [i64; N] {
    std::array::from_fn(|i| redis::from_redis_value_ref(&reply[i]).unwrap())
}

#[tokio::test]
async fn an_acquire_run_again_after_a_lost_reply_answers_the_same_grant() {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 2).await;
    let first = acc.acquire("i1:1", INTERACTIVE, 0).await;
    assert_eq!(first[0], 1, "granted");
    let again = acc.acquire("i1:1", INTERACTIVE, 0).await;
    assert_eq!(again, first, "the same fence, no second lease");
    assert_eq!(acc.card("leases").await, 1);
    let second = acc.acquire("i2:1", INTERACTIVE, 0).await;
    assert_eq!(second[0], 1);
    assert!(second[1] > first[1], "fences increase with every grant");
    let third = acc.acquire("i3:1", INTERACTIVE, 0).await;
    assert_eq!(third, [0, 0, 2, 2], "full: the third waits");
    assert_eq!(acc.card("waiters").await, 1);
}

#[tokio::test]
async fn a_release_run_twice_frees_only_its_own_thread() {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 2).await;
    acc.acquire("a:1", INTERACTIVE, 0).await;
    acc.acquire("b:1", INTERACTIVE, 0).await;
    assert_eq!(acc.release("a:1").await, [1, 1]);
    assert_eq!(
        acc.release("a:1").await,
        [0, 1],
        "the replay changes nothing"
    );
    // Someone else takes the freed thread; a late replay of a's release must not free it.
    assert_eq!(acc.acquire("c:1", INTERACTIVE, 0).await[0], 1);
    assert_eq!(acc.release("a:1").await, [0, 2]);
    assert_eq!(acc.acquire("d:1", INTERACTIVE, 0).await[0], 0, "still full");
}

#[tokio::test]
async fn a_lease_nobody_renews_lapses_within_one_lease_and_its_holder_learns_it_is_lost() {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 1).await;
    acc.acquire("paused:1", INTERACTIVE, 0).await;
    acc.now += LEASE / 3;
    assert_eq!(acc.renew(&["paused:1"]).await, (1, 1, vec![]));
    // The holder pauses past its lease; another instance asks at the end of it.
    acc.now += LEASE + 1;
    assert_eq!(acc.acquire("other:1", INTERACTIVE, 0).await[0], 1);
    // Back from the pause, the renewal reports the loss and does not put the lease back.
    let (leases, _, lost) = acc.renew(&["paused:1"]).await;
    assert_eq!((leases, lost), (1, vec!["paused:1".to_owned()]));
    assert_eq!(
        acc.release("paused:1").await,
        [0, 1],
        "its release frees nothing"
    );
}

#[tokio::test]
async fn a_refill_never_overtakes_a_caller_waiting_in_another_instance() {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 3).await;
    for id in ["r:1", "r:2"] {
        assert_eq!(acc.acquire(id, REFILL, 1).await[0], 1);
    }
    assert_eq!(
        acc.acquire("r:3", REFILL, 1).await[0],
        0,
        "the reserve stays free"
    );
    assert_eq!(acc.acquire("caller:1", INTERACTIVE, 1).await[0], 1);
    // Full: a caller in instance B waits, then a thread frees.
    assert_eq!(acc.acquire("b-caller:1", INTERACTIVE, 1).await[0], 0);
    acc.now += 10;
    acc.release("r:1").await;
    acc.release("r:2").await;
    // The refill that waited longer still goes after the caller, even asking first.
    assert_eq!(acc.acquire("r:3", REFILL, 1).await[0], 0);
    assert_eq!(acc.acquire("b-caller:1", INTERACTIVE, 1).await[0], 1);
    assert_eq!(
        acc.acquire("r:3", REFILL, 1).await[0],
        0,
        "2 taken, refill limit 2"
    );
    acc.release("caller:1").await;
    assert_eq!(acc.acquire("r:3", REFILL, 1).await[0], 1);
}

#[tokio::test]
async fn a_waiter_that_stops_asking_loses_its_place() {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 1).await;
    acc.acquire("busy:1", INTERACTIVE, 0).await;
    acc.acquire("gone:1", INTERACTIVE, 0).await;
    acc.release("busy:1").await;
    acc.now += 1;
    // The waiter's instance died; after its place expires a newcomer is not held back.
    assert_eq!(acc.acquire("new:1", INTERACTIVE, 0).await[0], 0);
    acc.now += 3_000;
    assert_eq!(acc.acquire("new:1", INTERACTIVE, 0).await[0], 1);
    assert_eq!(acc.card("waiters").await, 0);
    assert_eq!(acc.card("wexp").await, 0);
}

#[tokio::test]
async fn a_refusal_at_the_plan_cuts_the_cap_to_the_other_leases_once_per_gap_and_time_grows_it_back()
 {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 8).await;
    for id in ["a", "b", "c", "d", "e", "f"] {
        assert_eq!(acc.acquire(id, INTERACTIVE, 0).await[0], 1);
    }
    // `f` was refused with five others running, and nothing proved more: the plan is five.
    assert_eq!(acc.refused("f", 0).await, 5);
    acc.release("f").await;
    assert_eq!(acc.release("e").await[1], 4);
    assert_eq!(acc.refused("d", 0).await, 5, "a replay inside the gap");
    assert_eq!(acc.acquire("e", INTERACTIVE, 0).await[0], 1);
    assert_eq!(acc.acquire("g", INTERACTIVE, 0).await, [0, 0, 5, 5]);
    acc.now += STEP;
    assert_eq!(acc.renew(&["a", "b", "c", "d", "e"]).await.1, 6);
    assert_eq!(acc.acquire("g", INTERACTIVE, 0).await[0], 1);
    acc.now += 10 * STEP;
    assert_eq!(
        acc.cap(CapChange::Plan { threads: 6 }).await,
        6,
        "the plan's threads bound it"
    );
}

#[tokio::test]
async fn a_refusal_below_what_the_provider_just_took_or_far_below_the_cap_leaves_it_alone() {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 8).await;
    for id in ["a", "b", "c", "d", "e", "f"] {
        acc.acquire(id, INTERACTIVE, 0).await;
    }
    // The provider lately took a task with five others running.
    assert_eq!(acc.refused("f", 5).await, 8);
    acc.now += 3_000;
    for id in ["c", "d", "e", "f"] {
        acc.release(id).await;
    }
    // Two running of eight: far below the cap, whatever was proven.
    assert_eq!(acc.refused("b", 0).await, 8);
}

#[tokio::test]
async fn a_waiter_asking_again_keeps_its_first_place_across_instances() {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 1).await;
    acc.acquire("busy:1", INTERACTIVE, 0).await;
    // A caller of instance B asks and waits, registered in Redis.
    assert_eq!(acc.acquire("b:1", INTERACTIVE, 0).await[0], 0);
    acc.now += 4_000;
    // A's task first asked 10 s ago (then gave its thread back for a refusal): it goes first.
    let again = acc.run(acquire_aged("a:1", 10_000, INTERACTIVE, &[])).await;
    assert_eq!(ints::<1>(&again), [0]);
    acc.release("busy:1").await;
    acc.now += 1;
    assert_eq!(acc.acquire("b:1", INTERACTIVE, 0).await[0], 0, "behind a:1");
    let again = acc.run(acquire_aged("a:1", 10_001, INTERACTIVE, &[])).await;
    assert_eq!(ints::<1>(&again), [1]);
}

#[tokio::test]
async fn a_follower_that_came_first_is_asked_for_before_the_turn_holder() {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 2).await;
    acc.acquire("busy:1", INTERACTIVE, 0).await;
    // One thread free. The turn holder came 1 s ago; a follower queued behind it in the same
    // process first asked 9 s ago: the follower gets the thread, the holder waits in its place.
    let reply = acc
        .run(acquire_aged(
            "h:1",
            1_000,
            INTERACTIVE,
            &[("old:1", 9_000), ("new:1", 10)],
        ))
        .await;
    let [granted, _, leases, _, followers] = ints(&reply);
    assert_eq!((granted, leases, followers), (0, 2, 1));
    assert_eq!(acc.card("waiters").await, 1, "the holder keeps its place");
    // Next thread: the holder, ahead of the newer follower.
    acc.release("busy:1").await;
    acc.now += 1;
    let reply = acc
        .run(acquire_aged("h:1", 1_001, INTERACTIVE, &[("new:1", 11)]))
        .await;
    let [granted, _, leases, _, followers] = ints(&reply);
    assert_eq!((granted, leases, followers), (1, 2, 0));
}

#[tokio::test]
async fn followers_are_granted_in_order_while_threads_last_and_the_rest_are_left_alone() {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 3).await;
    let queued = 1;
    // The turn holder asks for itself and three callers queued behind it; two threads remain.
    let reply = acc
        .run(acquire("h:1", queued, 0, &["f:1", "f:2", "f:3"]))
        .await;
    let [granted, _, leases, _, followers] = ints(&reply);
    assert_eq!((granted, leases, followers), (1, 3, 2));
    // The one not granted was not registered: it asks for itself when its turn comes.
    assert_eq!(acc.card("waiters").await, 0);
    // Run again after a lost reply: the same grants, nothing more.
    let again = acc
        .run(acquire("h:1", queued, 0, &["f:1", "f:2", "f:3"]))
        .await;
    assert_eq!(ints::<5>(&again), ints::<5>(&reply));
    assert_eq!(acc.card("leases").await, 3);
    assert_eq!(acc.acquire("f:3", queued, 0).await[0], 0, "full: it waits");
    assert_eq!(acc.card("waiters").await, 1);
}

#[tokio::test]
async fn a_holder_that_must_wait_asks_for_no_follower() {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 1).await;
    acc.acquire("busy:1", INTERACTIVE, 0).await;
    let reply = acc.run(acquire("h:1", INTERACTIVE, 0, &["f:1"])).await;
    assert_eq!(ints::<5>(&reply), [0, 0, 1, 1, 0]);
    acc.release("busy:1").await;
    acc.now += 1;
    // A follower never overtakes the registered holder, even asking alone (later).
    assert_eq!(acc.acquire("f:1", INTERACTIVE, 0).await[0], 0);
    assert_eq!(acc.acquire("h:1", INTERACTIVE, 0).await[0], 1);
}

#[tokio::test]
async fn releases_gathered_into_one_call_each_free_only_their_own_thread_and_wake_once() {
    let redis = RedisServer::start();
    let mut acc = Account::on(&redis, 3).await;
    for id in ["a:1", "b:1", "c:1"] {
        assert_eq!(acc.acquire(id, INTERACTIVE, 0).await[0], 1);
    }
    let publishes = |info: String| {
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_publish:calls="))
            .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let stats = |conn: &mut MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut conn)
                .await
                .unwrap();
            publishes(info)
        }
    };
    let before = stats(&mut acc.conn).await;
    // a's and c's, and an id never held between them: {a removed, leases, never:0, c:1}.
    let reply = acc
        .run(BudgetCall::Release {
            ids: ids(&["a:1", "never:1", "c:1"]),
        })
        .await;
    assert_eq!(ints::<4>(&reply), [1, 1, 0, 1]);
    assert_eq!(stats(&mut acc.conn).await, before + 1, "one wake-up");
    // Run again: nothing more is freed, nobody is told.
    let again = acc
        .run(BudgetCall::Release {
            ids: ids(&["a:1", "never:1", "c:1"]),
        })
        .await;
    assert_eq!(ints::<4>(&again), [0, 1, 0, 0]);
    assert_eq!(stats(&mut acc.conn).await, before + 1);
    assert_eq!(acc.card("leases").await, 1, "b's thread is still b's");
}

/// What can happen to an account's cap.
#[derive(Debug, Clone)]
enum CapEvent {
    /// Time passes (ms).
    Wait(u64),
    /// A provider capacity refusal with this many other leases held (as far as the cap allows),
    /// the provider having lately taken a task with this many others in flight.
    Refused { others: u32, proven: u32 },
    /// `threadsinfo` reports the plan's threads.
    Plan(u32),
}

fn cap_event() -> impl proptest::strategy::Strategy<Value = CapEvent> {
    use proptest::prelude::*;
    prop_oneof![
        (0..3 * STEP).prop_map(CapEvent::Wait),
        (0..12u32, 0..12u32).prop_map(|(others, proven)| CapEvent::Refused { others, proven }),
        (0..12u32).prop_map(CapEvent::Plan),
    ]
}

impl Account {
    /// Holds `l0` to `l<n-1>` as far as the cap lets them be granted, and nothing else of
    /// those ids: the ones held after.
    async fn hold(&mut self, n: u32) -> Vec<String> {
        for i in n..12 {
            self.release(&format!("l{i}")).await;
        }
        let mut held = Vec::new();
        for i in 0..n {
            let id = format!("l{i}");
            if self.acquire(&id, INTERACTIVE, 0).await[0] == 1 {
                held.push(id);
            }
        }
        held
    }
}

/// The cap's arithmetic exists twice, in Rust for one process (`provider::budget::CapRule`) and in
/// Lua for a fleet (`lua/lib/budget.lua`), because each must run where its state lives. Random
/// histories of capacity errors, plans and time give the same cap in both at every step.
#[test]
fn the_fleets_cap_and_one_processs_cap_agree_on_any_history() {
    use captcha_gateway::provider::{CapRule, CapSettings};
    use proptest::prelude::*;
    use std::time::Duration;

    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisServer::start();
    let settings = CapSettings {
        increase_every: Duration::from_millis(STEP),
        decrease_gap: Duration::from_millis(2_000),
        evidence_window: Duration::from_secs(30),
    };
    let config = ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    };
    proptest!(config, |(threads in 1..12u32, events in proptest::collection::vec(cap_event(), 1..30))| {
        rt.block_on(async {
            let mut acc = Account::on(&redis, threads).await;
            for key in ["cap", "leases", "fences", "waiters", "wexp"] {
                let _: () = redis::cmd("DEL").arg(Account::key(key)).query_async(&mut acc.conn).await.unwrap();
            }
            let mut rule = CapRule::default();
            for (i, event) in events.iter().enumerate() {
                let fleet = match event {
                    CapEvent::Wait(ms) => {
                        acc.now += ms;
                        acc.renew(&[]).await.1
                    }
                    CapEvent::Refused { others, proven } => {
                        // The refused lease is the last of those held; the rest are the others.
                        let held = acc.hold(others + 1).await;
                        let Some(refused) = held.last() else {
                            continue;
                        };
                        let others = u32::try_from(held.len() - 1).unwrap();
                        rule.refused(threads, acc.now, &settings, others, *proven);
                        acc.refused(refused, *proven).await
                    }
                    CapEvent::Plan(plan) => {
                        rule.calibrate(*plan);
                        acc.cap(CapChange::Plan { threads: u64::from(*plan) }).await
                    }
                };
                let local = i64::from(rule.effective(threads, acc.now, &settings));
                prop_assert_eq!(fleet, local, "after {:?}", &events[..=i]);
            }
            Ok(())
        })?;
    });
}
