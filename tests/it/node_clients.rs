//! The npm client libraries (`@2captcha/captcha-solver`, `@antiadmin/anticaptchaofficial`, as
//! installed by scripts/test under target/node) against the gateway, each solving every kind it
//! has a method for, with the parameters it documents; every token verified once at the
//! simulator. The script is tests/node/clients.js.

use std::path::PathBuf;

use serde_json::Value;

use crate::clients::{
    assert_all_verify, geetest_v4_credential, points_credential, run_client_script,
};
use crate::support::TestGateway;
use crate::taskapi::{anticaptcha_gateway, assert_passed_through};

fn node_modules() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/node/node_modules");
    assert!(
        p.join("@2captcha/captcha-solver").exists(),
        "{} is missing: run scripts/test, which installs tests/node/package-lock.json there",
        p.display()
    );
    p
}

async fn run_node(gw: &TestGateway, mode: &str) -> Vec<Value> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node/clients.js");
    let mut command = tokio::process::Command::new("node");
    command.arg(script).env("NODE_PATH", node_modules());
    let out = run_client_script(command, gw, mode).await;
    out["results"].as_array().expect("results").clone()
}

/// An object answer as the library handed it: the object, or its JSON text.
fn object(v: &Value) -> Value {
    match v.as_str() {
        Some(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        None => v.clone(),
    }
}

/// The single-use credential in an answer, in whichever form the library hands it out.
fn credential(r: &Value) -> Option<String> {
    let answer = &r["answer"];
    match r["kind"].as_str()? {
        "image" | "text" => None,
        "geetest_v3" => {
            let a = object(answer);
            a.get("geetest_validate")
                .or_else(|| a.get("validate"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        }
        "lemin" => {
            let a = object(answer);
            assert!(a["challenge_id"].is_string(), "both keys present: {a}");
            a["answer"].as_str().map(str::to_owned)
        }
        "geetest_v4" => geetest_v4_credential(&object(answer)),
        "coordinates" => points_credential(r),
        _ => answer.as_str().map(str::to_owned),
    }
}

fn kinds(results: &[Value]) -> Vec<&str> {
    let mut kinds: Vec<&str> = results.iter().filter_map(|r| r["kind"].as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
}

/// `@2captcha/captcha-solver` (GET and JSON-POST `in.php`, `json=1`): every declared kind
/// 2captcha solves (coordinates in JSON mode: `{"x", "y"}` objects), and two types it does not
/// declare passed through, each answer verified.
#[tokio::test]
async fn the_2captcha_npm_client_solves_every_kind_it_has() {
    let gw = TestGateway::start().await;
    let results = run_node(&gw, "twocaptcha").await;
    assert_eq!(results.len(), 16, "{results:?}");
    assert_eq!(
        kinds(&results),
        [
            "coordinates",
            "datadome",
            "friendly_captcha",
            "funcaptcha",
            "geetest_v3",
            "geetest_v4",
            "hcaptcha",
            "image",
            "lemin",
            "mtcaptcha",
            "other",
            "recaptcha_v2",
            "recaptcha_v3",
            "text",
            "turnstile"
        ]
    );
    assert_all_verify(&gw, &results, credential).await;
}

/// `@antiadmin/anticaptchaofficial` (`createTask`, one task at a time as the library keeps it):
/// every kind it has a method for, hCaptcha with its `enterprisePayload`.
#[tokio::test]
async fn the_anticaptcha_npm_client_solves_every_kind_it_has() {
    let gw = TestGateway::start().await;
    let results = run_node(&gw, "anticaptcha").await;
    assert_eq!(results.len(), 11, "{results:?}");
    // Rectangles, asked for by `mode`, are corners: four numbers each.
    let rectangles = results.iter().find(|r| r["case"] == "rectangles").unwrap();
    let corners = rectangles["answer"].as_array().expect("a list");
    assert!(
        corners
            .iter()
            .all(|c| c.as_array().is_some_and(|c| c.len() == 4)),
        "{rectangles}"
    );
    assert_all_verify(&gw, &results, credential).await;
}

/// Its AWS WAF and Prosopo methods, types the gateway does not declare, pass through to an
/// anti-captcha account as the library wrote them.
#[tokio::test]
async fn the_anticaptcha_npm_client_passes_undeclared_types_through() {
    let (anti, gw) = anticaptcha_gateway().await;
    let results = run_node(&gw, "anticaptcha_passthrough").await;
    assert_eq!(results.len(), 2, "{results:?}");
    assert_passed_through(&anti, &gw, &results).await;
}
