//! Account behaviour against the scripted in-memory provider, in virtual time.

use std::time::Duration;

use futures::future::join_all;

use super::*;
use crate::eventually::eventually;
use crate::model::{RecaptchaVersion, TaskParams};
use crate::provider::code_error;
use crate::provider::testing::fake::FakeProvider;
use crate::wire::inphp::InPhpDialect;

fn turnstile() -> SolveRequest {
    SolveRequest::new(TaskParams::declared_of(
        crate::model::Kind::Turnstile,
        &[
            ("sitekey", "0x4AAA"),
            ("pageurl", "https://a.example/login"),
        ],
    ))
}

fn enterprise() -> SolveRequest {
    SolveRequest::new(TaskParams::Recaptcha {
        sitekey: "6Le".into(),
        pageurl: "https://a.example/".into(),
        version: RecaptchaVersion::V2,
        enterprise: true,
        invisible: false,
        action: None,
        min_score: None,
        data_s: None,
        domain: None,
    })
}

fn settings(threads: u32) -> AccountSettings {
    AccountSettings {
        name: "test".into(),
        threads,
        ..AccountSettings::default()
    }
}

fn start(fake: FakeProvider, settings: AccountSettings) -> (Arc<FakeProvider>, Arc<Account>) {
    let fake = Arc::new(fake);
    let account = Account::start(
        fake.clone(),
        settings.clone(),
        budget(&settings),
        &Shutdown::new(),
    );
    (fake, account)
}

fn budget(settings: &AccountSettings) -> crate::provider::Budget {
    crate::provider::budget::in_process(crate::provider::BudgetSettings::new(settings.threads))
}

fn in_secs(s: u64) -> Instant {
    Instant::now() + Duration::from_secs(s)
}

fn err(code: &str, family: InPhpDialect) -> ProviderError {
    code_error(code, family, "")
}

#[tokio::test(start_paused = true)]
async fn capacity_errors_are_retried_after_the_providers_wait() {
    let no_slot = err("ERROR_NO_SLOT_AVAILABLE", InPhpDialect::TwoCaptcha);
    let fake = FakeProvider::new().submit_errors(vec![no_slot; 3]);
    let (fake, account) = start(fake, settings(2));
    let solved = account
        .solve(&turnstile(), in_secs(120), Priority::Interactive)
        .await
        .unwrap();
    assert!(solved.text.starts_with("answer-"));
    let times = fake.submit_times();
    assert_eq!(times.len(), 4);
    for pair in times.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_secs(5), "{times:?}");
    }
    let stats = account.stats();
    assert_eq!(
        (
            stats.submits,
            stats.submit_errors_capacity,
            stats.capacity_retries,
            stats.solved
        ),
        (4, 3, 3, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_refusal_at_the_plan_lowers_the_cap_to_what_ran_and_the_refused_tasks_wait_under_it() {
    // Configured for 4 threads; the provider's plan holds 2.
    let no_slot = err("ERROR_NO_SLOT_AVAILABLE", InPhpDialect::CaptchaAi);
    let fake = FakeProvider::new()
        .solve_time(Duration::from_secs(20))
        .plan(2, no_slot);
    let (fake, account) = start(fake, settings(4));
    assert_eq!(account.effective_threads(), 4);
    let solves = {
        let account = account.clone();
        tokio::spawn(async move {
            let req = turnstile();
            let solve = |_| account.solve(&req, in_secs(120), Priority::Interactive);
            join_all((0..4).map(solve)).await
        })
    };
    // Virtual time: step it until both refused tasks were refused.
    while account.stats().submit_errors_capacity < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        account.effective_threads(),
        2,
        "two ran when the provider refused"
    );
    for solved in solves.await.unwrap() {
        solved.unwrap();
    }
    assert_eq!(fake.max_in_flight(), 2);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(account.effective_threads(), 4, "grown back to the threads");
    assert_eq!(account.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_below_what_the_provider_just_took_is_waited_out_with_the_cap_unchanged() {
    let no_slot = err("ERROR_NO_SLOT_AVAILABLE", InPhpDialect::CaptchaAi);
    let fake = FakeProvider::new().solve_time(Duration::from_secs(20));
    let (fake, account) = start(fake, settings(4));
    let first = {
        let account = account.clone();
        tokio::spawn(async move {
            let req = turnstile();
            let solve = |_| account.solve(&req, in_secs(120), Priority::Interactive);
            join_all((0..3).map(solve)).await
        })
    };
    // The provider took three at once...
    while fake.submit_times().len() < 3 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // ...and then refuses the fourth with two running: a moment's shortage, not the plan.
    fake.refuse_next(no_slot);
    let fourth = account
        .solve(&turnstile(), in_secs(120), Priority::Interactive)
        .await;
    fourth.unwrap();
    assert_eq!(account.stats().submit_errors_capacity, 1);
    assert_eq!(account.effective_threads(), 4);
    for solved in first.await.unwrap() {
        solved.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn capacity_is_never_surfaced_while_time_remains() {
    // CaptchaAI's "no free threads" carries no provider wait: only the backoff paces retries.
    let busy = err("ERROR_ZERO_BALANCE", InPhpDialect::CaptchaAi);
    let (fake, account) = start(FakeProvider::new().submit_error_forever(busy), settings(1));
    let deadline = in_secs(60);
    let e = account
        .solve(&turnstile(), deadline, Priority::Interactive)
        .await
        .unwrap_err();
    assert_eq!((e.code.as_str(), e.class), (TIMEOUT, ErrorClass::Transient));
    assert!(e.detail.contains("ERROR_ZERO_BALANCE"), "{e}");
    assert!(Instant::now() <= deadline);
    // Waits are at most 10 s, so a retry fits until at least 50 s in: 6 tries or more.
    assert!(
        fake.submit_times().len() >= 6,
        "{}",
        fake.submit_times().len()
    );
    assert_eq!(account.stats().timeouts, 1);
    assert_eq!(account.in_flight(), 0, "a refused submit holds no thread");
}

#[tokio::test(start_paused = true)]
async fn transient_errors_are_retried_a_bounded_number_of_times() {
    let html = err("BAD_RESPONSE", InPhpDialect::CaptchaAi);
    let (fake, account) = start(FakeProvider::new().submit_error_forever(html), settings(1));
    let e = account
        .solve(&turnstile(), in_secs(300), Priority::Interactive)
        .await
        .unwrap_err();
    assert_eq!(e.code, "BAD_RESPONSE");
    assert_eq!(fake.submit_times().len(), 4);
    let stats = account.stats();
    assert_eq!((stats.transient_retries, stats.failed), (3, 1));
}

#[tokio::test(start_paused = true)]
async fn transient_then_success() {
    let fake = FakeProvider::new().submit_errors(vec![err("HTTP_502", InPhpDialect::CaptchaAi)]);
    let (fake, account) = start(fake, settings(1));
    account
        .solve(&turnstile(), in_secs(120), Priority::Interactive)
        .await
        .unwrap();
    let times = fake.submit_times();
    assert_eq!(times.len(), 2);
    assert!(
        times[1] - times[0] >= Duration::from_secs(5),
        "CaptchaAI asks for ~5 s"
    );
}

#[tokio::test(start_paused = true)]
async fn permanent_and_account_errors_are_not_retried() {
    for (code, family) in [
        ("ERROR_GOOGLEKEY", InPhpDialect::TwoCaptcha),
        ("ERROR_WRONG_USER_KEY", InPhpDialect::CaptchaAi),
        ("ERROR_ZERO_BALANCE", InPhpDialect::TwoCaptcha),
    ] {
        let (fake, account) = start(
            FakeProvider::new().submit_error_forever(err(code, family)),
            settings(1),
        );
        let e = account
            .solve(&turnstile(), in_secs(120), Priority::Interactive)
            .await
            .unwrap_err();
        assert_eq!(e.code, code);
        assert_eq!(fake.submit_times().len(), 1, "{code}");
    }
}

#[tokio::test(start_paused = true)]
async fn in_flight_never_exceeds_threads() {
    let (fake, account) = start(FakeProvider::new().ready_after(2), settings(3));
    let req = turnstile();
    let solves = (0..10).map(|_| account.solve(&req, in_secs(600), Priority::Interactive));
    let results = join_all(solves).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(fake.max_in_flight(), 3);
    assert_eq!(account.in_flight(), 0);
    assert_eq!(account.stats().solved, 10);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_task_keeps_its_thread_until_its_poll_horizon() {
    let (fake, account) = start(FakeProvider::new().never_ready(), settings(1));
    let e = account
        .solve(&turnstile(), in_secs(20), Priority::Interactive)
        .await
        .unwrap_err();
    assert_eq!(e.code, TIMEOUT);
    // The provider is still working on it: the thread stays taken...
    assert_eq!(account.in_flight(), 1);
    let polls = fake.polls().len();
    assert!(polls >= 1);
    tokio::time::sleep(Duration::from_secs(60)).await;
    // ...but nobody waits for the answer, so it is not checked any more...
    assert_eq!(fake.polls().len(), polls);
    assert_eq!(account.in_flight(), 1);
    // ...and the thread comes back once the poller would have given the task up.
    let horizon = account.settings.poll.horizon(Kind::Turnstile);
    tokio::time::sleep(horizon).await;
    assert_eq!(account.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_task_its_caller_left_before_it_was_submitted_ends_unstarted_and_spends_nothing() {
    let no_slot = err("ERROR_NO_SLOT_AVAILABLE", InPhpDialect::CaptchaAi);
    let fake = FakeProvider::new()
        .solve_time(Duration::from_secs(60))
        .plan(1, no_slot);
    let (fake, account) = start(fake, settings(1));
    let busy = {
        let account = account.clone();
        tokio::spawn(async move {
            let req = turnstile();
            account
                .solve(&req, in_secs(120), Priority::Interactive)
                .await
        })
    };
    while fake.submit_times().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Waiting for the one thread when its caller leaves at 10 s: given up, never submitted.
    let schedule = Schedule::new(Priority::Interactive, in_secs(120)).start_by(in_secs(10));
    let e = account
        .solve_noted(&turnstile(), schedule, &|_| {})
        .await
        .unwrap_err();
    assert_eq!(e.code, UNSTARTED);
    assert_eq!(fake.submit_times().len(), 1);
    assert_eq!((account.stats().failed, account.stats().timeouts), (0, 0));
    busy.await.unwrap().unwrap();
    assert_eq!(account.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn answers_bound_to_a_browser_keep_their_user_agent() {
    let (fake, account) = start(FakeProvider::new(), settings(2));
    let solved = account
        .solve(&enterprise(), in_secs(120), Priority::Interactive)
        .await
        .unwrap();
    assert_eq!(solved.user_agent.as_deref(), Some("UA/1"));
    assert!(
        fake.polls()
            .iter()
            .all(|(_, ids, extras)| *extras && ids.len() == 1)
    );
    let solved = account
        .solve(&turnstile(), in_secs(120), Priority::Interactive)
        .await
        .unwrap();
    assert_eq!(solved.user_agent, None);
}

/// A solve on an account stopping under `shutdown`, in the background.
fn solving(account: &Arc<Account>) -> tokio::task::JoinHandle<Result<Solved, ProviderError>> {
    let account = account.clone();
    tokio::spawn(async move {
        account
            .solve(&turnstile(), in_secs(600), Priority::Interactive)
            .await
    })
}

#[tokio::test(start_paused = true)]
async fn a_task_submitted_before_the_signal_keeps_being_polled_and_answers_within_the_grace() {
    let fake = Arc::new(FakeProvider::new().ready_after(3));
    let shutdown = Shutdown::new();
    let account = Account::start(fake.clone(), settings(1), budget(&settings(1)), &shutdown);
    let solve = solving(&account);
    eventually(
        Duration::from_secs(30),
        "the task to be submitted",
        || async { fake.submit_times().len() == 1 },
    )
    .await;
    assert!(fake.polls().is_empty(), "not checked before the signal");
    shutdown.token.cancel();
    let signalled = Instant::now();

    let solved = solve.await.unwrap().expect("answered within the grace");
    assert_eq!(solved.text, "answer-1001");
    let polls = fake.polls();
    assert_eq!(polls.len(), 3, "checked until ready: {polls:?}");
    assert!(polls.iter().all(|(at, _, _)| *at >= signalled));
    assert!(!shutdown.cut.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_task_still_running_at_the_cut_ends_with_shutdown() {
    let fake = Arc::new(FakeProvider::new().never_ready());
    let shutdown = Shutdown::new();
    let account = Account::start(fake.clone(), settings(1), budget(&settings(1)), &shutdown);
    let solve = solving(&account);
    eventually(
        Duration::from_secs(30),
        "the task to be submitted",
        || async { fake.submit_times().len() == 1 },
    )
    .await;
    shutdown.token.cancel();
    // The signal alone does not end it: the poller goes on checking.
    fake.polled(2).await;
    assert!(!solve.is_finished(), "still waiting for its answer");

    shutdown.cut.cancel();
    let e = solve.await.unwrap().unwrap_err();
    assert_eq!(e.code, SHUTDOWN);
    let stats = account.stats();
    assert_eq!(
        (stats.failed, stats.timeouts),
        (0, 0),
        "handed back, not failed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_not_yet_submitted_at_the_signal_ends_with_shutdown_at_once() {
    let fake = Arc::new(FakeProvider::new().never_ready());
    let shutdown = Shutdown::new();
    let account = Account::start(fake.clone(), settings(1), budget(&settings(1)), &shutdown);
    let first = solving(&account);
    eventually(
        Duration::from_secs(30),
        "the first task to hold the thread",
        || async { fake.submit_times().len() == 1 },
    )
    .await;
    let second = solving(&account);
    eventually(Duration::from_secs(30), "the second to queue", || async {
        account.queued(Priority::Interactive) == 1
    })
    .await;

    shutdown.token.cancel();
    let e = second.await.unwrap().unwrap_err();
    assert_eq!(e.code, SHUTDOWN);
    assert_eq!(fake.submit_times().len(), 1, "nothing new is submitted");
    assert!(
        !first.is_finished(),
        "the submitted one runs on until the cut"
    );
    shutdown.cut.cancel();
    assert_eq!(first.await.unwrap().unwrap_err().code, SHUTDOWN);
}

#[tokio::test(start_paused = true)]
async fn account_calls_pass_through() {
    let (_fake, account) = start(FakeProvider::new(), settings(4));
    assert_eq!(account.balance().await.unwrap(), "1.5");
    assert_eq!(account.threads_info().await.unwrap().threads, 5);
    account.report("1001", true).await.unwrap();
    assert_eq!((account.name(), account.threads()), ("test", 4));
    assert!(!format!("{account:?}").is_empty());
}

#[tokio::test(start_paused = true)]
async fn refills_only_take_threads_no_caller_is_waiting_for() {
    let (_fake, account) = start(FakeProvider::new(), settings(1));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let run = |priority: Priority, name: &'static str| {
        let (account, order) = (account.clone(), order.clone());
        tokio::spawn(async move {
            let solved = account.solve(&turnstile(), in_secs(600), priority).await;
            order.lock().unwrap().push(name);
            solved
        })
    };
    let first = run(Priority::Interactive, "first");
    eventually(
        Duration::from_secs(30),
        "the first caller to hold the thread",
        || async { account.in_flight() >= 1 },
    )
    .await;
    // The refill queues before the caller, yet the caller gets the thread first.
    let refill = run(Priority::Refill, "refill");
    eventually(Duration::from_secs(30), "the refill to queue", || async {
        account.queued(Priority::Refill) >= 1
    })
    .await;
    let caller = run(Priority::Interactive, "caller");
    eventually(Duration::from_secs(30), "the caller to queue", || async {
        account.queued(Priority::Interactive) >= 1
    })
    .await;
    for task in [first, refill, caller] {
        task.await.unwrap().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["first", "caller", "refill"]);
}
