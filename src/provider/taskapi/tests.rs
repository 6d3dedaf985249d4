//! [`TaskApiProvider`] over real HTTP against the simulator speaking the JSON task protocol on a
//! loopback port, on a manual clock: tasks become ready when the test moves time, never by
//! sleeping. Every answer is checked at the simulator as a site backend would.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::model::{Kind, RecaptchaVersion, TaskParams};
use crate::sim::{Clock, Faults, LatencyRange, SimSettings, Simulator, Verdict};

const KEY: &str = "0123456789abcdef0123456789abcdef";
const PAGE: &str = "https://example.com/login";

struct Rig {
    sim: Arc<Simulator>,
    base: Url,
    _server: tokio::task::JoinHandle<()>,
}

impl Rig {
    /// A simulator where every kind takes one second of its manual clock.
    async fn start(tweak: impl FnOnce(&mut SimSettings)) -> Rig {
        Rig::with_clock(Clock::manual(1_704_067_200_000), tweak).await
    }

    async fn with_clock(clock: Clock, tweak: impl FnOnce(&mut SimSettings)) -> Rig {
        let mut settings = SimSettings {
            seed: Some(11),
            keys: vec![KEY.into()],
            latency: Kind::ALL
                .into_iter()
                .map(|k| (k, LatencyRange::fixed(Duration::from_secs(1))))
                .collect(),
            ..SimSettings::default()
        };
        tweak(&mut settings);
        let sim = Simulator::with_clock(settings, clock);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
        let served = sim.clone();
        let server = tokio::spawn(async move {
            let _ = crate::sim::serve(served, listener, std::future::pending()).await;
        });
        Rig {
            sim,
            base,
            _server: server,
        }
    }

    fn provider(&self, flavor: TaskApiDialect, key: &str) -> TaskApiProvider {
        let http = super::super::InPhpProvider::http_client().unwrap();
        TaskApiProvider::new(flavor, self.base.clone(), key.into(), "json-1".into(), http)
    }

    fn advance(&self) {
        self.sim.clock().advance(Duration::from_secs(2));
    }
}

fn requests() -> Vec<SolveRequest> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(&[3u8; 200]);
    let mut cf = SolveRequest::new(TaskParams::declared_of(
        Kind::CloudflareChallenge,
        &[("pageurl", PAGE)],
    ));
    cf.proxy = Some(crate::model::Proxy {
        kind: crate::model::ProxyType::Http,
        address: "u:secret@127.0.0.1:3128".into(),
    });
    vec![
        SolveRequest::recaptcha_v2("6Le-json", PAGE),
        SolveRequest::new(TaskParams::Recaptcha {
            sitekey: "6Le-v3".into(),
            pageurl: PAGE.into(),
            version: RecaptchaVersion::V3,
            enterprise: false,
            invisible: false,
            action: Some("login".into()),
            min_score: Some("0.3".into()),
            data_s: None,
            domain: None,
        }),
        SolveRequest::new(TaskParams::declared_of(
            crate::model::Kind::Turnstile,
            &[("sitekey", "0x4AAAAAAA"), ("pageurl", PAGE)],
        )),
        cf,
        SolveRequest::new(TaskParams::declared_of(
            Kind::Image,
            &[(
                "body",
                &base64::Engine::encode(&base64::engine::general_purpose::STANDARD, png),
            )],
        )),
        SolveRequest::new(TaskParams::declared_of(
            crate::model::Kind::Text,
            &[("textcaptcha", "2+2?")],
        )),
    ]
    .into_iter()
    .chain(
        Kind::ALL
            .into_iter()
            .filter_map(crate::model::kind::declared_sample),
    )
    .collect()
}

/// The single-use credential in an answer, as a site would check it.
fn credential(kind: Kind, text: &str) -> Option<String> {
    match kind {
        Kind::Image | Kind::Text => None,
        // A declared kind's answer as the account stores it; an object's token is its first key.
        declared if !declared.spec().declared_params().is_empty() => {
            let stored = declared.spec().answer.canonical(text.to_owned());
            match declared.spec().answer {
                crate::model::AnswerShape::Object { keys, also } => {
                    let v: Value = serde_json::from_str(&stored).unwrap();
                    // Each key also under every provider's spelling of it (GeeTest's
                    // `geetest_challenge`), so each client finds its own.
                    for (spelling, key) in also {
                        assert_eq!(v[spelling], v[key], "{v}");
                    }
                    v[keys[0]].as_str().map(str::to_owned)
                }
                shape @ crate::model::AnswerShape::Token { extras, .. } => {
                    let (token, beside) = shape.token_parts(&stored);
                    // What a kind keeps beside its token came through too.
                    assert_eq!(beside.len(), extras.len(), "{stored}");
                    Some(token.into_owned())
                }
                crate::model::AnswerShape::AsGiven => Some(stored),
                // Points are no credential; what matters is that they read as points.
                crate::model::AnswerShape::Points { field } => {
                    let points = crate::model::points::read(&stored, field);
                    assert!(
                        points.is_some_and(|p| p.as_array().is_some_and(|a| !a.is_empty())),
                        "{stored}"
                    );
                    None
                }
            }
        }
        _ => Some(text.to_owned()),
    }
}

#[tokio::test]
async fn every_flavor_solves_every_kind_it_has_against_the_simulator() {
    let rig = Rig::start(|_| {}).await;
    for flavor in TaskApiDialect::ALL {
        let p = rig.provider(flavor, KEY);
        assert!(!p.supports_batch());
        for req in requests() {
            let kind = req.kind();
            let id = match p.submit(&req).await {
                Ok(id) => id,
                Err(e) => {
                    // Only a kind the dialect has no task type for (its declaration says
                    // which) is refused, and for good.
                    assert_eq!(e.class, ErrorClass::Permanent, "{flavor:?} {kind}: {e}");
                    assert!(!kind.solved_in(flavor.dialect()), "{flavor:?} {kind}: {e}");
                    continue;
                }
            };
            assert_eq!(
                p.poll(std::slice::from_ref(&id), false).await.unwrap(),
                vec![PollOutcome::NotReady]
            );
            rig.advance();
            let outcome = p
                .poll(std::slice::from_ref(&id), false)
                .await
                .unwrap()
                .remove(0);
            let PollOutcome::Ready {
                text,
                user_agent,
                price,
            } = outcome
            else {
                panic!("{flavor:?} {kind}: {outcome:?}");
            };
            // CapSolver documents no cost in its replies, and the simulator speaks each dialect.
            assert_eq!(
                price.is_some(),
                flavor != TaskApiDialect::CapSolver,
                "{flavor:?}"
            );
            assert_eq!(
                user_agent.is_some(),
                req.answer_has_user_agent(),
                "{flavor:?} {kind}"
            );
            if let Some(token) = credential(kind, &text) {
                let (verdict, _) = rig.sim.verify(&token);
                assert!(
                    matches!(verdict, Verdict::Ok { .. }),
                    "{flavor:?} {kind}: {verdict:?}"
                );
            } else {
                assert!(!text.is_empty());
            }
        }
    }
    assert!(p_balance(&rig).await > 0.0);
}

async fn p_balance(rig: &Rig) -> f64 {
    let balance = rig
        .provider(TaskApiDialect::AntiCaptcha, KEY)
        .balance()
        .await
        .unwrap();
    balance.parse().unwrap()
}

#[tokio::test]
async fn provider_errors_get_their_classes() {
    let rig = Rig::start(|s| {
        s.threads = 1;
    })
    .await;
    let req = SolveRequest::recaptcha_v2("6Le-json", PAGE);
    let wrong = "f".repeat(32);
    let err = rig
        .provider(TaskApiDialect::CapSolver, &wrong)
        .submit(&req)
        .await
        .unwrap_err();
    assert_eq!(
        (err.class, err.code.as_str()),
        (ErrorClass::Account, "ERROR_KEY_DOES_NOT_EXIST")
    );
    assert!(!err.to_string().contains(&wrong));

    let p = rig.provider(TaskApiDialect::AntiCaptcha, KEY);
    let first = p.submit(&req).await.unwrap();
    let err = p.submit(&req).await.unwrap_err();
    assert_eq!(
        (err.class, err.code.as_str()),
        (ErrorClass::Capacity, "ERROR_NO_SLOT_AVAILABLE")
    );
    assert!(err.retry_after.is_some());

    let unknown = p.poll(&["123".into()], false).await.unwrap();
    assert!(
        matches!(&unknown[0], PollOutcome::Failed(e) if e.class == ErrorClass::Permanent && e.code == "ERROR_NO_SUCH_CAPCHA_ID"),
        "{unknown:?}"
    );
    rig.advance();
    assert!(matches!(
        p.poll(&[first], false).await.unwrap()[0],
        PollOutcome::Ready { .. }
    ));

    for (faults, class, code) in [
        (
            Faults {
                zero_balance_rate: 1.0,
                ..Faults::default()
            },
            ErrorClass::Account,
            "ERROR_ZERO_BALANCE",
        ),
        (
            Faults {
                server_error_rate: 1.0,
                ..Faults::default()
            },
            ErrorClass::Transient,
            "ERROR_SERVER_ERROR",
        ),
        (
            Faults {
                html_error_rate: 1.0,
                ..Faults::default()
            },
            ErrorClass::Transient,
            "HTTP_502",
        ),
        (
            Faults {
                malformed_rate: 1.0,
                ..Faults::default()
            },
            ErrorClass::Transient,
            BAD_RESPONSE,
        ),
        (
            Faults {
                drop_rate: 1.0,
                ..Faults::default()
            },
            ErrorClass::Transient,
            "TRANSPORT",
        ),
    ] {
        rig.sim.set_faults(faults).unwrap();
        let err = p.submit(&req).await.unwrap_err();
        assert_eq!((err.class, err.code.as_str()), (class, code), "{faults:?}");
    }
}

#[tokio::test]
async fn unsolvable_tasks_end_and_threads_info_is_unknown() {
    let rig = Rig::start(|s| s.unsolvable_rate = 1.0).await;
    let p = rig.provider(TaskApiDialect::TwoCaptchaV2, KEY);
    let id = p
        .submit(&SolveRequest::recaptcha_v2("6Le-json", PAGE))
        .await
        .unwrap();
    rig.advance();
    let out = p.poll(&[id], false).await.unwrap();
    assert!(
        matches!(&out[0], PollOutcome::Failed(e) if e.class == ErrorClass::Permanent && e.code == "ERROR_CAPTCHA_UNSOLVABLE"),
        "{out:?}"
    );
    let err = p.threads_info().await.unwrap_err();
    assert_eq!(err.code, NO_THREADS_INFO);
    assert!(!err.class.is_retryable());
}

#[tokio::test]
async fn reports_reach_the_simulators_task() {
    let rig = Rig::start(|_| {}).await;
    let p = rig.provider(TaskApiDialect::AntiCaptcha, KEY);
    let id = p
        .submit(&SolveRequest::recaptcha_v2("6Le-json", PAGE))
        .await
        .unwrap();
    rig.advance();
    p.poll(std::slice::from_ref(&id), false).await.unwrap();
    p.report(&id, false).await.unwrap();
    assert_eq!(rig.sim.stats().reports_bad, 1);
    let capsolver = rig.provider(TaskApiDialect::CapSolver, KEY);
    assert_eq!(
        capsolver.report(&id, true).await.unwrap_err().code,
        NO_REPORTS
    );
}

#[test]
fn replies_are_read_leniently() {
    let err = |status, body: &str| read_reply(status, body).unwrap_err();
    let html = "<html><body>502 Bad Gateway</body></html>";
    assert_eq!(
        (err(502, html).code, err(502, html).class),
        ("HTTP_502".into(), ErrorClass::Transient)
    );
    assert_eq!(err(200, html).code, BAD_RESPONSE);
    assert_eq!(err(200, "").class, ErrorClass::Transient);
    assert_eq!(err(404, "not found").code, "HTTP_404");
    assert_eq!(err(429, "{}").class, ErrorClass::Capacity);
    let denied = r#"{"errorId":"1","errorCode":"ERROR_KEY_DENIED_ACCESS","errorDescription":"x"}"#;
    assert_eq!(err(200, denied).class, ErrorClass::Account);
    assert_eq!(
        err(200, r#"{"errorId":1,"errorCode":"ERROR_RATE_LIMIT"}"#).class,
        ErrorClass::Capacity
    );
    assert_eq!(err(200, r#"{"errorId":1}"#).code, BAD_RESPONSE);
    assert_eq!(
        err(200, r#"{"errorId":1,"errorCode":"ERROR_ZERO_BALANCE"}"#).class,
        ErrorClass::Account
    );
    let ok = read_reply(200, r#"{"errorId":0,"taskId":"a-b-c"}"#).unwrap();
    assert_eq!(ok["taskId"], "a-b-c");
    // CapSolver answers images at once; `idle` is not done.
    let sync = json!({"errorId": 0, "status": "ready", "solution": {"text": "abc"}});
    assert!(
        matches!(outcome_of(sync.as_object().unwrap(), false), PollOutcome::Ready { ref text, .. } if text == "abc")
    );
    let idle = json!({"errorId": 0, "status": "idle"});
    assert_eq!(
        outcome_of(idle.as_object().unwrap(), false),
        PollOutcome::NotReady
    );
    let empty = json!({"errorId": 0, "status": "ready", "solution": {}});
    assert!(matches!(
        outcome_of(empty.as_object().unwrap(), false),
        PollOutcome::Failed(_)
    ));
    // A pass-through task's answer is the solution whole, whatever keys it has.
    let whole = json!({"errorId": 0, "status": "ready", "solution": {"token": "t", "x": [1]}});
    assert!(matches!(
        outcome_of(whole.as_object().unwrap(), true),
        PollOutcome::Ready { ref text, .. } if text == r#"{"token":"t","x":[1]}"#
    ));
    assert_eq!(split_whole("whole-42"), ("42", true));
    assert_eq!(split_whole("42"), ("42", false));
}

#[test]
fn the_default_check_budget_is_within_capsolvers_rule() {
    let limit = TaskApiDialect::CapSolver.max_checks_per_task().unwrap();
    assert!(super::super::PollSettings::default().max_polls_per_task <= limit);
}

#[test]
fn debug_never_shows_the_key() {
    let p = TaskApiProvider::new(
        TaskApiDialect::CapSolver,
        Url::parse("https://user:pw@api.capsolver.com/v1").unwrap(),
        KEY.into(),
        "cs".into(),
        reqwest::Client::new(),
    );
    let dbg = format!("{p:?}");
    assert!(!dbg.contains(KEY) && !dbg.contains("pw"), "{dbg}");
    assert_eq!(p.base.path(), "/v1/");
}

/// The whole upstream path on the system clock: the account's thread cap and the poller (which
/// asks one task per request, as the protocol has no batch form) over the JSON client.
#[tokio::test]
async fn an_account_solves_through_the_json_protocol_within_its_threads() {
    use super::super::{Account, AccountSettings, PollSettings, Priority};
    let rig = Rig::with_clock(Clock::system(), |s| {
        s.threads = 3;
        s.latency = Kind::ALL
            .into_iter()
            .map(|k| {
                let range = LatencyRange {
                    min: Duration::from_millis(20),
                    max: Duration::from_millis(60),
                };
                (k, range)
            })
            .collect();
    })
    .await;
    let provider: Arc<dyn Provider> = Arc::new(rig.provider(TaskApiDialect::CapSolver, KEY));
    let settings = AccountSettings {
        name: "json-1".into(),
        threads: 3,
        poll: PollSettings {
            first_check: Some(Duration::from_millis(20)),
            ..PollSettings::default().with_interval(Duration::from_millis(20))
        },
        ..AccountSettings::default()
    };
    let budget = crate::provider::budget::in_process(crate::provider::BudgetSettings::new(3));
    let account = Account::start(
        provider,
        settings,
        budget,
        &crate::shutdown::Shutdown::new(),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let solves = (0..12).map(|i| {
        let account = account.clone();
        async move {
            let req = SolveRequest::recaptcha_v2(format!("6Le-acct-{i}"), PAGE);
            account.solve(&req, deadline, Priority::Interactive).await
        }
    });
    for solved in futures::future::join_all(solves).await {
        let solved = solved.expect("every task is solved");
        let (verdict, _) = rig.sim.verify(&solved.text);
        assert!(matches!(verdict, Verdict::Ok { .. }), "{verdict:?}");
    }
    let stats = rig.sim.stats();
    assert_eq!(stats.submits, 12);
    assert!(stats.peak_concurrent <= 3, "{stats:?}");
    assert_eq!(stats.capacity_rejections, 0, "{stats:?}");
    assert_eq!(
        stats.ids_polled, stats.res_calls,
        "one task per getTaskResult"
    );
}

/// CapSolver answers image tasks in the `createTask` reply, with or without a task id. The answer
/// reaches the first check without a `getTaskResult` (this server has none: it would be a 404).
#[tokio::test]
async fn answers_given_at_once_reach_the_first_check() {
    use axum::routing::post;
    let replies = [
        json!({"errorId": 0, "taskId": "5f0c-uuid", "status": "ready", "solution": {"text": "abc"}}),
        json!({"errorId": 0, "status": "ready", "solution": {"text": "xyz"}}),
    ];
    for reply in replies {
        let want = reply["solution"]["text"].as_str().unwrap().to_owned();
        let app = axum::Router::new().route(
            "/createTask",
            post(move || {
                let reply = reply.clone();
                async move { axum::Json(reply) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let http = super::super::InPhpProvider::http_client().unwrap();
        let p = TaskApiProvider::new(
            TaskApiDialect::CapSolver,
            base,
            KEY.into(),
            "cs".into(),
            http,
        );
        let image = requests()
            .into_iter()
            .find(|r| r.kind() == Kind::Image)
            .expect("an image request");
        let id = p.submit(&image).await.unwrap();
        let out = p.poll(std::slice::from_ref(&id), false).await.unwrap();
        assert!(
            matches!(&out[0], PollOutcome::Ready { text, .. } if *text == want),
            "{out:?}"
        );
        assert!(p.early.lock().unwrap().is_empty(), "taken by the check");
        server.abort();
    }
}

/// CapSolver's 120 checks per task hold whatever the poll budget: the 121st check is not sent.
#[tokio::test]
async fn capsolver_tasks_get_at_most_120_checks() {
    let rig = Rig::start(|_| {}).await;
    let p = rig.provider(TaskApiDialect::CapSolver, KEY);
    let id = p
        .submit(&SolveRequest::recaptcha_v2("6Le-json", PAGE))
        .await
        .unwrap();
    for _ in 0..120 {
        let out = p.poll(std::slice::from_ref(&id), false).await.unwrap();
        assert_eq!(out, vec![PollOutcome::NotReady]);
    }
    let out = p.poll(std::slice::from_ref(&id), false).await.unwrap();
    assert!(
        matches!(&out[0], PollOutcome::Failed(e) if e.class == ErrorClass::Permanent),
        "{out:?}"
    );
    assert_eq!(rig.sim.stats().res_calls, 120);
    assert_eq!(p.checks.len(), 0, "the ended task is forgotten");
    // A task that ends on its own is forgotten too; other flavors count nothing.
    let id = p
        .submit(&SolveRequest::recaptcha_v2("6Le-json", PAGE))
        .await
        .unwrap();
    rig.advance();
    p.poll(std::slice::from_ref(&id), false).await.unwrap();
    assert_eq!(p.checks.len(), 0);
    let anti = rig.provider(TaskApiDialect::AntiCaptcha, KEY);
    anti.poll(&["1".into()], false).await.unwrap();
    assert_eq!(anti.checks.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn early_answers_of_cancelled_solves_are_forgotten() {
    let p = TaskApiProvider::new(
        TaskApiDialect::CapSolver,
        Url::parse("http://127.0.0.1:9/").unwrap(),
        "k".repeat(32),
        "json-early".into(),
        reqwest::Client::new(),
    );
    let answer = || PollOutcome::Ready {
        text: "ANSWER".into(),
        user_agent: None,
        price: None,
    };
    // Solves that were cancelled before their first check leave their answers behind.
    for i in 0..MAX_EARLY_ANSWERS {
        p.keep_early(&format!("gone-{i}"), answer());
    }
    p.keep_early("refused", answer());
    assert_eq!(p.take_early("refused"), None, "a full table takes no more");
    tokio::time::advance(EARLY_ANSWER_KEPT).await;
    p.keep_early("fresh", answer());
    assert_eq!(
        p.take_early("fresh"),
        Some(answer()),
        "the stale ones made room"
    );
    assert_eq!(p.take_early("gone-0"), None, "the stale ones are gone");
}

/// The poller reads a solution without knowing its kind: the most specific token field first
/// (reCAPTCHA's, a clearance at the top or inside CapSolver's `cookies`, then `token`, then
/// `text`); anything else, or a token with a key kept beside it, is kept whole.
#[test]
fn a_solution_is_read_without_its_kind() {
    let read = |v: serde_json::Value| read_any_solution(&v);
    let token = |t: &str, ua: Option<&str>| Some((t.to_owned(), ua.map(str::to_owned)));
    assert_eq!(
        read(json!({"gRecaptchaResponse": "g", "token": "t", "userAgent": "UA"})),
        token("g", Some("UA"))
    );
    assert_eq!(
        read(json!({"cf_clearance": "cf", "token": "t"})),
        token("cf", None)
    );
    assert_eq!(
        read(json!({"cookies": {"cf_clearance": "cf", "__cf_bm": "b"}, "token": "t"})),
        token("cf", None)
    );
    assert_eq!(read(json!({"token": "t"})), token("t", None));
    assert_eq!(read(json!({"text": "abc"})), token("abc", None));
    let whole = json!({"token": "t", "respKey": "k"});
    assert_eq!(read(whole.clone()), token(&whole.to_string(), None));
    let object = json!({"lot_number": "l", "pass_token": "p"});
    assert_eq!(read(object.clone()), token(&object.to_string(), None));
    assert_eq!(read(json!({})), None);
}
