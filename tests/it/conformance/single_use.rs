//! Promises 1-3 for single-use targets at the `Store` seam, with time passed in: once (an answer
//! has one owner), fresh (`min_remaining`), exact demand (`max(0, D - P - F)` new tasks), a
//! leaving caller hands on what reached it, a failure goes only to an uncovered waiter.

use captcha_gateway::engine::SolveFailure;
use captcha_gateway::engine::store::{Arrival, Finished, TaskOutcome};

use super::backend::*;

const NOW: u64 = 1_000_000;
const UNSOLVABLE: &str = "ERROR_CAPTCHA_UNSOLVABLE";

fn failed() -> TaskOutcome {
    TaskOutcome::Failed(SolveFailure::new(UNSOLVABLE, "conformance"))
}

fn solved(text: &str) -> TaskOutcome {
    TaskOutcome::Answer(answer(text, NOW, 60_000))
}

pub async fn once_each_answer_has_one_owner_oldest_first<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = target();
    let mut mailboxes = Vec::new();
    let mut claims = Vec::new();
    for _ in 0..3 {
        let (_, rx, claim) = arrive_start(s, &t, NOW).await;
        mailboxes.push(rx);
        claims.push(claim);
    }
    // Tasks end in any order; answers still go to the oldest waiter first, one each.
    for (claim, text) in [(&claims[2], "a"), (&claims[0], "b"), (&claims[1], "c")] {
        let done = s.finish(&t, claim, solved(text), true, NOW).await.unwrap();
        assert_eq!(done, Finished::Done);
    }
    let mut got = Vec::new();
    for rx in mailboxes {
        got.push(delivered(rx).await.unwrap());
    }
    assert_eq!(got, ["a", "b", "c"]);
    // Nothing was left over for the pool: the next caller needs a task of its own.
    arrive_start(s, &t, NOW).await;
}

pub async fn exact_demand_starts_only_the_missing_tasks<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    // (callers D, pooled P, in flight F)
    for (d, p, f) in [
        (3u64, 0u64, 0u64),
        (3, 1, 0),
        (3, 0, 1),
        (4, 1, 1),
        (3, 2, 2),
        (1, 3, 0),
        (2, 0, 5),
    ] {
        let t = target();
        for i in 0..p {
            s.put(&t, answer(format!("p{i}"), NOW, 60_000), NOW)
                .await
                .unwrap();
        }
        for k in 0..f {
            // A pool one bigger than what is pooled and coming lacks exactly one refill.
            let size = u32::try_from(p + k + 1).unwrap();
            assert_eq!(s.reserve(&t, size, NOW).await.unwrap().len(), 1);
        }
        let (mut pooled, mut waits, mut starts) = (0u64, 0u64, 0u64);
        let mut mailboxes = Vec::new();
        for _ in 0..d {
            match s.arrive(&t, &waiter(s), NOW, MIN_REMAINING).await.unwrap() {
                Arrival::Pooled(_) => pooled += 1,
                Arrival::Wait(rx) => {
                    waits += 1;
                    mailboxes.push(rx);
                }
                Arrival::Start(rx, _) => {
                    starts += 1;
                    mailboxes.push(rx);
                }
            }
        }
        let case = format!("D={d} P={p} F={f}");
        assert_eq!(starts, d.saturating_sub(p + f), "new tasks for {case}");
        assert_eq!(pooled, d.min(p), "pooled handouts for {case}");
        let counts = s.counts(&t, NOW, MIN_REMAINING).await.unwrap();
        assert_eq!(counts.pooled, p - pooled, "left in the pool for {case}");
        assert_eq!(counts.in_flight, f + starts, "in flight for {case}");
        assert_eq!(counts.waiting, waits + starts, "waiting for {case}");
        let fig = figures(s, &t).await;
        assert_eq!(
            (fig.pool_hits, fig.waits_served, fig.new_tasks, fig.refills),
            (pooled, waits, f + starts, f),
            "figures for {case}"
        );
    }
}

pub async fn fresh_only_answers_with_enough_life_are_handed_out<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = target();
    s.put(&t, answer("dying", NOW, MIN_REMAINING - 1), NOW)
        .await
        .unwrap();
    s.put(&t, answer("later", NOW, 90_000), NOW).await.unwrap();
    s.put(&t, answer("sooner", NOW, 60_000), NOW).await.unwrap();
    // Counting already leaves out what no caller may take.
    assert_eq!(s.counts(&t, NOW, MIN_REMAINING).await.unwrap().pooled, 2);
    // Earliest fresh expiry first, so the fewest expire unused.
    assert_eq!(arrive_pooled(s, &t, NOW).await, "sooner");
    // 50 s on, "later" has 40 s left: still fresh.
    assert_eq!(arrive_pooled(s, &t, NOW + 50_000).await, "later");
    arrive_start(s, &t, NOW + 50_000).await;
    let fig = figures(s, &t).await;
    assert_eq!((fig.pool_hits, fig.expired_unused), (2, 1));

    // An answer that expires while pooled is waste, never a handout.
    let t = target();
    s.put(&t, answer("short", NOW, 30_000), NOW).await.unwrap();
    arrive_start(s, &t, NOW + 30_000 - MIN_REMAINING + 1).await;
    assert_eq!(figures(s, &t).await.expired_unused, 1);
}

/// An answer already past its expiry when it reaches the store (a process paused between the
/// engine's freshness check and the store call) must not reach a caller or the pool.
pub async fn an_answer_expired_on_arrival_is_waste_not_a_handout<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = target();
    let (_, mut rx, claim) = arrive_start(s, &t, NOW).await;
    s.put(&t, answer("expired", NOW - 20_000, 10_000), NOW)
        .await
        .unwrap();
    assert!(still_waiting(&mut rx), "an expired import reached a caller");
    assert_eq!(figures(s, &t).await.expired_unused, 1);
    s.finish(&t, &claim, solved("good"), true, NOW)
        .await
        .unwrap();
    assert_eq!(delivered(rx).await.unwrap(), "good");
}

/// A task's answer that expired on its way to the store (the engine paused between its
/// freshness check and `finish`) is stale: waste, and a new task for the caller it was for.
pub async fn an_answer_expired_on_finish_restarts_a_task_for_its_waiter<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = target();
    let (_, mut rx, claim) = arrive_start(s, &t, NOW).await;
    let expired = TaskOutcome::Answer(answer("expired", NOW - 20_000, 10_000));
    let again = match s.finish(&t, &claim, expired, true, NOW).await.unwrap() {
        Finished::Restart(next) => next,
        Finished::Done => panic!("the waiter was left without a task"),
    };
    assert!(still_waiting(&mut rx), "an expired answer reached a caller");
    s.finish(&t, &again, solved("fresh"), true, NOW)
        .await
        .unwrap();
    assert_eq!(delivered(rx).await.unwrap(), "fresh");
    let fig = figures(s, &t).await;
    assert_eq!((fig.expired_unused, fig.new_tasks), (1, 2));
}

pub async fn a_stale_answer_is_waste_and_restarts_a_task_for_an_uncovered_waiter<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = target();
    let (_, mut rx, claim) = arrive_start(s, &t, NOW).await;
    let again = match s
        .finish(&t, &claim, TaskOutcome::Stale, true, NOW)
        .await
        .unwrap()
    {
        Finished::Restart(next) => next,
        Finished::Done => panic!("the waiter was left without a task"),
    };
    assert!(still_waiting(&mut rx), "a stale answer reached a caller");
    s.finish(&t, &again, solved("second"), true, NOW)
        .await
        .unwrap();
    assert_eq!(delivered(rx).await.unwrap(), "second");
    // A stale refill nobody waits for starts nothing.
    let refill = s.reserve(&t, 1, NOW).await.unwrap().remove(0);
    let done = s
        .finish(&t, &refill, TaskOutcome::Stale, true, NOW)
        .await
        .unwrap();
    assert_eq!(done, Finished::Done);
    let fig = figures(s, &t).await;
    assert_eq!((fig.expired_unused, fig.new_tasks), (2, 3));
}

pub async fn a_failure_fails_only_a_waiter_no_task_covers<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = target();
    let (_, first, c1) = arrive_start(s, &t, NOW).await;
    let (_, mut second, c2) = arrive_start(s, &t, NOW).await;
    // Two waiters, one task left: one of them is uncovered, the oldest.
    s.finish(&t, &c1, failed(), true, NOW).await.unwrap();
    assert_eq!(delivered(first).await.unwrap_err(), UNSOLVABLE);
    assert!(
        still_waiting(&mut second),
        "the covered waiter was failed too"
    );
    s.finish(&t, &c2, solved("last"), true, NOW).await.unwrap();
    assert_eq!(delivered(second).await.unwrap(), "last");

    // One waiter, two tasks (its own and a refill): the refill failing fails nobody.
    let (_, mut rx, own) = arrive_start(s, &t, NOW).await;
    let refill = s.reserve(&t, 1, NOW).await.unwrap().remove(0);
    s.finish(&t, &refill, failed(), true, NOW).await.unwrap();
    assert!(still_waiting(&mut rx), "a covered waiter was failed");
    s.finish(&t, &own, solved("own"), true, NOW).await.unwrap();
    assert_eq!(delivered(rx).await.unwrap(), "own");
}

pub async fn a_caller_that_leaves_hands_on_what_reached_it<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    // Leaves before its answer: its task serves the next caller, who starts nothing new.
    let t = target();
    let (w, rx, claim) = arrive_start(s, &t, NOW).await;
    drop(rx);
    s.abandon(&t, &w, None, true, NOW).await.unwrap();
    let (_, next) = arrive_wait(s, &t, NOW).await;
    s.finish(&t, &claim, solved("inherited"), true, NOW)
        .await
        .unwrap();
    assert_eq!(delivered(next).await.unwrap(), "inherited");

    // Leaves after its answer reached it: the answer goes to the next waiter.
    let (w1, rx1, c1) = arrive_start(s, &t, NOW).await;
    let (_, rx2, c2) = arrive_start(s, &t, NOW).await;
    s.finish(&t, &c1, solved("passed"), true, NOW)
        .await
        .unwrap();
    let got = received(rx1).await;
    s.abandon(&t, &w1, Some(got), true, NOW).await.unwrap();
    assert_eq!(delivered(rx2).await.unwrap(), "passed");
    // ... and with nobody left waiting, to the pool.
    s.finish(&t, &c2, solved("spare"), true, NOW).await.unwrap();
    assert_eq!(arrive_pooled(s, &t, NOW).await, "spare");

    // Nobody waiting and not poolable: waste, not a pool entry.
    let (w, rx, c) = arrive_start(s, &t, NOW).await;
    s.finish(&t, &c, solved("kept"), true, NOW).await.unwrap();
    let got = received(rx).await;
    s.abandon(&t, &w, Some(got), false, NOW).await.unwrap();
    assert_eq!(s.counts(&t, NOW, 0).await.unwrap().pooled, 0);
    assert_eq!(figures(s, &t).await.expired_unused, 1);

    // What reached it had expired by the time it left: waste as well.
    let (w, rx, c) = arrive_start(s, &t, NOW).await;
    s.finish(&t, &c, solved("aged"), true, NOW).await.unwrap();
    let got = received(rx).await;
    s.abandon(&t, &w, Some(got), true, NOW + 60_001)
        .await
        .unwrap();
    assert_eq!(s.counts(&t, NOW, 0).await.unwrap().pooled, 0);
    assert_eq!(figures(s, &t).await.expired_unused, 2);
}

pub async fn put_goes_to_the_oldest_waiter_else_the_pool<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = target();
    let (_, first, c1) = arrive_start(s, &t, NOW).await;
    let (_, second, c2) = arrive_start(s, &t, NOW).await;
    s.put(&t, answer("imported", NOW, 60_000), NOW)
        .await
        .unwrap();
    assert_eq!(delivered(first).await.unwrap(), "imported");
    s.finish(&t, &c1, solved("one"), true, NOW).await.unwrap();
    assert_eq!(delivered(second).await.unwrap(), "one");
    s.finish(&t, &c2, solved("two"), true, NOW).await.unwrap();
    assert_eq!(arrive_pooled(s, &t, NOW).await, "two");
}

pub async fn a_refill_counts_in_flight_and_serves_a_waiter_first<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = target();
    let refill = s.reserve(&t, 1, NOW).await.unwrap().remove(0);
    let counts = s.counts(&t, NOW, MIN_REMAINING).await.unwrap();
    assert_eq!((counts.pooled, counts.in_flight, counts.waiting), (0, 1, 0));
    // A caller arriving now is covered by the refill.
    let (_, rx) = arrive_wait(s, &t, NOW).await;
    s.finish(&t, &refill, solved("refilled"), true, NOW)
        .await
        .unwrap();
    assert_eq!(delivered(rx).await.unwrap(), "refilled");
    let fig = figures(s, &t).await;
    assert_eq!(
        (fig.new_tasks, fig.refills, fig.waits_served, fig.pool_hits),
        (1, 1, 1, 0)
    );
    assert_eq!(fig.label, t.label, "figures carry the target's label");
}

/// On the embedded store both "instances" are the one store; on Redis the answer crosses
/// instances through the waiter's inbox, not by polling.
pub async fn a_waiter_on_one_instance_gets_an_answer_finished_on_another<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let (a, b) = (backend.instance().await, backend.instance().await);
    let t = target();
    let (wa, rx_a, claim) = arrive_start(&*a, &t, NOW).await;
    drop(rx_a);
    a.abandon(&t, &wa, None, true, NOW).await.unwrap();
    let (_, rx_b) = arrive_wait(&*b, &t, NOW).await;
    a.finish(&t, &claim, solved("cross"), true, NOW)
        .await
        .unwrap();
    assert_eq!(delivered(rx_b).await.unwrap(), "cross");
}

/// While no instance died, every waiter is covered and `cover` claims nothing. (Re-covering
/// after a death is Redis-only: see `fleet.rs`.)
pub async fn cover_claims_nothing_while_every_waiter_is_covered<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = target();
    assert!(s.cover(&t, NOW).await.unwrap().is_empty(), "no waiters");
    let (_, _rx1, _) = arrive_start(s, &t, NOW).await;
    assert_eq!(s.reserve(&t, 1, NOW).await.unwrap().len(), 1);
    let (_, _rx2) = arrive_wait(s, &t, NOW).await;
    assert!(s.cover(&t, NOW).await.unwrap().is_empty(), "all covered");
    assert_eq!(figures(s, &t).await.new_tasks, 2);
}

/// Redis orders waiters by arrival time, then by id: callers in one millisecond must still be
/// served oldest first (a dozen, so their sequence numbers differ in length).
pub async fn callers_in_one_millisecond_are_served_in_arrival_order<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = target();
    let mut mailboxes = Vec::new();
    let mut claims = Vec::new();
    for _ in 0..12 {
        let (_, rx, claim) = arrive_start(s, &t, NOW).await;
        mailboxes.push(rx);
        claims.push(claim);
    }
    for (i, claim) in claims.iter().enumerate() {
        s.finish(&t, claim, solved(&format!("a{i:02}")), true, NOW)
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    for rx in mailboxes {
        got.push(delivered(rx).await.unwrap());
    }
    let expected: Vec<String> = (0..12).map(|i| format!("a{i:02}")).collect();
    assert_eq!(got, expected, "oldest first");
}

/// Exact demand holds when callers arrive at once on two instances: each decision is atomic, so
/// 30 callers with 10 pooled answers take the 10 and start exactly 20 tasks.
pub async fn callers_arriving_at_once_take_the_pool_and_start_the_rest<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let (a, b) = (backend.instance().await, backend.instance().await);
    let t = target();
    for i in 0..10 {
        a.put(&t, answer(format!("p{i}"), NOW, 60_000), NOW)
            .await
            .unwrap();
    }
    let callers = (0..30).map(|i| {
        let (s, t) = (if i % 2 == 0 { a.clone() } else { b.clone() }, t.clone());
        tokio::spawn(async move {
            let w = waiter(&*s);
            s.arrive(&t, &w, NOW, MIN_REMAINING).await.unwrap()
        })
    });
    let (mut pooled, mut started, mut mailboxes) = (Vec::new(), 0, Vec::new());
    for caller in futures::future::join_all(callers).await {
        match caller.unwrap() {
            Arrival::Pooled(answer) => pooled.push(answer.text),
            Arrival::Start(rx, _) => {
                started += 1;
                mailboxes.push(rx);
            }
            Arrival::Wait(_) => panic!("nothing was running for anyone to wait on"),
        }
    }
    pooled.sort();
    pooled.dedup();
    assert_eq!(pooled.len(), 10, "each pooled answer went to one caller");
    assert_eq!(started, 20, "one task per caller the pool could not serve");
    let counts = a.counts(&t, NOW, MIN_REMAINING).await.unwrap();
    assert_eq!(
        (counts.pooled, counts.in_flight, counts.waiting),
        (0, 20, 20)
    );
}

/// A rush bigger than a burst of arrivals (`held.rs`: 64 in one window) on one instance: on
/// Redis the instance takes pooled answers in batches and serves the callers after the taker
/// from memory, with no script each (fewer scripts than callers, by the servers' own count).
/// Every caller gets a pooled answer, each answer goes to one caller, and what a batch did not
/// hand out is back in the pool once its hold is over (ended by the next arrival after it).
pub async fn a_rush_served_from_held_batches_hands_each_answer_out_once<B: Backend>() {
    const POOLED: u64 = 200;
    const RUSH: u64 = 150;
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = target();
    for i in 0..POOLED {
        s.put(&t, answer(format!("r{i}"), NOW, 60_000), NOW)
            .await
            .unwrap();
    }
    let scripts_before = backend.scripts_run().await;
    let mut got = Vec::new();
    for _ in 0..RUSH {
        got.push(arrive_pooled(s, &t, NOW).await);
    }
    if let (Some(before), Some(after)) = (scripts_before, backend.scripts_run().await) {
        assert!(
            after - before < RUSH,
            "{} scripts for {RUSH} callers: no batch was held",
            after - before
        );
    }
    // After the hold (1 s on the store's clock), the next arrival ends the batch.
    got.push(arrive_pooled(s, &t, NOW + 2_000).await);
    got.sort();
    got.dedup();
    assert_eq!(got.len() as u64, RUSH + 1, "each answer to one caller");
    let counts = s.counts(&t, NOW + 2_000, MIN_REMAINING).await.unwrap();
    assert_eq!(counts.pooled, POOLED - RUSH - 1, "the batches' rest back");
    let f = figures(s, &t).await;
    assert_eq!((f.pool_hits, f.expired_unused), (RUSH + 1, 0));
}
