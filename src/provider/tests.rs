//! Behaviour over real HTTP: [`InPhpProvider`] and [`Account`] against the scripted mock
//! upstream on a loopback port. Durations are short and real; assertions are about what the
//! upstream saw (request counts, concurrency), never about elapsed time.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;
use url::Url;

use super::testing::mock_upstream::{BatchMode, KEY, MockUpstream, Script};
use super::*;
use crate::model::{RecaptchaVersion, SolveRequest, TaskParams};
use crate::wire::inphp::InPhpDialect;

fn provider(base: Url, family: InPhpDialect) -> Arc<InPhpProvider> {
    let http = InPhpProvider::http_client().expect("client");
    Arc::new(InPhpProvider::new(
        family,
        base,
        KEY.into(),
        "mock".into(),
        http,
    ))
}

/// Fast retries and polls so a test takes well under a second; a wide coalescing window so
/// tasks submitted a few milliseconds apart still share polls on a slow machine.
fn settings(threads: u32) -> AccountSettings {
    AccountSettings {
        name: "mock".into(),
        threads,
        capacity_backoff_base: Duration::from_millis(1),
        capacity_backoff_max: Duration::from_millis(5),
        transient_retries: 3,
        transient_backoff: Duration::from_millis(1),
        poll: PollSettings {
            adaptive: false,
            first_check: Some(Duration::from_millis(100)),
            interval: Duration::from_millis(100),
            max_polls_per_task: 20,
            batch_size: 100,
            max_requests_per_second: 1000.0,
            coalesce: Duration::from_millis(200),
        },
        calibrate_every: None,
    }
}

async fn account(
    script: Script,
    family: InPhpDialect,
    threads: u32,
) -> (MockUpstream, Arc<Account>) {
    let mock = MockUpstream::start(script).await;
    let account = Account::start(
        provider(mock.base.clone(), family),
        settings(threads),
        crate::provider::budget::in_process(crate::provider::BudgetSettings::new(threads)),
        &crate::shutdown::Shutdown::new(),
    );
    (mock, account)
}

fn turnstile() -> SolveRequest {
    let mut req = SolveRequest::new(TaskParams::declared_of(
        crate::model::Kind::Turnstile,
        &[
            ("sitekey", "0x4AAAAAAA"),
            ("pageurl", "https://shop.example/login"),
            ("action", "login"),
        ],
    ));
    req.user_agent = Some("Mozilla/5.0".into());
    req
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

#[tokio::test]
async fn submits_arrive_as_sent_and_numeric_ids_are_understood() {
    let script = Script {
        numeric_ids: true,
        ..Script::default()
    };
    let (mock, account) = account(script, InPhpDialect::CaptchaAi, 2).await;
    let req = turnstile();
    let solved = account
        .solve(&req, deadline(), Priority::Interactive)
        .await
        .unwrap();
    assert!(solved.task_id.parse::<u64>().is_ok(), "{}", solved.task_id);
    assert_eq!(solved.text, format!("tok-{}", solved.task_id));
    let seen = mock.seen();
    assert_eq!(seen.submitted, vec![req]);
    assert_eq!(
        seen.bad_requests, 0,
        "every request carries the key and json=1"
    );
}

#[tokio::test]
async fn capacity_errors_then_success() {
    // CaptchaAI's "no free threads" is capacity, not an account problem.
    let script = Script {
        submit_replies: vec![
            (
                200,
                r#"{"status":0,"request":"ERROR_ZERO_BALANCE"}"#.to_owned(),
            ),
            // A plain-text code although we asked for JSON.
            (200, "ERROR_ZERO_BALANCE".to_owned()),
        ]
        .into(),
        ..Script::default()
    };
    let (mock, account) = account(script, InPhpDialect::CaptchaAi, 1).await;
    account
        .solve(&turnstile(), deadline(), Priority::Interactive)
        .await
        .unwrap();
    assert_eq!(mock.seen().in_requests, 3);
    assert_eq!(account.stats().capacity_retries, 2);
}

#[tokio::test]
async fn an_html_502_is_retried() {
    let script = Script {
        submit_replies: vec![(502, "<html><body>502 Bad Gateway</body></html>".to_owned())].into(),
        ..Script::default()
    };
    let (mock, account) = account(script, InPhpDialect::TwoCaptcha, 1).await;
    account
        .solve(&turnstile(), deadline(), Priority::Interactive)
        .await
        .unwrap();
    assert_eq!(mock.seen().in_requests, 2);
    let stats = account.stats();
    assert_eq!(
        (stats.transient_retries, stats.submit_errors_transient),
        (1, 1)
    );
}

#[tokio::test]
async fn unsolvable_ends_the_task_without_resubmitting() {
    let script = Script {
        unsolvable: true,
        ..Script::default()
    };
    let (mock, account) = account(script, InPhpDialect::TwoCaptcha, 1).await;
    let e = account
        .solve(&turnstile(), deadline(), Priority::Interactive)
        .await
        .unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.class),
        ("ERROR_CAPTCHA_UNSOLVABLE", ErrorClass::Permanent)
    );
    assert_eq!(mock.seen().in_requests, 1);
    assert_eq!(account.stats().failed, 1);
}

#[tokio::test]
async fn many_tasks_share_batched_polls_within_the_thread_cap() {
    let script = Script {
        ready_after: 2,
        ..Script::default()
    };
    let (mock, account) = account(script, InPhpDialect::TwoCaptcha, 8).await;
    let req = turnstile();
    let results =
        join_all((0..40).map(|_| account.solve(&req, deadline(), Priority::Interactive))).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let seen = mock.seen();
    // One check per id would take at least 80 requests (two checks per task).
    assert!(seen.res_requests < 40, "{seen:?}");
    assert!(seen.batch_requests >= 1, "{seen:?}");
    assert!((1..=8).contains(&seen.max_in_flight), "{seen:?}");
    assert_eq!(account.in_flight(), 0);
    let stats = account.stats();
    assert_eq!(stats.solved, 40);
    assert_eq!(stats.poll_requests, u64::from(seen.res_requests));
}

#[tokio::test]
async fn one_batch_poll_ends_every_unsolvable_task_in_it() {
    // `ERROR_CAPTCHA_UNSOLVABLE|ERROR_CAPTCHA_UNSOLVABLE`: each part is that task's failure.
    // Read as one error about the request, the tasks would be polled again until their budget
    // ran out, and every task batched with a failed one would time out.
    let script = Script {
        unsolvable: true,
        ..Script::default()
    };
    let (mock, account) = account(script, InPhpDialect::TwoCaptcha, 8).await;
    let req = turnstile();
    let results =
        join_all((0..6).map(|_| account.solve(&req, deadline(), Priority::Interactive))).await;
    for r in &results {
        assert!(
            matches!(r, Err(e) if e.code == "ERROR_CAPTCHA_UNSOLVABLE"),
            "{results:?}"
        );
    }
    let seen = mock.seen();
    assert!(seen.batch_requests >= 1, "{seen:?}");
    // One check per task at most: no task is asked about after its failure was read.
    assert!(seen.res_requests <= 6, "{seen:?}");
}

#[tokio::test]
async fn a_batch_answer_that_does_not_parse_falls_back_to_single_ids() {
    let script = Script {
        batch_mode: BatchMode::Mismatch,
        ..Script::default()
    };
    let (mock, account) = account(script, InPhpDialect::CaptchaAi, 5).await;
    let req = turnstile();
    let results =
        join_all((0..5).map(|_| account.solve(&req, deadline(), Priority::Interactive))).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let seen = mock.seen();
    assert!(seen.batch_requests >= 1, "{seen:?}");
    assert!(seen.single_requests >= 1, "{seen:?}");
}

#[tokio::test]
async fn batching_stops_after_repeated_unparsable_batches() {
    let script = Script {
        batch_mode: BatchMode::Mismatch,
        ready_after: 100,
        ..Script::default()
    };
    let mock = MockUpstream::start(script).await;
    let p = provider(mock.base.clone(), InPhpDialect::CaptchaAi);
    let a = p.submit(&turnstile()).await.unwrap();
    let b = p.submit(&turnstile()).await.unwrap();
    let ids = [a, b];
    for _ in 0..4 {
        let outcomes = p.poll(&ids, false).await.unwrap();
        assert_eq!(outcomes, vec![PollOutcome::NotReady, PollOutcome::NotReady]);
    }
    assert!(!p.supports_batch());
    let seen = mock.seen();
    assert_eq!((seen.batch_requests, seen.single_requests), (3, 8));
}

#[tokio::test]
async fn answers_with_extras_are_polled_singly_and_keep_their_user_agent() {
    let (mock, account) = account(Script::default(), InPhpDialect::CaptchaAi, 2).await;
    let req = SolveRequest::new(TaskParams::Recaptcha {
        sitekey: "6LeEnterprise".into(),
        pageurl: "https://bank.example/".into(),
        version: RecaptchaVersion::V2,
        enterprise: true,
        invisible: false,
        action: None,
        min_score: None,
        data_s: None,
        domain: None,
    });
    let results =
        join_all((0..3).map(|_| account.solve(&req, deadline(), Priority::Interactive))).await;
    for solved in results {
        assert_eq!(solved.unwrap().user_agent.as_deref(), Some("UA/mock"));
    }
    assert_eq!(mock.seen().batch_requests, 0);
}

#[tokio::test]
async fn account_actions() {
    let (mock, account) = account(Script::default(), InPhpDialect::TwoCaptcha, 2).await;
    assert_eq!(account.balance().await.unwrap(), "3.14");
    account.report("7000001", false).await.unwrap();
    let info = account.threads_info().await.unwrap();
    assert_eq!((info.threads, info.working_threads), (8, 0));
    assert_eq!(mock.seen().bad_requests, 0);
}

#[tokio::test]
async fn the_key_never_appears_in_errors() {
    // A port that was free a moment ago: connections are refused.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    drop(listener);
    let p = provider(base, InPhpDialect::TwoCaptcha);
    let poll = p.poll(&["1".to_owned()], false).await.unwrap_err();
    let submit = p.submit(&turnstile()).await.unwrap_err();
    let balance = p.balance().await.unwrap_err();
    for e in [poll, submit, balance] {
        assert_eq!(
            (e.code.as_str(), e.class),
            ("TRANSPORT", ErrorClass::Transient)
        );
        for text in [e.to_string(), format!("{e:?}")] {
            assert!(!text.contains(KEY), "{text}");
        }
    }
    assert!(!format!("{p:?}").contains(KEY));
}
