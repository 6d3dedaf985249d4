//! The operations endpoints protected (docs/SECURITY.md "Endpoints"): the operations key on
//! `/metrics`, `/v1/status` and the dashboard, the operations listener that takes them off the
//! API port, the startup refusal when neither protects a public port, and the simulator's
//! controls behind the gateway key.

use captcha_gateway::config::Secret;
use captcha_gateway::http::{OpsInput, ops_settings};
use serde_json::{Value, json};

use crate::cli::assert_config_error;
use crate::support::gateway::{GatewayProcess, Launch};
use crate::support::{KEY, TestGateway, fast_settings};

/// The operations key of these tests: not a gateway key, and not 32 characters.
const OPS_KEY: &str = "ops-ThisKeyOpensTheFigures-0042";

/// The endpoints that show tenants, sites and threads.
const SENSITIVE: [&str; 4] = ["/metrics", "/v1/status", "/v1/advice", "/"];
/// The endpoints probes and clients need without a header.
const OPEN: [&str; 3] = ["/livez", "/readyz", "/health"];

/// `GET url` with an optional bearer key: the status and the body.
async fn get(http: &reqwest::Client, url: &str, bearer: Option<&str>) -> (u16, String) {
    let mut req = http.get(url);
    if let Some(key) = bearer {
        req = req.bearer_auth(key);
    }
    let res = req.send().await.expect("the gateway answers");
    let status = res.status().as_u16();
    (status, res.text().await.expect("a body"))
}

/// A gateway with a gateway key, an operations key and one finished solve (so the figures name
/// a site).
async fn keyed_gateway() -> TestGateway {
    let mut settings = fast_settings();
    settings.gateway_keys = vec![Secret(KEY.into())];
    let input = OpsInput {
        key_env: Some(Secret(OPS_KEY.into())),
        ..OpsInput::default()
    };
    settings.ops = ops_settings(input, settings.listen).unwrap().0;
    let gw = TestGateway::with(settings).await;
    let solved = gw
        .http
        .post(gw.url("/v1/solve"))
        .bearer_auth(KEY)
        .json(&json!({"kind": "turnstile", "sitekey": "0x4AAA", "pageurl": "https://secret-site.example/"}))
        .send()
        .await
        .unwrap();
    assert_eq!(solved.status(), 200);
    gw
}

#[tokio::test]
async fn the_ops_key_opens_metrics_status_and_the_dashboard_and_nothing_else_does() {
    let gw = keyed_gateway().await;
    for path in SENSITIVE {
        for (who, bearer) in [
            ("no key", None),
            ("a gateway key", Some(KEY)),
            ("a wrong key", Some("ops-ThisKeyOpensNothing-000000")),
        ] {
            let (status, body) = get(&gw.http, &gw.url(path), bearer).await;
            assert_eq!(status, 401, "{path} with {who}: {body}");
            assert!(
                !body.contains("secret-site.example") && !body.contains("tenant-"),
                "{path} with {who} shows figures: {body}"
            );
        }
        let (status, body) = get(&gw.http, &gw.url(path), Some(OPS_KEY)).await;
        assert_eq!(status, 200, "{path} with the ops key: {body}");
        // The advice is per kind, never per site.
        let figure = if path == "/v1/advice" {
            "\"threads\""
        } else {
            "secret-site.example"
        };
        assert!(body.contains(figure), "{path} shows the figures: {body}");
    }
    // The refused dashboard is still the page a browser runs (it then asks with the key).
    let (_, shell) = get(&gw.http, &gw.url("/"), None).await;
    assert!(shell.contains("/#key="), "{shell}");
    assert!(shell.contains("fetch(\"/v1/status\""), "{shell}");
    let res = gw.http.get(gw.url("/metrics")).send().await.unwrap();
    assert_eq!(
        res.headers()["www-authenticate"],
        "Bearer realm=\"captcha-gateway operations\""
    );
    let refusal: Value = res.json().await.unwrap();
    assert_eq!(refusal["error"]["code"], "ops_key_required");
    for path in OPEN {
        assert_eq!(get(&gw.http, &gw.url(path), None).await.0, 200, "{path}");
    }
}

/// A gateway process from a TOML file with a gateway key and `ops_listen`, and `env`: the
/// process (its API at `base`) and its operations base URL.
async fn spawn_with_ops_listener(env: &[(&str, &str)]) -> (GatewayProcess, String) {
    let launch = Launch::serve(format!(
        "provider = \"sim\"\nlisten = \"127.0.0.1:0\"\nops_listen = \"127.0.0.1:0\"\n\
         gateway_keys = [\"{KEY}\"]\n"
    ));
    let mut gateway = env
        .iter()
        .fold(launch, |launch, (name, value)| launch.env(name, value))
        .start()
        .await;
    let line = gateway.stdout_line().await;
    let ops = line
        .strip_prefix("operations listening on ")
        .unwrap_or_else(|| panic!("no operations listener announced: {line:?}"))
        .trim()
        .to_owned();
    // The simulator's line comes next.
    gateway.drain_stdout();
    (gateway, ops)
}

#[tokio::test]
async fn the_ops_listener_serves_them_and_the_api_port_does_not() {
    let (gateway, ops) = spawn_with_ops_listener(&[]).await;
    let api = &gateway.base;
    let http = reqwest::Client::new();
    for path in SENSITIVE {
        assert_eq!(
            get(&http, &format!("{api}{path}"), None).await.0,
            404,
            "{path}"
        );
        let (status, body) = get(&http, &format!("{ops}{path}"), None).await;
        assert_eq!(status, 200, "{ops}{path}: {body}");
    }
    for path in OPEN {
        assert_eq!(
            get(&http, &format!("{api}{path}"), None).await.0,
            200,
            "{path}"
        );
        assert_eq!(
            get(&http, &format!("{ops}{path}"), None).await.0,
            200,
            "{path}"
        );
    }
    // The operations port serves nothing that solves.
    let (status, _) = get(
        &http,
        &format!("{ops}/res.php?key={KEY}&action=getbalance"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = get(
        &http,
        &format!("{api}/res.php?key={KEY}&action=getbalance"),
        None,
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_ops_listener_asks_for_the_ops_key_from_the_environment() {
    let env = [("CAPTCHA_GATEWAY_OPS_KEY", OPS_KEY)];
    let (_gateway, ops) = spawn_with_ops_listener(&env).await;
    let http = reqwest::Client::new();
    for path in SENSITIVE {
        let url = format!("{ops}{path}");
        assert_eq!(get(&http, &url, None).await.0, 401, "{path}");
        assert_eq!(get(&http, &url, Some(KEY)).await.0, 401, "{path}");
        assert_eq!(get(&http, &url, Some(OPS_KEY)).await.0, 200, "{path}");
    }
    for path in OPEN {
        assert_eq!(
            get(&http, &format!("{ops}{path}"), None).await.0,
            200,
            "{path}"
        );
    }
}

#[test]
fn a_public_listen_without_ops_listener_or_ops_key_refuses_to_start() {
    let serve = [
        "serve",
        "--provider",
        "sim",
        "--listen",
        "0.0.0.0:0",
        "--gateway-key",
        KEY,
    ];
    assert_config_error(&serve, &[], "--ops-listen");
    // A short key is named, never echoed.
    let env = [("CAPTCHA_GATEWAY_OPS_KEY", "tooShortKey")];
    assert_config_error(&serve, &env, "CAPTCHA_GATEWAY_OPS_KEY");
    let (_, stderr) = crate::cli::run(&serve, &env);
    assert!(!stderr.contains("tooShortKey"), "{stderr}");
}

#[tokio::test]
async fn the_simulators_controls_need_a_gateway_key_on_a_keyed_gateway() {
    let mut settings = fast_settings();
    settings.gateway_keys = vec![Secret(KEY.into())];
    let gw = TestGateway::with(settings).await;
    let http = &gw.http;
    let faults = gw.url("/sim/faults");
    let drop_all = r#"{"drop_rate": 1}"#;

    let refused = http.post(&faults).body(drop_all).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let wrong = http
        .post(&faults)
        .bearer_auth("ffffffffffffffffffffffffffffffff")
        .body(drop_all)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let current: Value = http
        .get(&faults)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        current["drop_rate"], 0.0,
        "a refused switch changed nothing"
    );

    let set = http
        .post(&faults)
        .bearer_auth(KEY)
        .body(r#"{"slow_rate": 1, "slow_ms": 1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), 200);
    assert_eq!(http.delete(&faults).send().await.unwrap().status(), 401);
    let still: Value = http
        .get(&faults)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(still["slow_rate"], 1.0, "a refused clear changed nothing");
    let cleared = http.delete(&faults).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(cleared.status(), 200);

    // Its provider API holds the plan threads the gateway solves with: keyed too.
    let submit = format!(
        "/sim/in.php?key={KEY}&method=userrecaptcha&googlekey=6Le&pageurl=https://a.example/"
    );
    assert_eq!(get(http, &gw.url(&submit), None).await.0, 401);
    assert_eq!(get(http, &gw.url(&submit), Some(KEY)).await.0, 200);
    // What only reads stays open: the stats and a site backend's token check.
    assert_eq!(get(http, &gw.url("/sim/stats"), None).await.0, 200);
    let (status, verdict) = get(http, &gw.url("/sim/verify?token=SIM-nothing"), None).await;
    assert_eq!(status, 200, "{verdict}");
}

#[tokio::test]
async fn the_status_command_sends_the_ops_key() {
    let gw = keyed_gateway().await;
    let bin = env!("CARGO_BIN_EXE_captcha-gateway");
    let url = gw.url("");
    let run = |env: Vec<(&'static str, &'static str)>| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(bin)
                .args(["status", "--url", &url])
                .env_clear()
                .envs(env)
                .output()
                .unwrap()
        })
    };
    let refused = run(vec![]).await.unwrap();
    let line = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(1), "{line}");
    assert!(line.contains("operations key"), "{line}");
    let shown = run(vec![("CAPTCHA_GATEWAY_OPS_KEY", OPS_KEY)])
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.status.success(), "{text}");
    assert!(text.contains("turnstile:secret-site.example"), "{text}");
}

/// A queue worker's listener is an operations port: its `/metrics` asks for the same key (here
/// from the shared file's `ops_key`), its probes stay open.
#[tokio::test]
async fn a_workers_metrics_ask_for_the_ops_key_too() {
    let redis = crate::support::redis::RedisServer::start();
    let sim = crate::support::fleet::SimServer::stalled(5).await;
    let worker = Launch::worker(format!(
        "ops_key = \"{OPS_KEY}\"\nprovider = \"captchaai\"\nprovider_url = \"http://{}\"\n\
         threads = 5\nredis_url = \"{}\"\n",
        sim.addr,
        redis.url()
    ))
    .provider_key(KEY)
    .log("warn")
    .start()
    .await;
    let http = reqwest::Client::new();
    let metrics = format!("{}/metrics", worker.base);
    assert_eq!(get(&http, &metrics, None).await.0, 401);
    assert_eq!(get(&http, &metrics, Some(KEY)).await.0, 401);
    let (status, text) = get(&http, &metrics, Some(OPS_KEY)).await;
    assert_eq!(status, 200);
    assert!(text.contains("captcha_gateway_"), "{text}");
    for path in ["/livez", "/readyz"] {
        let url = format!("{}{path}", worker.base);
        assert_eq!(get(&http, &url, None).await.0, 200, "{path}");
    }
}

/// The shipped NGINX config forwards the APIs, never the operations endpoints: not even from an
/// instance that still serves them on its API port.
#[tokio::test]
async fn the_shipped_nginx_config_does_not_forward_the_operations_endpoints() {
    let gw = TestGateway::start().await;
    let base = gw.url("");
    let nginx = crate::nginx::Nginx::start(&[base.clone(), base.clone(), base]).await;
    for path in SENSITIVE {
        assert_eq!(get(&gw.http, &gw.url(path), None).await.0, 200, "{path}");
        let url = format!("{}{path}", nginx.base);
        assert_eq!(
            get(&gw.http, &url, None).await.0,
            404,
            "{path} through NGINX"
        );
    }
    for path in OPEN {
        let url = format!("{}{path}", nginx.base);
        assert_eq!(
            get(&gw.http, &url, None).await.0,
            200,
            "{path} through NGINX"
        );
    }
}

#[test]
fn a_worker_given_two_different_listeners_says_so() {
    let worker = [
        "worker",
        "--provider",
        "sim",
        "--listen",
        "127.0.0.1:0",
        "--ops-listen",
        "127.0.0.1:9",
        "--redis-url",
        "redis://127.0.0.1:1/0",
    ];
    assert_config_error(&worker, &[], "--ops-listen");
}
