//! The API contract (docs/openapi.json): the document lists every JSON route of the router and
//! only those, the gateway serves it, live answers of each operation validate against it, and a
//! bounded schemathesis run against a live gateway finds no server error and no answer outside it.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use captcha_gateway::config::Secret;
use captcha_gateway::http::OPENAPI_JSON;
use captcha_gateway::model::Kind;
use captcha_gateway::sim::LatencyRange;
use serde_json::{Value, json};

use crate::support::{KEY, TestGateway, fast_settings};

/// Routes of the router that speak another service's protocol (docs/API.md), not the native
/// API: 2captcha's form-encoded `in.php`/`res.php`, and anti-captcha's and CapSolver's JSON task
/// protocol, whose shapes are theirs (tests/it/taskapi.rs runs their own clients against it).
const OUTSIDE_THE_DOCUMENT: [&str; 10] = [
    "/in.php",
    "/res.php",
    "/createTask",
    "/getTaskResult",
    "/getBalance",
    "/reportIncorrect",
    "/reportIncorrectRecaptcha",
    "/reportIncorrectImageCaptcha",
    "/reportCorrect",
    "/reportCorrectRecaptcha",
];
/// An expected status of "any documented answer below 500" (a limit may answer 200 or 400).
const ANY: u16 = 0;
const METHODS: [&str; 6] = ["get", "post", "put", "delete", "patch", "any"];

fn document() -> Value {
    serde_json::from_str(OPENAPI_JSON).expect("docs/openapi.json is JSON")
}

/// `(path, method)` of every `.route(...)` in the router (src/http/mod.rs).
fn router_routes() -> BTreeSet<(String, String)> {
    let source =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/http/mod.rs"))
            .expect("the router's source");
    let mut routes = BTreeSet::new();
    for chunk in source.split(".route(\"").skip(1) {
        let (path, rest) = chunk.split_once('"').expect("a quoted path");
        let handlers = rest
            .split(".layer(")
            .next()
            .unwrap()
            .split(".with_state(")
            .next()
            .unwrap();
        let before_ok = |i: usize| {
            i == 0
                || !handlers.as_bytes()[i - 1].is_ascii_alphanumeric()
                    && handlers.as_bytes()[i - 1] != b'_'
        };
        let mut found = false;
        for m in METHODS {
            let token = format!("{m}(");
            if handlers.match_indices(&token).any(|(i, _)| before_ok(i)) {
                routes.insert((path.to_owned(), m.to_owned()));
                found = true;
            }
        }
        assert!(found, "no method router found for route {path}");
    }
    assert!(
        routes.len() > 10,
        "the router's routes were not found: {routes:?}"
    );
    routes
}

fn document_operations(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            ops.insert((path.clone(), method.clone()));
        }
    }
    ops
}

/// A validator for a schema of the document, its `$ref`s resolved against the document's
/// components; `date-time` formats are checked too.
fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let mut wrapped = schema.clone();
    if let Value::Object(map) = &mut wrapped {
        map.insert("components".into(), doc["components"].clone());
    }
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&wrapped)
        .unwrap_or_else(|e| panic!("a schema of the document does not compile: {e}: {schema}"))
}

#[test]
fn the_document_lists_every_json_route_and_only_those() {
    let doc = document();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let documented = document_operations(&doc);
    let routed: BTreeSet<_> = router_routes()
        .into_iter()
        .filter(|(path, _)| !OUTSIDE_THE_DOCUMENT.contains(&path.as_str()))
        .collect();
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from docs/openapi.json: {undocumented:?}"
    );
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        unrouted.is_empty(),
        "operations in docs/openapi.json that the router does not serve: {unrouted:?}"
    );
    for path in OUTSIDE_THE_DOCUMENT {
        assert!(
            doc["paths"].get(path).is_none(),
            "{path} is documented in docs/API.md only"
        );
    }
    // The validator really follows `$ref`s into the components and checks formats.
    let handout = validator(&doc, &json!({"$ref": "#/components/schemas/Handout"}));
    assert!(!handout.is_valid(&json!({"token": 5, "kind": "recaptcha_v2"})));
    let good = json!({"token": "t", "kind": "turnstile", "source": "pool", "solved_at": "2026-11-30T06:03:16.799Z",
        "expires_at": "2026-11-30T06:05:16.799Z", "user_agent": null, "task_id": "1"});
    assert!(handout.is_valid(&good));
    let mut bad_time = good.clone();
    bad_time["expires_at"] = json!("soon");
    assert!(!handout.is_valid(&bad_time), "date-time is checked");
    // Every schema compiles and every `$ref` resolves.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let bodies = op["requestBody"]["content"]
                .as_object()
                .into_iter()
                .flatten();
            let answers = op["responses"]
                .as_object()
                .unwrap_or_else(|| panic!("{method} {path} has no responses"))
                .values()
                .flat_map(|r| r["content"].as_object().into_iter().flatten());
            for (_, media) in bodies.chain(answers) {
                let v = validator(&doc, &media["schema"]);
                // A schema with a dangling `$ref` fails at its first use.
                let _ = v.is_valid(&json!({}));
            }
        }
    }
}

/// Checks one live answer against the document: its status is documented for the operation, its
/// media type is one of the documented ones, required headers are present, and a JSON body
/// validates against the schema.
async fn conforms(doc: &Value, method: &str, path: &str, res: reqwest::Response) -> (u16, Value) {
    let status = res.status().as_u16();
    let op = &doc["paths"][path][method];
    assert!(op.is_object(), "{method} {path} is not in the document");
    let documented = &op["responses"][status.to_string()];
    assert!(
        documented.is_object(),
        "{method} {path} answered {status}, which the document does not list"
    );
    for (name, header) in documented["headers"].as_object().into_iter().flatten() {
        let header = match header.get("$ref").and_then(Value::as_str) {
            Some(r) => &doc["components"]["headers"][r.rsplit('/').next().unwrap()],
            None => header,
        };
        if header["required"] == json!(true) {
            assert!(
                res.headers().contains_key(name.as_str()),
                "{method} {path} {status} lacks the required header {name}"
            );
        }
    }
    let media = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap()
        .trim()
        .to_owned();
    let content = &documented["content"];
    assert!(
        content.get(&media).is_some(),
        "{method} {path} {status} answered `{media}`, the document says {content}"
    );
    let text = res.text().await.expect("a body");
    if media != "application/json" {
        return (status, Value::String(text));
    }
    let body: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path} {status}: not JSON ({e}): {text}"));
    let v = validator(doc, &content[&media]["schema"]);
    let errors: Vec<String> = v.iter_errors(&body).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "{method} {path} {status} does not match the document: {errors:?}\nbody: {body}"
    );
    (status, body)
}

async fn keyed_gateway(settings: captcha_gateway::config::Settings) -> TestGateway {
    let mut settings = settings;
    settings.gateway_keys = vec![Secret(KEY.to_owned())];
    TestGateway::with(settings).await
}

#[tokio::test]
async fn live_answers_of_every_operation_match_the_document() {
    let doc = document();
    // With an operations key, so both answers of the operations endpoints are checked.
    let ops_key = "ops-ContractKey-0123456789";
    let mut settings = fast_settings();
    let ops = captcha_gateway::http::OpsInput {
        key_env: Some(Secret(ops_key.to_owned())),
        ..Default::default()
    };
    settings.ops = captcha_gateway::http::ops_settings(ops, settings.listen)
        .unwrap()
        .0;
    let gw = keyed_gateway(settings).await;
    let http = &gw.http;
    let bearer = format!("Bearer {KEY}");
    let ops = |path: &str| http.get(gw.url(path)).bearer_auth(ops_key);
    let post = |path: &str, body: &str| {
        http.post(gw.url(path))
            .header("authorization", &bearer)
            .header("content-type", "application/json")
            .body(body.to_owned())
    };
    let get = |path: &str| http.get(gw.url(path)).header("authorization", &bearer);
    let send = |req: reqwest::RequestBuilder| async move { req.send().await.expect("answers") };

    let recaptcha = json!({"kind": "recaptcha_v2", "sitekey": "6LcContractKey", "pageurl": "https://shop.example.com/login"});
    let cases: Vec<(&str, &str, reqwest::RequestBuilder, u16)> = vec![
        ("post", "/v1/solve", post("/v1/solve", &recaptcha.to_string()), 200),
        ("post", "/v1/solve", post("/v1/solve", r#"{"kind": "turnstile", "sitekey": "0x4AAAAAAAContract", "pageurl": "https://shop.example.com/"}"#), 200),
        ("post", "/v1/solve", post("/v1/solve", r#"{"kind": "geetest_v3", "gt": "022397c99c9f646f6477822485f30404", "challenge": "a66f31a53a5a7b5d0c4a5b5e7a9b2c11", "pageurl": "https://shop.example.com/"}"#), 200),
        ("post", "/v1/solve", post("/v1/solve", r#"{"kind": "text", "text": "What is 2 + 2?"}"#), 200),
        ("post", "/v1/solve", post("/v1/solve", r#"{"kind": "recaptcha_v2", "sitekey": "k", "pageurl": "https://a.example/", "timeout_s": 1e20}"#), ANY),
        ("post", "/v1/solve", post("/v1/solve", "{"), 400),
        ("post", "/v1/solve", post("/v1/solve", r#"{"kind": "recaptcha_v2", "sitekey": "k"}"#), 400),
        ("post", "/v1/solve", post("/v1/solve", r#"{"kind": "recaptcha_v2", "sitekey": "k", "pageurl": "https://b.example/", "timeout_s": 0.000001}"#), 504),
        ("post", "/v1/solve", http.post(gw.url("/v1/solve")).body(recaptcha.to_string()), 401),
        ("post", "/v1/tasks", post("/v1/tasks", &recaptcha.to_string()), 202),
        ("post", "/v1/tasks", post("/v1/tasks", r#"{"kind": "nope"}"#), 400),
        ("get", "/v1/tasks/{id}", get("/v1/tasks/99999999999"), 404),
        ("get", "/v1/tasks/{id}", get("/v1/tasks/1?wait=soon"), 400),
        ("get", "/v1/tasks/{id}", http.get(gw.url("/v1/tasks/1")), 401),
        ("post", "/v1/pools/tokens", post("/v1/pools/tokens", &json!({"kind": "recaptcha_v2", "sitekey": "6LcContractKey", "pageurl": "https://shop.example.com/login", "tokens": [{"token": "03AContractImported", "solved_at": captcha_gateway::model::now_ms()}, {"token": "", "solved_at": 1}]}).to_string()), 200),
        ("post", "/v1/pools/tokens", post("/v1/pools/tokens", r#"{"kind": "recaptcha_v2", "tokens": []}"#), 400),
        ("get", "/v1/pools", get("/v1/pools"), 200),
        ("get", "/v1/pools", http.get(gw.url("/v1/pools")), 401),
        ("post", "/solve", post("/solve", r#"{"sitekey": "6LcContractKey", "pageurl": "https://shop.example.com/login"}"#), 200),
        ("post", "/solve", post("/solve", r#"{"sitekey": "6LcContractKey"}"#), 200),
        ("post", "/solve", http.post(gw.url("/solve")).body("{}"), 401),
        ("get", "/health", http.get(gw.url("/health")), 200),
        ("get", "/livez", http.get(gw.url("/livez")), 200),
        ("get", "/readyz", http.get(gw.url("/readyz")), 200),
        ("get", "/metrics", ops("/metrics"), 200),
        ("get", "/metrics", get("/metrics"), 401),
        ("get", "/v1/status", ops("/v1/status"), 200),
        ("get", "/v1/status", http.get(gw.url("/v1/status")), 401),
        ("get", "/v1/advice", ops("/v1/advice?window_s=3600"), 200),
        ("get", "/v1/advice", ops("/v1/advice?window_s=soon"), 400),
        ("get", "/v1/advice", http.get(gw.url("/v1/advice")), 401),
        ("get", "/", ops("/"), 200),
        ("get", "/", http.get(gw.url("/")), 401),
        ("get", "/openapi.json", http.get(gw.url("/openapi.json")), 200),
    ];
    for (method, path, req, expected) in cases {
        let (status, body) = conforms(&doc, method, path, send(req).await).await;
        if expected == ANY {
            assert!(status < 500, "{method} {path}: {status} {body}");
        } else {
            assert_eq!(status, expected, "{method} {path}: {body}");
        }
    }

    // A task read while pending and when ready; both are documented answers.
    let (_, created) = conforms(
        &doc,
        "post",
        "/v1/tasks",
        send(post("/v1/tasks", &recaptcha.to_string())).await,
    )
    .await;
    let id = created["task_id"].as_str().expect("a task id").to_owned();
    let (status, _) = conforms(
        &doc,
        "get",
        "/v1/tasks/{id}",
        send(get(&format!("/v1/tasks/{id}"))).await,
    )
    .await;
    assert_eq!(status, 200);
    let (status, task) = conforms(
        &doc,
        "get",
        "/v1/tasks/{id}",
        send(get(&format!("/v1/tasks/{id}?wait=30"))).await,
    )
    .await;
    assert_eq!(
        (status, task["status"].as_str()),
        (200, Some("ready")),
        "{task}"
    );

    let (_, served) = conforms(
        &doc,
        "get",
        "/openapi.json",
        send(http.get(gw.url("/openapi.json"))).await,
    )
    .await;
    assert_eq!(served, doc, "the gateway serves docs/openapi.json as it is");
}

#[tokio::test]
async fn answers_at_capacity_match_the_document() {
    let doc = document();
    let mut settings = fast_settings();
    settings.max_concurrent = 1;
    for kind in Kind::ALL {
        // Long enough that the one admitted solve is still held while the others are refused.
        settings.sim.latency.insert(
            kind,
            LatencyRange {
                min: Duration::from_secs(20),
                max: Duration::from_secs(20),
            },
        );
    }
    let gw = keyed_gateway(settings).await;
    let bearer = format!("Bearer {KEY}");
    let body = r#"{"kind": "recaptcha_v2", "sitekey": "k", "pageurl": "https://held.example/", "timeout_s": 30}"#;
    let held = tokio::spawn(
        gw.http
            .post(gw.url("/v1/solve"))
            .header("authorization", &bearer)
            .body(body)
            .send(),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let res = gw
            .http
            .get(gw.url("/health"))
            .send()
            .await
            .expect("answers");
        let (status, health) = conforms(&doc, "get", "/health", res).await;
        if health["active_tasks"] == json!(1) {
            assert_eq!(
                status, 503,
                "at 100 % load /health says overloaded: {health}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first solve was never admitted: {health}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (path, req_body) in [
        ("/v1/solve", body),
        ("/v1/tasks", body),
        (
            "/solve",
            r#"{"sitekey": "k", "pageurl": "https://held.example/"}"#,
        ),
    ] {
        let res = gw
            .http
            .post(gw.url(path))
            .header("authorization", &bearer)
            .body(req_body)
            .send()
            .await
            .expect("answers");
        let (status, answer) = conforms(&doc, "post", path, res).await;
        assert_eq!(status, 503, "{path}: {answer}");
    }
    held.abort();
}

/// The venv's Python (scripts/test installs schemathesis into it from
/// tests/python/requirements.txt).
fn python() -> PathBuf {
    if let Ok(p) = std::env::var("CAPTCHA_GATEWAY_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/test, which installs schemathesis",
        p.display()
    );
    p
}

/// A bounded schemathesis run (examples, coverage, fuzzing and stateful phases, a few dozen cases
/// per operation; `POST /v1/tasks` links to `GET /v1/tasks/{id}`) against a live gateway: no 5xx except the documented 504 of a caller's own
/// deadline (tests/python/schemathesis.toml), every status, media type, required header and body
/// as documented.
#[tokio::test]
async fn schemathesis_finds_no_server_error_and_no_answer_outside_the_document() {
    let gw = keyed_gateway(fast_settings()).await;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let reports = tempfile::tempdir().unwrap();
    let run = tokio::process::Command::new(python())
        .current_dir(reports.path())
        .args([
            "-c",
            "import sys; from schemathesis.cli import schemathesis; sys.argv[0] = 'schemathesis'; sys.exit(schemathesis())",
            "--no-color",
            "--config-file",
        ])
        .arg(root.join("tests/python/schemathesis.toml"))
        .arg("run")
        .arg(gw.url("/openapi.json"))
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--max-examples",
            "40",
            // One worker: generation runs in Hypothesis, whose caches are not thread-safe (two
            // workers once failed inside its own code with a KeyError, not on our answers).
            "--workers",
            "1",
            "--request-timeout",
            "30",
            "--header",
        ])
        .arg(format!("Authorization: Bearer {KEY}"))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("schemathesis finishes within 4 minutes")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It tested every operation of the document but `GET /openapi.json` (which it loads the
    // document from), and a fair number of cases.
    let operations = document_operations(&document()).len() - 1;
    assert!(
        stdout.contains(&format!("Tested: {operations}\n")),
        "schemathesis did not test all {operations} operations:\n{stdout}"
    );
    let generated: u64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_suffix(" passed")?.split_once(" generated, "))
        .and_then(|(n, _)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no case count in schemathesis' summary:\n{stdout}"));
    assert!(generated >= 200, "only {generated} cases ran:\n{stdout}");
}

/// The document's kinds are the declarations', and each declared kind's body lists its
/// declared parameters, the required ones required.
#[test]
fn the_documents_kinds_and_declared_parameters_are_the_declarations() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    let listed: Vec<&str> = schemas["Kind"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let declared: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(listed, declared);
    for kind in Kind::ALL {
        let body = &schemas[format!("SolveBody_{kind}")];
        assert!(body.is_object(), "SolveBody_{kind} is documented");
        for param in kind.spec().declared_params() {
            // Under its name or one of its declared spellings (a question's `text`).
            let documented = std::iter::once(param.name)
                .chain(param.aliases.iter().copied())
                .find(|name| body["properties"][*name].is_object())
                .unwrap_or_else(|| panic!("{kind}: `{}` is documented", param.name));
            let required = body["required"]
                .as_array()
                .unwrap()
                .contains(&json!(documented));
            assert_eq!(required, param.required, "{kind}: `{documented}`");
        }
    }
}
