//! The native JSON API, the seed 002 worker API and the operations endpoints.

use std::time::Duration;

use captcha_gateway::model::Kind;
use captcha_gateway::sim::LatencyRange;
use serde_json::{Value, json};

use crate::support::eventually::eventually;
use crate::support::{KEY, TestGateway, fast_settings};

#[tokio::test]
async fn v1_solve_answers_with_token_source_and_expiry() {
    let gw = TestGateway::start().await;
    let res = gw
        .http
        .post(gw.url("/v1/solve"))
        .bearer_auth(KEY)
        .json(&json!({"kind": "recaptcha_v2", "sitekey": "6Le-native", "pageurl": "https://example.com/a", "timeout_s": 30}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["kind"], "recaptcha_v2");
    assert_eq!(v["source"], "solved");
    assert!(v["expires_at"].as_str().unwrap().ends_with('Z'), "{v}");
    assert!(v["task_id"].is_string());
    let verdict = gw.verify_json(v["token"].as_str().unwrap()).await;
    assert_eq!(verdict["success"], true, "{verdict}");
    // Lifetimes count from the provider's ready time: the gateway may think the answer older
    // than it is (it only knows "ready since the last not-ready check"), never younger.
    let ms = |field: &str| {
        let t = humantime::parse_rfc3339(v[field].as_str().unwrap()).unwrap();
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
    };
    let provider_ready = verdict["solved_at"].as_u64().unwrap();
    assert!(
        ms("solved_at") <= provider_ready,
        "gateway solved_at {} after the provider's {provider_ready}",
        ms("solved_at")
    );
    assert_eq!(ms("expires_at") - ms("solved_at"), 120_000);

    let res = gw
        .http
        .post(gw.url("/v1/solve"))
        .json(&json!({"kind": "cloudflare_challenge", "pageurl": "https://example.com/", "proxy": "u:p@127.0.0.1:3128", "user_agent": "UA/1"}))
        .send()
        .await
        .unwrap();
    let v: Value = res.json().await.unwrap();
    assert_eq!(
        v["user_agent"], "UA/1",
        "the clearance is bound to the caller's UA: {v}"
    );
}

#[tokio::test]
async fn v1_errors_are_4xx_with_a_code_and_message() {
    let mut settings = fast_settings();
    settings.gateway_keys = vec![captcha_gateway::config::Secret(KEY.to_owned())];
    let gw = TestGateway::with(settings).await;
    let post = |body: String, key: Option<&str>| {
        let mut req = gw
            .http
            .post(gw.url("/v1/solve"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        req.send()
    };
    let cases = [
        (
            r#"{"kind":"recaptcha_v2","sitekey":"k","pageurl":"https://e.com"}"#,
            None,
            401,
            "ERROR_WRONG_USER_KEY",
        ),
        ("{oops", Some(KEY), 400, "bad_json"),
        (r#"[1,2]"#, Some(KEY), 400, "bad_json"),
        (r#"{"kind":"keycaptcha"}"#, Some(KEY), 400, "bad_kind"),
        (r#"{"sitekey":"k"}"#, Some(KEY), 400, "bad_kind"),
        (
            r#"{"kind":"recaptcha_v2","pageurl":"https://e.com"}"#,
            Some(KEY),
            400,
            "ERROR_GOOGLEKEY",
        ),
        (
            r#"{"kind":"recaptcha_v2","sitekey":"k","pageurl":"https://e.com","timeout_s":-1}"#,
            Some(KEY),
            400,
            "bad_timeout",
        ),
        (
            r#"{"kind":"image","body":"aGk="}"#,
            Some(KEY),
            400,
            "ERROR_ZERO_CAPTCHA_FILESIZE",
        ),
    ];
    for (body, key, status, code) in cases {
        let res = post(body.to_owned(), key).await.unwrap();
        assert_eq!(res.status().as_u16(), status, "{body}");
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let res = gw
        .http
        .get(gw.url("/v1/tasks/123"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
}

#[tokio::test]
async fn v1_tasks_long_poll_until_ready() {
    let gw = TestGateway::start().await;
    let res = gw
        .http
        .post(gw.url("/v1/tasks"))
        .bearer_auth(KEY)
        .json(&json!({"kind": "turnstile", "sitekey": "0x4AAA-native", "pageurl": "https://example.com/"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let v: Value = res.json().await.unwrap();
    let id = v["task_id"].as_str().unwrap();
    let done = gw.wait_task(id).await;
    assert_eq!(done["status"], "ready");
    assert_eq!(done["result"]["kind"], "turnstile");
    gw.verify(done["result"]["token"].as_str().unwrap())
        .await
        .unwrap();
}

#[tokio::test]
async fn seed_worker_api_solves_and_sheds_load_at_max_concurrent() {
    let mut settings = fast_settings();
    settings.max_concurrent = 1;
    // Turnstile solves take long here, so the first caller holds the only slot while we look.
    settings.sim.latency.insert(
        Kind::Turnstile,
        LatencyRange::fixed(Duration::from_secs(60)),
    );
    let gw = TestGateway::with(settings).await;

    let v: Value = gw
        .http
        .post(gw.url("/solve"))
        .json(&json!({"sitekey": "6Le-seed", "pageurl": "https://example.com/"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    gw.verify(v["solution"].as_str().unwrap()).await.unwrap();
    assert!(v["captcha_id"].is_string(), "{v}");

    let http = gw.http.clone();
    let slow_url = gw.url("/solve");
    let slow = tokio::spawn(async move {
        http.post(slow_url).json(&json!({"method": "turnstile", "sitekey": "0x4", "pageurl": "https://example.com/"})).send().await
    });
    // Wait until the slow caller holds the slot, as /health reports it.
    eventually(
        Duration::from_secs(60),
        "/health to show the held slot",
        || async {
            let res = gw.http.get(gw.url("/health")).send().await.unwrap();
            let status = res.status();
            let h: Value = res.json().await.unwrap();
            if h["active_tasks"] == 1 {
                assert_eq!(status, 503);
                assert_eq!(h["status"], "overloaded");
                assert_eq!(h["load_pct"], 100.0);
                return true;
            }
            assert_eq!(h["status"], "healthy");
            false
        },
    )
    .await;
    let res = gw
        .http
        .post(gw.url("/solve"))
        .json(&json!({"sitekey": "6Le-seed", "pageurl": "https://example.com/"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    assert_eq!(
        res.json::<Value>().await.unwrap()["error"],
        "WORKER_AT_CAPACITY"
    );
    slow.abort();

    let v: Value = gw
        .http
        .post(gw.url("/solve"))
        .json(&json!({"pageurl": "https://example.com/"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["error"], "ERROR_GOOGLEKEY",
        "seed errors come as {{error}}"
    );
}

#[tokio::test]
async fn operations_endpoints_answer() {
    let gw = TestGateway::start().await;
    gw.solve_compat(&[
        ("method", "userrecaptcha"),
        ("googlekey", "6Le-ops"),
        ("pageurl", "https://example.com/"),
    ])
    .await;
    assert_eq!(gw.get_text("/livez").await, (200, "ok".to_owned()));
    assert_eq!(gw.get_text("/readyz").await.0, 200);
    let (status, metrics) = gw.get_text("/metrics").await;
    assert_eq!(status, 200);
    for needle in [
        "captcha_gateway_requests_total{api=\"compat\",endpoint=\"in\",outcome=\"ok\"} 1",
        "captcha_gateway_new_tasks_total{target=\"recaptcha_v2:example.com\"} 1",
        "captcha_gateway_upstream_requests_total{account=\"sim\",endpoint=\"submit\",result=\"ok\"} 1",
        "# EOF",
    ] {
        assert!(metrics.contains(needle), "missing {needle} in:\n{metrics}");
    }
    assert!(!metrics.contains(KEY));
    let (status, page) = gw.get_text("/").await;
    assert_eq!(status, 200);
    assert!(page.contains("recaptcha_v2:example.com"));
}

/// A second gateway key: another tenant.
const OTHER: &str = "fedcba9876543210fedcba9876543210";

/// Another tenant's task id answers a long poll at once and exactly like an unknown id: the
/// tenant filter runs before the wait, so how long the answer takes says nothing about whether
/// the id exists. The simulator's clock stands still, so the owner's task stays pending until
/// its own deadline (20 s) ends it; had the foreign poll waited, it would have answered only
/// then (the task ended) or at its 60 s.
#[tokio::test]
async fn another_tenants_task_id_answers_a_long_poll_at_once_like_an_unknown_id() {
    use captcha_gateway::cli::ServeArgs;
    use captcha_gateway::config::{self, Secret};
    use captcha_gateway::provider::AccountProvider;

    let sim = crate::support::fleet::SimServer::stalled(10).await;
    let args = ServeArgs {
        listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        provider: Some(AccountProvider::Captchaai),
        provider_url: Some(format!("http://{}", sim.addr)),
        threads: Some(10),
        gateway_keys: vec![Secret(KEY.into()), Secret(OTHER.into())],
        ..ServeArgs::default()
    };
    let env = |name: &str| (name == "CAPTCHAAI_API_KEY").then(|| KEY.to_owned());
    let mut settings = config::load_serve(&args, &env).expect("test settings are valid");
    settings.warmup = Duration::ZERO;
    let gw = TestGateway::with(settings).await;

    let created = gw
        .http
        .post(gw.url("/v1/tasks"))
        .bearer_auth(KEY)
        .json(&json!({"kind": "turnstile", "sitekey": "0x4AAA-owned", "pageurl": "https://owned.example/", "timeout_s": 20}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 202);
    let id = created.json::<Value>().await.unwrap()["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    eventually(
        Duration::from_secs(10),
        "the owner's upstream submit",
        || async { sim.sim.stats().submits == 1 },
    )
    .await;

    let poll = |id: String, key: &'static str| {
        let (http, url) = (gw.http.clone(), gw.url(&format!("/v1/tasks/{id}?wait=60")));
        async move {
            let res = http.get(url).bearer_auth(key).send().await.unwrap();
            (res.status().as_u16(), res.text().await.unwrap())
        }
    };
    let foreign = poll(id.clone(), OTHER).await;
    let owner: Value = gw
        .http
        .get(gw.url(&format!("/v1/tasks/{id}")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        owner["status"], "pending",
        "the foreign poll must answer while the owner's task is still pending: {owner}"
    );
    let unknown = poll("123456789012345".into(), OTHER).await;
    assert_eq!(foreign.0, 404, "{}", foreign.1);
    assert_eq!(
        foreign, unknown,
        "a foreign id reads exactly as an unknown one"
    );
}
