//! `res.php`: every action's exact bodies in both modes, batches, retention, answers per kind.

use base64::Engine as _;

use super::*;

#[tokio::test]
async fn get_answers_not_ready_then_the_token_in_both_modes() {
    let s = Sim::new(|_| {});
    let id = s.submit(RECAPTCHA).await;
    assert_eq!(
        s.res(&format!("action=get&id={id}")).await,
        "CAPCHA_NOT_READY"
    );
    assert_eq!(
        s.res(&format!("action=get&id={id}&json=1")).await,
        r#"{"request":"CAPCHA_NOT_READY","status":0}"#
    );
    s.advance(Duration::from_secs(1));
    let plain = s.res(&format!("action=get&id={id}")).await;
    let token = plain.strip_prefix("OK|SIM-rc2-").map(|_| &plain[3..]);
    let token = token.unwrap_or_else(|| panic!("unexpected {plain}"));
    assert!(!token.contains('|') && !token.contains("ERROR"));

    let v = json(&s.res(&format!("action=get&id={id}&json=1")).await);
    assert_eq!(v["status"], 1);
    assert_eq!(v["request"], token);
    assert!(v.get("price").is_none());
    assert!(
        v.get("user_agent").is_none(),
        "plain v2 answers carry no user agent"
    );

    let v = json(&s.res(&format!("action=get2&id={id}&json=1")).await);
    assert_eq!(
        (v["request"].as_str(), v["price"].as_str()),
        (Some(token), Some("0.00299"))
    );
    assert_eq!(s.res(&format!("action=get2&id={id}")).await, plain);
}

#[tokio::test]
async fn bad_unknown_and_missing_ids_and_actions() {
    let s = Sim::new(|_| {});
    assert_eq!(s.res("action=get&id=12ab").await, "ERROR_WRONG_ID_FORMAT");
    assert_eq!(s.res("action=get").await, "ERROR_WRONG_ID_FORMAT");
    assert_eq!(
        s.res("action=get&id=12345678901").await,
        "ERROR_WRONG_CAPTCHA_ID"
    );
    assert_eq!(
        s.res("action=get&id=99999999999999999999999999&json=1")
            .await,
        r#"{"request":"ERROR_WRONG_CAPTCHA_ID","status":0}"#
    );
    assert_eq!(s.res("id=1").await, "ERROR_EMPTY_ACTION");
    assert_eq!(s.res("action=fly").await, "ERROR_BAD_PARAMETERS");
    assert_eq!(s.stats().await["res_calls"], 6);
}

#[tokio::test]
async fn batches_answer_every_id_in_order() {
    let s = Sim::new(|c| {
        c.latency
            .insert(Kind::Text, LatencyRange::fixed(Duration::from_secs(5)));
    });
    let ready = s.submit(&[("textcaptcha", "Is fire hot?")]).await;
    s.advance(Duration::from_secs(4));
    let waiting = s.submit(&[("textcaptcha", "Is ice cold?")]).await;
    s.advance(Duration::from_secs(1));
    let answer = s.res(&format!("action=get&id={ready}")).await;
    let answer = answer.strip_prefix("OK|").expect("ready");
    let ids = format!("{ready},{waiting},12345,x1");
    let expected =
        format!("{answer}|CAPCHA_NOT_READY|ERROR_WRONG_CAPTCHA_ID|ERROR_WRONG_ID_FORMAT");
    assert_eq!(
        s.res(&format!("action=get&ids={ids}")).await,
        format!("OK|{expected}")
    );
    assert_eq!(
        json(&s.res(&format!("action=get&ids={ids}&json=1")).await),
        serde_json::json!({"status": 1, "request": expected})
    );
    assert_eq!(s.stats().await["ids_polled"], 9);
}

#[tokio::test]
async fn balance_and_threadsinfo_bodies() {
    let s = Sim::new(|c| c.balance = "12.50".into());
    assert_eq!(s.res("action=getbalance").await, "12.50");
    assert_eq!(
        s.res("action=getbalance&json=1").await,
        r#"{"request":"12.50","status":1}"#
    );
    let info = s.res("action=threadsinfo").await;
    assert_eq!(info, s.res("action=threadsinfo&json=1").await);
    assert_eq!(
        json(&info),
        serde_json::json!({"threads": 50, "working_threads": 0})
    );
}

#[tokio::test]
async fn reports_are_recorded_once_per_task_and_counted() {
    let s = Sim::new(|_| {});
    let a = s.submit(TURNSTILE).await;
    let b = s.submit(TURNSTILE).await;
    s.advance(Duration::from_secs(1));
    assert_eq!(
        s.res(&format!("action=reportbad&id={a}")).await,
        "OK_REPORT_RECORDED"
    );
    assert_eq!(
        s.res(&format!("action=reportbad&id={a}")).await,
        "ERROR_DUPLICATE_REPORT"
    );
    assert_eq!(
        s.res(&format!("action=reportgood&id={b}&json=1")).await,
        r#"{"request":"OK_REPORT_RECORDED","status":1}"#
    );
    assert_eq!(
        s.res("action=reportgood&id=1").await,
        "ERROR_WRONG_CAPTCHA_ID"
    );
    assert_eq!(
        s.res("action=reportgood&id=z").await,
        "ERROR_WRONG_ID_FORMAT"
    );
    let st = s.stats().await;
    assert_eq!(
        (st["reports_bad"].as_u64(), st["reports_good"].as_u64()),
        (Some(1), Some(1))
    );
}

#[tokio::test]
async fn unsolvable_tasks_end_with_the_terminal_error_once_ready() {
    let s = Sim::new(|c| c.unsolvable_rate = 1.0);
    let id = s.submit(RECAPTCHA).await;
    assert_eq!(
        s.res(&format!("action=get&id={id}")).await,
        "CAPCHA_NOT_READY"
    );
    s.advance(Duration::from_secs(1));
    assert_eq!(
        s.res(&format!("action=get&id={id}")).await,
        "ERROR_CAPTCHA_UNSOLVABLE"
    );
    let st = s.stats().await;
    assert_eq!(
        (st["unsolvable"].as_u64(), st["solved"].as_u64()),
        (Some(1), Some(0))
    );
}

#[tokio::test]
async fn results_stay_pollable_for_fifteen_minutes_then_are_forgotten() {
    let s = Sim::new(|_| {});
    let id = s.submit(TURNSTILE).await;
    s.advance(Duration::from_secs(1) + Duration::from_secs(15 * 60) - Duration::from_millis(1));
    assert!(
        s.res(&format!("action=get&id={id}"))
            .await
            .starts_with("OK|")
    );
    s.advance(Duration::from_millis(1));
    assert_eq!(
        s.res(&format!("action=get&id={id}")).await,
        "ERROR_WRONG_CAPTCHA_ID"
    );
}

#[tokio::test]
async fn image_answers_are_deterministic_and_respect_options() {
    let s = Sim::new(|c| {
        c.latency
            .insert(Kind::Image, LatencyRange::fixed(Duration::ZERO));
    });
    let b64 = |fill| base64::engine::general_purpose::STANDARD.encode(png(fill));
    let (one, two) = (b64(1), b64(2));
    let mut answers = Vec::new();
    for (body, numeric) in [(&one, "0"), (&one, "0"), (&two, "0"), (&one, "1")] {
        let id = s
            .submit(&[("method", "base64"), ("body", body), ("numeric", numeric)])
            .await;
        let reply = s.res(&format!("action=get&id={id}")).await;
        answers.push(reply.strip_prefix("OK|").expect("ready at once").to_owned());
    }
    assert_eq!(answers[0], answers[1], "same image, same answer");
    assert_ne!(answers[0], answers[2], "another image, another answer");
    assert!(
        answers[3].bytes().all(|b| b.is_ascii_digit()),
        "{}",
        answers[3]
    );
    assert_eq!(answers[0].len(), 6);
}

#[tokio::test]
async fn user_agents_ride_along_with_enterprise_and_cloudflare_answers() {
    let s = Sim::new(|_| {});
    let mut enterprise = RECAPTCHA.to_vec();
    enterprise.push(("enterprise", "1"));
    let e = s.submit(&enterprise).await;
    let cf = s
        .submit(&[
            ("method", "cloudflare_challenge"),
            ("pageurl", "https://shop.example/"),
            ("proxy", "user:pw@10.0.0.1:8080"),
            ("proxytype", "HTTP"),
            ("userAgent", "TestAgent/1.0"),
        ])
        .await;
    s.advance(Duration::from_secs(1));
    let v = json(&s.res(&format!("action=get&id={e}&json=1")).await);
    assert_eq!(v["user_agent"], super::super::DEFAULT_USER_AGENT);
    assert_eq!(v["result"], v["request"]);
    let v = json(&s.res(&format!("action=get&id={cf}&json=1")).await);
    assert_eq!(v["user_agent"], "TestAgent/1.0");
    assert!(
        v["request"]
            .as_str()
            .is_some_and(|t| t.starts_with("SIM-cloudflare_challenge-")),
        "{v}"
    );
}
