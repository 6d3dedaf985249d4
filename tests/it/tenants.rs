//! `[[tenants]]` through real gateways over HTTP: a tenant reads only its own tasks, every
//! limit answers in each protocol (compatible codes, native 429 with `Retry-After`, the seed
//! worker API), isolated tenants get answers of their own, usage and `/metrics` name tenants and
//! never keys, and `--gateway-key` keys stay unlimited tenants.

use std::io::Write;
use std::time::Duration;

use captcha_gateway::cli::ServeArgs;
use captcha_gateway::config::{self, Settings};
use captcha_gateway::model::Kind;
use captcha_gateway::sim::LatencyRange;
use serde_json::{Value, json};

use crate::support::{TestGateway, fast_settings};

const ALPHA: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const BETA: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";
const GAMMA: &str = "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3";
const OPERATOR: &str = "d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4";

/// Fast simulator settings plus the tenants (and keys) of a TOML text, loaded as `serve` does.
fn with_tenants(toml: &str) -> Settings {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(file, "provider = \"sim\"\nlisten = \"127.0.0.1:0\"\n{toml}").unwrap();
    let args = ServeArgs {
        config: Some(file.path().to_owned()),
        ..ServeArgs::default()
    };
    let loaded = config::load_serve(&args, &|_| None).expect("the test config is valid");
    let mut settings = fast_settings();
    settings.tenants = loaded.tenants;
    settings.gateway_keys = loaded.gateway_keys;
    settings
}

fn sha256_of(key: &str) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(key)))
}

impl TestGateway {
    async fn native(
        &self,
        method: &str,
        path: &str,
        key: &str,
        body: Option<Value>,
    ) -> (u16, Option<String>, Value) {
        let mut req = self
            .http
            .request(method.parse().unwrap(), self.url(path))
            .bearer_auth(key);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let res = req.send().await.expect("gateway answers");
        let status = res.status().as_u16();
        let retry_after = res
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, retry_after, res.json().await.unwrap_or(Value::Null))
    }

    async fn submit_as(&self, key: &str, json_mode: bool, extra: &[(&str, &str)]) -> String {
        let mut form = vec![
            ("key", key),
            ("method", "turnstile"),
            ("sitekey", "0x4AAAAAAAtenants"),
            ("pageurl", "https://tenants.example.com/"),
        ];
        if json_mode {
            form.push(("json", "1"));
        }
        form.extend_from_slice(extra);
        self.post_form("/in.php", &form).await.1
    }
}

fn task_id(submitted: &str) -> String {
    submitted
        .strip_prefix("OK|")
        .unwrap_or_else(|| panic!("submit failed: {submitted}"))
        .to_owned()
}

fn two_tenants() -> Settings {
    with_tenants(&format!(
        "[[tenants]]\nname = \"alpha\"\nkeys = [\"{ALPHA}\"]\n\
         [[tenants]]\nname = \"beta\"\nkeys = [\"{}\"]\n",
        sha256_of(BETA)
    ))
}

#[tokio::test]
async fn a_tenant_reads_only_its_own_task_ids() {
    cross_tenant_reads(two_tenants()).await;
}

#[tokio::test]
async fn a_tenant_reads_only_its_own_task_ids_on_the_redis_store() {
    let redis = crate::support::redis::RedisServer::start();
    let mut settings = two_tenants();
    settings.redis = Some(captcha_gateway::engine::store::redis::RedisSettings::new(
        vec![redis.url()],
        false,
    ));
    cross_tenant_reads(settings).await;
}

async fn cross_tenant_reads(settings: Settings) {
    let gw = TestGateway::with(settings).await;
    let id = task_id(&gw.submit_as(ALPHA, false, &[]).await);
    // The owner's long-poll sees it end; then the other tenant tries every way in.
    let (status, _, owner) = gw
        .native("GET", &format!("/v1/tasks/{id}?wait=30"), ALPHA, None)
        .await;
    assert_eq!(
        (status, owner["status"].as_str()),
        (200, Some("ready")),
        "{owner}"
    );
    let (_, body) = gw
        .get_text(&format!("/res.php?key={BETA}&action=get&id={id}"))
        .await;
    assert_eq!(body, "ERROR_WRONG_CAPTCHA_ID");
    let (_, body) = gw
        .get_text(&format!("/res.php?key={BETA}&action=get&ids={id},{id}"))
        .await;
    assert_eq!(body, "OK|ERROR_WRONG_CAPTCHA_ID|ERROR_WRONG_CAPTCHA_ID");
    let (_, body) = gw
        .get_text(&format!("/res.php?key={BETA}&action=reportbad&id={id}"))
        .await;
    assert_eq!(body, "ERROR_WRONG_CAPTCHA_ID");
    let (status, _, other) = gw
        .native("GET", &format!("/v1/tasks/{id}"), BETA, None)
        .await;
    assert_eq!(status, 404, "{other}");
    // Still the owner's, and unreported.
    let (_, body) = gw
        .get_text(&format!("/res.php?key={ALPHA}&action=get&id={id}"))
        .await;
    assert!(body.starts_with("OK|"), "{body}");
    let (_, body) = gw
        .get_text(&format!("/res.php?key={ALPHA}&action=reportbad&id={id}"))
        .await;
    assert_eq!(body, "OK_REPORT_RECORDED");
}

#[tokio::test]
async fn max_concurrent_answers_each_protocol_and_names_the_limit() {
    let mut settings = with_tenants(&format!(
        "[[tenants]]\nname = \"alpha\"\nkeys = [\"{ALPHA}\"]\nmax_concurrent = 1\n"
    ));
    // Turnstile solves take minutes, so alpha's first task holds its only slot for the test.
    settings.sim.latency.insert(
        Kind::Turnstile,
        LatencyRange {
            min: Duration::from_secs(300),
            max: Duration::from_secs(300),
        },
    );
    let gw = TestGateway::with(settings).await;
    let held = task_id(&gw.submit_as(ALPHA, false, &[]).await);

    assert_eq!(
        gw.submit_as(ALPHA, false, &[]).await,
        "ERROR_NO_SLOT_AVAILABLE"
    );
    let v: Value = serde_json::from_str(&gw.submit_as(ALPHA, true, &[]).await).unwrap();
    assert_eq!(v["status"], 0);
    assert_eq!(v["request"], "ERROR_NO_SLOT_AVAILABLE");
    assert!(
        v["error_text"].as_str().unwrap().contains("max_concurrent"),
        "{v}"
    );

    let turnstile = json!({"kind": "turnstile", "sitekey": "0x4AAAAAAAtenants", "pageurl": "https://tenants.example.com/"});
    for path in ["/v1/tasks", "/v1/solve"] {
        let (status, retry_after, body) = gw
            .native("POST", path, ALPHA, Some(turnstile.clone()))
            .await;
        assert_eq!(status, 429, "{path}: {body}");
        assert_eq!(retry_after.as_deref(), Some("1"), "{path}");
        assert_eq!(body["error"]["code"], "tenant_max_concurrent");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("max_concurrent")
        );
    }
    // Seed 002's worker API, key in the body as the seed's clients send it.
    let res = gw
        .http
        .post(gw.url("/solve"))
        .json(&json!({"key": ALPHA, "method": "turnstile", "sitekey": "0x4AAAAAAAtenants", "pageurl": "https://tenants.example.com/"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 429);
    assert!(res.headers().contains_key("retry-after"));
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "TENANT_MAX_CONCURRENT", "{body}");

    let (status, _, usage) = gw.native("GET", "/v1/usage", ALPHA, None).await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["tenant"], "alpha");
    assert_eq!(usage["in_flight"], 1);
    assert_eq!(usage["admitted_total"], 1);
    assert_eq!(usage["refused_total"]["max_concurrent"], 5);
    assert_eq!(usage["limits"]["max_concurrent"], 1);

    let (_, metrics) = gw.get_text("/metrics").await;
    assert!(
        metrics.contains(
            "captcha_gateway_tenant_requests_total{tenant=\"alpha\",result=\"max_concurrent\"} 5"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("captcha_gateway_tenant_in_flight{tenant=\"alpha\"} 1"));
    assert!(!metrics.contains(ALPHA), "a key in /metrics");
    assert_eq!(metrics.matches("# EOF").count(), 1);

    // `threadsinfo` agrees with the refusals: alpha's one thread is working.
    let (_, body) = gw
        .get_text(&format!("/res.php?key={ALPHA}&action=threadsinfo"))
        .await;
    let threads: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            threads["threads"].as_u64(),
            threads["working_threads"].as_u64()
        ),
        (Some(1), Some(1)),
        "{body}"
    );

    // The held task is still alpha's own, and pending.
    let (_, body) = gw
        .get_text(&format!("/res.php?key={ALPHA}&action=get&id={held}"))
        .await;
    assert_eq!(body, "CAPCHA_NOT_READY");
}

#[tokio::test]
async fn the_hourly_budget_and_the_kind_list_refuse_with_their_own_answers() {
    let gw = TestGateway::with(with_tenants(&format!(
        "[[tenants]]\nname = \"beta\"\nkeys = [\"{BETA}\"]\nmax_solves_per_hour = 2\n\
         kinds = [\"turnstile\", \"recaptcha_v2\"]\n"
    )))
    .await;
    let turnstile = json!({"kind": "turnstile", "sitekey": "0x4AAAAAAAtenants", "pageurl": "https://tenants.example.com/"});
    for _ in 0..2 {
        let (status, _, body) = gw
            .native("POST", "/v1/solve", BETA, Some(turnstile.clone()))
            .await;
        assert_eq!(status, 200, "{body}");
        gw.verify(body["token"].as_str().unwrap()).await.unwrap();
    }
    let (status, retry_after, body) = gw.native("POST", "/v1/solve", BETA, Some(turnstile)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "tenant_max_solves_per_hour");
    let wait: u64 = retry_after.expect("Retry-After").parse().unwrap();
    assert!((1..=3600).contains(&wait), "Retry-After {wait}");
    assert_eq!(gw.submit_as(BETA, false, &[]).await, "ERROR_ZERO_BALANCE");

    // A kind outside the list: refused before any limit is spent, saying which kinds are allowed.
    let text = json!({"kind": "text", "text": "What is two plus two?"});
    let (status, _, body) = gw.native("POST", "/v1/tasks", BETA, Some(text)).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "kind_not_allowed");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("text") && message.contains("turnstile"),
        "{message}"
    );
    let (_, body) = gw
        .post_form(
            "/in.php",
            &[
                ("key", BETA),
                ("method", "textcaptcha"),
                ("textcaptcha", "2+2?"),
            ],
        )
        .await;
    assert_eq!(body, "ERROR_BAD_PARAMETERS");

    let (_, _, usage) = gw.native("GET", "/v1/usage", BETA, None).await;
    assert_eq!(usage["solves_last_hour"], 2, "{usage}");
    assert_eq!(usage["refused_total"]["max_solves_per_hour"], 2);
    assert_eq!(usage["refused_total"]["kinds"], 2);
}

#[tokio::test]
async fn an_isolated_tenant_never_shares_answers_and_gateway_keys_stay_unlimited() {
    let mut settings = with_tenants(&format!(
        "gateway_keys = [\"{OPERATOR}\"]\n\
         [[tenants]]\nname = \"alpha\"\nkeys = [\"{ALPHA}\"]\nmax_concurrent = 1\n\
         [[tenants]]\nname = \"beta\"\nkeys = [\"{BETA}\"]\n\
         [[tenants]]\nname = \"gamma\"\nkeys = [\"{GAMMA}\"]\npools = \"isolated\"\n"
    ));
    settings.engine.min_remaining = Duration::from_secs(1);
    let gw = TestGateway::with(settings).await;
    // A text answer is reusable: shared tenants get one upstream task between them.
    let text = json!({"kind": "text", "text": "What colour is the sky?"});
    let mut tokens = Vec::new();
    for key in [ALPHA, BETA] {
        let (status, _, body) = gw
            .native("POST", "/v1/solve", key, Some(text.clone()))
            .await;
        assert_eq!(status, 200, "{body}");
        tokens.push(body["token"].clone());
    }
    assert_eq!(tokens[0], tokens[1]);
    assert_eq!(gw.stat("submits").await, 1, "alpha and beta share one task");
    // The isolated tenant asks the same question and gets a task of its own.
    let (status, _, body) = gw
        .native("POST", "/v1/solve", GAMMA, Some(text.clone()))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(gw.stat("submits").await, 2, "gamma's target is its own");
    let (_, _, usage) = gw.native("GET", "/v1/usage", GAMMA, None).await;
    assert_eq!(usage["pools"], "isolated");

    // The operator's key: its own tenant, no limits, several solves at once.
    let turnstile = json!({"kind": "turnstile", "sitekey": "0x4AAAAAAAoperator", "pageurl": "https://tenants.example.com/"});
    let solves = (0..3).map(|_| gw.native("POST", "/v1/solve", OPERATOR, Some(turnstile.clone())));
    for (status, _, body) in futures::future::join_all(solves).await {
        assert_eq!(status, 200, "{body}");
    }
    let (_, _, usage) = gw.native("GET", "/v1/usage", OPERATOR, None).await;
    assert!(
        usage["tenant"].as_str().unwrap().starts_with("tenant-"),
        "{usage}"
    );
    assert!(usage["limits"].is_null());
    assert_eq!(usage["admitted_total"], 3);
    assert!(!usage.to_string().contains(OPERATOR));
    // Each caller sees itself only.
    let (_, _, usage) = gw.native("GET", "/v1/usage", BETA, None).await;
    assert_eq!(usage["tenant"], "beta");
    assert_eq!(usage["admitted_total"], 1);
    let (status, _, _) = gw
        .native("GET", "/v1/usage", "e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5", None)
        .await;
    assert_eq!(status, 401);
}

/// Runs `serve` with `toml` as its config file; returns (exit code, stderr).
fn serve_with_config(toml: &str, extra_args: &[&str]) -> (i32, String) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(file, "provider = \"sim\"\nlisten = \"127.0.0.1:0\"\n{toml}").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args(["serve", "--config", file.path().to_str().unwrap()])
        .args(extra_args)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_tenant_and_tls_settings_exit_2_naming_the_setting_never_the_key() {
    let tenant = |name: &str, body: &str| format!("[[tenants]]\nname = \"{name}\"\n{body}\n");
    let alpha_key = format!("keys = [\"{ALPHA}\"]");
    let cases = [
        (
            format!("{}{}", tenant("a", &alpha_key), tenant("b", &alpha_key)),
            "tenants[1] (b).keys[0]",
        ),
        (
            format!("gateway_keys = [\"{ALPHA}\"]\n{}", tenant("a", &alpha_key)),
            "tenants[0] (a).keys[0]",
        ),
        (
            tenant("a", "keys = [\"sha256:not-hex\"]"),
            "tenants[0] (a).keys[0]",
        ),
        (tenant("a", "keys = [\"short\"]"), "tenants[0] (a).keys[0]"),
        (
            tenant("a", &format!("{alpha_key}\nkinds = [\"keycaptcha\"]")),
            "tenants[0] (a).kinds",
        ),
        (
            tenant("a", &format!("{alpha_key}\nmax_concurrent = 0")),
            "tenants[0] (a).max_concurrent",
        ),
        (
            tenant("a", &format!("{alpha_key}\npools = \"private\"")),
            "tenants[0] (a).pools",
        ),
        (tenant("tenant-x", &alpha_key), "tenants[0].name"),
        (
            format!(
                "{}{}",
                tenant("a", &alpha_key),
                tenant("a", &format!("keys = [\"{BETA}\"]"))
            ),
            "tenants[1] (a).name",
        ),
        (
            "tls_cert = \"/nonexistent/cert.pem\"\ntls_key = \"/nonexistent/key.pem\"".to_owned(),
            "--tls-cert",
        ),
        (
            "tls_cert = \"/nonexistent/cert.pem\"".to_owned(),
            "--tls-key",
        ),
        ("shutdown_grace_s = -1".to_owned(), "shutdown_grace_s"),
    ];
    for (toml, names) in cases {
        let (code, stderr) = serve_with_config(&toml, &[]);
        assert_eq!(code, 2, "{toml}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(names), "should name {names}: {stderr}");
        assert!(
            !stderr.contains(ALPHA) && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
    // A key file that is not a key, given as flags.
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "-----BEGIN NOTHING-----\n").unwrap();
    let junk = junk.to_str().unwrap();
    let (code, stderr) = serve_with_config("", &["--tls-cert", junk, "--tls-key", junk]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--tls-cert"), "{stderr}");
    // Tenants' keys are keys: a gateway with only tenants may listen beyond loopback (its
    // operations endpoints on a port of their own).
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(
        file,
        "provider = \"sim\"\nlisten = \"0.0.0.0:0\"\nops_listen = \"127.0.0.1:0\"\n{}",
        tenant("a", &alpha_key)
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(file.path().to_owned()),
        ..ServeArgs::default()
    };
    assert!(config::load_serve(&args, &|_| None).is_ok());
}

#[tokio::test]
async fn an_isolated_tenant_never_takes_a_pooled_answer_of_the_shared_target() {
    let gw = TestGateway::with(with_tenants(&format!(
        "[[tenants]]\nname = \"alpha\"\nkeys = [\"{ALPHA}\"]\n\
         [[tenants]]\nname = \"gamma\"\nkeys = [\"{GAMMA}\"]\npools = \"isolated\"\n"
    )))
    .await;
    let target = json!({"kind": "turnstile", "sitekey": "0x4AAAAAAApooled", "pageurl": "https://pooled.example.com/"});
    let mut import = target.clone();
    let solved_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    import["tokens"] = json!([{"token": "imported-shared-token", "solved_at": solved_at}]);
    let (status, _, body) = gw
        .native("POST", "/v1/pools/tokens", ALPHA, Some(import))
        .await;
    assert_eq!(
        (status, body["accepted"].as_u64()),
        (200, Some(1)),
        "{body}"
    );

    // The isolated tenant asks for the same target: its own target, so a solve of its own.
    let (status, _, body) = gw
        .native("POST", "/v1/solve", GAMMA, Some(target.clone()))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["source"], "solved", "{body}");
    assert_ne!(body["token"], "imported-shared-token");
    // The shared tenant finds the pooled answer still there.
    let (status, _, body) = gw.native("POST", "/v1/solve", ALPHA, Some(target)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["source"].as_str(), body["token"].as_str()),
        (Some("pool"), Some("imported-shared-token")),
        "{body}"
    );
}
