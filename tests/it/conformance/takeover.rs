//! A reusable target's leader that dies: its lock is a lease its instance
//! renews while the task runs, so a live leader keeps it however long it solves, a dead one's
//! lapses within a lease, and exactly one instance with callers following takes over. Redis
//! only, like `fleet.rs`: the embedded store's leader cannot die while its store lives on.
//!
//! An instance dies here by cancelling its life token (its renewer and inbox reader stop) and
//! never finishing; each survivor asks [`Reusable::shared_takeover`] as its coverer does every third
//! of a lease. Leases are real time (the lock's on Redis's clock), so waits are `eventually`.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use captcha_gateway::engine::SolveFailure;
use captcha_gateway::engine::store::Store;
use captcha_gateway::engine::store::prelude::*;
use captcha_gateway::model::now_ms;

use super::backend::*;
use super::reusable::{follow, image_target, lead};
use crate::support::eventually::eventually;

/// Long enough that a renewer ticking every third of it on a busy test machine never misses
/// (a missed renewal would be a real lapse), short enough that a lapse comes quickly.
const LEASE_MS: u64 = 1_500;

fn tuning() -> Tuning {
    Tuning {
        lease: Duration::from_millis(LEASE_MS),
        ..Tuning::default()
    }
}

/// Asks each store, as its coverer does, until one takes over; returns its index and token.
async fn taken_over(stores: &[&dyn Store], t: &captcha_gateway::model::Target) -> (usize, u64) {
    let won = Mutex::new(Vec::new());
    eventually(
        Duration::from_secs(30),
        "a follower's instance to take over the dead leader's target",
        || {
            let won = &won;
            async move {
                for (i, s) in stores.iter().enumerate() {
                    if let Some(token) =
                        s.shared_takeover(t, now_ms(), MIN_REMAINING).await.unwrap()
                    {
                        won.lock().unwrap().push((i, token));
                    }
                }
                !won.lock().unwrap().is_empty()
            }
        },
    )
    .await;
    let won = won.into_inner().unwrap();
    assert_eq!(won.len(), 1, "exactly one instance takes over: {won:?}");
    // Everyone else keeps following the new leader.
    for s in stores {
        let again = s.shared_takeover(t, now_ms(), MIN_REMAINING).await.unwrap();
        assert_eq!(again, None, "a second takeover while the new leader lives");
    }
    won[0]
}

/// A leader's crash must not strand its followers: instance A leads and dies without finishing; followers on
/// B and C are taken over by exactly one of them and get the new leader's answer, and a caller
/// arriving after A's death follows the new leader, not the dead one.
pub async fn a_dead_leaders_followers_are_taken_over_by_one_instance<T>()
where
    Redis<T>: Backend,
{
    let backend = Redis::<T>::start(tuning()).await;
    let (a, a_life) = backend.connect().await;
    let (b, _b_life) = backend.connect().await;
    let (c, _c_life) = backend.connect().await;
    let t = image_target();
    let (_dies_with_a, first) = lead(&a, &t, now_ms()).await;
    let on_b = follow(&b, &t, now_ms()).await;
    let on_c = follow(&c, &t, now_ms()).await;
    assert_eq!(
        b.shared_takeover(&t, now_ms(), MIN_REMAINING)
            .await
            .unwrap(),
        None,
        "no takeover while the leader lives"
    );

    a_life.cancel();
    let (winner, second) = taken_over(&[&b, &c], &t).await;
    assert!(second > first, "the new leader has a newer fencing token");
    let newcomer = follow(&c, &t, now_ms()).await;
    let leader: &dyn Store = [&b as &dyn Store, &c][winner];
    leader
        .shared_finish(&t, second, Ok(answer("NEW", now_ms(), 3_600_000)), now_ms())
        .await
        .unwrap();
    for rx in [on_b, on_c, newcomer] {
        assert_eq!(delivered(rx).await.unwrap(), "NEW");
    }
}

/// A live leader whose task runs for several leases keeps its lock: no follower takes over and
/// new callers keep following it, so there is never a second task.
pub async fn a_leaders_lock_is_renewed_while_its_task_outlives_the_lease<T>()
where
    Redis<T>: Backend,
{
    let backend = Redis::<T>::start(tuning()).await;
    let (a, _a_life) = backend.connect().await;
    let (b, _b_life) = backend.connect().await;
    let t = image_target();
    let (on_a, token) = lead(&a, &t, now_ms()).await;
    let on_b = follow(&b, &t, now_ms()).await;
    let until = now_ms() + 3 * LEASE_MS;
    // Without renewal the lock would lapse after one lease and B, whose follower is live, would
    // take over; watched for three.
    eventually(
        Duration::from_secs(60),
        "three leases to pass while the leader solves",
        || {
            let (b, t) = (&b, &t);
            async move {
                let second = b.shared_takeover(t, now_ms(), MIN_REMAINING).await.unwrap();
                assert_eq!(
                    second, None,
                    "a second leader while the first renews its lock"
                );
                now_ms() >= until
            }
        },
    )
    .await;
    let late = follow(&b, &t, now_ms()).await;
    a.shared_finish(&t, token, Ok(answer("ONE", now_ms(), 3_600_000)), now_ms())
        .await
        .unwrap();
    for rx in [on_a, on_b, late] {
        assert_eq!(delivered(rx).await.unwrap(), "ONE");
    }
}

/// The old leader was only cut off (paused past its lease, its finish run late): once a follower
/// took over, its finish must not release the new leader's lock; its failure fails nobody, and
/// its answer is shared with everyone waiting and cached.
pub async fn a_leader_whose_lock_ran_out_is_fenced_off<T>()
where
    Redis<T>: Backend,
{
    let backend = Redis::<T>::start(tuning()).await;
    let (a, a_life) = backend.connect().await;
    let (b, _b_life) = backend.connect().await;
    let t = image_target();
    let (_, first) = lead(&a, &t, now_ms()).await;
    let mut on_b = follow(&b, &t, now_ms()).await;
    a_life.cancel();
    let (_, second) = taken_over(&[&b], &t).await;

    let failure = SolveFailure::new("ERROR_CAPTCHA_UNSOLVABLE", "late");
    a.shared_finish(&t, first, Err(failure), now_ms())
        .await
        .unwrap();
    let mut late = follow(&b, &t, now_ms()).await;
    assert!(still_waiting(&mut on_b), "an old leader failed a follower");
    assert!(still_waiting(&mut late), "an old leader failed a follower");

    a.shared_finish(&t, first, Ok(answer("OCR1", now_ms(), 3_600_000)), now_ms())
        .await
        .unwrap();
    for rx in [on_b, late] {
        assert_eq!(delivered(rx).await.unwrap(), "OCR1");
    }
    // The new leader's lock stayed: without the cache, a caller follows it...
    b.shared_evict(&t.id).await.unwrap();
    let waiting = follow(&b, &t, now_ms()).await;
    assert_eq!(
        b.shared_takeover(&t, now_ms(), MIN_REMAINING)
            .await
            .unwrap(),
        None
    );
    // ... until its own finish releases it.
    b.shared_finish(
        &t,
        second,
        Ok(answer("OCR2", now_ms(), 3_600_000)),
        now_ms(),
    )
    .await
    .unwrap();
    assert_eq!(delivered(waiting).await.unwrap(), "OCR2");
    b.shared_evict(&t.id).await.unwrap();
    let (_, third) = lead(&b, &t, now_ms()).await;
    assert!(third > second);
}

/// Callers that left (deadline, dropped request) stop being renewed: once the leader is dead
/// too, nothing keeps the target, and retirement forgets it (its followers used to stay listed
/// for good).
pub async fn followers_that_left_stop_keeping_a_target_alive<T>()
where
    Redis<T>: Backend,
{
    let backend = Redis::<T>::start(Tuning {
        target_idle: Duration::ZERO,
        ..tuning()
    })
    .await;
    let (a, a_life) = backend.connect().await;
    let (b, _b_life) = backend.connect().await;
    let t = image_target();
    let (left_a, _) = lead(&a, &t, now_ms()).await;
    let left_b = follow(&b, &t, now_ms()).await;
    drop((left_a, left_b));
    a_life.cancel();
    eventually(
        Duration::from_secs(30),
        "the target to retire once nobody live follows or leads it",
        || {
            let b = &b;
            async move { b.retire(now_ms(), &HashSet::new()).await.unwrap() == 1 }
        },
    )
    .await;
    // Started afresh: a new caller leads.
    lead(&b, &t, now_ms()).await;
}
