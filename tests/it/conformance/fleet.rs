//! Promises that only a fleet can break, so only Redis runs them: the embedded store is one
//! process, whose claims, waiters and leader locks live and die with it (an instance cannot die
//! while its store lives on), so it has nothing to re-cover and no lock to take over.

use std::time::Duration;

use captcha_gateway::engine::store::TaskOutcome;
use captcha_gateway::engine::store::prelude::*;

use super::backend::*;

const NOW: u64 = 1_000_000;

/// A dead instance's claims expire after one lease; the survivors then claim one task for each
/// of their waiters left uncovered, and no more (promise 3 after a crash).
pub async fn cover_claims_tasks_for_waiters_a_dead_instance_left_uncovered<T>()
where
    Redis<T>: Backend,
{
    // A lease of an hour on the explicit clock. Renewers tick every 20 minutes of real time, so
    // none races this test; the dead instance's is stopped anyway.
    let lease = 3_600_000;
    let backend = Redis::<T>::start(Tuning {
        lease: Duration::from_millis(lease),
        ..Tuning::default()
    })
    .await;
    let (dead, life) = backend.connect().await;
    let (survivor, _life) = backend.connect().await;
    let t = target();
    // Two callers of the doomed instance start tasks, then leave: the tasks are not spoken for.
    let mut left = Vec::new();
    for _ in 0..2 {
        left.push(arrive_start(&dead, &t, NOW).await);
    }
    for (w, rx, _) in left {
        drop(rx);
        dead.abandon(&t, &w, None, true, NOW).await.unwrap();
    }
    // Half a lease later the survivor's three callers are covered by those two tasks and a
    // refill the doomed instance claimed just now.
    let mid = NOW + lease / 2;
    let (_, first) = arrive_wait(&survivor, &t, mid).await;
    let (_, second) = arrive_wait(&survivor, &t, mid).await;
    assert_eq!(dead.reserve(&t, 1, mid).await.unwrap().len(), 1);
    let (_, mut third) = arrive_wait(&survivor, &t, mid).await;
    assert!(
        survivor.cover(&t, mid).await.unwrap().is_empty(),
        "all covered"
    );

    life.cancel();
    drop(dead);
    // One lease after the first two claims: they are gone, the refill's claim is not. Two of the
    // three callers are uncovered: exactly two tasks start, and asking again starts none.
    let after = NOW + lease + 1;
    let claims = survivor.cover(&t, after).await.unwrap();
    assert_eq!(claims.len(), 2, "one task per uncovered caller");
    assert!(
        survivor.cover(&t, after).await.unwrap().is_empty(),
        "covered now"
    );
    for (claim, text) in claims.iter().zip(["r1", "r2"]) {
        let outcome = TaskOutcome::Answer(answer(text, after, 60_000));
        survivor
            .finish(&t, claim, outcome, true, after)
            .await
            .unwrap();
    }
    assert_eq!(delivered(first).await.unwrap(), "r1");
    assert_eq!(delivered(second).await.unwrap(), "r2");
    assert!(
        still_waiting(&mut third),
        "the refill still covers the third caller"
    );
    let counts = survivor.counts(&t, after, MIN_REMAINING).await.unwrap();
    assert_eq!((counts.in_flight, counts.waiting), (1, 1));
}
