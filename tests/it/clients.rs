//! The real `captchaai` and `2captcha-python` packages from PyPI, pointed at the gateway with
//! only host and key changed, against `--provider sim`. Every token they receive must verify at
//! the simulator: valid, never used twice, never expired.

use std::collections::HashSet;
use std::path::PathBuf;

use serde_json::Value;

use crate::support::{KEY, TestGateway};

/// The virtualenv's Python that `scripts/test` prepares with tests/python/requirements.txt.
pub(crate) fn python() -> PathBuf {
    if let Ok(p) = std::env::var("CAPTCHA_GATEWAY_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/test, which installs the client libraries",
        p.display()
    );
    p
}

/// Runs `client`'s case list in `script` (under tests/python/) against the gateway; the script
/// prints its results as JSON.
pub(crate) async fn run_script(gw: &TestGateway, script: &str, client: &str) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let mut command = tokio::process::Command::new(python());
    command.arg(script);
    run_client_script(command, gw, client).await
}

/// Runs a client script (`command`, its interpreter and path) for `client`'s cases against the
/// gateway, as `SCRIPT CLIENT GATEWAY_URL KEY`, and reads the JSON it prints.
pub(crate) async fn run_client_script(
    mut command: tokio::process::Command,
    gw: &TestGateway,
    client: &str,
) -> Value {
    let out = command
        .arg(client)
        .arg(gw.url(""))
        .arg(KEY)
        .output()
        .await
        .expect("the script's interpreter runs");
    assert!(
        out.status.success(),
        "{client} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the script prints JSON")
}

async fn run_client(gw: &TestGateway, client: &str) -> Value {
    run_script(gw, "clients.py", client).await
}

/// The single-use credential inside an answer: the token itself, or GeeTest's `validate`.
fn credential(r: &Value) -> Option<String> {
    match r["kind"].as_str()? {
        "image" | "text" => None,
        "geetest_v3" => {
            let a = &r["answer"];
            assert_eq!(
                a["geetest_challenge"], a["challenge"],
                "both key flavours present: {a}"
            );
            a["validate"].as_str().map(str::to_owned)
        }
        // Lemin's and GeeTest v4's answers are objects, as JSON text in a plain-text reply (the
        // CaptchaAI SDK hands Lemin's out parsed), each key under both its spellings.
        "lemin" => {
            let a: Value = match r["answer"].as_str() {
                Some(text) => serde_json::from_str(text).ok()?,
                None => r["answer"].clone(),
            };
            for key in ["challenge_id", "challenge_uuid"] {
                assert!(a[key].is_string(), "`{key}` present: {a}");
            }
            a["answer"].as_str().map(str::to_owned)
        }
        "geetest_v4" => {
            let a: Value = serde_json::from_str(r["answer"].as_str()?).ok()?;
            geetest_v4_credential(&a)
        }
        "coordinates" => points_credential(r),
        _ => r["answer"].as_str().map(str::to_owned),
    }
}

/// Points are no credential: the answer is checked to be points (2captcha's
/// `coordinates:x=..,y=..;..` text, or a list as a `createTask` or JSON-mode client reads it),
/// and nothing is verified.
pub(crate) fn points_credential(r: &Value) -> Option<String> {
    let answer = &r["answer"];
    let text = answer
        .as_str()
        .map_or_else(|| answer.to_string(), str::to_owned);
    let points = captcha_gateway::model::points::read(&text, "coordinates");
    assert!(
        (answer.is_array() || text.starts_with("coordinates:x="))
            && points.is_some_and(|p| p.as_array().is_some_and(|a| !a.is_empty())),
        "points: {r}"
    );
    None
}

/// GeeTest v4's credential, `pass_token`, after checking the answer has its five keys and
/// echoes the site's `captcha_id`.
pub(crate) fn geetest_v4_credential(a: &Value) -> Option<String> {
    for key in ["captcha_id", "lot_number", "gen_time", "captcha_output"] {
        assert!(a[key].is_string(), "`{key}` present: {a}");
    }
    assert_eq!(a["captcha_id"], "e392e1d7fd421dc63325744d5a2b9c73", "{a}");
    a["pass_token"].as_str().map(str::to_owned)
}

/// Every credential (`credential` picks it out of a result) verifies once at the simulator,
/// none was handed out twice, none expired.
pub(crate) async fn assert_all_verify(
    gw: &TestGateway,
    results: &[Value],
    credential: fn(&Value) -> Option<String>,
) {
    let mut seen = HashSet::new();
    for r in results {
        if let Some(token) = credential(r) {
            assert!(seen.insert(token.clone()), "token handed out twice: {r}");
            gw.verify(&token)
                .await
                .unwrap_or_else(|e| panic!("{} did not verify ({e}): {r}", r["case"]));
        }
    }
    assert!(!seen.is_empty());
    assert_eq!(gw.stat("verify_duplicate").await, 0);
    assert_eq!(gw.stat("verify_expired").await, 0);
}

/// `captcha_gateway_passthrough_tasks_total` counts each `(type, n)` under `protocol`.
pub(crate) async fn assert_passthrough_counted(
    gw: &TestGateway,
    protocol: &str,
    counted: &[(&str, u64)],
) {
    let metrics = gw.get_text("/metrics").await.1;
    for (name, n) in counted {
        let line = format!(
            "captcha_gateway_passthrough_tasks_total{{protocol=\"{protocol}\",type=\"{name}\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
}

#[tokio::test]
async fn the_official_captchaai_client_solves_every_kind() {
    let gw = TestGateway::start().await;
    let out = run_client(&gw, "captchaai").await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 14, "{out}");
    for r in results {
        let case = r["case"].as_str().unwrap();
        let bound = matches!(case, "recaptcha_v2_enterprise" | "cloudflare_challenge");
        assert_eq!(
            r["user_agent"].is_string(),
            bound,
            "user_agent only where the answer is bound: {r}"
        );
        assert!(
            r["task_id"]
                .as_str()
                .unwrap()
                .bytes()
                .all(|b| b.is_ascii_digit())
        );
    }
    let image = results.iter().find(|r| r["case"] == "image").unwrap();
    assert!(
        image["answer"]
            .as_str()
            .unwrap()
            .bytes()
            .all(|b| b.is_ascii_digit()),
        "numeric=1 is honoured: {image}"
    );
    // The grid's and BLS's answers pass through as the provider gave them: cells to click,
    // which the SDK hands out as a list; the same image gets the same cells from the worker.
    let cells = |case: &str, within: u64| {
        let r = results.iter().find(|r| r["case"] == case).unwrap();
        let cells: Vec<u64> = r["answer"]
            .as_array()
            .unwrap_or_else(|| panic!("a list of cells: {r}"))
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        assert!(
            !cells.is_empty() && cells.iter().all(|c| (1..=within).contains(c)),
            "{r}"
        );
        cells
    };
    assert_eq!(cells("grid", 16), cells("grid_again", 16));
    cells("bls", 9);
    assert_passthrough_counted(&gw, "in.php", &[("base64", 2), ("bls", 1)]).await;
    assert!(out["extras"]["threads"]["threads"].as_u64().unwrap() > 0);
    assert_all_verify(&gw, results, credential).await;
}

#[tokio::test]
async fn the_2captcha_python_client_solves_every_kind_and_reports() {
    let gw = TestGateway::start().await;
    let out = run_client(&gw, "twocaptcha").await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 7, "{out}");
    let image = |case: &str| results.iter().find(|r| r["case"] == case).unwrap().clone();
    assert_eq!(
        image("image")["answer"],
        image("image_again")["answer"],
        "identical images, one answer"
    );
    assert_ne!(
        image("image")["task_id"],
        image("image_again")["task_id"],
        "but each call is its own task"
    );
    assert_eq!(out["extras"]["report_bad"], "OK_REPORT_RECORDED");
    assert!(out["extras"]["balance"].as_f64().is_some(), "{out}");
    assert_eq!(
        gw.stat("reports_bad").await,
        1,
        "the report reached the upstream task"
    );
    assert_all_verify(&gw, results, credential).await;
}

/// 2captcha-python's methods for every kind it has, with every parameter the library documents
/// for each: every one is understood or forwarded (the calls succeed and verify), GeeTest's
/// `offline` and `new_captcha` too (to 2captcha accounts, which document them).
#[tokio::test]
async fn the_2captcha_python_clients_full_parameter_sets_are_understood_or_refused() {
    let gw = TestGateway::start().await;
    let out = run_client(&gw, "twocaptcha_full").await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 16, "{out}");
    let (refused, solved): (Vec<Value>, Vec<Value>) = results
        .iter()
        .cloned()
        .partition(|r| r["refused"].is_string());
    let refused: Vec<(&str, &str)> = refused
        .iter()
        .map(|r| (r["case"].as_str().unwrap(), r["refused"].as_str().unwrap()))
        .collect();
    assert_eq!(refused, Vec::<(&str, &str)>::new(), "{out}");
    assert_eq!(solved.len(), 16, "{out}");
    assert_all_verify(&gw, &solved, credential).await;
}

/// unicaps (its 2captcha service, polling with `res.php?action=get2`): every kind it has a
/// method for, with the parameters it takes, and KeyCaptcha passed through; every answer
/// verifies, GeeTest's as the library's own solution objects.
#[tokio::test]
async fn the_unicaps_client_solves_every_kind_it_has() {
    let gw = TestGateway::start().await;
    let out = run_client(&gw, "unicaps").await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 9, "{out}");
    fn unicaps_credential(r: &Value) -> Option<String> {
        match r["kind"].as_str()? {
            "image" | "text" => None,
            "geetest_v3" => r["answer"]["validate"].as_str().map(str::to_owned),
            "geetest_v4" => geetest_v4_credential(&r["answer"]),
            _ => r["answer"].as_str().map(str::to_owned),
        }
    }
    assert_all_verify(&gw, results, unicaps_credential).await;
}

/// 2captcha-python's methods for types the gateway does not declare (docs/API.md,
/// "Pass-through"), files uploaded as the library uploads them: each passes through to the
/// provider as its own task, and every answer is the provider's and verifies.
#[tokio::test]
async fn the_2captcha_python_client_passes_undeclared_types_through() {
    let gw = TestGateway::start().await;
    let out = run_client(&gw, "twocaptcha_passthrough").await;
    let results = out["results"].as_array().unwrap();
    let cases: HashSet<&str> = results.iter().filter_map(|r| r["case"].as_str()).collect();
    assert_eq!(cases.len(), 12, "{out}");
    assert_eq!(
        gw.stat("submits").await,
        12,
        "each call was one provider task"
    );
    assert_all_verify(&gw, results, credential).await;
    let counted = [("keycaptcha", 1), ("post", 3), ("rotatecaptcha", 1)];
    assert_passthrough_counted(&gw, "in.php", &counted).await;
}

/// 2captcha-python's methods for the declared kinds (docs/API.md, "Task types"), each with the
/// parameters the library documents for it: every answer verifies, object answers whole.
#[tokio::test]
async fn the_2captcha_python_client_solves_the_declared_kinds() {
    let gw = TestGateway::start().await;
    let out = run_client(&gw, "twocaptcha_declared").await;
    let results = out["results"].as_array().unwrap();
    let kinds: HashSet<&str> = results.iter().filter_map(|r| r["kind"].as_str()).collect();
    let declared: HashSet<&str> = captcha_gateway::model::Kind::ALL
        .into_iter()
        .filter(|k| !k.spec().declared_params().is_empty())
        .filter(|k| k.solved_in(captcha_gateway::model::Dialect::TwoCaptcha))
        .map(|k| k.as_str())
        .collect();
    assert_eq!(
        kinds, declared,
        "every declared kind 2captcha solves: {out}"
    );
    assert_all_verify(&gw, results, credential).await;
    let points: Vec<&Value> = results
        .iter()
        .filter(|r| r["kind"] == "coordinates")
        .map(|r| &r["answer"])
        .collect();
    assert_eq!(points.len(), 2, "{out}");
    assert_eq!(points[0], points[1], "the same picture, the same points");
}
