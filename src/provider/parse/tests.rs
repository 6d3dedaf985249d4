//! Reply shapes seen from CaptchaAI, 2captcha and broken servers, and random bodies.

use super::*;
use crate::provider::ErrorClass;
use proptest::prelude::*;

const AI: InPhpDialect = InPhpDialect::CaptchaAi;
const TWO: InPhpDialect = InPhpDialect::TwoCaptcha;

fn ok_request(reply: UpstreamReply) -> String {
    match reply {
        UpstreamReply::Ok { request, .. } => request,
        other => panic!("expected Ok, got {other:?}"),
    }
}

fn error(reply: UpstreamReply) -> ProviderError {
    match reply {
        UpstreamReply::Error(e) => e,
        other => panic!("expected Error, got {other:?}"),
    }
}

#[test]
fn successes_in_every_shape() {
    assert_eq!(
        ok_request(parse_reply(AI, 200, r#"{"status":1,"request":"123"}"#)),
        "123"
    );
    assert_eq!(
        ok_request(parse_reply(AI, 200, r#"{"status":1,"request":987654321}"#)),
        "987654321"
    );
    assert_eq!(
        ok_request(parse_reply(AI, 200, r#"{"status":"1","request":"tok"}"#)),
        "tok"
    );
    assert_eq!(
        ok_request(parse_reply(TWO, 200, "OK|73548291\n")),
        "73548291"
    );
    assert_eq!(ok_request(parse_reply(TWO, 200, "OK|a|b|c")), "a|b|c");
    assert_eq!(ok_request(parse_reply(TWO, 200, "12.345")), "12.345");
    assert_eq!(
        ok_request(parse_reply(TWO, 200, "OK_REPORT_RECORDED")),
        "OK_REPORT_RECORDED"
    );
    assert_eq!(ok_request(parse_reply(AI, 200, r#""OK|55""#)), "55");
    assert_eq!(
        parse_reply(AI, 200, "CAPCHA_NOT_READY"),
        UpstreamReply::NotReady
    );
    assert_eq!(
        parse_reply(AI, 200, r#"{"status":0,"request":"CAPCHA_NOT_READY"}"#),
        UpstreamReply::NotReady
    );
}

#[test]
fn extras_and_answer_choice() {
    let reply = parse_reply(
        AI,
        200,
        r#"{"status":1,"request":"tok","result":"tok2","user_agent":"UA/1","price":0.002}"#,
    );
    let UpstreamReply::Ok { extras, .. } = &reply else {
        panic!("{reply:?}")
    };
    assert_eq!(extras.user_agent.as_deref(), Some("UA/1"));
    assert_eq!(extras.price.as_deref(), Some("0.002"));
    assert_eq!(
        reply.into_outcome().unwrap(),
        PollOutcome::Ready {
            text: "tok2".into(),
            user_agent: Some("UA/1".into()),
            price: Some("0.002".into())
        }
    );
    let reply = parse_reply(TWO, 200, r#"{"status":1,"request":"t","useragent":"UA/2"}"#);
    let Ok(PollOutcome::Ready {
        text, user_agent, ..
    }) = reply.into_outcome()
    else {
        panic!()
    };
    assert_eq!((text.as_str(), user_agent.as_deref()), ("t", Some("UA/2")));
}

#[test]
fn errors_in_every_shape() {
    let e = error(parse_reply(
        TWO,
        200,
        r#"{"status":0,"request":"ERROR_ZERO_BALANCE","error_text":"no money"}"#,
    ));
    assert_eq!(
        (e.code.as_str(), e.class, e.detail.as_str()),
        ("ERROR_ZERO_BALANCE", ErrorClass::Account, "no money")
    );
    let e = error(parse_reply(
        AI,
        200,
        r#"{"status":0,"request":"ERROR_ZERO_BALANCE"}"#,
    ));
    assert_eq!(e.class, ErrorClass::Capacity);
    // Plain-text codes even though we asked for JSON.
    let e = error(parse_reply(AI, 200, "ERROR_UPLOAD"));
    assert_eq!(
        (e.code.as_str(), e.class),
        ("ERROR_UPLOAD", ErrorClass::Permanent)
    );
    let e = error(parse_reply(TWO, 200, "ERROR: 1003"));
    assert_eq!(
        (e.code.as_str(), e.class),
        ("ERROR: 1003", ErrorClass::Capacity)
    );
    let e = error(parse_reply(TWO, 200, "IP_BANNED"));
    assert_eq!(e.class, ErrorClass::Account);
    let e = error(parse_reply(
        AI,
        200,
        r#"{"status":1,"request":"ERROR_CAPTCHA_UNSOLVABLE"}"#,
    ));
    assert_eq!(e.class, ErrorClass::Permanent);
    let e = error(parse_reply(
        AI,
        502,
        "<html><body>502 Bad Gateway</body></html>",
    ));
    assert_eq!(
        (e.code.as_str(), e.class),
        ("HTTP_502", ErrorClass::Transient)
    );
    let e = error(parse_reply(AI, 429, "slow down"));
    assert_eq!(
        (e.code.as_str(), e.class),
        ("HTTP_429", ErrorClass::Capacity)
    );
    let e = error(parse_reply(AI, 403, "<html>blocked</html>"));
    assert_eq!(
        (e.code.as_str(), e.class),
        ("HTTP_403", ErrorClass::Transient)
    );
    for garbage in [
        "<html>500</html>",
        "",
        "{\"status\":1",
        "[1,2]",
        "OK|",
        "hello world",
        r#"{"status":0,"request":"https://2captcha.com/blog/x"}"#,
    ] {
        let e = error(parse_reply(AI, 200, garbage));
        assert_eq!(
            (e.code.as_str(), e.class),
            (BAD_RESPONSE, ErrorClass::Transient),
            "{garbage:?}"
        );
    }
}

#[test]
fn single_poll_outcomes_split_task_and_request_errors() {
    let unsolvable = parse_reply(AI, 200, "ERROR_CAPTCHA_UNSOLVABLE").into_outcome();
    assert!(
        matches!(unsolvable, Ok(PollOutcome::Failed(e)) if e.code == "ERROR_CAPTCHA_UNSOLVABLE")
    );
    let busy = parse_reply(AI, 200, "ERROR_NO_SLOT_AVAILABLE").into_outcome();
    assert!(matches!(busy, Err(e) if e.class == ErrorClass::Capacity));
    let html = parse_reply(AI, 500, "<html>").into_outcome();
    assert!(matches!(html, Err(e) if e.class == ErrorClass::Transient));
}

#[test]
fn batches_split_in_order_or_not_at_all() {
    let parts = split_batch("263s2v|CAPCHA_NOT_READY|ERROR_CAPTCHA_UNSOLVABLE", 3, TWO).unwrap();
    assert_eq!(
        parts[0],
        PollOutcome::Ready {
            text: "263s2v".into(),
            user_agent: None,
            price: None
        }
    );
    assert_eq!(parts[1], PollOutcome::NotReady);
    assert!(matches!(&parts[2], PollOutcome::Failed(e) if e.class == ErrorClass::Permanent));
    assert_eq!(split_batch("a|b", 3, TWO), None);
    assert_eq!(split_batch("a||b", 3, TWO), None);
    assert_eq!(
        split_batch("CAPCHA_NOT_READY", 1, AI),
        Some(vec![PollOutcome::NotReady])
    );
}

#[test]
fn a_batch_led_by_one_tasks_error_is_read_per_task() {
    // The envelope's rules would read a leading ERROR_ as the whole request failing, and every
    // task in the batch would be polled again until its budget ran out.
    let body = r#"{"status":1,"request":"ERROR_CAPTCHA_UNSOLVABLE|CAPCHA_NOT_READY|tok"}"#;
    let parts = batch_reply(200, body, 3, TWO).unwrap();
    assert!(matches!(&parts[0], PollOutcome::Failed(e) if e.code == "ERROR_CAPTCHA_UNSOLVABLE"));
    assert_eq!(parts[1], PollOutcome::NotReady);
    assert!(matches!(&parts[2], PollOutcome::Ready { text, .. } if text == "tok"));
    let all_failed =
        r#"{"status":0,"request":"ERROR_CAPTCHA_UNSOLVABLE|ERROR_CAPTCHA_UNSOLVABLE"}"#;
    assert!(batch_reply(200, all_failed, 2, AI).is_some());
    // Whole-request answers and answers that do not line up are left to the envelope's rules.
    for (status, body) in [
        (200, r#"{"status":0,"request":"ERROR_WRONG_USER_KEY"}"#),
        (200, r#"{"status":1,"request":"a|b|c"}"#),
        (500, r#"{"status":1,"request":"a|b"}"#),
        (200, "OK|a|b"),
        (200, r#"{"status":1,"request":["a","b"]}"#),
    ] {
        assert_eq!(batch_reply(status, body, 2, TWO), None, "{body}");
    }
}

proptest! {
    #[test]
    fn random_bodies_and_statuses_never_panic(
        status in 0u16..1000,
        body in prop_oneof![
            ".{0,200}",
            "(OK\\|)?[A-Z_|0-9: ]{0,40}",
            r#"\{"status":[0-9a-z"]{0,3},"request":("[^"]{0,20}"|[0-9]{1,12}|\{[^}]{0,20}\}|null)[^}]{0,30}\}"#,
        ],
        family in prop_oneof![Just(AI), Just(TWO)],
    ) {
        match parse_reply(family, status, &body) {
            UpstreamReply::Error(e) => {
                prop_assert!(e.code.len() <= 64, "code too long: {}", e.code);
                prop_assert!(e.detail.chars().count() <= 83);
            }
            UpstreamReply::Ok { .. } | UpstreamReply::NotReady => {
                prop_assert!(status != 429 && !(500..=599).contains(&status));
            }
        }
        let _ = split_batch(&body, 3, family);
    }
}

/// hCaptcha's `respKey` beside `request` (2captcha's JSON mode) stays with the answer, for the
/// kind's declaration to keep; a reply without one is the token alone.
#[test]
fn a_key_kept_beside_the_token_stays_with_the_answer() {
    let body = r#"{"status":1,"request":"P1_t","respKey":"E0_k","useragent":"UA/2"}"#;
    let Ok(PollOutcome::Ready {
        text, user_agent, ..
    }) = parse_reply(TWO, 200, body).into_outcome()
    else {
        panic!()
    };
    let kept = crate::model::Kind::Hcaptcha.spec().answer.canonical(text);
    let (token, beside) = crate::model::Kind::Hcaptcha
        .spec()
        .answer
        .token_parts(&kept);
    assert_eq!(
        (token.as_ref(), beside, user_agent.as_deref()),
        ("P1_t", vec![("respKey", "E0_k".to_owned())], Some("UA/2"))
    );
    let body = r#"{"status":1,"request":"P1_t","respKey":""}"#;
    assert_eq!(ok_request(parse_reply(TWO, 200, body)), "P1_t");
}
