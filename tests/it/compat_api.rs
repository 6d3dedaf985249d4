//! The compatible API's contract for bad input (docs/PROTOCOL.md items 1-15): every malformed
//! request gets its protocol code with HTTP 200, in the mode the client asked for; good requests in
//! every encoding are accepted.

use serde_json::Value;

use crate::support::{KEY, TestGateway, fast_settings};

const OTHER_KEY: &str = "ffffffffffffffffffffffffffffffff";

async fn keyed_gateway() -> TestGateway {
    let mut settings = fast_settings();
    settings.gateway_keys = vec![captcha_gateway::config::Secret(KEY.to_owned())];
    TestGateway::with(settings).await
}

/// Asserts `path?query` answers `code` with HTTP 200, plain and JSON.
async fn assert_code(gw: &TestGateway, path: &str, query: &str, code: &str) {
    let (status, body) = gw.get_text(&format!("{path}?{query}")).await;
    assert_eq!((status, body.as_str()), (200, code), "plain {path}?{query}");
    let (status, body) = gw.get_text(&format!("{path}?{query}&json=1")).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["status"].as_i64(), v["request"].as_str()),
        (Some(0), Some(code)),
        "json {path}?{query}"
    );
}

#[tokio::test]
async fn bad_keys_get_key_codes() {
    let gw = keyed_gateway().await;
    let submit = "method=userrecaptcha&googlekey=k&pageurl=https://example.com";
    assert_code(&gw, "/in.php", submit, "ERROR_WRONG_USER_KEY").await;
    assert_code(
        &gw,
        "/in.php",
        &format!("key=short&{submit}"),
        "ERROR_WRONG_USER_KEY",
    )
    .await;
    assert_code(
        &gw,
        "/in.php",
        &format!("key={OTHER_KEY}&{submit}"),
        "ERROR_KEY_DOES_NOT_EXIST",
    )
    .await;
    assert_code(
        &gw,
        "/res.php",
        &format!("key={OTHER_KEY}&action=get&id=1"),
        "ERROR_KEY_DOES_NOT_EXIST",
    )
    .await;
    let (_, body) = gw.get_text(&format!("/in.php?key={KEY}&{submit}")).await;
    assert!(body.starts_with("OK|"), "the configured key works: {body}");
}

#[tokio::test]
async fn missing_and_bad_parameters_get_their_codes() {
    let gw = TestGateway::start().await;
    let k = format!("key={KEY}");
    let cases = [
        (k.clone(), "ERROR_BAD_PARAMETERS"),
        (format!("{k}&method=non%20sense"), "ERROR_BAD_PARAMETERS"),
        (
            format!("{k}&method=userrecaptcha&pageurl=https://example.com"),
            "ERROR_GOOGLEKEY",
        ),
        (
            format!("{k}&method=userrecaptcha&googlekey=6Le"),
            "ERROR_PAGEURL",
        ),
        (
            format!("{k}&method=userrecaptcha&googlekey=6Le&pageurl=ftp://x"),
            "ERROR_PAGEURL",
        ),
        (
            format!("{k}&method=userrecaptcha&googlekey=6Le&pageurl=https://e.com&version=v3"),
            "ERROR_BAD_PARAMETERS",
        ),
        (
            format!("{k}&method=turnstile&sitekey=0x4&pageurl=https://e.com&proxy=nonsense"),
            "ERROR_BAD_PROXY",
        ),
        (
            format!(
                "{k}&method=turnstile&sitekey=0x4&pageurl=https://e.com&proxy=h:1&proxytype=FTP"
            ),
            "ERROR_BAD_PROXY",
        ),
        (
            format!("{k}&method=cloudflare_challenge&pageurl=https://e.com"),
            "ERROR_BAD_PROXY",
        ),
        (
            format!("{k}&method=geetest&gt=g&pageurl=https://e.com"),
            "ERROR_BAD_PARAMETERS",
        ),
        (format!("{k}&method=base64"), "ERROR_ZERO_CAPTCHA_FILESIZE"),
        (
            format!("{k}&method=base64&body=aGVsbG8%3D"),
            "ERROR_ZERO_CAPTCHA_FILESIZE",
        ),
        (format!("{k}&method=base64&body=%21%21%21"), "ERROR_UPLOAD"),
        (format!("{k}&method=post"), "ERROR_ZERO_CAPTCHA_FILESIZE"),
    ];
    for (query, code) in &cases {
        assert_code(&gw, "/in.php", query, code).await;
    }
}

/// A refused submit says why in JSON mode (`error_text`, as 2captcha's JSON replies do), naming
/// the parameter; the plain form stays the bare code clients parse.
#[tokio::test]
async fn a_refusal_in_json_mode_names_the_parameter() {
    let gw = TestGateway::start().await;
    let page = "pageurl=https://e.com/";
    let cases = [
        (
            format!("method=turnstile&sitekey=0x4&{page}&websiteSToken=t"),
            "ERROR_BAD_PARAMETERS",
            "`websiteSToken` is not supported for turnstile",
        ),
        (
            format!("method=geetest&gt=g&{page}"),
            "ERROR_BAD_PARAMETERS",
            "`challenge`",
        ),
        (
            format!("method=turnstile&sitekey=0x4&{page}&pingback=http://10.0.0.1/x"),
            "ERROR_BAD_PARAMETERS",
            "`pingback`",
        ),
    ];
    for (query, code, reason) in cases {
        let query = format!("key={KEY}&{query}");
        assert_code(&gw, "/in.php", &query, code).await;
        let (_, body) = gw.get_text(&format!("/in.php?{query}&json=1")).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        let text = v["error_text"].as_str().unwrap_or_default();
        assert!(text.contains(reason), "{query}: {body}");
    }
}

#[tokio::test]
async fn oversized_and_non_image_uploads_get_file_codes() {
    let gw = TestGateway::start().await;
    // Larger than the body limit: refused before parsing, still in the protocol.
    let huge = "A".repeat(5 * 1024 * 1024);
    let (status, body) = gw
        .post_form(
            "/in.php?json=1",
            &[("key", KEY), ("method", "base64"), ("body", &huge)],
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["request"],
        "ERROR_TOO_BIG_CAPTCHA_FILESIZE"
    );
    // Within the body limit but over the image limit.
    use base64::Engine as _;
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.resize(1024 * 1024 + 10, 0);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
    let (_, body) = gw
        .post_form(
            "/in.php",
            &[("key", KEY), ("method", "base64"), ("body", &b64)],
        )
        .await;
    assert_eq!(body, "ERROR_TOO_BIG_CAPTCHA_FILESIZE");
    let not_image = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; 500]);
    let (_, body) = gw
        .post_form(
            "/in.php",
            &[("key", KEY), ("method", "base64"), ("body", &not_image)],
        )
        .await;
    assert_eq!(body, "ERROR_IMAGE_TYPE_NOT_SUPPORTED");
}

#[tokio::test]
async fn request_heads_up_to_8_kb_are_served_and_longer_ones_refused_alone() {
    let gw = TestGateway::start().await;
    // A GET submit carrying cookies in its query string, as some PHP clients send it: 6 KB.
    let cookies = format!("c={}", "x".repeat(6000));
    let (status, body) = gw
        .get_text(&format!(
            "/in.php?key={KEY}&method=userrecaptcha&googlekey=k&pageurl=https://example.com&cookies={cookies}"
        ))
        .await;
    assert_eq!(status, 200);
    assert!(body.starts_with("OK|"), "{body}");
    // Past 8 KB of head (nginx's default line limit too): refused by status, not by a reset.
    let pad = "x".repeat(9000);
    let (status, _) = gw
        .get_text(&format!("/res.php?key={KEY}&action=get&id=1&pad={pad}"))
        .await;
    assert_eq!(status, 431);
    assert_code(
        &gw,
        "/res.php",
        &format!("key={KEY}&action=get&id=123456789"),
        "ERROR_WRONG_CAPTCHA_ID",
    )
    .await;
}

#[tokio::test]
async fn garbage_bodies_get_protocol_errors_not_failures() {
    let gw = TestGateway::start().await;
    for (ct, body) in [
        (Some("application/json"), &b"{not json"[..]),
        (
            Some("multipart/form-data; boundary=zz"),
            &b"--zz\r\ngarbage"[..],
        ),
        (None, &b"\xff\xfe\x00\x01"[..]),
        (Some("application/x-www-form-urlencoded"), &b"%%%&&&==="[..]),
    ] {
        let mut req = gw.http.post(gw.url("/in.php")).body(body.to_vec());
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 200);
        let text = res.text().await.unwrap();
        assert!(text.starts_with("ERROR_"), "{ct:?}: {text}");
    }
}

#[tokio::test]
async fn result_ids_and_actions_are_checked() {
    let gw = TestGateway::start().await;
    let k = format!("key={KEY}");
    assert_code(&gw, "/res.php", &k, "ERROR_EMPTY_ACTION").await;
    assert_code(
        &gw,
        "/res.php",
        &format!("{k}&action=get&id=12ab"),
        "ERROR_WRONG_ID_FORMAT",
    )
    .await;
    assert_code(
        &gw,
        "/res.php",
        &format!("{k}&action=get&id=123456789"),
        "ERROR_WRONG_CAPTCHA_ID",
    )
    .await;
    assert_code(
        &gw,
        "/res.php",
        &format!("{k}&action=get"),
        "ERROR_WRONG_CAPTCHA_ID",
    )
    .await;
    assert_code(
        &gw,
        "/res.php",
        &format!("{k}&action=reportbad&id=123456789"),
        "ERROR_WRONG_CAPTCHA_ID",
    )
    .await;
    assert_code(
        &gw,
        "/res.php",
        &format!("{k}&action=launch"),
        "ERROR_BAD_PARAMETERS",
    )
    .await;
}

#[tokio::test]
async fn every_request_encoding_submits_and_batches_answer_in_order() {
    let gw = TestGateway::start().await;
    let fields = [
        ("key", KEY),
        ("method", "turnstile"),
        ("sitekey", "0x4AAA"),
        ("pageurl", "https://example.com/"),
    ];
    let mut ids = Vec::new();
    // GET query.
    let q = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish();
    ids.push(gw.get_text(&format!("/in.php?{q}")).await.1);
    // POST urlencoded.
    ids.push(gw.post_form("/in.php", &fields).await.1);
    // POST JSON, as the npm client sends images.
    let json: serde_json::Map<String, Value> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), Value::from(*v)))
        .collect();
    ids.push(
        gw.http
            .post(gw.url("/in.php"))
            .json(&json)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    // POST without Content-Type, as the puppeteer plugin sends it.
    ids.push(
        gw.http
            .post(gw.url("/in.php"))
            .body(q.clone())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    // Multipart.
    let mut form = reqwest::multipart::Form::new();
    for (k, v) in fields {
        form = form.text(k, v);
    }
    ids.push(
        gw.http
            .post(gw.url("/in.php"))
            .multipart(form)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );

    let ids: Vec<String> = ids
        .iter()
        .map(|b| {
            b.strip_prefix("OK|")
                .unwrap_or_else(|| panic!("accepted: {b}"))
                .to_owned()
        })
        .collect();
    for id in &ids {
        assert!(id.bytes().all(|b| b.is_ascii_digit()));
        gw.wait_task(id).await;
    }
    let (_, body) = gw
        .get_text(&format!(
            "/res.php?key={KEY}&action=get&ids={},123,{}",
            ids[0], ids[1]
        ))
        .await;
    let parts: Vec<&str> = body.strip_prefix("OK|").unwrap().split('|').collect();
    assert_eq!(parts.len(), 3, "{body}");
    assert_eq!(parts[1], "ERROR_WRONG_CAPTCHA_ID");
    for token in [parts[0], parts[2]] {
        gw.verify(token).await.unwrap();
    }
    // Another tenant cannot read them.
    let (_, body) = gw
        .get_text(&format!(
            "/res.php?key={OTHER_KEY}&action=get&id={}",
            ids[3]
        ))
        .await;
    assert_eq!(body, "ERROR_WRONG_CAPTCHA_ID");
    // `get2` adds a price; `threadsinfo` has top-level integers; the ACAO header is always sent.
    let res = gw
        .http
        .get(gw.url(&format!(
            "/res.php?key={KEY}&action=get2&json=1&id={}",
            ids[4]
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["access-control-allow-origin"], "*");
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["status"], 1);
    assert!(v["price"].is_string(), "{v}");
    let (_, body) = gw
        .get_text(&format!("/res.php?key={KEY}&action=threadsinfo"))
        .await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["threads"].as_u64().unwrap() >= v["working_threads"].as_u64().unwrap());
}
