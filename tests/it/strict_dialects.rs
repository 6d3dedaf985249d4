//! Replies in the caller's own dialect, with exactly the fields its provider documents
//! (docs/PROTOCOL.md item 17): the two strict JSON-task clients from PyPI (`python3-capsolver`,
//! `python3-anticaptcha`, which fail on any field outside their provider's reply) solve through
//! the gateway, every token verified once; and every reply of each JSON dialect and of `in.php`,
//! read by hand, carries no field outside its documented set.

use std::collections::BTreeSet;
use std::time::Duration;

use captcha_gateway::model::Kind;
use captcha_gateway::sim::LatencyRange;
use serde_json::{Value, json};

use crate::clients::{assert_all_verify, run_script};
use crate::support::{KEY, TestGateway, fast_settings};

fn token(r: &Value) -> Option<String> {
    match r["kind"].as_str()? {
        "image" => None,
        // Points, as the library's strict struct read them: anti-captcha's `[x, y]` pairs.
        "coordinates" => {
            let points = r["answer"]["coordinates"].as_array().expect("points");
            assert!(!points.is_empty(), "{r}");
            for p in points {
                let p = p.as_array().unwrap_or_else(|| panic!("[x, y]: {r}"));
                assert!(p.len() == 2 && p.iter().all(Value::is_u64), "{r}");
            }
            None
        }
        "geetest_v4" => crate::clients::geetest_v4_credential(&r["answer"]),
        _ => r["answer"].as_str().map(str::to_owned),
    }
}

async fn strict_client_solves(client: &str, cases: usize) {
    let gw = TestGateway::start().await;
    let out = run_script(&gw, "strict_clients.py", client).await;
    let results = out["results"].as_array().expect("results");
    assert_eq!(results.len(), cases, "{out}");
    assert_all_verify(&gw, results, token).await;
}

#[tokio::test]
async fn the_strict_capsolver_client_reads_every_reply() {
    strict_client_solves("capsolver", 7).await;
}

#[tokio::test]
async fn the_strict_anticaptcha_client_reads_every_reply() {
    strict_client_solves("anticaptcha", 7).await;
}

/// Who calls: the headers and body fields that say which provider's client it is.
#[derive(Clone, Copy, Debug)]
enum Caller {
    /// Nothing but the body every dialect shares: anti-captcha's shape.
    AntiCaptcha,
    /// Addressed as 2captcha's v2 API.
    TwoCaptcha,
    /// `appId` in the body, as CapSolver's clients send it.
    CapSolverAppId,
    /// The official `capsolver` package's header, with a task type both dialects spell alike.
    CapSolverSdk,
}

impl Caller {
    fn capsolver(self) -> bool {
        matches!(self, Caller::CapSolverAppId | Caller::CapSolverSdk)
    }

    fn request(self, gw: &TestGateway, path: &str, mut body: Value) -> reqwest::RequestBuilder {
        let mut req = gw.http.post(gw.url(path));
        match self {
            Caller::AntiCaptcha => {}
            Caller::TwoCaptcha => req = req.header("host", "api.2captcha.com"),
            Caller::CapSolverAppId => {
                if path == "/createTask" {
                    body["appId"] = json!("E2E-STRICT");
                }
            }
            Caller::CapSolverSdk => {
                req = req.header(
                    "x-capsolver-client-user-agent",
                    r#"{"bindings_version":"1"}"#,
                );
            }
        }
        req.json(&body)
    }

    async fn call(self, gw: &TestGateway, path: &str, body: Value) -> Value {
        let res = self.request(gw, path, body).send().await.unwrap();
        assert_eq!(res.status(), 200, "{self:?} {path}");
        res.json().await.unwrap()
    }
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

fn set<'a>(names: &[&'a str]) -> BTreeSet<&'a str> {
    names.iter().copied().collect()
}

/// Every key of `reply` is one `documented` allows, and every key it requires is there.
fn assert_exactly(what: &str, reply: &Value, documented: &[&str]) {
    assert_eq!(keys(reply), set(documented), "{what}: {reply}");
}

/// A gateway whose solves take long enough that the first check finds them running.
async fn gateway(unsolvable: bool) -> TestGateway {
    let mut settings = fast_settings();
    for kind in Kind::ALL {
        settings.sim.latency.insert(
            kind,
            LatencyRange {
                min: Duration::from_millis(400),
                max: Duration::from_millis(500),
            },
        );
    }
    if unsolvable {
        settings.sim.unsolvable_rate = 1.0;
    }
    TestGateway::with(settings).await
}

async fn create(gw: &TestGateway, caller: Caller, sitekey: &str) -> Value {
    // A name both dialects spell alike when the caller must be told by other means.
    let type_name = "RecaptchaV2TaskProxyless";
    let created = caller
        .call(
            gw,
            "/createTask",
            json!({"clientKey": KEY, "task": {"type": type_name,
                "websiteURL": "https://example.com/", "websiteKey": sitekey}}),
        )
        .await;
    if caller.capsolver() {
        assert_exactly("createTask", &created, &["errorId", "taskId", "status"]);
        assert!(created["taskId"].is_string(), "{created}");
    } else {
        assert_exactly("createTask", &created, &["errorId", "taskId"]);
        assert!(created["taskId"].is_u64(), "{created}");
    }
    created["taskId"].clone()
}

/// Checks until the task ends, each reply checked against the dialect's fields for its status.
async fn checks_until_done(gw: &TestGateway, caller: Caller, task_id: &Value) -> Value {
    let mut seen_processing = false;
    for _ in 0..200 {
        let reply = caller
            .call(
                gw,
                "/getTaskResult",
                json!({"clientKey": KEY, "taskId": task_id}),
            )
            .await;
        match (reply["status"].as_str(), caller.capsolver()) {
            (Some("processing"), true) => {
                assert_exactly("processing", &reply, &["errorId", "taskId", "status"]);
                seen_processing = true;
            }
            (Some("processing"), false) => {
                assert_exactly("processing", &reply, &["errorId", "status"]);
                seen_processing = true;
            }
            _ => {
                assert!(seen_processing, "the first check found the task running");
                return reply;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{caller:?}: the task never ended");
}

const CALLERS: [Caller; 4] = [
    Caller::AntiCaptcha,
    Caller::TwoCaptcha,
    Caller::CapSolverAppId,
    Caller::CapSolverSdk,
];

#[tokio::test]
async fn each_json_dialect_gets_exactly_its_documented_fields() {
    let gw = gateway(false).await;
    for (i, caller) in CALLERS.into_iter().enumerate() {
        let id = create(&gw, caller, &format!("6Le-strict-{i}")).await;
        let ready = checks_until_done(&gw, caller, &id).await;
        assert_eq!(ready["status"], "ready", "{caller:?}: {ready}");
        if caller.capsolver() {
            assert_exactly(
                "ready",
                &ready,
                &["errorId", "taskId", "status", "solution"],
            );
        } else {
            assert_exactly(
                "ready",
                &ready,
                &[
                    "errorId",
                    "status",
                    "solution",
                    "cost",
                    "ip",
                    "createTime",
                    "endTime",
                    "solveCount",
                ],
            );
            assert!(ready["cost"].is_string(), "cost is a decimal string");
        }
        let solution_keys = if caller.capsolver() {
            &["gRecaptchaResponse"][..]
        } else {
            // anti-captcha's key and 2captcha's: callers of the two cannot be told apart.
            &["gRecaptchaResponse", "token"][..]
        };
        assert_exactly("solution", &ready["solution"], solution_keys);
        let token = ready["solution"]["gRecaptchaResponse"].as_str().unwrap();
        gw.verify(token).await.expect("the answer verifies");

        let balance = caller
            .call(&gw, "/getBalance", json!({"clientKey": KEY}))
            .await;
        match caller {
            // getBalance carries no task: only the header says CapSolver.
            Caller::CapSolverSdk => {
                assert_exactly("getBalance", &balance, &["errorId", "balance", "packages"])
            }
            _ => assert_exactly("getBalance", &balance, &["errorId", "balance"]),
        }
        let unknown = caller
            .call(
                &gw,
                "/createTask",
                json!({"clientKey": KEY, "task": {"type": "FunCaptchaTaskProxyless"}}),
            )
            .await;
        assert_exactly(
            "an error",
            &unknown,
            &["errorId", "errorCode", "errorDescription"],
        );
    }
}

#[tokio::test]
async fn a_failed_task_is_reported_in_each_dialects_shape() {
    let gw = gateway(true).await;
    for (i, caller) in CALLERS.into_iter().enumerate() {
        let id = create(&gw, caller, &format!("6Le-strict-fail-{i}")).await;
        let failed = checks_until_done(&gw, caller, &id).await;
        assert_eq!(failed["errorId"], 1, "{caller:?}: {failed}");
        if caller.capsolver() {
            // CapSolver's client stops polling on `failed`, not on the error alone.
            assert_eq!(failed["status"], "failed", "{failed}");
            assert_eq!(failed["taskId"], id, "{failed}");
            assert_exactly(
                "failed",
                &failed,
                &[
                    "errorId",
                    "errorCode",
                    "errorDescription",
                    "taskId",
                    "status",
                ],
            );
        } else {
            assert_exactly(
                "failed",
                &failed,
                &["errorId", "errorCode", "errorDescription"],
            );
        }
    }
}

/// `in.php`/`res.php` in JSON mode: `status` and `request`, and beside them only what CaptchaAI
/// or 2captcha document for that reply (`result` for reCAPTCHA and Cloudflare Challenge,
/// `user_agent`/`useragent` with an answer bound to one, `price` for `get2`).
#[tokio::test]
async fn in_php_json_replies_carry_only_documented_fields() {
    let gw = TestGateway::start().await;
    let submit = |params: Vec<(&'static str, String)>| {
        let gw = &gw;
        async move {
            let mut form: Vec<(&str, String)> =
                vec![("key", KEY.to_owned()), ("json", "1".to_owned())];
            form.extend(params);
            let res = gw
                .http
                .post(gw.url("/in.php"))
                .form(&form)
                .send()
                .await
                .unwrap();
            let v: Value = res.json().await.unwrap();
            assert_exactly("in.php", &v, &["status", "request"]);
            v["request"].as_str().unwrap().to_owned()
        }
    };
    let recaptcha = submit(vec![
        ("method", "userrecaptcha".into()),
        ("googlekey", "6Le-strict-inphp".into()),
        ("pageurl", "https://example.com/".into()),
    ])
    .await;
    let turnstile = submit(vec![
        ("method", "turnstile".into()),
        ("sitekey", "0x4-strict-inphp".into()),
        ("pageurl", "https://example.com/".into()),
    ])
    .await;
    let res = |query: String| {
        let gw = &gw;
        async move {
            let url = gw.url(&format!("/res.php?key={KEY}&json=1&{query}"));
            for _ in 0..200 {
                let v: Value = gw
                    .http
                    .get(&url)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                if v["request"] != "CAPCHA_NOT_READY" {
                    return v;
                }
                assert_exactly("not ready", &v, &["status", "request"]);
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("{query}: never ready");
        }
    };
    let v = res(format!("action=get&id={turnstile}")).await;
    assert_exactly("turnstile", &v, &["status", "request"]);
    gw.verify(v["request"].as_str().unwrap()).await.unwrap();
    let v = res(format!("action=get2&id={recaptcha}")).await;
    assert_exactly(
        "recaptcha get2",
        &v,
        &["status", "request", "result", "price"],
    );
    assert_eq!(v["result"], v["request"]);
    gw.verify(v["request"].as_str().unwrap()).await.unwrap();
    let v = res("action=get&id=1".into()).await;
    assert_exactly("an error", &v, &["status", "request"]);
}
