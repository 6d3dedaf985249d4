//! Poller schedules against the scripted in-memory provider, in virtual time.

use std::time::Duration;

use futures::future::join_all;

use super::*;
use crate::model::{SolveRequest, TaskParams};
use crate::provider::code_error;
use crate::provider::stats::Counters;
use crate::provider::testing::fake::FakeProvider;
use crate::wire::inphp::InPhpDialect;

struct Rig {
    fake: Arc<FakeProvider>,
    tx: mpsc::UnboundedSender<Registration>,
    counters: Arc<Counters>,
}

fn rig(fake: FakeProvider, settings: PollSettings) -> Rig {
    let fake = Arc::new(fake);
    let counters = Arc::new(Counters::default());
    let tx = spawn(
        fake.clone(),
        settings,
        counters.clone(),
        CancellationToken::new(),
    );
    Rig { fake, tx, counters }
}

impl Rig {
    /// Submits a task at the fake and hands it to the poller.
    async fn task(&self, kind: Kind, extras: bool) -> (String, oneshot::Receiver<Settled>) {
        let req = SolveRequest::new(TaskParams::declared_of(
            crate::model::Kind::Text,
            &[("textcaptcha", "2+2")],
        ));
        let id = self.fake.submit(&req).await.unwrap();
        let (reply, rx) = oneshot::channel();
        let reg = Registration {
            id: id.clone(),
            kind,
            extras,
            reply,
        };
        self.tx.send(reg).unwrap_or_else(|_| panic!("poller gone"));
        (id, rx)
    }
}

/// The fixed schedule, without the coalescing window.
fn settings() -> PollSettings {
    PollSettings {
        coalesce: Duration::ZERO,
        ..fixed()
    }
}

fn fixed() -> PollSettings {
    PollSettings {
        adaptive: false,
        ..PollSettings::default()
    }
}

fn gaps(times: &[Instant]) -> Vec<Duration> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

/// Virtual timers fire on whole milliseconds, so an interval may come out a hair long.
fn about(d: Duration, want: Duration) -> bool {
    d >= want && d < want + Duration::from_millis(5)
}

#[tokio::test(start_paused = true)]
async fn due_tasks_share_batches_of_at_most_batch_size() {
    let r = rig(FakeProvider::new(), settings());
    let mut receivers = Vec::new();
    for _ in 0..250 {
        receivers.push(r.task(Kind::Image, false).await.1);
    }
    for settled in join_all(receivers).await {
        let outcome = settled.map(|s| s.outcome);
        assert!(
            matches!(outcome, Ok(PollOutcome::Ready { .. })),
            "{outcome:?}"
        );
    }
    let sizes: Vec<usize> = r.fake.polls().iter().map(|(_, ids, _)| ids.len()).collect();
    assert_eq!(sizes, vec![100, 100, 50]);
    assert_eq!(r.counters.poll_requests.load(Ordering::Relaxed), 3);
    assert_eq!(r.counters.ids_polled.load(Ordering::Relaxed), 250);
}

#[tokio::test(start_paused = true)]
async fn tasks_due_close_together_share_a_request() {
    let r = rig(FakeProvider::new(), fixed());
    let (_, first) = r.task(Kind::Image, false).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (_, second) = r.task(Kind::Image, false).await;
    assert!(first.await.is_ok() && second.await.is_ok());
    let polls = r.fake.polls();
    assert_eq!(polls.len(), 1, "{polls:?}");
    assert_eq!(polls[0].1.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn tasks_needing_extras_are_checked_alone() {
    let r = rig(FakeProvider::new(), settings());
    let mut receivers = Vec::new();
    for i in 0..8 {
        receivers.push(r.task(Kind::RecaptchaV2, i < 3).await.1);
    }
    join_all(receivers).await;
    let polls = r.fake.polls();
    assert_eq!(polls.len(), 4, "{polls:?}");
    let singles = polls.iter().filter(|(_, ids, x)| *x && ids.len() == 1);
    assert_eq!(singles.count(), 3);
    assert!(polls.iter().any(|(_, ids, x)| !*x && ids.len() == 5));
}

#[tokio::test(start_paused = true)]
async fn first_check_follows_the_kind_then_the_interval() {
    let r = rig(FakeProvider::new().ready_after(2), settings());
    let t0 = Instant::now();
    let (image, a) = r.task(Kind::Image, false).await;
    let (recaptcha, b) = r.task(Kind::RecaptchaV2, false).await;
    assert!(a.await.is_ok() && b.await.is_ok());
    let when = |id: &String| -> Vec<Duration> {
        let polls = r.fake.polls();
        polls
            .iter()
            .filter(|(_, ids, _)| ids.contains(id))
            .map(|(t, _, _)| *t - t0)
            .collect()
    };
    let image_checks = when(&image);
    let recaptcha_checks = when(&recaptcha);
    assert!(
        about(image_checks[0], Duration::from_secs(1)),
        "{image_checks:?}"
    );
    assert!(
        about(image_checks[1], Duration::from_secs(6)),
        "{image_checks:?}"
    );
    assert!(
        about(recaptcha_checks[0], Duration::from_secs(15)),
        "{recaptcha_checks:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_that_never_finishes_fails_after_its_budget_slowing_down_past_half() {
    let r = rig(FakeProvider::new().never_ready(), settings());
    let (_, rx) = r.task(Kind::Turnstile, false).await;
    let Ok(PollOutcome::Failed(e)) = rx.await.map(|s| s.outcome) else {
        panic!("expected a failure")
    };
    assert_eq!(
        (e.code.as_str(), e.class),
        ("ERROR_CAPTCHA_UNSOLVABLE", ErrorClass::Permanent)
    );
    let times: Vec<Instant> = r.fake.polls().iter().map(|p| p.0).collect();
    assert_eq!(times.len(), 20);
    let gaps = gaps(&times);
    assert!(
        gaps[..9].iter().all(|g| about(*g, Duration::from_secs(5))),
        "{gaps:?}"
    );
    assert!(
        gaps[9..].iter().all(|g| about(*g, Duration::from_secs(10))),
        "{gaps:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_check_does_not_fail_the_task() {
    let errors = vec![
        code_error("BAD_RESPONSE", InPhpDialect::CaptchaAi, ""),
        code_error("HTTP_502", InPhpDialect::CaptchaAi, ""),
    ];
    let r = rig(FakeProvider::new().poll_errors(errors), settings());
    let (_, rx) = r.task(Kind::Image, false).await;
    assert!(matches!(
        rx.await.map(|s| s.outcome),
        Ok(PollOutcome::Ready { .. })
    ));
    assert_eq!(r.fake.polls().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn capacity_answers_pause_the_account() {
    let turn = code_error("MAX_USER_TURN", InPhpDialect::TwoCaptcha, "");
    let r = rig(FakeProvider::new().poll_errors(vec![turn]), settings());
    let (_, rx) = r.task(Kind::Image, false).await;
    assert!(rx.await.is_ok());
    let times: Vec<Instant> = r.fake.polls().iter().map(|p| p.0).collect();
    assert_eq!(times.len(), 2);
    assert!(times[1] - times[0] >= Duration::from_secs(10), "{times:?}");
}

#[tokio::test(start_paused = true)]
async fn account_errors_end_tasks() {
    let bad_key = code_error("ERROR_WRONG_USER_KEY", InPhpDialect::CaptchaAi, "");
    let r = rig(FakeProvider::new().poll_errors(vec![bad_key]), settings());
    let (_, rx) = r.task(Kind::Image, false).await;
    assert!(
        matches!(rx.await.map(|s| s.outcome), Ok(PollOutcome::Failed(e)) if e.class == ErrorClass::Account)
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_receiver_stops_its_checks() {
    let r = rig(FakeProvider::new().ready_after(3), settings());
    let (abandoned, rx) = r.task(Kind::Image, false).await;
    drop(rx);
    let (_, kept) = r.task(Kind::Image, false).await;
    assert!(kept.await.is_ok());
    let polls = r.fake.polls();
    assert_eq!(polls.len(), 3);
    assert!(
        polls.iter().all(|(_, ids, _)| !ids.contains(&abandoned)),
        "{polls:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn requests_stay_within_the_account_budget() {
    let settings = PollSettings {
        max_requests_per_second: 2.0,
        ..settings()
    };
    let r = rig(FakeProvider::new(), settings);
    let mut receivers = Vec::new();
    for _ in 0..6 {
        receivers.push(r.task(Kind::GeetestV3, true).await.1);
    }
    join_all(receivers).await;
    let times: Vec<Instant> = r.fake.polls().iter().map(|p| p.0).collect();
    assert_eq!(times.len(), 6);
    for gap in gaps(&times) {
        assert!(gap >= Duration::from_millis(499), "{gap:?}");
    }
}

#[test]
fn horizon_covers_every_allowed_check() {
    let s = fixed();
    // 10 s to the first check, 9 more at 5 s, the last 10 at 10 s.
    assert_eq!(
        s.horizon(Kind::Turnstile),
        Duration::from_secs(10 + 45 + 100)
    );
    let zero = PollSettings {
        max_requests_per_second: 0.0,
        max_polls_per_task: 0,
        ..fixed()
    };
    assert_eq!(zero.gap(), Duration::from_secs(1));
    assert_eq!(zero.horizon(Kind::Image), Duration::from_secs(1));
    // The adaptive schedule ends at the same last check, moved to its next tick at most.
    let adaptive = PollSettings::default();
    assert!(adaptive.learns());
    assert_eq!(
        adaptive.horizon(Kind::Turnstile),
        Duration::from_secs(155) + adaptive.interval
    );
    let pinned = PollSettings {
        first_check: Some(Duration::from_secs(2)),
        ..PollSettings::default()
    };
    assert!(
        !pinned.learns(),
        "an explicit first check pins the fixed schedule"
    );
}

/// The checks of each task, as offsets from its submit, in order.
fn checks_by_task(r: &Rig, ids: &[(String, Instant)]) -> Vec<Vec<Duration>> {
    let polls = r.fake.polls();
    ids.iter()
        .map(|(id, at)| {
            polls
                .iter()
                .filter(|(_, ids, _)| ids.contains(id))
                .map(|(t, _, _)| *t - *at)
                .collect()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn adaptive_checks_learn_the_solve_time_and_share_requests() {
    let solve = Duration::from_secs(4);
    let r = rig(
        FakeProvider::new().solve_time(solve),
        PollSettings::default(),
    );
    let mut ids = Vec::new();
    let mut receivers = Vec::new();
    // Ten tasks a second for 40 s, as a busy account sees them.
    for _ in 0..400 {
        let at = Instant::now();
        let (id, rx) = r.task(Kind::RecaptchaV2, false).await;
        ids.push((id, at));
        receivers.push(rx);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for settled in join_all(receivers).await {
        let outcome = settled.map(|s| s.outcome);
        assert!(
            matches!(outcome, Ok(PollOutcome::Ready { .. })),
            "{outcome:?}"
        );
    }
    let checks = checks_by_task(&r, &ids);
    assert!(checks.iter().all(|c| !c.is_empty() && c.len() <= 20));
    // Nothing learned at first: the first task is checked early, well before the 15 s the
    // fixed schedule waits for reCAPTCHA.
    assert!(checks[0][0] <= Duration::from_secs(2), "{:?}", checks[0]);
    // Later tasks: the first check has moved toward 4 s and the answer is fetched soon after
    // (one task in eight also looks below the learned times, at half the first check).
    for (i, c) in checks.iter().enumerate().skip(300) {
        let first = if i % 8 == 0 { c[0] * 2 } else { c[0] };
        assert!(first >= Duration::from_secs(3), "task {i}: {c:?}");
        let fetched = *c.last().unwrap();
        assert!(
            fetched >= solve && fetched - solve <= Duration::from_millis(500),
            "{c:?}"
        );
    }
    let requests = r.counters.poll_requests.load(Ordering::Relaxed);
    assert!(
        requests as f64 <= 0.5 * ids.len() as f64,
        "{requests} requests for {} tasks",
        ids.len()
    );
}

#[tokio::test(start_paused = true)]
async fn adaptive_checks_of_a_task_that_never_finishes_stop_at_the_budget_and_horizon() {
    let settings = PollSettings::default();
    let horizon = settings.horizon(Kind::Turnstile);
    let r = rig(FakeProvider::new().never_ready(), settings);
    let start = Instant::now();
    let (id, rx) = r.task(Kind::Turnstile, false).await;
    let Ok(PollOutcome::Failed(e)) = rx.await.map(|s| s.outcome) else {
        panic!("expected a failure")
    };
    assert_eq!(e.code, "ERROR_CAPTCHA_UNSOLVABLE");
    let checks = &checks_by_task(&r, &[(id, start)])[0];
    assert!(!checks.is_empty() && checks.len() <= 20, "{checks:?}");
    assert!(*checks.last().unwrap() <= horizon, "{checks:?}");
}

/// Solve times spread over 3-6 s, nine tasks a second: after the first hundred tasks, the wait
/// from ready to the check that fetched the answer is a fraction of a second, in virtual time,
/// with batches keeping requests well under one per task.
#[tokio::test(start_paused = true)]
async fn adaptive_checks_follow_varied_solve_times() {
    let (min, spread) = (Duration::from_secs(3), Duration::from_secs(3));
    let r = rig(
        FakeProvider::new().solve_times(min, spread),
        PollSettings::default(),
    );
    let mut ids = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..400 {
        let at = Instant::now();
        let (id, rx) = r.task(Kind::RecaptchaV2, false).await;
        ids.push((id, at));
        receivers.push(rx);
        tokio::time::sleep(Duration::from_millis(110)).await;
    }
    for settled in join_all(receivers).await {
        assert!(matches!(
            settled.map(|s| s.outcome),
            Ok(PollOutcome::Ready { .. })
        ));
    }
    let checks = checks_by_task(&r, &ids);
    assert!(checks.iter().all(|c| !c.is_empty() && c.len() <= 20));
    // The fake's solve time of its n-th task (ids count from 1001).
    let solve = |n: usize| min + spread.mul_f64((n as f64 * 0.618_033_988_75).fract());
    let mut waits: Vec<Duration> = checks
        .iter()
        .enumerate()
        .skip(100)
        .map(|(i, c)| *c.last().unwrap() - solve(i + 1))
        .collect();
    waits.sort();
    let median = waits[waits.len() / 2];
    assert!(median <= Duration::from_millis(300), "{median:?}");
    let requests = r.counters.poll_requests.load(Ordering::Relaxed);
    assert!(requests as f64 <= 0.5 * ids.len() as f64, "{requests}");
}

/// A provider that gets five times slower (3-6 s, then 15-30 s) at the same load: within a
/// few minutes of virtual time the schedule has moved with it, every task still within its
/// check budget.
#[tokio::test(start_paused = true)]
async fn adaptive_checks_follow_a_provider_that_gets_slower() {
    let fake = FakeProvider::new().solve_times(Duration::from_secs(3), Duration::from_secs(3));
    let r = rig(fake, PollSettings::default());
    let mut ids = Vec::new();
    let mut receivers = Vec::new();
    let mut ready = Vec::new();
    // 3-6 s for the first 60 s, then 15-30 s for three minutes, 2 tasks a second.
    for i in 0..480usize {
        let (min, spread) = if i < 120 { (3, 3) } else { (15, 15) };
        if i == 120 {
            r.fake
                .set_solve_times(Duration::from_secs(min), Duration::from_secs(spread));
        }
        let at = Instant::now();
        let (id, rx) = r.task(Kind::RecaptchaV2, false).await;
        let share = ((i + 1) as f64 * 0.618_033_988_75).fract();
        ready.push(Duration::from_secs(min) + Duration::from_secs(spread).mul_f64(share));
        ids.push((id, at));
        receivers.push(rx);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for settled in join_all(receivers).await {
        assert!(matches!(
            settled.map(|s| s.outcome),
            Ok(PollOutcome::Ready { .. })
        ));
    }
    let checks = checks_by_task(&r, &ids);
    assert!(checks.iter().all(|c| !c.is_empty() && c.len() <= 20));
    let median_wait = |range: std::ops::Range<usize>| {
        let mut waits: Vec<Duration> = range
            .map(|i| *checks[i].last().unwrap() - ready[i])
            .collect();
        waits.sort();
        waits[waits.len() / 2]
    };
    // Right after the change the learned checks are all too early: answers wait for the reserve.
    let just_after = median_wait(120..140);
    // The last minute: the schedule has followed.
    let settled = median_wait(360..480);
    assert!(settled <= Duration::from_millis(1500), "{settled:?}");
    assert!(just_after > settled, "{just_after:?} then {settled:?}");
}
