//! Result callbacks (`pingback` on `in.php`, `callback_url` on `POST /v1/tasks`) delivered to a
//! real HTTP receiver on loopback, allowed through the settings; and every refusal: callbacks
//! off by default, hosts off the allow-list, special addresses (by literal and by name at
//! connect time), redirects, and bounded retries.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use captcha_gateway::callback::{
    CallbackSettings, Callbacks, DeliveryError, Payload, normalize_host_entry,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::support::{KEY, TestGateway, fast_settings};

/// One request the receiver got.
#[derive(Debug)]
struct Received {
    content_type: String,
    query: Option<String>,
    body: Bytes,
}

#[derive(Clone)]
struct ReceiverState {
    got: mpsc::UnboundedSender<Received>,
    /// Replies to give, in order; 200 once they run out. A 302 points at the metadata address.
    replies: Arc<Mutex<VecDeque<u16>>>,
}

/// A real HTTP server on loopback that records every request.
struct Receiver {
    addr: SocketAddr,
    got: mpsc::UnboundedReceiver<Received>,
}

impl Receiver {
    async fn start(replies: &[u16]) -> Receiver {
        let (tx, rx) = mpsc::unbounded_channel();
        let state = ReceiverState {
            got: tx,
            replies: Arc::new(Mutex::new(replies.iter().copied().collect())),
        };
        let app = Router::new().fallback(record).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { addr, got: rx }
    }

    /// The next request, waiting at most `within`.
    async fn next(&mut self, within: Duration) -> Received {
        tokio::time::timeout(within, self.got.recv())
            .await
            .unwrap_or_else(|_| panic!("no callback reached the receiver within {within:?}"))
            .expect("the receiver runs")
    }

    /// How many requests arrived so far (without waiting).
    fn count_now(&mut self) -> usize {
        let mut n = 0;
        while self.got.try_recv().is_ok() {
            n += 1;
        }
        n
    }
}

async fn record(
    State(state): State<ReceiverState>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let _ = state.got.send(Received {
        content_type: headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned(),
        query: uri.query().map(str::to_owned),
        body,
    });
    let reply = state.replies.lock().unwrap().pop_front().unwrap_or(200);
    let mut res = StatusCode::from_u16(reply).unwrap().into_response();
    if reply == 302 {
        res.headers_mut().insert(
            header::LOCATION,
            "http://169.254.169.254/latest/meta-data".parse().unwrap(),
        );
    }
    res
}

fn settings(hosts: &[&str], networks: &[&str]) -> CallbackSettings {
    CallbackSettings {
        hosts: hosts
            .iter()
            .map(|h| normalize_host_entry(h).unwrap())
            .collect(),
        allow_networks: networks.iter().map(|n| n.parse().unwrap()).collect(),
        timeout: Duration::from_secs(5),
        ..CallbackSettings::default()
    }
}

/// A gateway whose callbacks may reach this machine's loopback, as a test receiver needs.
async fn gateway_allowing_loopback() -> TestGateway {
    let mut s = fast_settings();
    s.callbacks = settings(&["127.0.0.1"], &["127.0.0.1/32"]);
    TestGateway::with(s).await
}

#[tokio::test]
async fn pingback_posts_id_and_answer_to_an_allowed_receiver() {
    let mut receiver = Receiver::start(&[]).await;
    let gw = gateway_allowing_loopback().await;
    let hook = format!("http://{}/hook?secret=abc", receiver.addr);
    let (_, body) = gw
        .post_form(
            "/in.php",
            &[
                ("key", KEY),
                ("method", "userrecaptcha"),
                ("googlekey", "6Le-pingback"),
                ("pageurl", "https://example.com/"),
                ("pingback", &hook),
            ],
        )
        .await;
    let id = body.strip_prefix("OK|").expect("submitted").to_owned();
    let got = receiver.next(Duration::from_secs(30)).await;
    assert_eq!(got.content_type, "application/x-www-form-urlencoded");
    assert_eq!(got.query.as_deref(), Some("secret=abc"));
    let form: Vec<(String, String)> = form_urlencoded::parse(&got.body).into_owned().collect();
    assert_eq!(form[0], ("id".to_owned(), id.clone()), "{form:?}");
    assert_eq!(form[1].0, "code");
    // The pingback carries the same answer res.php gives, and it is a real token.
    let (_, res) = gw
        .get_text(&format!("/res.php?key={KEY}&action=get&id={id}"))
        .await;
    assert_eq!(res, format!("OK|{}", form[1].1));
    gw.verify(&form[1].1).await.unwrap();
}

#[tokio::test]
async fn a_failed_task_pings_back_its_error_code() {
    let mut receiver = Receiver::start(&[]).await;
    let mut s = fast_settings();
    s.sim.unsolvable_rate = 1.0;
    s.callbacks = settings(&["127.0.0.1"], &["127.0.0.1/32"]);
    let gw = TestGateway::with(s).await;
    let (_, body) = gw
        .post_form(
            "/in.php",
            &[
                ("key", KEY),
                ("method", "turnstile"),
                ("sitekey", "0x4-fails"),
                ("pageurl", "https://example.com/"),
                ("pingback", &format!("http://{}/hook", receiver.addr)),
            ],
        )
        .await;
    let id = body.strip_prefix("OK|").expect("submitted").to_owned();
    let got = receiver.next(Duration::from_secs(30)).await;
    let form: Vec<(String, String)> = form_urlencoded::parse(&got.body).into_owned().collect();
    assert_eq!(
        form,
        [
            ("id".to_owned(), id),
            ("code".to_owned(), "ERROR_CAPTCHA_UNSOLVABLE".to_owned())
        ]
    );
}

#[tokio::test]
async fn callback_url_posts_the_task_document() {
    let mut receiver = Receiver::start(&[]).await;
    let gw = gateway_allowing_loopback().await;
    let res = gw
        .http
        .post(gw.url("/v1/tasks"))
        .bearer_auth(KEY)
        .json(
            &json!({"kind": "turnstile", "sitekey": "0x4AAA-cb", "pageurl": "https://example.com/",
                      "callback_url": format!("http://{}/done", receiver.addr)}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let created: Value = res.json().await.unwrap();
    let got = receiver.next(Duration::from_secs(30)).await;
    assert_eq!(got.content_type, "application/json");
    let doc: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(doc["task_id"], created["task_id"]);
    assert_eq!(doc["status"], "ready", "{doc}");
    gw.verify(doc["result"]["token"].as_str().unwrap())
        .await
        .unwrap();
}

/// anti-captcha's and 2captcha v2's `callbackUrl` beside a `createTask`'s task: the receiver
/// gets what `getTaskResult` answers, with the task's id; a URL off the allow-list is refused
/// by name before anything is solved. Before, the field was read by no one, and the caller's
/// callback never came.
#[tokio::test]
async fn createtask_callback_url_posts_the_task_result() {
    let mut receiver = Receiver::start(&[]).await;
    let gw = gateway_allowing_loopback().await;
    let create = |callback: String| {
        json!({"clientKey": KEY, "softId": 0, "callbackUrl": callback,
            "task": {"type": "TurnstileTaskProxyless", "websiteURL": "https://example.com/",
                "websiteKey": "0x4AAA-createtask-cb"}})
    };
    let hook = format!("http://{}/anti?secret=abc", receiver.addr);
    let created = gw.post_json("/createTask", &create(hook)).await;
    assert_eq!(created["errorId"], 0, "{created}");
    let got = receiver.next(Duration::from_secs(30)).await;
    assert_eq!(got.content_type, "application/json");
    assert_eq!(got.query.as_deref(), Some("secret=abc"));
    let result: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(result["taskId"], created["taskId"], "{result}");
    assert_eq!(
        (result["errorId"].as_u64(), result["status"].as_str()),
        (Some(0), Some("ready")),
        "{result}"
    );
    let poll = json!({"clientKey": KEY, "taskId": created["taskId"]});
    let polled = gw.post_json("/getTaskResult", &poll).await;
    assert_eq!(result["solution"], polled["solution"]);
    gw.verify(result["solution"]["token"].as_str().unwrap())
        .await
        .unwrap();

    let off_list = create("http://hooks.example.com/anti".into());
    let refused = gw.post_json("/createTask", &off_list).await;
    assert_eq!(refused["errorCode"], "ERROR_BAD_PARAMETERS", "{refused}");
    let why = refused["errorDescription"].as_str().unwrap_or_default();
    assert!(why.contains("callbackUrl"), "{refused}");
    assert_eq!(receiver.count_now(), 0, "one callback, for the one task");
}

/// Submits one task with callback `hook` through both APIs: (native status, native body, in.php
/// reply).
async fn submit_with_callback(gw: &TestGateway, hook: String) -> (u16, Value, String) {
    let res = gw
        .http
        .post(gw.url("/v1/tasks"))
        .bearer_auth(KEY)
        .json(&json!({"kind": "recaptcha_v2", "sitekey": "6Le-cb", "pageurl": "https://example.com/", "callback_url": hook}))
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let v: Value = res.json().await.unwrap();
    let (_, compat) = gw
        .post_form(
            "/in.php",
            &[
                ("key", KEY),
                ("method", "userrecaptcha"),
                ("googlekey", "6Le-cb"),
                ("pageurl", "https://example.com/"),
                ("pingback", &hook),
            ],
        )
        .await;
    (status, v, compat)
}

#[tokio::test]
async fn callbacks_are_refused_by_default_and_off_the_allow_list() {
    let receiver = Receiver::start(&[]).await;
    let hook = format!("http://{}/hook", receiver.addr);
    // Default settings: no callback host, so none is taken.
    let gw = TestGateway::start().await;
    let (status, v, compat) = submit_with_callback(&gw, hook.clone()).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("bad_callback_url"))
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("callback_hosts"),
        "{v}"
    );
    assert_eq!(compat, "ERROR_BAD_PARAMETERS");

    // Listed host, but loopback is special and not allowed.
    let mut s = fast_settings();
    s.callbacks = settings(&["127.0.0.1", "hooks.example.com"], &[]);
    let gw = TestGateway::with(s).await;
    let (status, v, compat) = submit_with_callback(&gw, hook.clone()).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("special address"),
        "{v}"
    );
    assert_eq!(compat, "ERROR_BAD_PARAMETERS");
    for (url, why) in [
        (
            "http://other.example.com/x",
            "not in this gateway's callback_hosts",
        ),
        ("gopher://hooks.example.com/", "absolute http(s) URL"),
        ("http://169.254.169.254/", "special address"),
    ] {
        let (status, v, compat) = submit_with_callback(&gw, url.to_owned()).await;
        assert_eq!(status, 400, "{url}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(why),
            "{url}: {v}"
        );
        assert_eq!(compat, "ERROR_BAD_PARAMETERS", "{url}");
    }
    let res = gw
        .http
        .post(gw.url("/v1/solve"))
        .bearer_auth(KEY)
        .json(&json!({"kind": "recaptcha_v2", "sitekey": "6Le-cb", "pageurl": "https://example.com/", "callback_url": "http://hooks.example.com/"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400, "/v1/solve answers in its response");
}

fn service(s: CallbackSettings) -> Arc<Callbacks> {
    Callbacks::new(s, CancellationToken::new(), TaskTracker::new()).unwrap()
}

fn payload() -> Payload {
    Payload::Form(vec![("id".into(), "1".into()), ("code".into(), "t".into())])
}

#[tokio::test]
async fn a_name_resolving_to_a_special_address_is_refused_when_connecting() {
    let mut receiver = Receiver::start(&[]).await;
    // `localhost` is on the allow-list, so the URL passes submission; it resolves to loopback,
    // which is not allowed, so the delivery never connects.
    let callbacks = service(settings(&["localhost"], &[]));
    let url = callbacks
        .check(&format!("http://localhost:{}/hook", receiver.addr.port()))
        .expect("a listed name passes submission");
    let err = callbacks.deliver(&url, &payload()).await.unwrap_err();
    assert_eq!(err, DeliveryError::Refused("localhost".into()));
    assert_eq!(receiver.count_now(), 0, "nothing reached the receiver");

    // The same name with loopback allowed is delivered: the check, not the name, decided.
    let callbacks = service(settings(&["localhost"], &["127.0.0.0/8", "::1/128"]));
    let url = callbacks
        .check(&format!("http://localhost:{}/hook", receiver.addr.port()))
        .unwrap();
    callbacks.deliver(&url, &payload()).await.unwrap();
    let got = receiver.next(Duration::from_secs(5)).await;
    assert_eq!(&got.body[..], b"id=1&code=t");
}

#[tokio::test]
async fn redirects_are_not_followed_and_retries_are_bounded() {
    // A redirect to the metadata address is an answer, not an instruction.
    let mut receiver = Receiver::start(&[302]).await;
    let callbacks = service(settings(&["127.0.0.1"], &["127.0.0.1/32"]));
    let url = callbacks
        .check(&format!("http://{}/hook", receiver.addr))
        .unwrap();
    assert_eq!(
        callbacks.deliver(&url, &payload()).await,
        Err(DeliveryError::Status(302))
    );
    assert_eq!(receiver.count_now(), 1, "one request, no follow-up");

    // A failing receiver gets exactly `attempts` requests; a recovering one gets its callback.
    let mut failing = Receiver::start(&[500, 500, 500, 500]).await;
    let mut s = settings(&["127.0.0.1"], &["127.0.0.1/32"]);
    s.attempts = 2;
    let callbacks = service(s);
    let url = callbacks
        .check(&format!("http://{}/hook", failing.addr))
        .unwrap();
    assert_eq!(
        callbacks.deliver(&url, &payload()).await,
        Err(DeliveryError::Status(500))
    );
    assert_eq!(failing.count_now(), 2);

    let mut recovering = Receiver::start(&[503]).await;
    let url = callbacks
        .check(&format!("http://{}/hook", recovering.addr))
        .unwrap();
    callbacks.deliver(&url, &payload()).await.unwrap();
    assert_eq!(recovering.count_now(), 2, "a 503, then the delivered retry");
}

#[test]
fn callback_settings_are_checked_when_loading() {
    use captcha_gateway::cli::ServeArgs;
    use captcha_gateway::config;
    let load = |toml: &str| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, format!("provider = \"sim\"\n{toml}")).unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        config::load_serve(&args, &|_| None)
    };
    let ok = load(
        "callback_hosts = [\"Hooks.Example.com\", \"*.w.example\"]\ncallback_allow_networks = [\"10.0.0.0/8\"]\ncallback_attempts = 2\n",
    )
    .unwrap();
    assert_eq!(ok.callbacks.hosts, ["hooks.example.com", "*.w.example"]);
    assert_eq!(ok.callbacks.attempts, 2);
    assert!(
        load("").unwrap().callbacks.hosts.is_empty(),
        "off by default"
    );
    for (toml, setting) in [
        ("callback_hosts = [\"http://x.example\"]", "callback_hosts"),
        ("callback_hosts = [\"x.example:8080\"]", "callback_hosts"),
        (
            "callback_allow_networks = [\"10.0.0.0\"]",
            "callback_allow_networks",
        ),
        ("callback_attempts = 0", "callback_attempts"),
        ("callback_attempts = 11", "callback_attempts"),
        ("callback_timeout_s = 0", "callback_timeout_s"),
        ("callback_timeout_s = 1e20", "callback_timeout_s"),
        ("callback_max_concurrent = 0", "callback_max_concurrent"),
    ] {
        let err = load(toml).unwrap_err();
        assert_eq!(err.setting, setting, "{toml}: {err}");
    }
}
