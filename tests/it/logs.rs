//! Logs (docs/CONFIGURATION.md "Logs", docs/API.md "Request ids"): a gateway and a queue worker
//! logging JSON at debug level (trace for our crate) write nothing but JSON lines; every response
//! carries an `X-Request-Id`, a safe caller id is kept and an unsafe one replaced; the upstream
//! tasks a request starts log its id (the worker's too, for a task handed over through the
//! queue); and no key or password reaches any line.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use captcha_gateway::sim::{LatencyRange, SimSettings};
use serde_json::{Value, json};

use crate::support::eventually::eventually;
use crate::support::fleet::SimServer;
use crate::support::gateway::{Launch, OutputLine, Transcript};
use crate::support::redis::RedisServer;

const LOG_LEVEL: &str = "debug,captcha_gateway=trace";

/// Distinctive values that appear nowhere unless leaked.
struct Secrets {
    provider_key: String,
    gateway_key: String,
    proxy_password: String,
    /// Sent inside an `X-Request-Id` the gateway must refuse.
    in_request_id: String,
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
        Secrets {
            provider_key: r("LogPrvKey", 32),
            gateway_key: r("LogGwKey0", 32),
            proxy_password: r("LogPxPass", 20),
            in_request_id: r("LogRidSecret", 24),
        }
    }

    fn all(&self) -> [(&'static str, &str); 4] {
        [
            ("provider key", &self.provider_key),
            ("gateway key", &self.gateway_key),
            ("proxy password", &self.proxy_password),
            ("refused request id", &self.in_request_id),
        ]
    }
}

fn temp_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    write!(f, "{text}").unwrap();
    f
}

/// Every stderr line as JSON (the test fails on the first that is not); stdout holds only the
/// announcement, which scripts read as plain text.
fn json_lines(lines: &[OutputLine], announced: &str) -> Vec<Value> {
    let stray: Vec<&OutputLine> = lines.iter().filter(|l| l.stdout).collect();
    assert!(
        stray.is_empty(),
        "stdout has more than its announcement ({announced:?}): {stray:?}"
    );
    lines
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(&l.text)
                .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {}", l.text))
        })
        .collect()
}

/// The spans of a JSON log line, root first. An event given its parent explicitly lists that
/// parent under `span` only; other events list it under `spans` too.
fn spans(line: &Value) -> Vec<&Value> {
    let mut all: Vec<&Value> = line["spans"]
        .as_array()
        .map(|s| s.iter().collect())
        .unwrap_or_default();
    if line["span"].is_object() && all.last() != Some(&&line["span"]) {
        all.push(&line["span"]);
    }
    all
}

/// Lines logged inside an upstream task's span whose ancestors carry `request_id` on a span
/// named `parent` (`request` in a gateway, `queue_task` in a worker).
fn task_lines<'a>(lines: &'a [Value], parent: &str, request_id: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| {
            let s = spans(l);
            s.iter().any(|s| s["name"] == "upstream_task")
                && s.iter()
                    .any(|s| s["name"] == parent && s["request_id"] == request_id)
        })
        .collect()
}

fn message(line: &Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or("")
}

fn assert_no_secret(s: &Secrets, lines: &[OutputLine]) {
    for (what, secret) in s.all() {
        if let Some(l) = lines.iter().find(|l| l.text.contains(secret)) {
            panic!("the {what} leaked into a log line: {}", l.text);
        }
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

/// The gateway's TOML: the simulator as a captchaai account, fast polling, `extra` appended.
fn gateway_config(
    sim: &SimServer,
    s: &Secrets,
    key_file: &tempfile::NamedTempFile,
    extra: &str,
) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nprovider = \"captchaai\"\nprovider_url = \"http://{}\"\n\
         provider_key_file = \"{}\"\nthreads = 50\ngateway_keys = [\"{}\"]\n{extra}\n\
         [poll]\nfirst_check_s = 0.05\ninterval_s = 0.05\nmax_requests_per_second = 500\n",
        sim.addr,
        key_file.path().display(),
        s.gateway_key,
    )
}

fn request_id(res: &reqwest::Response) -> String {
    res.headers()
        .get("x-request-id")
        .unwrap_or_else(|| panic!("no X-Request-Id on {} {}", res.status(), res.url().path()))
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn json_logs_name_the_request_behind_each_upstream_task_and_no_secret() {
    let s = Secrets::new();
    let sim = simulator_requiring(&s.provider_key).await;
    let key_file = temp_file(&s.provider_key);
    let config = gateway_config(&sim, &s, &key_file, "");
    let transcript = Transcript::default();
    let gw = Launch::serve(config)
        .log(LOG_LEVEL)
        .env("CAPTCHA_GATEWAY_LOG_FORMAT", "json")
        .keep_file(key_file)
        .capture(&transcript, "gateway")
        .start()
        .await;
    let base = gw.base.clone();
    let http = crate::support::fleet::client();
    let key = s.gateway_key.as_str();

    // Compatible API, key in the form, the caller's own request id.
    let res = http
        .post(format!("{base}/in.php"))
        .header("X-Request-Id", "compat-submit-1")
        .form(&[
            ("key", key),
            ("method", "userrecaptcha"),
            ("googlekey", "6Le-logs-compat"),
            ("pageurl", "https://logs.example.com/compat"),
            ("json", "1"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(
        request_id(&res),
        "compat-submit-1",
        "a safe caller id is kept"
    );
    let submitted: Value = res.json().await.unwrap();
    assert_eq!(submitted["status"], 1, "{submitted}");
    let task = submitted["request"].as_str().unwrap().to_owned();
    // Compatible API, key in the query string: polled until the answer is ready.
    let res_url = format!("{base}/res.php?key={key}&action=get&id={task}&json=1");
    let poll_ids = Arc::new(Mutex::new(Vec::new()));
    eventually(
        Duration::from_secs(30),
        "the compatible task's answer",
        || {
            let (http, url, ids) = (http.clone(), res_url.clone(), poll_ids.clone());
            async move {
                let res = http.get(url).send().await.unwrap();
                ids.lock().unwrap().push(request_id(&res));
                let body: Value = res.json().await.unwrap();
                body["status"] == 1
            }
        },
    )
    .await;
    let poll_ids = poll_ids.lock().unwrap().clone();
    assert!(
        poll_ids.windows(2).all(|w| w[0] != w[1]),
        "each request without an id gets its own: {poll_ids:?}"
    );

    // Native API with a bearer key; no caller id, so one is made up.
    let res = http
        .post(format!("{base}/v1/solve"))
        .bearer_auth(key)
        .json(&json!({"kind": "recaptcha_v2", "sitekey": "6Le-logs-native", "pageurl": "https://logs.example.com/native"}))
        .send()
        .await
        .unwrap();
    let native_id = request_id(&res);
    assert!(
        native_id.len() == 32 && native_id.bytes().all(|b| b.is_ascii_hexdigit()),
        "a generated id is 32 hex digits: {native_id}"
    );
    let solved: Value = res.json().await.unwrap();
    assert!(solved["token"].is_string(), "{solved}");

    // A proxy-bound task whose proxy has a password, with an unsafe caller id (refused).
    let unsafe_id = format!("key={} x", s.in_request_id);
    let proxy = format!("loguser:{}@127.0.0.1:3128", s.proxy_password);
    let res = http
        .post(format!("{base}/v1/solve"))
        .bearer_auth(key)
        .header("X-Request-Id", &unsafe_id)
        .json(&json!({
            "kind": "turnstile", "sitekey": "0x4AAA-logs", "pageurl": "https://logs.example.com/proxy",
            "proxy": proxy, "proxytype": "HTTP",
        }))
        .send()
        .await
        .unwrap();
    let proxy_id = request_id(&res);
    assert_ne!(proxy_id, unsafe_id, "an unsafe caller id is never echoed");
    assert!(!proxy_id.contains(&s.in_request_id));
    let solved: Value = res.json().await.unwrap();
    assert!(solved["token"].is_string(), "{solved}");

    // Two callers of one reusable target (a text question): one task, one answer for both.
    let ask = |id: &'static str| {
        http.post(format!("{base}/v1/solve"))
            .bearer_auth(key)
            .header("X-Request-Id", id)
            .json(&json!({"kind": "text", "text": "Which log line names this request?"}))
            .send()
    };
    let (first, second) = tokio::join!(ask("shared-ask-1"), ask("shared-ask-2"));
    for res in [first.unwrap(), second.unwrap()] {
        let solved: Value = res.json().await.unwrap();
        assert!(solved["token"].is_string(), "{solved}");
    }

    // Operations endpoints, a refused key and an unknown path: the header is on every answer.
    for (path, id) in [
        ("/livez", "ops-livez-1"),
        ("/metrics", "ops-metrics-1"),
        ("/no/such/page", "ops-404-1"),
    ] {
        let res = http
            .get(format!("{base}{path}"))
            .header("X-Request-Id", id)
            .send()
            .await
            .unwrap();
        assert_eq!(request_id(&res), id, "{path}");
    }
    let refused = http
        .post(format!("{base}/v1/solve"))
        .bearer_auth("0000000000000000ffffffffffffffff")
        .json(&json!({"kind": "turnstile", "sitekey": "x", "pageurl": "https://example.com/"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(request_id(&refused).len(), 32);
    // Seed 002's worker API.
    let res = http
        .post(format!("{base}/solve"))
        .header("X-Request-Id", "worker-api-1")
        .bearer_auth(key)
        .json(&json!({"sitekey": "6Le-logs-worker", "pageurl": "https://logs.example.com/worker"}))
        .send()
        .await
        .unwrap();
    assert_eq!(request_id(&res), "worker-api-1");

    let announced = gw.announcement().to_owned();
    gw.stop().await;
    let all = transcript.lines();
    let parsed = json_lines(&all, &announced);
    assert!(
        parsed.len() > 50,
        "debug logs are too thin to judge ({} lines)",
        parsed.len()
    );
    for (what, id) in [
        ("compatible submit", "compat-submit-1"),
        ("native solve", native_id.as_str()),
        ("proxy-bound solve", proxy_id.as_str()),
    ] {
        let lines = task_lines(&parsed, "request", id);
        let said: Vec<&str> = lines.iter().map(|l| message(l)).collect();
        assert!(
            said.contains(&"upstream task started") && said.contains(&"upstream task solved"),
            "the {what}'s upstream task logs its request id {id}: {said:?}"
        );
    }
    // Exactly one of the two text callers started the task; the other was handed its answer,
    // and both name the provider task that produced it.
    let started: Vec<&str> = ["shared-ask-1", "shared-ask-2"]
        .into_iter()
        .filter(|id| {
            task_lines(&parsed, "request", id)
                .iter()
                .any(|l| message(l) == "upstream task started")
        })
        .collect();
    assert_eq!(
        started.len(),
        1,
        "one task for both text callers: {started:?}"
    );
    let solved_by = |id: &str| -> String {
        let solved = task_lines(&parsed, "request", id)
            .into_iter()
            .find(|l| message(l) == "upstream task solved")
            .unwrap_or_else(|| panic!("{id}'s task logged its answer"));
        solved["fields"]["provider_task"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let provider_task = solved_by(started[0]);
    for id in ["shared-ask-1", "shared-ask-2"] {
        let handed: Vec<&Value> = parsed
            .iter()
            .filter(|l| {
                message(l) == "answer handed to the caller"
                    && spans(l)
                        .iter()
                        .any(|s| s["name"] == "request" && s["request_id"] == id)
            })
            .collect();
        assert_eq!(handed.len(), 1, "{id} logs its handout once");
        assert_eq!(
            handed[0]["fields"]["provider_task"], provider_task,
            "{id} names the provider task that answered it"
        );
    }
    // The request that refused the unsafe id logs under the id it was given instead.
    assert!(
        all.iter().all(|l| !l.text.contains("LogRidSecret")),
        "the refused request id reached a log line"
    );
    assert_no_secret(&s, &all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queued_task_logs_the_request_id_that_enqueued_it_on_the_worker() {
    let s = Secrets::new();
    let sim = simulator_requiring(&s.provider_key).await;
    let redis = RedisServer::start();
    let front_key = temp_file(&s.provider_key);
    let front_config = gateway_config(
        &sim,
        &s,
        &front_key,
        &format!("redis_url = \"{}\"", redis.url()),
    );
    let front_transcript = Transcript::default();
    let front = Launch::serve(front_config)
        .args(&["--queue", "--log-format", "json"])
        .log(LOG_LEVEL)
        .keep_file(front_key)
        .capture(&front_transcript, "front end")
        .start()
        .await;
    let worker_key = temp_file(&s.provider_key);
    let worker_config = format!(
        "provider = \"captchaai\"\nprovider_url = \"http://{}\"\nprovider_key_file = \"{}\"\n\
         threads = 50\nredis_url = \"{}\"\n\
         [poll]\nfirst_check_s = 0.05\ninterval_s = 0.05\nmax_requests_per_second = 500\n",
        sim.addr,
        worker_key.path().display(),
        redis.url()
    );
    let worker_transcript = Transcript::default();
    let worker = Launch::worker(worker_config)
        .args(&["--log-json", "--queue"])
        .log(LOG_LEVEL)
        .keep_file(worker_key)
        .capture(&worker_transcript, "worker")
        .start()
        .await;

    let http = crate::support::fleet::client();
    let proxy = format!("queueuser:{}@127.0.0.1:3128", s.proxy_password);
    let res = http
        .post(format!("{}/v1/solve", front.base))
        .bearer_auth(&s.gateway_key)
        .header("X-Request-Id", "queued-solve-1")
        .json(&json!({
            "kind": "recaptcha_v2", "sitekey": "6Le-logs-queue", "pageurl": "https://logs.example.com/queue",
            "proxy": proxy, "proxytype": "HTTP",
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(request_id(&res), "queued-solve-1");
    let solved: Value = res.json().await.unwrap();
    assert!(solved["token"].is_string(), "{solved}");
    // The worker's probes answer with the header too.
    let probe = http
        .get(format!("{}/livez", worker.base))
        .header("X-Request-Id", "probe-1")
        .send()
        .await
        .unwrap();
    assert_eq!(request_id(&probe), "probe-1");
    eventually(
        Duration::from_secs(10),
        "the worker's log of the solved task",
        || {
            let lines = worker_transcript.lines();
            async move {
                lines.iter().any(|l| {
                    l.text.contains("upstream task solved") && l.text.contains("queued-solve-1")
                })
            }
        },
    )
    .await;

    let worker_announced = worker.announcement().to_owned();
    let front_announced = front.announcement().to_owned();
    worker.stop().await;
    front.stop().await;
    let worker_lines = worker_transcript.lines();
    let front_lines = front_transcript.lines();
    let parsed = json_lines(&worker_lines, &worker_announced);
    let said: Vec<&str> = task_lines(&parsed, "queue_task", "queued-solve-1")
        .iter()
        .map(|l| message(l))
        .collect();
    assert!(
        said.contains(&"upstream task started") && said.contains(&"upstream task solved"),
        "the worker's upstream task names the enqueuing request: {said:?}"
    );
    json_lines(&front_lines, &front_announced);
    assert_no_secret(&s, &worker_lines);
    assert_no_secret(&s, &front_lines);
}

#[test]
fn a_bad_log_setting_is_one_line_and_exit_2() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 5] = [
        (
            &["serve", "--provider", "sim", "--log-format", "xml"],
            &[],
            "--log-format",
        ),
        (
            &["serve", "--provider", "sim"],
            &[("CAPTCHA_GATEWAY_LOG_FORMAT", "yaml")],
            "CAPTCHA_GATEWAY_LOG_FORMAT",
        ),
        (
            &["serve", "--provider", "sim"],
            &[("RUST_LOG", "info,captcha_gateway=loud")],
            "RUST_LOG",
        ),
        (&["simulate", "--log-format", "logfmt"], &[], "--log-format"),
        (
            &["bench", "hit", "--quick"],
            &[("RUST_LOG", "warn,hyper=shouty")],
            "RUST_LOG",
        ),
    ];
    for (args, env, setting) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.contains(setting), "{err} names {setting}");
    }
}
