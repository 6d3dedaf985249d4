//! Promise 8, secrets stay: the client and fleet scenarios run with distinctive secrets (provider
//! keys, gateway keys, an operations key, a Redis password, proxy passwords, user info and query
//! strings in page URLs), every log line at every level and every response body and header is collected, and
//! none may contain any of them.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use captcha_gateway::sim::{LatencyRange, SimSettings};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::support::fleet::SimServer;
use crate::support::gateway::{GatewayProcess, Launch, Transcript};
use crate::support::redis::{RedisServer, free_port};

/// Distinctive values: each appears nowhere unless leaked. Alphanumeric, so URL and JSON
/// encoding leave them as they are.
struct Secrets {
    provider_key: String,
    wrong_provider_key: String,
    gateway_key: String,
    wrong_gateway_key: String,
    redis_password: String,
    proxy_password: String,
    page_password: String,
    page_query: String,
    tenant_key: String,
    callback_secret: String,
    ops_key: String,
}

impl Secrets {
    fn new() -> Self {
        let r = |prefix: &str, len: usize| {
            let mut s = prefix.to_owned();
            while s.len() < len {
                s.push_str(&format!("{:x}", rand::random::<u64>()));
            }
            s.truncate(len);
            s
        };
        Self {
            provider_key: r("PrvKey", 32),
            wrong_provider_key: r("BadPrv", 32),
            gateway_key: r("GwKey0", 32),
            wrong_gateway_key: r("GwBad0", 32),
            redis_password: r("RedisPw", 24),
            proxy_password: r("PxPass", 20),
            page_password: r("PgPass", 20),
            page_query: r("QrySecret", 20),
            tenant_key: r("TenantKey0", 32),
            callback_secret: r("HookSecret", 24),
            ops_key: r("OpsKey0", 32),
        }
    }

    fn all(&self) -> [(&'static str, &str); 11] {
        [
            ("provider key", &self.provider_key),
            ("wrong provider key", &self.wrong_provider_key),
            ("gateway key", &self.gateway_key),
            ("wrong gateway key", &self.wrong_gateway_key),
            ("Redis password", &self.redis_password),
            ("proxy password", &self.proxy_password),
            ("page URL password", &self.page_password),
            ("page URL query", &self.page_query),
            ("tenant key", &self.tenant_key),
            ("callback URL secret", &self.callback_secret),
            ("operations key", &self.ops_key),
        ]
    }
}

/// Every response the test received, for the final grep.
#[derive(Clone, Default)]
struct Responses(Arc<Mutex<Vec<String>>>);

impl Responses {
    fn push(&self, what: impl Into<String>) {
        self.0.lock().unwrap().push(what.into());
    }
}

/// A `serve` process on `toml`, its provider key in a file, logging at trace level (every
/// dependency's too), everything it prints captured into `log` under `name`.
async fn start_gateway(
    name: &str,
    toml: &str,
    provider_key: &str,
    log: &Transcript,
) -> GatewayProcess {
    let mut key_file = tempfile::NamedTempFile::new().unwrap();
    writeln!(key_file, "{provider_key}").unwrap();
    let config = format!(
        "provider_key_file = \"{}\"\nlisten = \"127.0.0.1:0\"\n{toml}\n",
        key_file.path().display()
    );
    Launch::serve(config)
        .log("trace")
        .env("RUST_BACKTRACE", "1")
        .keep_file(key_file)
        .capture(log, name)
        .start()
        .await
}

/// An HTTP client that records every response (status, headers, body) it receives.
struct Recorder {
    http: reqwest::Client,
    seen: Responses,
}

impl Recorder {
    async fn send(&self, req: reqwest::RequestBuilder) -> (u16, String) {
        let res = req.send().await.expect("the gateway answers");
        let status = res.status().as_u16();
        let headers = format!("{:?}", res.headers());
        let body = res.text().await.expect("a body");
        self.seen
            .push(format!("response {status} {headers} {body}"));
        (status, body)
    }

    async fn get(&self, url: String) -> (u16, String) {
        self.send(self.http.get(url)).await
    }

    async fn json(&self, req: reqwest::RequestBuilder) -> Value {
        let (status, body) = self.send(req).await;
        serde_json::from_str(&body).unwrap_or_else(|_| panic!("{status}: not JSON: {body}"))
    }
}

async fn simulator_requiring(key: &str) -> SimServer {
    let settings = SimSettings {
        keys: vec![key.to_owned()],
        ..SimSettings::default()
    };
    let fast = LatencyRange {
        min: Duration::from_millis(50),
        max: Duration::from_millis(150),
    };
    SimServer::with_settings(settings, fast).await
}

/// The real client libraries, with the gateway key, against one gateway.
async fn run_python_clients(base: &str, key: &str, seen: &Responses) {
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/clients.py");
    for client in ["captchaai", "twocaptcha"] {
        let out = Command::new(crate::clients::python())
            .arg(&script)
            .arg(client)
            .arg(base)
            .arg(key)
            .output()
            .await
            .expect("python runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{client} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // What the libraries received from the gateway (answers, errors, balance).
        seen.push(format!("{client} received {stdout}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_secret_reaches_a_log_line_a_response_or_a_label() {
    let s = Secrets::new();
    let sim = simulator_requiring(&s.provider_key).await;
    let redis = RedisServer::start();
    // Set after start: the support code's readiness ping speaks without a password.
    let set = std::process::Command::new("redis-cli")
        .args([
            "-p",
            &redis.port.to_string(),
            "config",
            "set",
            "requirepass",
        ])
        .arg(&s.redis_password)
        .output()
        .expect("redis-cli runs");
    assert_eq!(String::from_utf8_lossy(&set.stdout).trim(), "OK");
    let redis_url = format!("redis://:{}@127.0.0.1:{}/", s.redis_password, redis.port);
    let log = Transcript::default();
    let common = format!(
        "provider = \"captchaai\"\nprovider_url = \"http://{}\"\nthreads = 50\n\
         gateway_keys = [\"{}\"]\nredis_url = \"{redis_url}\"\n\
         callback_hosts = [\"localhost\"]\ncallback_allow_networks = [\"127.0.0.1/32\", \"::1/128\"]\n\
         callback_attempts = 2\nops_key = \"{}\"\n\
         [[tenants]]\nname = \"team\"\nkeys = [\"{}\"]\nmax_concurrent = 50\n",
        sim.addr, s.gateway_key, s.ops_key, s.tenant_key
    );
    let poll = "[poll]\nfirst_check_s = 0.05\ninterval_s = 0.05\nmax_requests_per_second = 500\n";
    let a = start_gateway("a", &format!("{common}{poll}"), &s.provider_key, &log).await;
    let b = start_gateway(
        "b",
        &format!("log_json = true\n{common}{poll}"),
        &s.provider_key,
        &log,
    )
    .await;
    // A gateway whose provider key is wrong: its failures must not quote the key either.
    let c = start_gateway(
        "c",
        &format!(
            "provider = \"captchaai\"\nprovider_url = \"http://{}\"\nthreads = 5\n\
             gateway_keys = [\"{}\"]\n{poll}",
            sim.addr, s.gateway_key
        ),
        &s.wrong_provider_key,
        &log,
    )
    .await;

    let rec = Recorder {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
        seen: Responses::default(),
    };
    let key = &s.gateway_key;
    let proxy = format!("leakuser:{}@127.0.0.1:3128", s.proxy_password);
    let page = format!(
        "https://pageuser:{}@shop.example.com/cart?session={}",
        s.page_password, s.page_query
    );

    // A callback receiver that is not there: the failed delivery is logged, the URL must not be.
    let hook = format!(
        "http://localhost:{}/hook?token={}",
        free_port(),
        s.callback_secret
    );

    run_python_clients(&a.base, key, &rec.seen).await;

    // A configured tenant's key, on the native API and its usage page.
    let solved = rec
        .json(
            rec.http
                .post(a.url("/v1/solve"))
                .bearer_auth(&s.tenant_key)
                .json(&json!({
                    "kind": "recaptcha_v2", "sitekey": "6Le-tenant", "pageurl": page,
                })),
        )
        .await;
    assert!(solved["token"].is_string(), "{solved}");
    let usage = rec
        .json(rec.http.get(b.url("/v1/usage")).bearer_auth(&s.tenant_key))
        .await;
    assert!(usage.to_string().contains("team"), "{usage}");

    // Compatible API on `b`, answer read from `a` (a fleet shares task records).
    let submitted = rec
        .json(rec.http.post(b.url("/in.php")).form(&[
            ("key", key.as_str()),
            ("method", "userrecaptcha"),
            ("googlekey", "6Le-secrets"),
            ("pageurl", page.as_str()),
            ("proxy", proxy.as_str()),
            ("proxytype", "HTTP"),
            ("pingback", hook.as_str()),
            ("json", "1"),
        ]))
        .await;
    assert_eq!(submitted["status"], 1, "{submitted}");
    let id = submitted["request"].as_str().unwrap().to_owned();
    let done = rec
        .json(
            rec.http
                .get(a.url(&format!("/v1/tasks/{id}?wait=30")))
                .bearer_auth(key),
        )
        .await;
    assert_eq!(done["status"], "ready", "{done}");
    let (_, answer) = rec
        .get(a.url(&format!("/res.php?key={key}&action=get&id={id}")))
        .await;
    assert!(answer.starts_with("OK|"), "{answer}");
    rec.get(b.url(&format!("/res.php?key={key}&action=reportbad&id={id}")))
        .await;

    // Native API with the same secrets in body fields.
    let solved = rec
        .json(
            rec.http
                .post(a.url("/v1/solve"))
                .bearer_auth(key)
                .json(&json!({
                    "kind": "turnstile",
                    "sitekey": "0x4AAA-secrets",
                    "pageurl": page,
                    "proxy": proxy,
                    "proxytype": "HTTP",
                })),
        )
        .await;
    assert!(solved["token"].is_string(), "{solved}");

    // Wrong keys in every place a key goes.
    let wrong = &s.wrong_gateway_key;
    let (_, refused) = rec
        .get(a.url(&format!(
            "/in.php?key={wrong}&method=turnstile&sitekey=x&pageurl=https://example.com/"
        )))
        .await;
    assert_eq!(refused, "ERROR_KEY_DOES_NOT_EXIST");
    let refused = rec
        .json(
            rec.http
                .post(b.url("/v1/solve"))
                .bearer_auth(wrong)
                .json(&json!({
                    "kind": "turnstile", "sitekey": "x", "pageurl": "https://example.com/"
                })),
        )
        .await;
    assert!(refused["error"].is_object(), "{refused}");

    // The gateway with the wrong provider key fails the solve without quoting the key.
    let failed = rec
        .json(
            rec.http
                .post(c.url("/v1/solve"))
                .bearer_auth(key)
                .json(&json!({
                    "kind": "recaptcha_v2", "sitekey": "6Le-c", "pageurl": page, "timeout_s": 20
                })),
        )
        .await;
    assert!(failed["error"].is_object(), "{failed}");
    rec.get(c.url(&format!("/res.php?key={key}&action=getbalance")))
        .await;

    // Every operations page, on every instance, with the operations key (a and b ask for it)
    // and without.
    for gw in [&a, &b, &c] {
        for path in ["/metrics", "/health", "/", "/v1/status"] {
            rec.get(gw.url(path)).await;
            rec.send(rec.http.get(gw.url(path)).bearer_auth(&s.ops_key))
                .await;
        }
        rec.send(rec.http.get(gw.url("/v1/pools")).bearer_auth(key))
            .await;
    }

    for gw in [a, b, c] {
        gw.stop().await;
    }
    let logs: Vec<String> = log
        .lines()
        .into_iter()
        .map(|l| {
            let stream = if l.stdout { "stdout" } else { "stderr" };
            format!("{} {stream}: {}", l.process, l.text)
        })
        .collect();
    let responses = rec.seen.0.lock().unwrap().clone();
    // The grep means something only if the logs are verbose and cover the requests above.
    assert!(
        logs.len() > 100 && logs.iter().any(|l| l.contains(&id)),
        "trace logs are too thin to judge ({} lines)",
        logs.len()
    );
    assert!(
        logs.iter().any(|l| l.contains("callback not delivered")),
        "the pingback to a closed port was attempted and logged"
    );
    assert!(
        responses.iter().any(|r| r.contains("shop.example.com")),
        "the pages shown carry the target label"
    );
    let leaks: Vec<String> = s
        .all()
        .into_iter()
        .flat_map(|(what, secret)| {
            logs.iter()
                .chain(&responses)
                .filter(move |line| line.contains(secret))
                .map(move |line| {
                    let at = line.find(secret).unwrap_or(0).saturating_sub(150);
                    let around: String = line[at..].chars().take(300).collect();
                    format!("the {what} leaked into: ...{around}")
                })
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "{} leaks:\n{}",
        leaks.len(),
        leaks.join("\n")
    );
}
