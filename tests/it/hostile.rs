//! A hostile client next to legitimate ones: 10,000 random and malformed requests of every
//! encoding at every endpoint (and raw bytes that are not HTTP at all) while legitimate callers
//! solve through both APIs. Every legitimate caller succeeds, no request gets a server error,
//! the process stays up without a panic, and its memory returns to the level it had after a
//! warm-up of the same traffic (growth that scales with requests is a leak).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinHandle;

use crate::support::KEY;
use crate::support::eventually::eventually;
use crate::support::gateway::{GatewayProcess, Launch, Stderr};

const ENDPOINTS: &[&str] = &[
    "/in.php",
    "/res.php",
    "/v1/solve",
    "/v1/tasks",
    "/v1/tasks/123456789",
    "/v1/pools",
    "/v1/pools/tokens",
    "/solve",
    "/health",
    "/livez",
    "/readyz",
    "/metrics",
    "/",
    "/createTask",
    "/getTaskResult",
    "/v1/usage",
    "/v1/status",
    "/v1/advice",
    "/openapi.json",
    "/no/such/path",
];

const NAMES: &[&str] = &[
    "key",
    "method",
    "googlekey",
    "sitekey",
    "pageurl",
    "json",
    "action",
    "id",
    "ids",
    "min_score",
    "timeout_s",
    "wait",
    "kind",
    "body",
    "proxy",
    "proxytype",
    "invisible",
    "enterprise",
    "version",
    "textinstructions",
    "textcaptcha",
    "lang",
    "min_len",
    "max_len",
    "minLen",
    "regsense",
    "numeric",
    "phrase",
    "calc",
    "gt",
    "challenge",
    "api_server",
    "pingback",
    "callback_url",
    "soft_id",
    "tokens",
    "token",
    "solved_at",
    "expires_at",
    "userAgent",
    "user_agent",
    "cookies",
    "data-s",
    "header_acao",
    "file",
    "file_1",
    "imginstructions",
    "limit",
    "cursor",
    "clientKey",
    "taskId",
    "task",
];

const METHODS: &[&str] = &[
    "userrecaptcha",
    "turnstile",
    "cloudflare_challenge",
    "geetest",
    "base64",
    "post",
    "textcaptcha",
    "get",
    "get2",
    "getbalance",
    "reportbad",
    "reportgood",
    "threadsinfo",
    "v3",
    "recaptcha_v2",
    "image",
];

/// A hostile value: numbers at and past every limit, text that breaks naive code, URLs that
/// should be refused, and now and then a plausible value so deeper code paths run too.
fn value(rng: &mut StdRng) -> String {
    match rng.random_range(0..24) {
        0 => String::new(),
        1 => "1e20".into(),
        2 => "-1".into(),
        3 => "NaN".into(),
        4 => "inf".into(),
        5 => "18446744073709551616".into(),
        6 => "-9223372036854775809".into(),
        7 => rng.random::<f64>().to_string(),
        8 => rng.random::<i64>().to_string(),
        9 => "x".repeat(rng.random_range(1_000..20_000)),
        10 => "ß漢字🙂\u{202e}\u{0}".into(),
        11 => "%00%ff%fe%".into(),
        12 => "https://user:pw@example.com/a?b=c#d".into(),
        13 => "http://127.0.0.1:6379/".into(),
        14 => "javascript:alert(1)".into(),
        15 => "http://[::1]:22/".into(),
        16 => (0..rng.random_range(1..500))
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(","),
        17 => KEY.into(),
        18 => METHODS[rng.random_range(0..METHODS.len())].into(),
        19 => format!("https://site{}.example/login", rng.random_range(0..50)),
        20 => "1".into(),
        21 => "0".into(),
        22 => "{\"a\":[1,2,{\"b\":null}]".into(),
        _ => (0..rng.random_range(1..64))
            .map(|_| char::from(rng.random_range(0x20u8..0x7f)))
            .collect(),
    }
}

/// Numbers that JSON and query strings carry fine but careless conversions do not.
fn hostile_number(rng: &mut StdRng) -> Value {
    match rng.random_range(0..10) {
        0 => json!(1e20),
        1 => json!(-1),
        2 => json!(f64::MAX),
        3 => json!(u64::MAX),
        4 => json!(i64::MIN),
        5 => json!(-0.0),
        6 => json!(1e-300),
        7 => json!(0),
        8 => json!("1e20"),
        _ => json!(rng.random::<f64>() * 1e25),
    }
}

fn params(rng: &mut StdRng) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = (0..rng.random_range(0..12))
        .map(|_| {
            let name = if rng.random_bool(0.9) {
                NAMES[rng.random_range(0..NAMES.len())].to_owned()
            } else {
                value(rng)
            };
            (name, value(rng))
        })
        .collect();
    if rng.random_bool(0.5) {
        out.push(("key".into(), KEY.into()));
    }
    out
}

/// Random JSON of bounded size: scalars from [`value`], numbers JSON itself allows but Rust
/// conversions do not, arrays and objects.
fn json_value(rng: &mut StdRng, depth: u32) -> Value {
    match rng.random_range(0..if depth > 3 { 4 } else { 7 }) {
        0 => Value::String(value(rng)),
        1 => json!(rng.random::<f64>() * 10f64.powi(rng.random_range(-30..300))),
        2 => json!(rng.random::<i64>()),
        3 => [Value::Null, json!(true), json!(false), json!(-0.0)][rng.random_range(0..4)].clone(),
        4 => Value::Array(
            (0..rng.random_range(0..5))
                .map(|_| json_value(rng, depth + 1))
                .collect(),
        ),
        _ => Value::Object(
            params(rng)
                .into_iter()
                .map(|(k, _)| (k, json_value(rng, depth + 1)))
                .collect(),
        ),
    }
}

fn query(pairs: &[(String, String)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// One hostile request and what its answer may be.
struct Hostile {
    req: reqwest::RequestBuilder,
    what: String,
    /// The gateway may close the connection instead of answering (an oversized body may be cut
    /// off mid-upload).
    may_close: bool,
    /// The request set its own deadline (`timeout_s`), so a 504 `timeout` is its documented
    /// answer when the solve takes longer.
    may_time_out: bool,
}

fn hostile_request(rng: &mut StdRng, http: &reqwest::Client, base: &str) -> Hostile {
    let encoding = rng.random_range(0..11);
    let mut path = ENDPOINTS[rng.random_range(0..ENDPOINTS.len())].to_owned();
    if path.starts_with("/v1/tasks/") && rng.random_bool(0.5) {
        path = format!("/v1/tasks/{}", urlencode(&value(rng)));
    }
    let mut method = [
        "GET", "POST", "POST", "POST", "PUT", "DELETE", "PATCH", "HEAD",
    ][rng.random_range(0..8)];
    // Near-valid requests go where they are understood.
    if encoding == 9 {
        path = ["/v1/solve", "/v1/tasks", "/solve"][rng.random_range(0..3)].to_owned();
        method = "POST";
    } else if encoding == 10 {
        path = ["/in.php", "/res.php"][rng.random_range(0..2)].to_owned();
        method = "POST";
    }
    let pairs = params(rng);
    let url = if rng.random_bool(0.5) {
        format!("{base}{path}?{}", query(&pairs))
    } else {
        format!("{base}{path}")
    };
    // Past the documented 8 KB request head the gateway answers 431 and closes the connection,
    // possibly while the client is still sending the body.
    let mut may_close = url.len() > 7 * 1024;
    let mut may_time_out = false;
    let mut req = http.request(method.parse().unwrap(), url);
    if rng.random_bool(0.3) {
        let key = if rng.random_bool(0.5) {
            KEY.to_owned()
        } else {
            value(rng)
        };
        if let Ok(v) = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")) {
            req = req.header("authorization", v);
        }
    }
    // Headers the gateway reads on its own: a key that binds a task (and its scope), an id that
    // reaches logs.
    for header in ["idempotency-key", "idempotency-scope", "x-request-id"] {
        if rng.random_bool(0.2) {
            if let Ok(v) = reqwest::header::HeaderValue::from_str(&value(rng)) {
                req = req.header(header, v);
            }
        }
    }
    req = match encoding {
        0 => req,
        1 => req
            .header("content-type", "application/x-www-form-urlencoded")
            .body(query(&pairs)),
        2 => {
            let mut form = reqwest::multipart::Form::new();
            for (k, v) in pairs.iter().cloned() {
                form = if rng.random_bool(0.3) {
                    form.part(k, reqwest::multipart::Part::bytes(random_bytes(rng, 4096)))
                } else {
                    form.text(k, v)
                };
            }
            req.multipart(form)
        }
        3 => req
            .header("content-type", "application/json")
            .body(json_value(rng, 0).to_string()),
        4 => {
            // Neither Content-Type nor Content-Length: a chunked body, as some clients send.
            let body = query(&pairs).into_bytes();
            let stream = futures::stream::iter([Ok::<_, std::io::Error>(body)]);
            req.body(reqwest::Body::wrap_stream(stream))
        }
        5 => req
            .header("content-type", "multipart/form-data; boundary=XYZ")
            .body(random_bytes(rng, 2048)),
        6 => req.header("content-type", "application/json").body(format!(
            "{}1{}",
            "[".repeat(5_000),
            "]".repeat(5_000)
        )),
        7 => {
            may_close = true;
            req.header("content-type", "application/json").body(vec![
                b'7';
                rng.random_range(
                    1_000_000..3_000_000
                )
            ])
        }
        8 => req
            .header("content-type", "text/plain; charset=utf-16")
            .body(random_bytes(rng, 512)),
        9 => {
            // Valid but for one field: the hostile value reaches the code behind the parser.
            let kind = ["recaptcha_v2", "recaptcha_v3", "turnstile", "image", "text"]
                [rng.random_range(0..5)];
            let mut body = json!({
                "kind": kind,
                "sitekey": "6Le-hostile",
                "pageurl": "https://hostile.example.com/",
                "body": "iVBORw0KGgo=",
                "text": "2+2",
            });
            let field = NAMES[rng.random_range(0..NAMES.len())];
            body[field] = hostile_number(rng);
            may_time_out = field == "timeout_s";
            req.header("content-type", "application/json")
                .body(body.to_string())
        }
        _ => {
            // The same for the compatible API: a plausible submit or result request.
            let mut pairs = vec![
                ("key".to_owned(), KEY.to_owned()),
                (
                    "method".to_owned(),
                    METHODS[rng.random_range(0..METHODS.len())].to_owned(),
                ),
                ("googlekey".to_owned(), "6Le-hostile".to_owned()),
                ("sitekey".to_owned(), "0x4AAA-hostile".to_owned()),
                (
                    "pageurl".to_owned(),
                    "https://hostile.example.com/".to_owned(),
                ),
                (
                    "action".to_owned(),
                    ["get", "get2", "reportbad", "getbalance"][rng.random_range(0..4)].to_owned(),
                ),
                ("id".to_owned(), rng.random_range(0..u64::MAX).to_string()),
            ];
            let field = NAMES[rng.random_range(0..NAMES.len())].to_owned();
            pairs.push((
                field,
                hostile_number(rng).to_string().trim_matches('"').to_owned(),
            ));
            req.header("content-type", "application/x-www-form-urlencoded")
                .body(query(&pairs))
        }
    };
    Hostile {
        req,
        what: format!("{method} {path} encoding {encoding}"),
        may_close,
        may_time_out,
    }
}

/// What went wrong, without the URL (which may carry 20 KB of query).
fn error_chain(e: &reqwest::Error) -> String {
    let mut out = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    short(&out)
}

/// Error texts quote the URL, which may carry 20 KB of query.
fn short(s: &str) -> String {
    s.chars().take(2000).collect()
}

fn random_bytes(rng: &mut StdRng, max: usize) -> Vec<u8> {
    (0..rng.random_range(0..max))
        .map(|_| rng.random())
        .collect()
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Bytes that are not HTTP, or HTTP cut short, on a raw connection.
async fn raw_garbage(rng: &mut StdRng, addr: &str) {
    let bytes: Vec<u8> = match rng.random_range(0..4) {
        0 => random_bytes(rng, 4096),
        1 => b"GET /in.php?key=".to_vec(),
        2 => "POST /v1/solve HTTP/1.1\r\nHost: x\r\nContent-Length: 99999\r\n\r\n{"
            .to_owned()
            .into_bytes(),
        _ => format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000)).into_bytes(),
    };
    let Ok(mut conn) = tokio::net::TcpStream::connect(addr).await else {
        panic!("the gateway stopped accepting connections");
    };
    let _ = conn.write_all(&bytes).await;
    let _ = conn.shutdown().await;
    let mut sink = Vec::new();
    // Bounded so a gateway that keeps the half-closed connection open does not hang the test;
    // what it answers to garbage is not judged, only that it keeps serving everyone else.
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut sink)).await;
}

struct Process {
    gateway: GatewayProcess,
    stderr: JoinHandle<Vec<String>>,
}

impl Process {
    async fn start() -> Process {
        let latency: String = captcha_gateway::model::Kind::ALL
            .iter()
            .map(|k| format!("{} = \"0.05s..0.15s\"\n", k.as_str()))
            .collect();
        let config = format!(
            "provider = \"sim\"\nlisten = \"127.0.0.1:0\"\ngateway_keys = [\"{KEY}\"]\n\
             [poll]\nfirst_check_s = 0.025\ninterval_s = 0.025\nmax_requests_per_second = 1000\n\
             [sim.latency]\n{latency}"
        );
        // mimalloc keeps memory freed on a thread for that thread's next allocations and returns
        // it to the system only once the thread allocates again after a delay; a worker thread
        // idle after the barrage then holds its peak (up to 30 MB here, under load). Returning
        // it at once makes RSS follow the live memory this test is about.
        let mut gateway = Launch::serve(config)
            .log("warn")
            .env("RUST_BACKTRACE", "1")
            .env("MIMALLOC_PURGE_DELAY", "0")
            .stderr(Stderr::Piped)
            .start()
            .await;
        let stderr = gateway.take_stderr();
        let stderr = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut all = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                all.push(line);
            }
            all
        });
        gateway.drain_stdout();
        Process { gateway, stderr }
    }

    fn assert_alive(&mut self) {
        assert!(self.gateway.running(), "the gateway process exited");
    }
}

/// Legitimate callers, both APIs, until `stop`: every solve must succeed with a token the
/// simulator accepts once.
fn legitimate(
    base: String,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    n: usize,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            let token = if (n as u64 + i) % 2 == 0 {
                let v: Value = http
                    .post(format!("{base}/v1/solve"))
                    .bearer_auth(KEY)
                    .json(&json!({
                        "kind": "turnstile",
                        "sitekey": format!("0x4AAA-legit-{n}"),
                        "pageurl": "https://legit.example.com/"
                    }))
                    .send()
                    .await
                    .expect("legitimate /v1/solve answered")
                    .json()
                    .await
                    .unwrap();
                v["token"]
                    .as_str()
                    .unwrap_or_else(|| panic!("legitimate /v1/solve failed: {v}"))
                    .to_owned()
            } else {
                let sub: Value = http
                    .post(format!("{base}/in.php"))
                    .form(&[
                        ("key", KEY),
                        ("method", "userrecaptcha"),
                        ("googlekey", "6Le-legit"),
                        ("pageurl", "https://legit.example.com/form"),
                        ("json", "1"),
                    ])
                    .send()
                    .await
                    .expect("legitimate in.php answered")
                    .json()
                    .await
                    .unwrap();
                assert_eq!(sub["status"], 1, "legitimate in.php failed: {sub}");
                let id = sub["request"].as_str().unwrap();
                let done: Value = http
                    .get(format!("{base}/v1/tasks/{id}?wait=30"))
                    .bearer_auth(KEY)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(done["status"], "ready", "legitimate task failed: {done}");
                let res = http
                    .get(format!("{base}/res.php?key={KEY}&action=get&id={id}"))
                    .send()
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                res.strip_prefix("OK|")
                    .unwrap_or_else(|| panic!("legitimate res.php failed: {res}"))
                    .to_owned()
            };
            let verdict: Value = http
                .get(format!("{base}/sim/verify"))
                .query(&[("token", &token)])
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(
                verdict["success"], true,
                "a legitimate token failed: {verdict}"
            );
            served.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// Sends `count` hostile requests, `CONCURRENCY` at a time, each one judged on its own.
async fn barrage(base: &str, addr: &str, seed: u64, count: usize) {
    const CONCURRENCY: usize = 24;
    // A new connection per request: the gateway may close a connection after refusing a request
    // (an oversized body), and a pooled connection closed that way would blame the next request.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|w| {
            let (http, base, addr, next) =
                (http.clone(), base.to_owned(), addr.to_owned(), next.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed ^ (w as u64).wrapping_mul(0x9e37_79b9));
                while next.fetch_add(1, Ordering::Relaxed) < count as u64 {
                    if rng.random_bool(0.03) {
                        raw_garbage(&mut rng, &addr).await;
                        continue;
                    }
                    let Hostile {
                        req,
                        what,
                        may_close,
                        may_time_out,
                    } = hostile_request(&mut rng, &http, &base);
                    match req.send().await {
                        Ok(res) => {
                            let status = res.status().as_u16();
                            let retry_after = res.headers().contains_key("retry-after");
                            let body = res.bytes().await.unwrap_or_default();
                            let timed_out = status == 504
                                && serde_json::from_slice::<Value>(&body)
                                    .is_ok_and(|v| v["error"]["code"] == "timeout");
                            assert!(
                                status < 500
                                    || (status == 503 && retry_after)
                                    || (may_time_out && timed_out),
                                "{what} (seed {seed}) got {status}: {}",
                                String::from_utf8_lossy(&body[..body.len().min(300)])
                            );
                        }
                        Err(e) => {
                            // A request refused before its body was read (an unknown route or
                            // method, a head too large) is answered and the connection closed;
                            // the client, still writing the body, sees a broken pipe. Any other
                            // failure is a request the gateway dropped.
                            let chain = error_chain(&e);
                            assert!(
                                may_close || chain.contains("error writing a body"),
                                "{what} (seed {seed}) got no answer{chain}"
                            )
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("a hostile worker's assertion failed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_client_harms_nobody() {
    let mut gw = Process::start().await;
    let seed: u64 = std::env::var("HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);

    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let legit: Vec<_> = (0..4)
        .map(|n| legitimate(gw.gateway.base.clone(), stop.clone(), served.clone(), n))
        .collect();

    // Every admission slot a hostile request took comes back: nothing leaked a held solve. A
    // keyed solve runs on after its caller left (a repeat may join it), so memory is compared
    // once each barrage's work has ended, not while some of it still runs.
    // The four legitimate callers hold at most one slot each while they run.
    let health_url = format!("{}/health", gw.gateway.base);
    let drained = |at_most: u64| {
        let health_url = health_url.clone();
        async move {
            eventually(
                Duration::from_secs(60),
                "the admission slots the barrage took to come back",
                || async {
                    let health: Value = reqwest::get(&health_url)
                        .await
                        .expect("the gateway still answers")
                        .json()
                        .await
                        .unwrap();
                    health["active_tasks"]
                        .as_u64()
                        .is_some_and(|n| n <= at_most)
                },
            )
            .await;
        }
    };

    // Warm-up: the same traffic at the same size as the measured barrage, so the allocator's
    // arenas and caches reach the high-water mark that traffic's concurrency needs first (a
    // 2,000-request warm-up left up to ~25 MB of that to the measured barrage, as much as a
    // 1 KB-per-request leak would add, and so failed now and then with no leak).
    barrage(&gw.gateway.base, gw.gateway.addr(), seed, 10_000).await;
    drained(4).await;
    let baseline_kb = gw.gateway.memory_kb("VmRSS:");
    barrage(
        &gw.gateway.base,
        gw.gateway.addr(),
        seed.wrapping_add(1),
        10_000,
    )
    .await;
    gw.assert_alive();
    drained(4).await;
    let after_kb = gw.gateway.memory_kb("VmRSS:");
    println!("FIGURE hostile: RSS {baseline_kb} kB after warm-up, {after_kb} kB after the barrage");

    stop.store(true, Ordering::Relaxed);
    for l in legit {
        l.await.expect("a legitimate caller failed");
    }
    assert!(
        served.load(Ordering::Relaxed) >= 4,
        "legitimate callers were served during the barrage"
    );
    drained(0).await;
    gw.assert_alive();

    // 10,000 requests after a 10,000-request warm-up: a leak of even 1 KB per request would add
    // ~10 MB. The allowance covers allocator noise, not growth that scales with traffic.
    assert!(
        after_kb <= baseline_kb + baseline_kb / 4 + 8 * 1024,
        "RSS grew from {baseline_kb} kB after warm-up to {after_kb} kB after 10,000 hostile requests (seed {seed})"
    );

    gw.gateway.kill().await;
    let stderr = gw.stderr.await.unwrap();
    let panics: Vec<_> = stderr.iter().filter(|l| l.contains("panicked")).collect();
    assert!(
        panics.is_empty(),
        "the gateway panicked (seed {seed}):\n{panics:#?}"
    );
}
