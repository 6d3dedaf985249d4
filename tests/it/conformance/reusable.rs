//! Promise 4 at the `Store` seam: a reusable target (image by content) is solved once, its
//! followers share the leader's outcome, the answer is cached until it expires, and the fencing
//! token keeps an old leader from disturbing a newer one.

use captcha_gateway::engine::SolveFailure;
use captcha_gateway::engine::store::SharedArrival;
use captcha_gateway::model::{Target, TargetPolicy};

use crate::support::image_request;

use super::backend::*;

const NOW: u64 = 1_000_000;

/// A fresh image target per call (the content is the target).
pub fn image_target() -> Target {
    let mut body = b"\x89PNG\r\n\x1a\n".to_vec();
    body.extend_from_slice(target().id.as_bytes());
    let req = image_request(&body);
    Target::of(&req, TargetPolicy::default())
}

pub async fn lead(
    store: &dyn captcha_gateway::engine::Store,
    t: &Target,
    now: u64,
) -> (Mailbox, u64) {
    match store.shared_arrive(t, now, MIN_REMAINING).await.unwrap() {
        SharedArrival::Lead(rx, token) => (rx, token),
        other => panic!("expected to lead, got {other:?}"),
    }
}

pub async fn follow(store: &dyn captcha_gateway::engine::Store, t: &Target, now: u64) -> Mailbox {
    match store.shared_arrive(t, now, MIN_REMAINING).await.unwrap() {
        SharedArrival::Follow(rx) => rx,
        other => panic!("expected to follow, got {other:?}"),
    }
}

async fn cached(store: &dyn captcha_gateway::engine::Store, t: &Target, now: u64) -> String {
    match store.shared_arrive(t, now, MIN_REMAINING).await.unwrap() {
        SharedArrival::Cached(a) => a.text,
        other => panic!("expected the cached answer, got {other:?}"),
    }
}

pub async fn followers_share_one_task_and_the_answer_is_cached<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let (a, b) = (backend.instance().await, backend.instance().await);
    let t = image_target();
    let (leader, token) = lead(&*a, &t, NOW).await;
    let followers = [follow(&*a, &t, NOW).await, follow(&*b, &t, NOW).await];
    a.shared_finish(&t, token, Ok(answer("OCR", NOW, 60_000)), NOW)
        .await
        .unwrap();
    assert_eq!(delivered(leader).await.unwrap(), "OCR");
    for rx in followers {
        assert_eq!(delivered(rx).await.unwrap(), "OCR");
    }
    // Shared, not taken: every later caller gets it while it has enough life left.
    assert_eq!(cached(&*a, &t, NOW).await, "OCR");
    assert_eq!(cached(&*b, &t, NOW + 1).await, "OCR");
    // Too close to expiry: a new task, under a newer token.
    let (_, newer) = lead(&*b, &t, NOW + 60_000 - MIN_REMAINING + 1).await;
    assert!(newer > token, "fencing tokens increase");
}

pub async fn a_failure_reaches_every_follower_and_is_not_cached<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = image_target();
    let (leader, token) = lead(s, &t, NOW).await;
    let follower = follow(s, &t, NOW).await;
    let failure = SolveFailure::new("ERROR_CAPTCHA_UNSOLVABLE", "conformance");
    s.shared_finish(&t, token, Err(failure), NOW).await.unwrap();
    assert_eq!(
        delivered(leader).await.unwrap_err(),
        "ERROR_CAPTCHA_UNSOLVABLE"
    );
    assert_eq!(
        delivered(follower).await.unwrap_err(),
        "ERROR_CAPTCHA_UNSOLVABLE"
    );
    // Nothing cached, and the lock is free: the next caller leads a new task.
    let (_, newer) = lead(s, &t, NOW).await;
    assert!(newer > token);
}

pub async fn an_evicted_answer_is_solved_again<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = image_target();
    let (_, token) = lead(s, &t, NOW).await;
    s.shared_finish(&t, token, Ok(answer("wrong", NOW, 60_000)), NOW)
        .await
        .unwrap();
    assert_eq!(cached(s, &t, NOW).await, "wrong");
    s.shared_evict(&t.id).await.unwrap();
    lead(s, &t, NOW).await;
}

/// A leader's finish arriving after a newer leader took the target (a reply lost and the
/// command run again, or a leader paused past its lock) must not release the newer leader's
/// lock, nor fail the callers the newer leader's task still covers. Its answer is as good as
/// any for a reusable target, so it is shared and cached.
pub async fn an_old_leaders_finish_leaves_the_current_leader_alone<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let t = image_target();
    let (_, old) = lead(s, &t, NOW).await;
    s.shared_finish(&t, old, Ok(answer("first", NOW, 60_000)), NOW)
        .await
        .unwrap();
    s.shared_evict(&t.id).await.unwrap();
    let (mut current, token) = lead(s, &t, NOW).await;
    let mut follower = follow(s, &t, NOW).await;

    // The old leader's finish, once more, with a failure: covered callers keep waiting.
    let failure = SolveFailure::new("ERROR_CAPTCHA_UNSOLVABLE", "late");
    s.shared_finish(&t, old, Err(failure), NOW).await.unwrap();
    assert!(
        still_waiting(&mut current),
        "an old leader failed the current leader's caller"
    );
    assert!(
        still_waiting(&mut follower),
        "an old leader failed a covered follower"
    );
    // The lock is still the current leader's: a new caller follows it.
    let late_follower = follow(s, &t, NOW).await;

    // The old leader's finish with an answer: shared with everyone waiting, and cached.
    s.shared_finish(&t, old, Ok(answer("late", NOW, 60_000)), NOW)
        .await
        .unwrap();
    for rx in [current, follower, late_follower] {
        assert_eq!(delivered(rx).await.unwrap(), "late");
    }
    assert_eq!(cached(s, &t, NOW).await, "late");
    // Still the current leader's lock: without the cache, a caller follows it...
    s.shared_evict(&t.id).await.unwrap();
    let waiting = follow(s, &t, NOW).await;
    // ... until it finishes and releases it.
    s.shared_finish(&t, token, Ok(answer("own", NOW, 60_000)), NOW)
        .await
        .unwrap();
    assert_eq!(delivered(waiting).await.unwrap(), "own");
    s.shared_evict(&t.id).await.unwrap();
    lead(s, &t, NOW).await;
}

/// Per-target figures (pool, demand, waste) are about single-use targets. A reusable target has
/// none: it must not add a row to the figures (and so a series to `/metrics`, and a target to
/// every sweep) for each distinct image ever solved.
pub async fn a_reusable_target_adds_no_per_target_figures<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let single = target();
    s.put(&single, answer("pooled", NOW, 60_000), NOW)
        .await
        .unwrap();
    let t = image_target();
    let (_, token) = lead(s, &t, NOW).await;
    s.shared_finish(&t, token, Ok(answer("OCR", NOW, 60_000)), NOW)
        .await
        .unwrap();
    let ids: Vec<String> = s
        .figures()
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(ids, [single.id], "only the single-use target has figures");
}

/// Taking over is only for a leader that is gone: never while one solves, and never for a target
/// nobody follows any more (every follower got the outcome).
pub async fn nobody_takes_over_a_live_leader_or_a_finished_target<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let (a, b) = (backend.instance().await, backend.instance().await);
    let t = image_target();
    let (leader, token) = lead(&*a, &t, NOW).await;
    let follower = follow(&*b, &t, NOW).await;
    for s in [&a, &b] {
        let taken = s.shared_takeover(&t, NOW, MIN_REMAINING).await.unwrap();
        assert_eq!(taken, None, "took over a live leader");
    }
    a.shared_finish(&t, token, Ok(answer("OCR", NOW, 60_000)), NOW)
        .await
        .unwrap();
    for rx in [leader, follower] {
        assert_eq!(delivered(rx).await.unwrap(), "OCR");
    }
    // Even without the cached answer, nobody follows: nothing to take over.
    b.shared_evict(&t.id).await.unwrap();
    let taken = b.shared_takeover(&t, NOW, MIN_REMAINING).await.unwrap();
    assert_eq!(taken, None, "took over a target nobody follows");
}
