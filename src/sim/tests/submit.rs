//! `in.php`: keys, encodings, validation, the thread limit, injected errors.

use super::*;

#[tokio::test]
async fn thread_limit_answers_the_capacity_code_until_a_thread_frees() {
    let s = Sim::new(|c| {
        c.threads = 2;
        c.latency.insert(
            Kind::RecaptchaV2,
            LatencyRange::fixed(Duration::from_secs(10)),
        );
    });
    let a = s.submit(RECAPTCHA).await;
    let b = s.submit(RECAPTCHA).await;
    assert_ne!(a, b);
    let mut third = vec![("key", KEY)];
    third.extend_from_slice(RECAPTCHA);
    assert_eq!(
        s.post_form("/in.php", &third).await.1,
        "ERROR_NO_SLOT_AVAILABLE"
    );
    third.push(("json", "1"));
    assert_eq!(
        json(&s.post_form("/in.php", &third).await.1),
        serde_json::json!({"status": 0, "request": "ERROR_NO_SLOT_AVAILABLE"})
    );
    assert_eq!(
        s.res("action=threadsinfo").await,
        r#"{"threads":2,"working_threads":2}"#
    );

    s.advance(Duration::from_secs(10));
    s.submit(RECAPTCHA).await;
    let st = s.stats().await;
    assert_eq!(st["submits"], 3);
    assert_eq!(st["capacity_rejections"], 2);
    assert_eq!(st["peak_concurrent"], 2);
    assert_eq!(st["current_concurrent"], 1);
    assert_eq!(st["solved"], 2);
}

#[tokio::test]
async fn capacity_code_is_configurable() {
    let s = Sim::new(|c| {
        c.threads = 0;
        c.capacity_code = "ERROR_ZERO_BALANCE".into();
    });
    let mut pairs = vec![("key", KEY)];
    pairs.extend_from_slice(TURNSTILE);
    assert_eq!(s.post_form("/in.php", &pairs).await.1, "ERROR_ZERO_BALANCE");
}

#[tokio::test]
async fn peak_concurrency_is_exact_across_overlapping_solves() {
    let s = Sim::new(|c| {
        c.latency.insert(
            Kind::RecaptchaV2,
            LatencyRange::fixed(Duration::from_secs(5)),
        );
    });
    s.submit(RECAPTCHA).await; // busy 0..5 s
    s.advance(Duration::from_secs(2));
    s.submit(TURNSTILE).await; // busy 2..3 s
    s.advance(Duration::from_secs(2));
    s.submit(TURNSTILE).await; // busy 4..5 s
    let st = s.stats().await;
    assert_eq!(st["peak_concurrent"], 2);
    assert_eq!(st["current_concurrent"], 2);
    s.advance(Duration::from_secs(1));
    let st = s.stats().await;
    assert_eq!(st["current_concurrent"], 0);
    assert_eq!(st["solved"], 3);
    assert_eq!(
        s.res("action=threadsinfo&json=1").await,
        r#"{"threads":50,"working_threads":0}"#
    );
}

#[tokio::test]
async fn ids_are_unique_digit_strings_in_both_modes() {
    let s = Sim::new(|_| {});
    let mut seen = std::collections::HashSet::new();
    for _ in 0..5 {
        let id = s.submit(TURNSTILE).await;
        assert!(
            id.len() >= 10 && id.bytes().all(|b| b.is_ascii_digit()),
            "{id}"
        );
        assert!(seen.insert(id));
    }
    let mut pairs = vec![("key", KEY), ("json", "1")];
    pairs.extend_from_slice(TURNSTILE);
    let v = json(&s.post_form("/in.php", &pairs).await.1);
    assert_eq!(v["status"], 1);
    let id = v["request"].as_str().expect("request is a string");
    assert!(
        id.bytes().all(|b| b.is_ascii_digit()) && !seen.contains(id),
        "{id}"
    );
}

#[tokio::test]
async fn every_encoding_is_accepted() {
    let s = Sim::new(|_| {});
    let query = format!("/in.php?key={KEY}&{}", form(RECAPTCHA));
    assert!(s.get(&query).await.starts_with("OK|"));

    let body = serde_json::json!({"key": KEY, "method": "turnstile", "json": 1,
        "sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://a.example/"});
    let req = Request::post("/in.php")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("valid test request");
    assert_eq!(json(&s.send(req).await.1)["status"], 1);

    // The puppeteer plugin: urlencoded body, no Content-Type.
    let mut pairs = vec![("key", KEY)];
    pairs.extend_from_slice(RECAPTCHA);
    let req = Request::post("/in.php")
        .body(Body::from(form(&pairs)))
        .expect("valid test request");
    assert!(s.send(req).await.1.starts_with("OK|"));

    let mut multipart = Vec::new();
    for (name, value) in [("key", KEY), ("method", "post")] {
        multipart.extend_from_slice(
            format!("--XB\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .as_bytes(),
        );
    }
    multipart.extend_from_slice(
        b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"c.png\"\r\n\r\n",
    );
    multipart.extend_from_slice(&png(1));
    multipart.extend_from_slice(b"\r\n--XB--\r\n");
    let req = Request::post(format!("/in.php?key={KEY}"))
        .header(header::CONTENT_TYPE, "multipart/form-data; boundary=XB")
        .body(Body::from(multipart))
        .expect("valid test request");
    assert!(s.send(req).await.1.starts_with("OK|"));
    assert_eq!(s.stats().await["submits"], 4);
}

#[tokio::test]
async fn keys_are_checked_for_length_then_membership() {
    let other = "ffffffffffffffffffffffffffffffff";
    let s = Sim::new(|c| c.keys = vec![KEY.to_owned()]);
    for (key, code) in [
        ("", "ERROR_WRONG_USER_KEY"),
        ("short", "ERROR_WRONG_USER_KEY"),
        (other, "ERROR_KEY_DOES_NOT_EXIST"),
    ] {
        let mut pairs = vec![("key", key)];
        pairs.extend_from_slice(RECAPTCHA);
        assert_eq!(s.post_form("/in.php", &pairs).await.1, code, "{key:?}");
        assert_eq!(
            s.get(&format!("/res.php?key={key}&action=getbalance"))
                .await,
            code
        );
    }
    s.submit(RECAPTCHA).await;
    assert_eq!(s.stats().await["submits"], 1);
}

#[tokio::test]
async fn invalid_requests_get_the_parser_code() {
    let s = Sim::new(|_| {});
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("method", "userrecaptcha"),
                ("pageurl", "https://a.example"),
            ],
            "ERROR_GOOGLEKEY",
        ),
        (
            &[
                ("method", "turnstile"),
                ("sitekey", "k"),
                ("pageurl", "nope"),
            ],
            "ERROR_PAGEURL",
        ),
        (&[("method", "base64"), ("body", "!!")], "ERROR_UPLOAD"),
        (&[("method", "teleport")], "ERROR_BAD_PARAMETERS"),
    ];
    for (pairs, code) in cases {
        let mut all = vec![("key", KEY)];
        all.extend_from_slice(pairs);
        assert_eq!(s.post_form("/in.php", &all).await.1, *code, "{pairs:?}");
    }
    assert_eq!(s.stats().await["submits"], 0);
}

#[tokio::test]
async fn oversized_bodies_are_refused_without_reading_them_whole() {
    let s = Sim::new(|_| {});
    let req = Request::post(format!("/in.php?key={KEY}&json=1"))
        .body(Body::from(vec![b'a'; 9 * 1024 * 1024]))
        .expect("valid test request");
    let (status, body) = s.send(req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        json(&body),
        serde_json::json!({"status": 0, "request": "ERROR_TOO_BIG_CAPTCHA_FILESIZE"})
    );
}

#[tokio::test]
async fn injected_errors_follow_their_rates() {
    let s = Sim::new(|c| c.faults.server_error_rate = 1.0);
    let mut pairs = vec![("key", KEY)];
    pairs.extend_from_slice(RECAPTCHA);
    assert_eq!(
        s.post_form("/in.php", &pairs).await,
        (StatusCode::OK, "ERROR_SERVER_ERROR".into())
    );

    let s = Sim::new(|c| c.faults.html_error_rate = 1.0);
    let (status, body) = s.post_form("/in.php", &pairs).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(body.contains("<html>") && body.contains("502"), "{body}");
    let st = s.stats().await;
    assert_eq!(
        (st["injected_errors"].as_u64(), st["submits"].as_u64()),
        (Some(1), Some(0))
    );
}

#[tokio::test]
async fn a_seed_makes_runs_repeatable() {
    let draw = || async {
        let s = Sim::new(|c| {
            c.latency
                .insert(Kind::Turnstile, "1s..60s".parse().expect("valid range"));
        });
        let id = s.submit(TURNSTILE).await;
        // The first second at which the answer is ready depends only on the seed.
        let mut waited = 0;
        while s.res(&format!("action=get&id={id}")).await == "CAPCHA_NOT_READY" {
            s.advance(Duration::from_secs(1));
            waited += 1;
        }
        (id, waited)
    };
    let first = draw().await;
    assert_eq!(first, draw().await);
}
