//! Pass-through (docs/API.md "Pass-through"): a task of a type no kind declares is forwarded as
//! sent to an account of the caller's protocol, never to another protocol's, never pooled, its
//! answer returned as the provider gave it; a provider refusing the type moves it to the next
//! account of the protocol; an operator can turn it off; the metric's labels stay bounded.

use captcha_gateway::config::AccountProvider;
use serde_json::{Value, json};

use crate::failover::{LATENCY, account, json_account, settings};
use crate::support::fleet::SimServer;
use crate::support::{KEY, TestGateway};

const PAGE: &str = "https://shop.example.com/login";

/// 2captcha-python's `keycaptcha` parameters, as its client sends them.
fn keycaptcha() -> Vec<(&'static str, &'static str)> {
    vec![
        ("method", "keycaptcha"),
        ("s_s_c_user_id", "184015"),
        ("s_s_c_session_id", "9ff29e0176e78eb7ba59314f92dbac1b"),
        ("s_s_c_web_server_sign", "964635241a3e5e76980f2572e5f63452"),
        ("s_s_c_web_server_sign2", "3ca802a38ffc5831fa293ac2819b1204"),
        ("pageurl", PAGE),
        ("soft_id", "4580"),
    ]
}

async fn submit_inphp(gw: &TestGateway, form: &[(&str, &str)]) -> String {
    let mut form = form.to_vec();
    form.push(("key", KEY));
    gw.post_form("/in.php", &form).await.1
}

/// An `in.php` task to its end: the `res.php` answer after `OK|`, or the error.
async fn solve_inphp(gw: &TestGateway, form: &[(&str, &str)]) -> Result<String, String> {
    let body = submit_inphp(gw, form).await;
    let id = body
        .strip_prefix("OK|")
        .ok_or_else(|| body.clone())?
        .to_owned();
    gw.wait_task(&id).await;
    let (_, body) = gw
        .get_text(&format!("/res.php?key={KEY}&action=get&id={id}"))
        .await;
    body.strip_prefix("OK|").map(str::to_owned).ok_or(body)
}

async fn create_task(gw: &TestGateway, task: Value) -> Value {
    let res = gw
        .http
        .post(gw.url("/createTask"))
        .json(&json!({"clientKey": KEY, "task": task}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

async fn metrics(gw: &TestGateway) -> String {
    gw.get_text("/metrics").await.1
}

/// The value of the metric line starting with `series` (labels in their written order).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// Each protocol's undeclared types reach an account of that protocol only, and come back as
/// the provider gave them: an `in.php` token, a coordinates image task whole (not solved as the
/// image's text), and a `createTask` solution object. Two callers of the same task each get
/// their own provider task (never pooled or shared).
#[tokio::test]
async fn a_type_no_kind_declares_goes_as_sent_to_an_account_of_its_protocol() {
    let inphp = SimServer::start(LATENCY, 4).await;
    let anti = SimServer::start(LATENCY, 4).await;
    let gw = TestGateway::with(settings(vec![
        account("inphp", &inphp, 4),
        json_account("anti", AccountProvider::AntiCaptcha, &anti),
    ]))
    .await;

    let form = keycaptcha();
    let (first, second) = tokio::join!(solve_inphp(&gw, &form), solve_inphp(&gw, &form));
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_ne!(first, second, "one answer per caller, never shared");
    for token in [&first, &second] {
        let verdict = inphp.verify(&gw.http, token).await;
        assert_eq!(verdict["success"], true, "{token}: {verdict}");
    }
    let png = base64_png();
    // A 2captcha reCAPTCHA grid (`recaptcha=1` on an image) is another task than the image's text.
    let grid = solve_inphp(
        &gw,
        &[
            ("method", "base64"),
            ("body", &png),
            ("recaptcha", "1"),
            ("textinstructions", "click the cats"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        inphp.verify(&gw.http, &grid).await["success"],
        true,
        "the provider's answer to the grid task, not an image text: {grid}"
    );
    assert_eq!(inphp.sim.stats().submits, 3);

    let created = create_task(
        &gw,
        json!({"type": "KeyCaptchaTaskProxyless", "s_s_c_user_id": 184015,
            "s_s_c_session_id": "9ff29e0176e78eb7ba59314f92dbac1b", "websiteURL": PAGE}),
    )
    .await;
    assert_eq!(created["errorId"], 0, "{created}");
    gw.wait_task(&created["taskId"].to_string()).await;
    let result = gw
        .http
        .post(gw.url("/getTaskResult"))
        .json(&json!({"clientKey": KEY, "taskId": created["taskId"]}))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(result["status"], "ready", "{result}");
    let solution = result["solution"].as_object().expect("the solution object");
    assert_eq!(
        solution.len(),
        1,
        "whole, as the provider gave it: {result}"
    );
    let token = solution["token"].as_str().unwrap();
    assert_eq!(anti.verify(&gw.http, token).await["success"], true);
    assert_eq!(anti.sim.stats().submits, 1, "only createTask's went there");
    assert_eq!(inphp.sim.stats().submits, 3, "and none of them to in.php");

    let text = metrics(&gw).await;
    let counted = |protocol: &str, name: &str| {
        sample(
            &text,
            &format!(
                "captcha_gateway_passthrough_tasks_total{{protocol=\"{protocol}\",type=\"{name}\"}}"
            ),
        )
    };
    assert_eq!(counted("in.php", "keycaptcha"), Some(2.0), "{text}");
    assert_eq!(counted("in.php", "base64"), Some(1.0));
    assert_eq!(counted("createTask", "KeyCaptchaTaskProxyless"), Some(1.0));
}

/// A provider refusing a type it does not have moves the task to the next account of the
/// protocol: every `in.php` account is asked once, the caller gets the last refusal, and the
/// made-up names all share one `unlisted` label.
#[tokio::test]
async fn a_refused_type_is_tried_at_every_account_of_its_protocol_and_labels_stay_bounded() {
    let a = SimServer::start(LATENCY, 4).await;
    let b = SimServer::start(LATENCY, 4).await;
    let gw = TestGateway::with(settings(vec![account("a", &a, 4), account("b", &b, 4)])).await;
    for i in 0..5 {
        let method = format!("teleport{i}");
        let answer = solve_inphp(&gw, &[("method", &method), ("pageurl", PAGE)]).await;
        assert_eq!(answer, Err("ERROR_BAD_PARAMETERS".to_owned()), "{method}");
    }
    let text = metrics(&gw).await;
    for name in ["a", "b"] {
        let refused = sample(
            &text,
            &format!(
                "captcha_gateway_upstream_requests_total{{account=\"{name}\",endpoint=\"submit\",result=\"permanent\"}}"
            ),
        );
        assert_eq!(
            refused,
            Some(5.0),
            "account {name} was asked each time: {text}"
        );
    }
    let unlisted = "captcha_gateway_passthrough_tasks_total{protocol=\"in.php\",type=\"unlisted\"}";
    assert_eq!(sample(&text, unlisted), Some(5.0));
    assert!(
        !text.contains("teleport"),
        "a caller's name is never a label"
    );
}

/// With no account of the caller's protocol the caller is told the type and the accounts
/// there are; with `passthrough = false` it is told pass-through is off; neither reaches a
/// provider.
#[tokio::test]
async fn without_an_account_of_its_protocol_or_with_passthrough_off_the_type_is_named() {
    let sim = SimServer::start(LATENCY, 4).await;
    let gw = TestGateway::with(settings(vec![account("only-inphp", &sim, 4)])).await;
    let created = create_task(
        &gw,
        json!({"type": "CapyTaskProxyless", "websiteURL": PAGE, "websiteKey": "PUZZLE_x"}),
    )
    .await;
    assert_eq!(
        created["errorCode"], "ERROR_TASK_NOT_SUPPORTED",
        "{created}"
    );
    let said = created["errorDescription"].as_str().unwrap();
    assert!(
        said.contains("CapyTaskProxyless") && said.contains("only-inphp"),
        "{said}"
    );

    let mut off = settings(vec![account("only-inphp", &sim, 4)]);
    off.upstream.passthrough = false;
    let gw = TestGateway::with(off).await;
    let form = keycaptcha();
    let body = submit_inphp(&gw, &form).await;
    assert_eq!(body, "ERROR_TASK_NOT_SUPPORTED");
    let (status, reply) = crate::support::solve(
        &gw.http,
        &gw.url(""),
        json!({"kind": "other", "method": "capy", "sitekey": "PUZZLE_x", "pageurl": PAGE}),
    )
    .await;
    assert_eq!(status, 422, "{reply}");
    let message = reply.to_string();
    assert!(
        message.contains("`capy`") && message.contains("passthrough = false"),
        "{message}"
    );
    assert_eq!(sim.sim.stats().submits, 0, "no provider was asked");
}

fn base64_png() -> String {
    use base64::Engine as _;
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(&[7u8; 300]);
    base64::engine::general_purpose::STANDARD.encode(png)
}
