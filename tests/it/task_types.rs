//! The kinds whose parameters are declared (docs/API.md, "Task types"), across protocols: a
//! caller of one protocol is solved by an account of the other, an object answer arrives whole,
//! a kind goes only where a provider solves it, and a field the declaration does not name is
//! refused by name rather than dropped.

use captcha_gateway::config::AccountProvider;
use serde_json::{Value, json};

use crate::failover::{LATENCY, account, json_account, settings};
use crate::support::fleet::SimServer;
use crate::support::{KEY, TestGateway, solve};

const PAGE: &str = "https://shop.example.com/login";

/// A JSON-protocol call to the gateway: every answer is HTTP 200 and JSON.
async fn call(gw: &TestGateway, path: &str, body: Value) -> Value {
    let res = gw.http.post(gw.url(path)).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 200, "every answer is HTTP 200");
    res.json().await.expect("every answer is JSON")
}

/// `createTask`, then `getTaskResult` once the task has ended: its solution.
pub(crate) async fn solve_task(gw: &TestGateway, task: Value) -> Value {
    let created = call(gw, "/createTask", json!({"clientKey": KEY, "task": task})).await;
    assert_eq!(created["errorId"], 0, "{created}");
    gw.wait_task(&created["taskId"].to_string()).await;
    let v = call(
        gw,
        "/getTaskResult",
        json!({"clientKey": KEY, "taskId": created["taskId"]}),
    )
    .await;
    assert_eq!(
        (v["errorId"].as_u64(), v["status"].as_str()),
        (Some(0), Some("ready")),
        "{v}"
    );
    v["solution"].clone()
}

/// An `in.php` submit (plain text, as 2captcha-python reads it), then `res.php` once the task
/// has ended: the answer after `OK|`.
pub(crate) async fn solve_inphp(gw: &TestGateway, form: &[(&str, &str)]) -> String {
    let mut form = form.to_vec();
    form.push(("key", KEY));
    let (_, body) = gw.post_form("/in.php", &form).await;
    let id = body
        .strip_prefix("OK|")
        .unwrap_or_else(|| panic!("submit: {body}"))
        .to_owned();
    gw.wait_task(&id).await;
    let (_, body) = gw
        .get_text(&format!("/res.php?key={KEY}&action=get&id={id}"))
        .await;
    body.strip_prefix("OK|")
        .unwrap_or_else(|| panic!("res.php: {body}"))
        .to_owned()
}

async fn assert_verifies(sim: &SimServer, gw: &TestGateway, token: &str) {
    let verdict = sim.verify(&gw.http, token).await;
    assert_eq!(verdict["success"], true, "{token}: {verdict}");
}

/// An `in.php` FunCaptcha caller (2captcha-python's parameters, `data[blob]` included), native
/// MTCaptcha and DataDome callers and an `in.php` hCaptcha caller with its `rqdata` are solved
/// by a CapSolver account; a kind CapSolver does not solve is refused at the submit and never
/// reaches it.
#[tokio::test]
async fn an_inphp_caller_is_solved_by_a_createtask_account() {
    let capsolver = SimServer::start(LATENCY, 4).await;
    let gw = TestGateway::with(settings(vec![json_account(
        "cs",
        AccountProvider::CapSolver,
        &capsolver,
    )]))
    .await;
    let token = solve_inphp(
        &gw,
        &[
            ("method", "funcaptcha"),
            ("publickey", "69A21A01-CC7B-B9C6-0F9A-E7FA06677FFC"),
            ("pageurl", PAGE),
            ("surl", "https://client-api.arkoselabs.com"),
            ("data[blob]", "b10b"),
        ],
    )
    .await;
    assert_verifies(&capsolver, &gw, &token).await;

    let (status, reply) = solve(
        &gw.http,
        &gw.url(""),
        json!({"kind": "mtcaptcha", "sitekey": "MTPublic-KzqLY1cKH", "pageurl": PAGE}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_verifies(&capsolver, &gw, reply["token"].as_str().unwrap()).await;
    // CapSolver's DataDome solution is `{"cookie": ...}`: the caller gets the cookie itself.
    let (status, reply) = solve(
        &gw.http,
        &gw.url(""),
        json!({"kind": "datadome", "pageurl": PAGE,
            "captcha_url": "https://geo.captcha-delivery.com/captcha/?initialCid=x",
            "user_agent": "Mozilla/5.0 (test)", "proxy": "u:p@127.0.0.1:3128", "proxytype": "HTTP"}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_verifies(&capsolver, &gw, reply["token"].as_str().unwrap()).await;
    // hCaptcha's `data` (its rqdata) travels in `enterprisePayload`, which the account's strict
    // decoder would refuse in any other place.
    let token = solve_inphp(
        &gw,
        &[
            ("method", "hcaptcha"),
            ("sitekey", "10000000-ffff-ffff-ffff-000000000001"),
            ("pageurl", PAGE),
            ("data", "rqdata-value"),
        ],
    )
    .await;
    assert_verifies(&capsolver, &gw, &token).await;
    assert_eq!(capsolver.sim.stats().submits, 4);

    let form = [
        ("method", "lemin"),
        (
            "captcha_id",
            "CROPPED_3dfdd5c_d1872b526b794d83ba3b365eb15a200b",
        ),
        ("div_id", "lemin-cropped-captcha"),
        ("pageurl", PAGE),
        ("key", KEY),
    ];
    let (_, body) = gw.post_form("/in.php", &form).await;
    assert_eq!(body, "ERROR_TASK_NOT_SUPPORTED");
    assert_eq!(
        capsolver.sim.stats().submits,
        4,
        "CapSolver was never asked"
    );
}

/// A gateway with a `provider` account preferred 1000 to 1 over a simulator account, and the
/// check that a task (`form`) with `param` set goes past the preferred account to the
/// simulator's while the same task without it goes to the preferred one. Returns the preferred
/// account's simulator.
async fn passed_over_for(
    provider: AccountProvider,
    form: &[(&str, &str)],
    param: (&str, &str),
) -> SimServer {
    let preferred_sim = SimServer::start(LATENCY, 4).await;
    let other = SimServer::start(LATENCY, 4).await;
    let mut preferred = json_account("pref", provider, &preferred_sim);
    preferred.weight = 1000;
    let gw = TestGateway::with(settings(vec![preferred, account("sim", &other, 4)])).await;
    let mut with = form.to_vec();
    with.push(param);
    let token = solve_inphp(&gw, &with).await;
    assert_verifies(&other, &gw, &token).await;
    assert_eq!(
        (preferred_sim.sim.stats().submits, other.sim.stats().submits),
        (0, 1),
        "with `{}`, past the preferred account",
        param.0
    );
    let token = solve_inphp(&gw, form).await;
    assert_verifies(&preferred_sim, &gw, &token).await;
    assert_eq!(
        preferred_sim.sim.stats().submits,
        1,
        "without it, the preferred account"
    );
    preferred_sim
}

/// A parameter only some providers take keeps its task to their accounts: CaptchaAI's Friendly
/// Captcha `version` passes a preferred 2captcha account by.
#[tokio::test]
async fn a_parameter_only_captchaai_takes_keeps_the_task_to_captchaai_accounts() {
    let form = [
        ("method", "friendly_captcha"),
        ("sitekey", "FCMGEMUD2KTDSQ5H"),
        ("pageurl", PAGE),
    ];
    passed_over_for(AccountProvider::TwoCaptcha, &form, ("version", "v2")).await;
}

/// A Turnstile challenge page's `chlPageData` (`pagedata`), for which CapSolver documents no
/// field, passes a preferred CapSolver account by: before, CapSolver was sent it under a name
/// its docs do not have, and the answer came back as if it had been honoured.
#[tokio::test]
async fn a_challenge_pages_data_capsolver_has_no_field_for_passes_it_by() {
    let form = [
        ("method", "turnstile"),
        ("sitekey", "0x4AAAAAAApagedata"),
        ("pageurl", PAGE),
        ("data", "cdata-1"),
    ];
    passed_over_for(
        AccountProvider::CapSolver,
        &form,
        ("pagedata", "chl-page-1"),
    )
    .await;
}

/// hCaptcha's `domain` (2captcha's alone; `createTask` has no field for it) keeps a task to
/// `in.php` accounts: a preferred CapSolver account is passed over for it (and takes the same
/// task without it), and with no account that takes it the caller is told, naming the parameter.
#[tokio::test]
async fn a_parameter_only_inphp_carries_keeps_the_task_to_inphp_accounts() {
    let form = [
        ("method", "hcaptcha"),
        ("sitekey", "10000000-ffff-ffff-ffff-000000000001"),
        ("pageurl", PAGE),
    ];
    let capsolver = passed_over_for(
        AccountProvider::CapSolver,
        &form,
        ("domain", "js.hcaptcha.com"),
    )
    .await;

    let hcaptcha = json!({"kind": "hcaptcha", "sitekey": "10000000-ffff-ffff-ffff-000000000001",
        "pageurl": PAGE, "domain": "js.hcaptcha.com"});
    let account = ("cs", AccountProvider::CapSolver);
    refused_by_its_only_account(account, &capsolver, hcaptcha, "domain").await;
    assert_eq!(capsolver.sim.stats().submits, 1, "CapSolver was not asked");
}

/// A native `body` sent to a gateway whose only account is `account` (at `sim`), which does not
/// take `param` as sent: refused with 422, the message naming the parameter and the account.
async fn refused_by_its_only_account(
    (name, provider): (&str, AccountProvider),
    sim: &SimServer,
    body: Value,
    param: &str,
) {
    let gw = TestGateway::with(settings(vec![json_account(name, provider, sim)])).await;
    let (status, reply) = solve(&gw.http, &gw.url(""), body).await;
    assert_eq!(status, 422, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    let label = format!("{name} ({})", provider.as_str());
    assert!(
        message.contains(&format!("`{param}`")) && message.contains(&label),
        "{reply}"
    );
}

/// A `createTask` Lemin caller (2captcha v2's names) is solved by an `in.php` account, and its
/// object answer arrives whole as the solution; DataDome's cookie comes back as `cookie`.
#[tokio::test]
async fn a_createtask_caller_is_solved_by_an_inphp_account_with_the_answer_whole() {
    let sim = SimServer::start(LATENCY, 4).await;
    let gw = TestGateway::with(settings(vec![account("inphp", &sim, 4)])).await;
    let lemin = solve_task(
        &gw,
        json!({"type": "LeminTaskProxyless", "websiteURL": PAGE,
            "captchaId": "CROPPED_3dfdd5c_d1872b526b794d83ba3b365eb15a200b",
            "divId": "lemin-cropped-captcha", "leminApiServerSubdomain": "api.leminnow.com"}),
    )
    .await;
    assert!(lemin["challenge_id"].is_string(), "{lemin}");
    assert_verifies(&sim, &gw, lemin["answer"].as_str().unwrap()).await;

    let datadome = solve_task(
        &gw,
        json!({"type": "DataDomeSliderTask", "websiteURL": PAGE,
            "captchaUrl": "https://geo.captcha-delivery.com/captcha/?initialCid=x",
            "userAgent": "Mozilla/5.0 (test)", "proxyType": "http",
            "proxyAddress": "127.0.0.1", "proxyPort": 3128}),
    )
    .await;
    assert_verifies(&sim, &gw, datadome["cookie"].as_str().unwrap()).await;
    assert_eq!(sim.sim.stats().submits, 2);
}

/// What a declared kind cannot carry is refused by name, before any provider is asked: a
/// field its declaration does not name, the caller's proxy on a proxyless type, a missing
/// required parameter or proxy.
#[tokio::test]
async fn what_a_declared_kind_cannot_carry_is_refused_by_name() {
    let gw = TestGateway::start().await;
    let funcaptcha = json!({"type": "FunCaptchaTaskProxyless", "websiteURL": PAGE,
        "websitePublicKey": "69A21A01-CC7B-B9C6-0F9A-E7FA06677FFC"});
    let with = |field: &str, value: Value| {
        let mut task = funcaptcha.clone();
        task[field] = value;
        task
    };
    let cases = [
        (
            with("captchaExtra", json!("x")),
            "ERROR_BAD_PARAMETERS",
            "captchaExtra",
        ),
        (
            with("proxyAddress", json!("1.2.3.4")),
            "ERROR_BAD_PARAMETERS",
            "proxyAddress",
        ),
        (
            with("data", json!("not an object")),
            "ERROR_BAD_PARAMETERS",
            "data",
        ),
        (
            with("websitePublicKey", Value::Null),
            "ERROR_BAD_PARAMETERS",
            "publickey",
        ),
        (
            json!({"type": "DatadomeSliderTask", "websiteURL": PAGE,
                "captchaUrl": "https://geo.captcha-delivery.com/c", "userAgent": "UA",
                "proxy": ""}),
            "ERROR_BAD_PROXY",
            "",
        ),
    ];
    for (task, code, named) in cases {
        let v = call(&gw, "/createTask", json!({"clientKey": KEY, "task": task})).await;
        assert_eq!(
            (v["errorId"].as_u64(), v["errorCode"].as_str()),
            (Some(1), Some(code)),
            "{task}: {v}"
        );
        let description = v["errorDescription"].as_str().unwrap_or_default();
        assert!(description.contains(named), "{task}: {description}");
    }
    // Empty values are how clients leave a field unset (anticaptchaofficial sends
    // `"enterprisePayload": null` and `"isInvisible": 0` for hCaptcha).
    let token = solve_task(
        &gw,
        json!({"type": "HCaptchaTaskProxyless", "websiteURL": PAGE,
            "websiteKey": "10000000-ffff-ffff-ffff-000000000001", "isInvisible": 0,
            "enterprisePayload": null, "userAgent": ""}),
    )
    .await;
    gw.verify(token["gRecaptchaResponse"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(
        gw.stat("submits").await,
        1,
        "only the good task reached the provider"
    );
}

/// One picture and instruction asked for by four callers in three dialects, solved once by an
/// anti-captcha account: each gets the same points in its own form (anti-captcha's `[x, y]`
/// pairs, `in.php`'s `coordinates:x=..,y=..` text and its JSON mode's `{"x": "..", "y": ".."}`,
/// 2captcha v2's `{"x", "y"}` numbers), and the provider saw one task.
#[tokio::test]
async fn the_same_picture_gets_the_same_points_in_every_callers_form() {
    use base64::Engine as _;
    let (anti, gw) = crate::taskapi::anticaptcha_gateway().await;
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend([b'p'; 200]);
    let body = base64::engine::general_purpose::STANDARD.encode(&png);
    let points = |list: &Value| -> Vec<(u64, u64)> {
        let list = list.as_array().unwrap_or_else(|| panic!("a list: {list}"));
        list.iter()
            .map(|p| {
                let n = |v: &Value| v.as_u64().or_else(|| v.as_str()?.parse().ok()).unwrap();
                match p {
                    Value::Array(xy) => (n(&xy[0]), n(&xy[1])),
                    o => (n(&o["x"]), n(&o["y"])),
                }
            })
            .collect()
    };

    let anti_form = solve_task(
        &gw,
        json!({"type": "ImageToCoordinatesTask", "body": body, "comment": "click the cats"}),
    )
    .await;
    let want = points(&anti_form["coordinates"]);
    assert!(!want.is_empty(), "{anti_form}");
    assert!(anti_form["coordinates"][0].is_array(), "{anti_form}");

    let form = [
        ("method", "base64"),
        ("coordinatescaptcha", "1"),
        ("body", body.as_str()),
        ("textinstructions", "click the cats"),
    ];
    let plain = solve_inphp(&gw, &form).await;
    let parsed: Vec<(u64, u64)> = plain
        .strip_prefix("coordinates:")
        .unwrap_or_else(|| panic!("{plain}"))
        .split(';')
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x[2..].parse().unwrap(), y[2..].parse().unwrap())
        })
        .collect();
    assert_eq!(parsed, want, "{plain}");

    let mut json_form = form.to_vec();
    json_form.extend([("key", KEY), ("json", "1")]);
    let (_, submitted) = gw.post_form("/in.php", &json_form).await;
    let id: Value = serde_json::from_str(&submitted).unwrap();
    let id = id["request"].as_str().unwrap().to_owned();
    gw.wait_task(&id).await;
    let (_, got) = gw
        .get_text(&format!("/res.php?key={KEY}&action=get&json=1&id={id}"))
        .await;
    let got: Value = serde_json::from_str(&got).unwrap();
    assert!(got["request"][0]["x"].is_string(), "{got}");
    assert_eq!(points(&got["request"]), want, "{got}");
    // Polled in an `ids=` batch, the same text as `OK|` carries.
    let (_, batch) = gw
        .get_text(&format!("/res.php?key={KEY}&action=get&ids={id},{id}"))
        .await;
    assert_eq!(batch, format!("OK|{plain}|{plain}"));

    // 2captcha's v2 API, as a caller addressing it by its host name reads it.
    let as_2captcha = |path: &str, body: Value| {
        gw.http
            .post(gw.url(path))
            .header("host", "api.2captcha.com")
            .json(&body)
            .send()
    };
    let created: Value = as_2captcha(
        "/createTask",
        json!({"clientKey": KEY, "task": {"type": "CoordinatesTask", "body": body,
            "comment": "click the cats"}}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    gw.wait_task(&created["taskId"].to_string()).await;
    let ready: Value = as_2captcha(
        "/getTaskResult",
        json!({"clientKey": KEY, "taskId": created["taskId"]}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let objects = &ready["solution"]["coordinates"];
    assert!(objects[0]["x"].is_u64(), "{ready}");
    assert_eq!(points(objects), want, "{ready}");

    assert_eq!(
        anti.sim.stats().submits,
        1,
        "one provider task for the one picture"
    );
}

/// An image's `numeric` 3 ("only digits or only letters") and 4 ("both"), which
/// anti-captcha's 0-2 have no word for, keep the task from anti-captcha accounts: a preferred
/// anti-captcha account is passed over for them (and takes `numeric` 1), and with no other
/// account the caller is told, naming the parameter. Before this, 4 reached anti-captcha as 2,
/// "no digits": the opposite of what was asked.
#[tokio::test]
async fn an_image_hint_anticaptcha_has_no_word_for_keeps_the_task_from_it() {
    use base64::Engine as _;
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(std::iter::repeat_n(b'n', 120));
    let body = base64::engine::general_purpose::STANDARD.encode(png);
    let form = |numeric| {
        vec![
            ("method", "base64"),
            ("body", body.as_str()),
            ("numeric", numeric),
        ]
    };
    let anti_sim = SimServer::start(LATENCY, 4).await;
    let other = SimServer::start(LATENCY, 4).await;
    let mut anti = json_account("anti", AccountProvider::AntiCaptcha, &anti_sim);
    anti.weight = 1000;
    let gw = TestGateway::with(settings(vec![anti, account("sim", &other, 4)])).await;
    let both = solve_inphp(&gw, &form("4")).await;
    assert!(
        both.bytes().any(|b| b.is_ascii_digit()) && both.bytes().any(|b| b.is_ascii_alphabetic()),
        "digits and letters both: {both}"
    );
    solve_inphp(&gw, &form("3")).await;
    assert_eq!(
        (anti_sim.sim.stats().submits, other.sim.stats().submits),
        (0, 2),
        "3 and 4 past the preferred anti-captcha account"
    );
    let digits = solve_inphp(&gw, &form("1")).await;
    assert!(digits.bytes().all(|b| b.is_ascii_digit()), "{digits}");
    assert_eq!(anti_sim.sim.stats().submits, 1, "1 to anti-captcha");

    let image = json!({"kind": "image", "body": body, "numeric": 4});
    let account = ("ac", AccountProvider::AntiCaptcha);
    refused_by_its_only_account(account, &anti_sim, image, "numeric").await;
    assert_eq!(
        anti_sim.sim.stats().submits,
        1,
        "anti-captcha was not asked"
    );
}
