//! The JSON task protocol downstream (`/createTask`, `/getTaskResult`, `/getBalance`): the real
//! `anticaptchaofficial` and `capsolver` packages from PyPI against `--provider sim`, every
//! token they receive verified once at the simulator; and the protocol's edges by hand (bad keys,
//! bodies and numbers answered in the protocol's shape with HTTP 200, no secret echoed).

use std::time::Duration;

use serde_json::{Value, json};

use captcha_gateway::config::AccountProvider;

use crate::clients::{assert_all_verify, run_script};
use crate::failover::{LATENCY, json_account, settings};
use crate::support::eventually::eventually;
use crate::support::fleet::SimServer;
use crate::support::{KEY, TestGateway, fast_settings};

async fn run_client(gw: &TestGateway, client: &str) -> Value {
    run_script(gw, "taskapi_clients.py", client).await
}

/// The single-use credential inside an answer: the token itself, or GeeTest's `validate`.
fn credential(r: &Value) -> Option<String> {
    match r["kind"].as_str()? {
        "image" | "text" => None,
        "geetest_v3" => {
            let a = &r["answer"];
            assert!(
                a["challenge"].is_string() && a["seccode"].is_string(),
                "{a}"
            );
            a["validate"].as_str().map(str::to_owned)
        }
        "geetest_v4" => crate::clients::geetest_v4_credential(&r["answer"]),
        _ => r["answer"].as_str().map(str::to_owned),
    }
}

fn case<'a>(results: &'a [Value], name: &str) -> &'a Value {
    results
        .iter()
        .find(|r| r["case"] == name)
        .unwrap_or_else(|| panic!("no case {name}"))
}

#[tokio::test]
async fn the_anticaptcha_client_solves_every_kind_it_has() {
    let gw = TestGateway::start().await;
    let out = run_client(&gw, "anticaptcha").await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 17, "{out}");
    for r in results {
        assert!(
            r["task_id"].is_u64(),
            "anti-captcha task ids are numbers: {r}"
        );
    }
    let enterprise = case(results, "recaptcha_v2_enterprise");
    assert!(enterprise["user_agent"].is_string(), "{enterprise}");
    assert!(case(results, "recaptcha_v2")["user_agent"].is_null());
    // hCaptcha's `respKey`, which the library reads beside the token (`get_respkey()`), came
    // through from the simulator's `in.php` account.
    for name in ["hcaptcha", "hcaptcha_proxy"] {
        let r = case(results, name);
        assert!(
            r["resp_key"]
                .as_str()
                .is_some_and(|k| k.starts_with("respKey-")),
            "{r}"
        );
    }
    let image = case(results, "image")["answer"].as_str().unwrap();
    assert!(
        image.bytes().all(|b| b.is_ascii_digit()),
        "numeric=1: {image}"
    );
    // Coordinates, solved by the simulator's `in.php` account and read by the library from
    // `solution.coordinates`: points, and rectangles when asked for.
    for (name, width) in [("coordinates", 2), ("rectangles", 4)] {
        let r = case(results, name);
        let shapes = r["answer"].as_array().expect("a list");
        assert!(!shapes.is_empty(), "{r}");
        for shape in shapes {
            let numbers = shape.as_array().unwrap();
            assert_eq!(numbers.len(), width, "{r}");
            assert!(numbers.iter().all(|n| n.as_u64().is_some()), "{r}");
        }
    }
    assert!(out["extras"]["balance"].as_f64().is_some(), "{out}");
    assert_eq!(out["extras"]["report_bad"]["errorId"], 0, "{out}");
    assert_eq!(
        gw.stat("reports_bad").await,
        1,
        "the report reached the upstream task"
    );
    assert_all_verify(&gw, results, credential).await;
}

/// anticaptchaofficial's modules for types the gateway does not declare (AWS WAF, Prosopo,
/// Altcha; docs/API.md "Pass-through"), every setter used: each passes through to an anti-captcha
/// account as the library wrote it, and its token comes back as the provider gave it.
#[tokio::test]
async fn the_anticaptcha_client_passes_undeclared_types_through() {
    let (anti, gw) = anticaptcha_gateway().await;
    let out = run_client(&gw, "anticaptcha_passthrough").await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{out}");
    assert_eq!(
        anti.sim.stats().submits,
        3,
        "each call was one provider task"
    );
    assert_passed_through_tokens(&anti, &gw, results).await;
    let counted = [
        ("AmazonTaskProxyless", 1),
        ("ProsopoTaskProxyless", 1),
        ("AltchaTaskProxyless", 1),
    ];
    crate::clients::assert_passthrough_counted(&gw, "createTask", &counted).await;
}

/// A gateway whose one account is anti-captcha's dialect, on a simulator of its own.
pub(crate) async fn anticaptcha_gateway() -> (SimServer, TestGateway) {
    let anti = SimServer::start(LATENCY, 4).await;
    let gw = TestGateway::with(settings(vec![json_account(
        "ac",
        AccountProvider::AntiCaptcha,
        &anti,
    )]))
    .await;
    (anti, gw)
}

/// Each result was one task at `anti`, and its token, the provider's as given, verifies there.
pub(crate) async fn assert_passed_through(anti: &SimServer, gw: &TestGateway, results: &[Value]) {
    assert_eq!(
        anti.sim.stats().submits,
        results.len() as u64,
        "each call was one provider task"
    );
    assert_passed_through_tokens(anti, gw, results).await;
}

/// Each result's answer is a token the simulator minted, verified once.
async fn assert_passed_through_tokens(anti: &SimServer, gw: &TestGateway, results: &[Value]) {
    for r in results {
        let token = r["answer"].as_str().unwrap_or_else(|| panic!("{r}"));
        let verdict = anti.verify(&gw.http, token).await;
        assert_eq!(verdict["success"], true, "{r}: {verdict}");
    }
}

#[tokio::test]
async fn the_capsolver_client_solves_every_kind_it_has() {
    let gw = TestGateway::start().await;
    let out = run_client(&gw, "capsolver").await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 13, "{out}");
    let cf = case(results, "cloudflare_challenge");
    assert!(
        cf["user_agent"].is_string(),
        "cf_clearance is bound to a user agent: {cf}"
    );
    assert_eq!(out["extras"]["balance"]["errorId"], 0, "{out}");
    assert!(
        out["extras"]["balance"]["balance"].as_f64().is_some(),
        "{out}"
    );
    assert_all_verify(&gw, results, credential).await;
}

async fn post(gw: &TestGateway, path: &str, body: impl Into<reqwest::Body>) -> Value {
    let res = gw
        .http
        .post(gw.url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "every answer is HTTP 200");
    res.json().await.expect("every answer is JSON")
}

async fn call(gw: &TestGateway, path: &str, body: Value) -> Value {
    post(gw, path, body.to_string()).await
}

fn assert_error(v: &Value, code: &str) {
    assert_eq!(v["errorId"], 1, "{v}");
    assert_eq!(v["errorCode"], code, "{v}");
    assert!(v["errorDescription"].is_string(), "{v}");
}

#[tokio::test]
async fn a_task_runs_once_and_its_answer_can_be_read_again() {
    let gw = TestGateway::start().await;
    let created = call(
        &gw,
        "/createTask",
        json!({"clientKey": KEY, "task": {"type": "TurnstileTaskProxyless",
            "websiteURL": "https://example.com/", "websiteKey": "0x4AAAAAAAraw"}}),
    )
    .await;
    assert_eq!(created["errorId"], 0, "{created}");
    let id = created["taskId"].as_u64().expect("a numeric task id");
    eventually(Duration::from_secs(10), "the task is ready", || {
        let gw = &gw;
        async move {
            // CapSolver clients send the id back as a string.
            let v = call(
                gw,
                "/getTaskResult",
                json!({"clientKey": KEY, "taskId": id.to_string()}),
            )
            .await;
            assert_eq!(v["errorId"], 0, "{v}");
            assert!(v["status"] == "ready" || v["status"] == "processing", "{v}");
            v["status"] == "ready"
        }
    })
    .await;
    let ready = call(
        &gw,
        "/getTaskResult",
        json!({"clientKey": KEY, "taskId": id}),
    )
    .await;
    let token = ready["solution"]["token"].as_str().unwrap().to_owned();
    let again = call(
        &gw,
        "/getTaskResult",
        json!({"clientKey": KEY, "taskId": id}),
    )
    .await;
    assert_eq!(
        again["solution"]["token"],
        token.as_str(),
        "the task's own answer, read again"
    );
    gw.verify(&token).await.unwrap();
    assert_eq!(gw.stat("submits").await, 1);
}

#[tokio::test]
async fn bad_keys_bodies_and_numbers_are_answered_in_the_protocol() {
    let mut settings = fast_settings();
    settings.gateway_keys = vec![captcha_gateway::config::Secret(KEY.to_owned())];
    let gw = TestGateway::with(settings).await;
    let page = "https://example.com/";
    let unknown = "f".repeat(32);
    let task = json!({"type": "RecaptchaV2TaskProxyless", "websiteURL": page, "websiteKey": "6Le"});
    for key in [json!(unknown), json!("short"), json!(12), Value::Null] {
        for path in ["/createTask", "/getTaskResult", "/getBalance"] {
            let v = call(
                &gw,
                path,
                json!({"clientKey": key, "task": task, "taskId": 1}),
            )
            .await;
            assert_error(&v, "ERROR_KEY_DOES_NOT_EXIST");
            assert!(
                !v.to_string().contains(&unknown),
                "the key is not echoed: {v}"
            );
        }
    }
    assert_error(
        &post(&gw, "/createTask", "{not json").await,
        "ERROR_BAD_REQUEST",
    );
    assert_error(
        &post(&gw, "/createTask", "[1,2]").await,
        "ERROR_BAD_REQUEST",
    );
    let cases = [
        (json!(null), "ERROR_TASK_ABSENT"),
        (
            json!({"type": "KeyCaptchaTaskProxyless"}),
            "ERROR_TASK_NOT_SUPPORTED",
        ),
        (
            json!({"type": "RecaptchaV2TaskProxyless", "websiteURL": page}),
            "ERROR_RECAPTCHA_INVALID_SITEKEY",
        ),
        (
            json!({"type": "RecaptchaV2Task", "websiteURL": page, "websiteKey": "6Le",
            "proxyAddress": "10.0.0.1", "proxyPort": 1e40, "proxyPassword": "hunter2-secret"}),
            "ERROR_BAD_PROXY",
        ),
        (
            json!({"type": "RecaptchaV2Task", "websiteURL": page, "websiteKey": "6Le",
            "proxyAddress": "10.0.0.1", "proxyPort": -80}),
            "ERROR_BAD_PROXY",
        ),
        (
            json!({"type": "ImageToTextTask", "body": "aGk=", "numeric": -1}),
            "ERROR_BAD_PARAMETERS",
        ),
        (
            json!({"type": "RecaptchaV3TaskProxyless", "websiteURL": page, "websiteKey": "6Le",
            "pageAction": "a", "minScore": 1e308}),
            "ERROR_BAD_PARAMETERS",
        ),
    ];
    for (task, code) in cases {
        let v = call(&gw, "/createTask", json!({"clientKey": KEY, "task": task})).await;
        assert_error(&v, code);
        assert!(!v.to_string().contains("hunter2"), "no secret echoed: {v}");
    }
    for id in [
        json!(-1),
        json!("not-a-number"),
        json!(99999999999u64),
        json!(1.5),
        json!({"a": 1}),
    ] {
        let v = call(
            &gw,
            "/getTaskResult",
            json!({"clientKey": KEY, "taskId": id}),
        )
        .await;
        assert_error(&v, "ERROR_NO_SUCH_CAPCHA_ID");
    }
    assert_eq!(
        gw.stat("submits").await,
        0,
        "nothing bad reached the provider"
    );
    let balance = call(&gw, "/getBalance", json!({"clientKey": KEY})).await;
    assert_eq!(balance["errorId"], 0, "{balance}");
    assert!(balance["balance"].as_f64().is_some(), "{balance}");
}

#[tokio::test]
async fn a_task_is_its_tenants_only() {
    let other = "abcdef0123456789abcdef0123456789";
    let mut settings = fast_settings();
    settings.gateway_keys = vec![
        captcha_gateway::config::Secret(KEY.to_owned()),
        captcha_gateway::config::Secret(other.to_owned()),
    ];
    let gw = TestGateway::with(settings).await;
    let task = json!({"type": "RecaptchaV2TaskProxyless", "websiteURL": "https://example.com/",
        "websiteKey": "6Le-tenant"});
    let created = call(&gw, "/createTask", json!({"clientKey": KEY, "task": task})).await;
    let id = created["taskId"].clone();
    assert!(id.is_u64(), "{created}");
    gw.wait_task(&id.to_string()).await;
    let theirs = call(
        &gw,
        "/getTaskResult",
        json!({"clientKey": other, "taskId": id}),
    )
    .await;
    assert_error(&theirs, "ERROR_NO_SUCH_CAPCHA_ID");
    let report = call(
        &gw,
        "/reportIncorrectRecaptcha",
        json!({"clientKey": other, "taskId": id}),
    )
    .await;
    assert_error(&report, "ERROR_NO_SUCH_CAPCHA_ID");
    let mine = call(
        &gw,
        "/getTaskResult",
        json!({"clientKey": KEY, "taskId": id}),
    )
    .await;
    assert_eq!(mine["status"], "ready", "{mine}");
    let report = call(
        &gw,
        "/reportCorrect",
        json!({"clientKey": KEY, "taskId": id}),
    )
    .await;
    assert_eq!(report["errorId"], 0, "{report}");
    let again = call(
        &gw,
        "/reportCorrect",
        json!({"clientKey": KEY, "taskId": id}),
    )
    .await;
    assert_error(&again, "ERROR_DUPLICATE_REPORT");
    assert_eq!(gw.stat("reports_good").await, 1);
}

#[tokio::test]
async fn identical_images_share_one_upstream_task() {
    use base64::Engine as _;
    let gw = TestGateway::start().await;
    let png = [b"\x89PNG\r\n\x1a\n".as_slice(), &[9u8; 300]].concat();
    let task = json!({"type": "ImageToTextTask", "numeric": 1, "minLength": 5,
        "body": base64::engine::general_purpose::STANDARD.encode(png)});
    let mut answers = Vec::new();
    for _ in 0..2 {
        let created = call(&gw, "/createTask", json!({"clientKey": KEY, "task": task})).await;
        let id = created["taskId"].clone();
        gw.wait_task(&id.to_string()).await;
        let v = call(
            &gw,
            "/getTaskResult",
            json!({"clientKey": KEY, "taskId": id}),
        )
        .await;
        assert_eq!(v["status"], "ready", "{v}");
        answers.push((id, v["solution"]["text"].as_str().unwrap().to_owned()));
    }
    assert_ne!(answers[0].0, answers[1].0, "each call is its own task");
    assert_eq!(answers[0].1, answers[1].1, "with the one answer");
    assert!(answers[0].1.len() >= 5 && answers[0].1.bytes().all(|b| b.is_ascii_digit()));
    assert_eq!(gw.stat("submits").await, 1, "solved upstream once");
}

/// The kinds neither client library has a call for: a text question (2captcha v2's
/// `TextCaptchaTask`) and a Cloudflare challenge in anti-captcha's form (`TurnstileTask` with
/// `cloudflareTaskType`), by hand.
#[tokio::test]
async fn kinds_without_a_library_call_work_by_hand() {
    let gw = TestGateway::start().await;
    let cases = [
        (
            json!({"type": "TextCaptchaTask", "comment": "If tomorrow is Saturday, what day is today?",
            "languagePool": "en"}),
            "text",
        ),
        (
            json!({"type": "TurnstileTask", "cloudflareTaskType": "cf_clearance",
            "websiteURL": "https://example.com/", "proxyType": "http",
            "proxyAddress": "127.0.0.1", "proxyPort": 3128, "proxyLogin": "u",
            "proxyPassword": "secret", "userAgent": "Mozilla/5.0 (by hand)"}),
            "cf_clearance",
        ),
    ];
    for (task, field) in cases {
        let created = call(&gw, "/createTask", json!({"clientKey": KEY, "task": task})).await;
        assert_eq!(created["errorId"], 0, "{created}");
        let id = created["taskId"].clone();
        gw.wait_task(&id.to_string()).await;
        let v = call(
            &gw,
            "/getTaskResult",
            json!({"clientKey": KEY, "taskId": id}),
        )
        .await;
        assert_eq!(v["status"], "ready", "{v}");
        let answer = v["solution"][field]
            .as_str()
            .unwrap_or_else(|| panic!("{field}: {v}"));
        if field == "cf_clearance" {
            assert_eq!(v["solution"]["userAgent"], "Mozilla/5.0 (by hand)", "{v}");
            gw.verify(answer).await.unwrap();
        } else {
            assert!(!answer.is_empty());
        }
    }
}
