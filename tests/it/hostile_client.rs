//! The hostile client of issue 8 over HTTP: 10,000 random and malformed requests of every
//! encoding at every endpoint while legitimate callers solve.

use serde_json::{Value, json};

use crate::support::{KEY, TestGateway};

/// One random, mostly malformed request: an endpoint, a method, an encoding and hostile values.
fn hostile_request(rng: &mut rand::rngs::StdRng, gw: &TestGateway) -> reqwest::RequestBuilder {
    use rand::Rng;
    use rand::seq::IndexedRandom;
    const VALUES: &[&str] = &[
        "1e20",
        "-1",
        "NaN",
        "inf",
        "0",
        "99999999999999999999",
        "0.3",
        "",
        " ",
        "\u{0}",
        "١٢٣",
        "https://u:p@example.com/a?q=1#f",
        "https://example.com/",
        "javascript:x",
        "6Le-key",
        "6Le key",
        "u:p@127.0.0.1:3128",
        "nohostport",
        "userrecaptcha",
        "turnstile",
        "geetest",
        "base64",
        "post",
        "textcaptcha",
        "v3",
        "get",
        "get2",
        "reportbad",
        "threadsinfo",
        "getbalance",
        "1,2,3",
        "123456789012345",
        "%FF",
        "{}",
        "[]",
        "\"",
    ];
    const NAMES: &[&str] = &[
        "key",
        "method",
        "googlekey",
        "sitekey",
        "pageurl",
        "version",
        "action",
        "min_score",
        "body",
        "proxy",
        "proxytype",
        "textcaptcha",
        "gt",
        "challenge",
        "numeric",
        "min_len",
        "max_len",
        "language",
        "json",
        "id",
        "ids",
        "pingback",
        "timeout_s",
        "callback_url",
        "kind",
        "tokens",
        "wait",
        "cookies",
        "userAgent",
    ];
    const PATHS: &[&str] = &[
        "/in.php",
        "/res.php",
        "/v1/solve",
        "/v1/tasks",
        "/v1/tasks/123456789012345",
        "/v1/tasks/%FF",
        "/v1/pools",
        "/v1/pools/tokens",
        "/solve",
        "/health",
        "/metrics",
        "/",
    ];
    let n = rng.random_range(0..8);
    let pairs: Vec<(String, String)> = (0..n)
        .map(|_| {
            let value = if rng.random_bool(0.1) {
                "x".repeat(rng.random_range(1000..20_000))
            } else {
                VALUES.choose(rng).unwrap().to_string()
            };
            (NAMES.choose(rng).unwrap().to_string(), value)
        })
        .collect();
    let path = PATHS.choose(rng).unwrap();
    let query: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs.iter().take(n / 2))
        .finish();
    let url = format!("{}?{query}", gw.url(path));
    let body_pairs = &pairs[n / 2..];
    let req = if rng.random_bool(0.2) {
        gw.http.get(url)
    } else {
        gw.http.post(url)
    };
    let req = if rng.random_bool(0.5) {
        req.bearer_auth(KEY)
    } else {
        req
    };
    match rng.random_range(0..6) {
        0 => req
            .header("content-type", "application/x-www-form-urlencoded")
            .body(
                form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(body_pairs)
                    .finish(),
            ),
        1 => {
            let mut body = String::new();
            for (k, v) in body_pairs {
                body.push_str(&format!(
                    "--b\r\nContent-Disposition: form-data; name=\"{k}\"; filename=\"f\"\r\n\r\n{v}\r\n"
                ));
            }
            if rng.random_bool(0.5) {
                body.push_str("--b--\r\n");
            }
            req.header("content-type", "multipart/form-data; boundary=b")
                .body(body)
        }
        2 => {
            let obj: serde_json::Map<String, Value> = body_pairs
                .iter()
                .map(|(k, v)| {
                    let value = v
                        .parse::<f64>()
                        .ok()
                        .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number))
                        .unwrap_or_else(|| Value::String(v.clone()));
                    (k.clone(), value)
                })
                .collect();
            req.header("content-type", "application/json")
                .body(Value::Object(obj).to_string())
        }
        3 => req.body(
            (0..rng.random_range(0..300))
                .map(|_| rng.random::<u8>())
                .collect::<Vec<u8>>(),
        ),
        4 => req
            .header("content-type", "application/json")
            .body("{\"kind\":\"recaptcha_v2\",\"timeout_s\":1e999,"),
        _ => req,
    }
}

/// The hostile client of issue 8, over HTTP: 10,000 random and malformed requests of every
/// encoding at every endpoint while legitimate callers solve. Every hostile request is answered
/// (no dropped connection, no 500), every legitimate caller gets a valid token, and the gateway
/// still serves afterwards.
#[tokio::test]
async fn hostile_clients_are_answered_while_legitimate_callers_solve() {
    use futures::StreamExt;
    use rand::SeedableRng;
    let gw = TestGateway::start().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let requests: Vec<_> = (0..10_000)
        .map(|_| hostile_request(&mut rng, &gw))
        .collect();
    let hostile = futures::stream::iter(requests)
        .map(|req| async move {
            let res = req.send().await.map_err(|e| e.to_string())?;
            let status = res.status().as_u16();
            res.bytes().await.map_err(|e| e.to_string())?;
            Ok::<u16, String>(status)
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>();
    let legitimate = futures::future::join_all((0..20).map(|i| {
        let gw = &gw;
        async move {
            if i % 2 == 0 {
                let res = gw
                    .http
                    .post(gw.url("/v1/solve"))
                    .bearer_auth(KEY)
                    .json(&json!({"kind": "turnstile", "sitekey": format!("0x4-legit-{i}"), "pageurl": "https://legit.example/", "timeout_s": 60}))
                    .send()
                    .await
                    .expect("the gateway answers a legitimate caller");
                let status = res.status().as_u16();
                let v: Value = res.json().await.expect("a JSON answer");
                assert_eq!(status, 200, "legitimate caller {i}: {v}");
                v["token"].as_str().unwrap().to_owned()
            } else {
                let v = gw
                    .solve_compat(&[
                        ("method", "userrecaptcha"),
                        ("googlekey", &format!("6Le-legit-{i}")),
                        ("pageurl", "https://legit.example/"),
                    ])
                    .await;
                assert_eq!(v["status"], 1, "legitimate caller {i}: {v}");
                v["request"].as_str().unwrap().to_owned()
            }
        }
    }));
    let (hostile, tokens) = tokio::join!(hostile, legitimate);
    let mut by_status = std::collections::BTreeMap::new();
    for outcome in &hostile {
        let status = outcome
            .clone()
            .unwrap_or_else(|e| panic!("a hostile request got no answer: {e}"));
        *by_status.entry(status).or_insert(0) += 1;
    }
    assert!(
        !by_status.contains_key(&500),
        "no hostile request may fault the server: {by_status:?}"
    );
    for token in tokens {
        gw.verify(&token).await.unwrap();
    }
    let (status, _) = gw.get_text("/livez").await;
    assert_eq!(status, 200);
    // Every admission slot the hostile tasks took comes back once they end.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (_, body) = gw.get_text("/health").await;
        let health: Value = serde_json::from_str(&body).unwrap();
        if health["active_tasks"] == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "admission slots still held a minute after the hostile load: {health}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
