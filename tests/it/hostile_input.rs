//! Hostile input over HTTP against a real gateway: numbers out of range, page URLs carrying
//! user info, and the input limits (docs/API.md "Input limits"). Every bad
//! request gets a clear error in its caller's protocol, and the gateway keeps serving.

use serde_json::{Value, json};

use crate::support::{KEY, TestGateway};

/// A `/v1/...` request's status and JSON body.
async fn native(gw: &TestGateway, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = gw
        .http
        .request(method.parse().unwrap(), gw.url(path))
        .bearer_auth(KEY);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.expect("the gateway answers");
    let status = res.status().as_u16();
    let text = res.text().await.expect("a body");
    let v = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"));
    (status, v)
}

/// Asserts a 400 with `code` and a message naming `field`.
fn assert_refused(got: &(u16, Value), code: &str, field: &str) {
    assert_eq!(got.0, 400, "{}", got.1);
    assert_eq!(got.1["error"]["code"], code, "{}", got.1);
    let message = got.1["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains(field),
        "message names `{field}`: {message}"
    );
}

fn v2(extra: Value) -> Value {
    let mut body = json!({"kind": "recaptcha_v2", "sitekey": "6Le-hostile", "pageurl": "https://example.com/login"});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test]
async fn huge_timeouts_and_waits_answer_400_and_the_gateway_keeps_serving() {
    let gw = TestGateway::start().await;
    for timeout in [
        json!(1e20),
        json!(-1),
        json!(0),
        json!("NaN"),
        json!(601),
        json!([1]),
    ] {
        for path in ["/v1/solve", "/v1/tasks"] {
            let got = native(&gw, "POST", path, Some(v2(json!({"timeout_s": timeout})))).await;
            assert_refused(&got, "bad_timeout", "timeout_s");
        }
    }
    let (status, created) =
        native(&gw, "POST", "/v1/tasks", Some(v2(json!({"timeout_s": 30})))).await;
    assert_eq!(status, 202, "{created}");
    let id = created["task_id"].as_str().unwrap().to_owned();
    for wait in ["1e20", "-5", "abc", "inf", "NaN", "601", ""] {
        let got = native(&gw, "GET", &format!("/v1/tasks/{id}?wait={wait}"), None).await;
        assert_refused(&got, "bad_wait", "wait");
    }
    for bad_id in ["abc", "1%2F..", "%FF%FE", "12345678901234567890123"] {
        let got = native(&gw, "GET", &format!("/v1/tasks/{bad_id}"), None).await;
        assert_refused(&got, "bad_task_id", "task id");
    }
    // The same handlers still work: nothing panicked, and the task ran.
    let (status, done) = native(&gw, "GET", &format!("/v1/tasks/{id}?wait=30"), None).await;
    assert_eq!(
        (status, done["status"].as_str()),
        (200, Some("ready")),
        "{done}"
    );
    let (status, solved) = native(
        &gw,
        "POST",
        "/v1/solve",
        Some(v2(json!({"timeout_s": "30"}))),
    )
    .await;
    assert_eq!(status, 200, "{solved}");
    gw.verify(solved["token"].as_str().unwrap()).await.unwrap();
}

#[tokio::test]
async fn compatible_numbers_out_of_range_answer_their_codes() {
    let gw = TestGateway::start().await;
    let png = base64_png();
    let submit = |extra: &str| format!("/in.php?key={KEY}&method=base64&body={png}&{extra}");
    for extra in [
        "numeric=1e20",
        "numeric=-1",
        "min_len=4294967296",
        "max_len=99",
        "language=300",
        "minLen=x",
    ] {
        let (status, body) = gw.get_text(&submit(extra)).await;
        assert_eq!(
            (status, body.as_str()),
            (200, "ERROR_BAD_PARAMETERS"),
            "{extra}"
        );
    }
    let v3 = |score: &str| {
        format!(
            "/in.php?key={KEY}&method=userrecaptcha&version=v3&action=login&googlekey=6Le-k&pageurl=https://example.com/&min_score={score}"
        )
    };
    for score in ["1e20", "-1", "NaN", "2"] {
        let (status, body) = gw.get_text(&v3(score)).await;
        assert_eq!(
            (status, body.as_str()),
            (200, "ERROR_BAD_PARAMETERS"),
            "{score}"
        );
    }
    let (_, body) = gw.get_text(&v3("0.7")).await;
    assert!(body.starts_with("OK|"), "{body}");
    // ids per batch: 100 at most.
    let ids = vec!["123456789012345"; 101].join(",");
    let (_, body) = gw
        .get_text(&format!("/res.php?key={KEY}&action=get&ids={ids}"))
        .await;
    assert_eq!(body, "ERROR_WRONG_ID_FORMAT");
    let ids = vec!["123456789012345"; 100].join(",");
    let (_, body) = gw
        .get_text(&format!("/res.php?key={KEY}&action=get&ids={ids}"))
        .await;
    assert_eq!(
        body,
        format!("OK|{}", vec!["ERROR_WRONG_CAPTCHA_ID"; 100].join("|"))
    );
    for id in ["-1", "1e20", "١٢٣", "123456789012345678901"] {
        let (_, body) = gw
            .get_text(&format!(
                "/res.php?key={KEY}&action=get&id={}",
                urlencode(id)
            ))
            .await;
        assert_eq!(body, "ERROR_WRONG_ID_FORMAT", "{id}");
    }
}

#[tokio::test]
async fn limits_on_bodies_lengths_urls_and_sitekeys_answer_in_each_protocol() {
    let gw = TestGateway::start().await;
    let huge = "A".repeat(4 * 1024 * 1024 + 1);
    // Native: a JSON 413 naming the limit.
    let res = gw
        .http
        .post(gw.url("/v1/solve"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(huge.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["code"], "body_too_large", "{v}");
    // Seed worker API: its own error shape.
    let res = gw
        .http
        .post(gw.url("/solve"))
        .bearer_auth(KEY)
        .body(huge.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"], "ERROR_TOO_BIG_CAPTCHA_FILESIZE");
    // Compatible: the provider's code with HTTP 200.
    let (status, body) = gw
        .post_form(
            "/in.php",
            &[("key", KEY), ("method", "base64"), ("body", &huge)],
        )
        .await;
    assert_eq!(
        (status, body.as_str()),
        (200, "ERROR_TOO_BIG_CAPTCHA_FILESIZE")
    );

    let long_page = format!("https://example.com/{}", "p".repeat(5000));
    let long_ua = "U".repeat(2000);
    let cases = [
        (json!({"pageurl": long_page}), "ERROR_PAGEURL", "pageurl"),
        (json!({"pageurl": "/login"}), "ERROR_PAGEURL", "pageurl"),
        (
            json!({"pageurl": "javascript:alert(1)"}),
            "ERROR_PAGEURL",
            "pageurl",
        ),
        (
            json!({"pageurl": "ftp://example.com/"}),
            "ERROR_PAGEURL",
            "pageurl",
        ),
        (json!({"sitekey": "6Le key"}), "ERROR_GOOGLEKEY", "sitekey"),
        (
            json!({"sitekey": "6Le\u{e9}"}),
            "ERROR_GOOGLEKEY",
            "sitekey",
        ),
        (
            json!({"sitekey": "k".repeat(300)}),
            "ERROR_GOOGLEKEY",
            "sitekey",
        ),
        (
            json!({"user_agent": long_ua}),
            "ERROR_BAD_PARAMETERS",
            "userAgent",
        ),
        (
            json!({"cookies": "c".repeat(17 * 1024)}),
            "ERROR_BAD_PARAMETERS",
            "cookies",
        ),
        (
            json!({"action": "a".repeat(300)}),
            "ERROR_BAD_PARAMETERS",
            "action",
        ),
    ];
    for (extra, code, field) in cases {
        let got = native(&gw, "POST", "/v1/tasks", Some(v2(extra.clone()))).await;
        assert_refused(&got, code, field);
        let mut form: Vec<(String, String)> = vec![
            ("key".into(), KEY.into()),
            ("method".into(), "userrecaptcha".into()),
            ("googlekey".into(), "6Le-hostile".into()),
            ("pageurl".into(), "https://example.com/login".into()),
        ];
        for (k, v) in extra.as_object().unwrap() {
            let name = match k.as_str() {
                "sitekey" => "googlekey",
                "user_agent" => "userAgent",
                other => other,
            };
            form.retain(|(n, _)| n != name);
            form.push((name.into(), v.as_str().unwrap().into()));
        }
        let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (status, body) = gw.post_form("/in.php", &pairs).await;
        assert_eq!((status, body.as_str()), (200, code), "compatible {field}");
    }
}

#[tokio::test]
async fn user_info_and_queries_never_reach_labels_metrics_or_pages() {
    let gw = TestGateway::start().await;
    let page = "https://alice:s3cretPass@Shop.Example.com/cart?session=tok3n#x";
    let (status, v) = native(
        &gw,
        "POST",
        "/v1/solve",
        Some(json!({"kind": "turnstile", "sitekey": "0x4AAA-defect2", "pageurl": page, "timeout_s": 30})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let (_, body) = gw.get_text("/v1/pools").await;
    let pools: Value = serde_json::from_str(&body).unwrap();
    let labels: Vec<&str> = pools
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["label"].as_str())
        .collect();
    assert!(labels.contains(&"turnstile:shop.example.com"), "{labels:?}");
    let (_, metrics) = gw.get_text("/metrics").await;
    assert!(
        metrics.contains(r#"target="turnstile:shop.example.com""#),
        "{metrics}"
    );
    let (_, index) = gw.get_text("/").await;
    assert!(index.contains("turnstile:shop.example.com"), "{index}");
    for (name, text) in [("/v1/pools", &body), ("/metrics", &metrics), ("/", &index)] {
        // `session=`, not `session`: the dashboard's own script keeps its key in sessionStorage.
        for secret in ["alice", "s3cretPass", "session=", "tok3n", "@"] {
            assert!(!text.contains(secret), "{name} shows `{secret}`");
        }
    }
    // The same page without user info is the same target: its answers are shared alike.
    let again = Value::Array(pools.as_array().unwrap().clone());
    let (status, _) = native(
        &gw,
        "POST",
        "/v1/solve",
        Some(json!({"kind": "turnstile", "sitekey": "0x4AAA-defect2", "pageurl": "https://shop.example.com/cart", "timeout_s": 30})),
    )
    .await;
    assert_eq!(status, 200);
    let (_, body) = gw.get_text("/v1/pools").await;
    let after: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        after.as_array().unwrap().len(),
        again.as_array().unwrap().len(),
        "no second target for the same page: {after}"
    );
}

fn base64_png() -> String {
    use base64::Engine as _;
    let png = [b"\x89PNG\r\n\x1a\n".as_slice(), &[7u8; 200]].concat();
    urlencode(&base64::engine::general_purpose::STANDARD.encode(png))
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
