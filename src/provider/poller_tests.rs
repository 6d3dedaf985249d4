//! Poller schedules against the scripted in-memory provider, in virtual time.

use std::time::Duration;

use futures::future::join_all;

use super::*;
use crate::model::{SolveRequest, TaskParams};
use crate::provider::account::Counters;
use crate::provider::testing::fake::FakeProvider;
use crate::provider::{Family, code_error};

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
        let req = SolveRequest::new(TaskParams::Text {
            text: "2+2".into(),
            lang: None,
        });
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

fn settings() -> PollSettings {
    PollSettings {
        coalesce: Duration::ZERO,
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
    let r = rig(FakeProvider::new(), PollSettings::default());
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
        code_error("BAD_RESPONSE", Family::CaptchaAi, ""),
        code_error("HTTP_502", Family::CaptchaAi, ""),
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
    let turn = code_error("MAX_USER_TURN", Family::TwoCaptcha, "");
    let r = rig(FakeProvider::new().poll_errors(vec![turn]), settings());
    let (_, rx) = r.task(Kind::Image, false).await;
    assert!(rx.await.is_ok());
    let times: Vec<Instant> = r.fake.polls().iter().map(|p| p.0).collect();
    assert_eq!(times.len(), 2);
    assert!(times[1] - times[0] >= Duration::from_secs(10), "{times:?}");
}

#[tokio::test(start_paused = true)]
async fn account_errors_end_tasks() {
    let bad_key = code_error("ERROR_WRONG_USER_KEY", Family::CaptchaAi, "");
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
    let s = PollSettings::default();
    // 10 s to the first check, 9 more at 5 s, the last 10 at 10 s.
    assert_eq!(
        s.horizon(Kind::Turnstile),
        Duration::from_secs(10 + 45 + 100)
    );
    let zero = PollSettings {
        max_requests_per_second: 0.0,
        max_polls_per_task: 0,
        ..PollSettings::default()
    };
    assert_eq!(zero.gap(), Duration::from_secs(1));
    assert_eq!(zero.horizon(Kind::Image), Duration::from_secs(1));
}
