//! The local side of claim batches: sizing, order, freshness, the hold's end, stopping and the
//! map's bound. Tokio's paused clock drives the windows and holds; the scripts' side runs on a
//! real Redis in `tests/it/scripts/held.rs`.

use super::*;
use crate::model::Answer;

fn answer(token: &str, expires_at: u64) -> String {
    let a = Answer {
        text: token.into(),
        user_agent: None,
        solved_at: 0,
        expires_at,
        upstream: None,
    };
    serde_json::to_string(&a).unwrap()
}

/// The mails of a batch read when Redis's time was 1,000, each answer expiring at `expiry`.
fn mails(tokens: &[&str], expiry: u64) -> Vec<String> {
    tokens
        .iter()
        .map(|t| format!("A|{expiry}|{}", answer(t, expiry)))
        .collect()
}

/// Arrivals for `target` at `rate` a second for a window, so the next one asks for a batch.
async fn warm(held: &Held, target: &str, per_window: u32) -> Turn {
    for _ in 0..per_window {
        let _ = held.arrive(target, 0, 0, Look::First);
    }
    tokio::time::advance(WINDOW).await;
    held.arrive(target, 0, 0, Look::First)
}

fn asked(turn: &Turn) -> Option<u32> {
    match turn {
        Turn::Script { hold, .. } => *hold,
        Turn::Hit(_) => panic!("a hit where a script call was due"),
        Turn::Await(_) => panic!("a wait where a script call was due"),
    }
}

fn token(turn: Turn) -> String {
    match turn {
        Turn::Hit(a) => a.text,
        Turn::Script { .. } | Turn::Await(_) => panic!("a script call where a hit was due"),
    }
}

/// The release a script call carries; a hit or a wait here is the fault under test.
fn released(turn: Turn) -> Option<Release> {
    match turn {
        Turn::Script { release, .. } => release,
        Turn::Hit(a) => panic!(
            "{} handed out from memory where a script call was due",
            a.text
        ),
        Turn::Await(_) => panic!("waited with no batch being taken"),
    }
}

fn release(batch: &str, served: usize) -> Release {
    Release {
        batch: batch.into(),
        served,
    }
}

fn batch(id: &str, tokens: &[&str], at: Millis) -> Batch {
    // Redis read at 1,000; answers expire at 61,000: 60 s left, restamped at `at`.
    Batch::read(
        id.into(),
        &mails(tokens, 61_000),
        1_000,
        at,
        Instant::now() + HOLD,
    )
}

#[tokio::test(start_paused = true)]
async fn a_slow_target_is_never_batched_and_a_busy_one_asks_once_at_a_time() {
    let held = Held::new(32);
    // 1 arrival per 100 ms window: 10 a second, one per span.
    assert_eq!(asked(&warm(&held, "slow", 1).await), None);
    // 50 per window: 500 a second, 50 per span, capped at 32.
    let first = warm(&held, "busy", 50).await;
    assert_eq!(asked(&first), Some(32));
    // Until that call's batch arrives, nobody else asks: a second look runs the script alone.
    assert_eq!(asked(&held.arrive("busy", 0, 0, Look::Last)), None);
    assert!(held.claim("busy").land(None, true).is_none());
    assert_eq!(asked(&held.arrive("busy", 0, 0, Look::First)), Some(32));
    // Off: never.
    let off = Held::new(0);
    assert_eq!(asked(&warm(&off, "busy", 50).await), None);
}

#[tokio::test(start_paused = true)]
async fn a_batch_is_handed_out_once_in_order_then_released_with_its_count() {
    let held = Held::new(32);
    assert!(asked(&warm(&held, "t", 50).await).is_some());
    let at = 5_000;
    assert!(
        held.claim("t")
            .land(Some(batch("b1", &["a", "b", "c"], at)), true)
            .is_none()
    );
    assert_eq!(token(held.arrive("t", at, 10_000, Look::First)), "a");
    assert_eq!(token(held.arrive("t", at, 10_000, Look::First)), "b");
    assert_eq!(token(held.arrive("t", at, 10_000, Look::First)), "c");
    // Spent: the next arrival runs the script and ends the batch, three handed out.
    assert_eq!(
        released(held.arrive("t", at, 10_000, Look::First)),
        Some(release("b1", 3))
    );
    // Nothing left to release a second time.
    assert!(held.lapse("t", "b1").is_none());
    assert!(held.stop().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_hit_at_once_hands_out_in_order_counts_and_leaves_the_rest_to_the_arrival() {
    let held = Held::new(64);
    assert_eq!(asked(&warm(&held, "t", 10).await), Some(10));
    let tokens: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let at = 5_000;
    assert!(
        held.claim("t")
            .land(Some(batch("b1", &tokens, at)), true)
            .is_none()
    );
    // A caller needing more than the answers have left gets nothing at once, and takes nothing.
    assert!(held.hit("t", at, 61_000).is_none());
    for want in &tokens {
        assert_eq!(
            held.hit("t", at, 10_000).map(|a| a.text).as_deref(),
            Some(*want)
        );
    }
    // Spent: nothing at once, and nothing changed either; the arrival ends the batch.
    assert!(held.hit("t", at, 10_000).is_none());
    // The hits counted: 41 arrivals in the window (the warm-up's last and 40 hits) size the
    // next batch; had they not counted, one arrival would ask for none.
    tokio::time::advance(WINDOW).await;
    match held.arrive("t", at, 10_000, Look::First) {
        Turn::Script { release: r, hold } => {
            assert_eq!(r, Some(release("b1", 40)));
            assert_eq!(hold, Some(41));
        }
        _ => panic!("the spent batch's arrival must run the script"),
    }
    // A target with no batch, or never seen, is not served at once and is not tracked for it.
    let tracked = held.tracked();
    assert!(held.hit("unseen", at, 0).is_none());
    assert_eq!(held.tracked(), tracked);
    assert!(Held::new(0).hit("t", at, 0).is_none());
}

#[tokio::test(start_paused = true)]
async fn an_answer_without_the_callers_min_remaining_is_not_handed_out_from_memory() {
    let held = Held::new(32);
    let _ = warm(&held, "t", 50).await;
    // Restamped at 0: 60 s left.
    assert!(
        held.claim("t")
            .land(Some(batch("b1", &["a", "b"], 0)), true)
            .is_none()
    );
    // At 50 s, 10 s are left: a caller needing 20 goes to Redis, and the batch ends unspent.
    assert_eq!(
        released(held.arrive("t", 50_000, 20_000, Look::First)),
        Some(release("b1", 0))
    );
}

#[tokio::test(start_paused = true)]
async fn the_hold_ends_on_time_and_its_release_comes_once() {
    let held = Held::new(32);
    let _ = warm(&held, "t", 50).await;
    assert!(
        held.claim("t")
            .land(Some(batch("b1", &["a", "b"], 0)), true)
            .is_none()
    );
    assert_eq!(token(held.arrive("t", 0, 0, Look::First)), "a");
    tokio::time::advance(HOLD).await;
    // Past the hold nothing is handed out from memory; the lapse timer gets the release.
    assert!(held.lapse("t", "other").is_none());
    assert_eq!(held.lapse("t", "b1"), Some(release("b1", 1)));
    assert_eq!(released(held.arrive("t", 0, 0, Look::First)), None);
}

#[tokio::test(start_paused = true)]
async fn stopping_releases_every_batch_and_keeps_none_after() {
    let held = Held::new(32);
    for t in ["x", "y"] {
        assert!(asked(&warm(&held, t, 50).await).is_some());
    }
    assert!(
        held.claim("x")
            .land(Some(batch("bx", &["a", "b"], 0)), true)
            .is_none()
    );
    let mut back = held.stop();
    back.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(back, vec![("x".to_owned(), release("bx", 0))]);
    // y's batch arrives after the stop: it goes straight back, and nobody asks again.
    assert_eq!(
        held.claim("y").land(Some(batch("by", &["c"], 0)), true),
        Some(release("by", 0))
    );
    assert_eq!(asked(&warm(&held, "y", 50).await), None);
}

#[tokio::test(start_paused = true)]
async fn an_unreadable_mail_ends_the_batch_there() {
    let mut m = mails(&["a"], 61_000);
    m.push("A|61000|{not json".into());
    m.extend(mails(&["c"], 61_000));
    let b = Batch::read("b".into(), &m, 1_000, 0, Instant::now() + HOLD);
    // Handed out as a prefix: "c" goes back at release with the unreadable one.
    assert_eq!(b.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn targets_are_forgotten_when_idle_and_never_tracked_past_the_bound() {
    let held = Held::new(32);
    for i in 0..MAX_TARGETS {
        let _ = held.arrive(&format!("t{i}"), 0, 0, Look::First);
    }
    assert_eq!(held.tracked(), MAX_TARGETS);
    // Full of recent targets: one more is served by the script, not tracked.
    assert!(asked(&held.arrive("extra", 0, 0, Look::First)).is_none());
    assert_eq!(held.tracked(), MAX_TARGETS);
    tokio::time::advance(FORGET_AFTER).await;
    held.forget_idle();
    assert_eq!(held.tracked(), 0);
}

#[tokio::test(start_paused = true)]
async fn callers_wait_for_a_batch_being_taken_and_are_let_go_if_it_is_given_up() {
    let held = Held::new(32);
    let first = warm(&held, "t", 50).await;
    assert!(asked(&first).is_some());
    let Turn::Await(landed) = held.arrive("t", 0, 0, Look::First) else {
        panic!("a second caller ran its own script while a batch was being taken");
    };
    assert!(
        held.claim("t")
            .land(Some(batch("b1", &["a"], 0)), true)
            .is_none()
    );
    landed.await;
    assert_eq!(token(held.arrive("t", 0, 0, Look::Last)), "a");
    // The next taker is cancelled before its reply: waiters are let go, not left waiting.
    let _ = held.arrive("t", 0, 0, Look::First);
    let claim = held.claim("t");
    let Turn::Await(landed) = held.arrive("t", 0, 0, Look::First) else {
        panic!("no wait while a batch was being taken");
    };
    drop(claim);
    landed.await;
    assert!(asked(&held.arrive("t", 0, 0, Look::First)).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_stuck_taker_holds_nobody_up_and_the_next_batch_is_sized_for_those_who_waited() {
    let held = Held::new(64);
    // 10 arrivals a window: 100 a second, a batch of 10 by rate alone.
    assert_eq!(asked(&warm(&held, "t", 10).await), Some(10));
    for _ in 0..40 {
        assert!(matches!(
            held.arrive("t", 0, 0, Look::Again),
            Turn::Await(_)
        ));
    }
    // The taker lands: the forty it kept waiting size the next batch.
    assert!(held.claim("t").land(None, true).is_none());
    assert_eq!(asked(&held.arrive("t", 0, 0, Look::Again)), Some(40));
    // That taker is stuck (it times itself): waiting callers are woken, and they and later
    // ones run their own script, asking for nothing, until it lands.
    let Turn::Await(landed) = held.arrive("t", 0, 0, Look::Again) else {
        panic!("no wait while a batch was being taken");
    };
    held.stuck("t");
    landed.await;
    assert_eq!(asked(&held.arrive("t", 0, 0, Look::Again)), None);
    assert!(held.claim("t").land(None, true).is_none());
    assert!(matches!(
        held.arrive("t", 0, 0, Look::First),
        Turn::Script { hold: Some(_), .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn when_the_pool_is_dry_misses_do_not_queue_behind_one_taker() {
    let held = Held::new(64);
    assert!(asked(&warm(&held, "t", 50).await).is_some());
    // The taker's caller found the pool empty: it waits for a solve.
    assert!(held.claim("t").land(None, false).is_none());
    // The next taker asks again, but nobody waits for it while the pool is dry.
    assert!(asked(&held.arrive("t", 0, 0, Look::Again)).is_some());
    assert_eq!(asked(&held.arrive("t", 0, 0, Look::Again)), None);
    // A taker that finds answers again ends the dry spell.
    assert!(
        held.claim("t")
            .land(Some(batch("b1", &["a"], 0)), true)
            .is_none()
    );
    assert_eq!(token(held.arrive("t", 0, 0, Look::First)), "a");
    let _ = held.arrive("t", 0, 0, Look::First);
    assert!(matches!(
        held.arrive("t", 0, 0, Look::Again),
        Turn::Await(_)
    ));
}
