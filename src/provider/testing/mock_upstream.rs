//! An in-process `in.php`/`res.php` upstream on `127.0.0.1:0` with scripted replies, which
//! records what it was asked, for behaviour tests of [`InPhpProvider`](super::super::InPhpProvider)
//! and [`Account`](super::super::Account) over real HTTP.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::any;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use url::Url;

use crate::model::SolveRequest;
use crate::wire::inphp::{Params, parse_submit};

pub const KEY: &str = "0123456789abcdef0123456789abcdef";

/// How the mock answers `ids=` polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchMode {
    /// Parts joined by `|` in order, as 2captcha does.
    Normal,
    /// One part too few, tasks unchecked: a batch answer that does not line up with the ids.
    Mismatch,
}

pub struct Script {
    /// Replies to `in.php` before it starts accepting tasks: (HTTP status, body).
    pub submit_replies: VecDeque<(u16, String)>,
    /// Task ids as JSON numbers, as CaptchaAI may send them.
    pub numeric_ids: bool,
    /// Checks a task needs before it is ready.
    pub ready_after: u32,
    /// Every task ends `ERROR_CAPTCHA_UNSOLVABLE` on its first check.
    pub unsolvable: bool,
    pub batch_mode: BatchMode,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            submit_replies: VecDeque::new(),
            numeric_ids: false,
            ready_after: 1,
            unsolvable: false,
            batch_mode: BatchMode::Normal,
        }
    }
}

/// What the mock saw.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub in_requests: u32,
    pub res_requests: u32,
    pub batch_requests: u32,
    pub single_requests: u32,
    /// Requests without our key or without `json=1`.
    pub bad_requests: u32,
    pub submitted: Vec<SolveRequest>,
    /// Most tasks accepted and not yet finished at once.
    pub max_in_flight: u32,
}

#[derive(Default)]
struct Inner {
    script: Script,
    seen: Seen,
    next_id: u64,
    checks: HashMap<String, u32>,
    in_flight: u32,
}

pub struct MockUpstream {
    pub base: Url,
    inner: Arc<Mutex<Inner>>,
    server: JoinHandle<()>,
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl MockUpstream {
    pub async fn start(script: Script) -> MockUpstream {
        let inner = Arc::new(Mutex::new(Inner {
            script,
            ..Inner::default()
        }));
        let app = Router::new()
            .route("/in.php", any(submit))
            .route("/res.php", any(res))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("bound address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        MockUpstream {
            base: Url::parse(&format!("http://{addr}")).expect("valid URL"),
            inner,
            server,
        }
    }

    pub fn seen(&self) -> Seen {
        self.inner.lock().unwrap().seen.clone()
    }
}

type Shared = State<Arc<Mutex<Inner>>>;

async fn read(query: Option<String>, headers: &HeaderMap, body: Bytes) -> Params {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    Params::read(query.as_deref(), ct, body).await
}

fn check_auth(inner: &mut Inner, p: &Params) -> bool {
    let ok = p.get(&["key"]) == Some(KEY) && p.wants_json();
    if !ok {
        inner.seen.bad_requests += 1;
    }
    ok
}

fn reply(status: u16, body: String) -> axum::response::Response {
    (StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body).into_response()
}

async fn submit(
    State(inner): Shared,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let p = read(q, &headers, body).await;
    let mut s = inner.lock().unwrap();
    s.seen.in_requests += 1;
    if !check_auth(&mut s, &p) {
        return reply(200, "ERROR_KEY_DOES_NOT_EXIST".into());
    }
    if let Some((status, body)) = s.script.submit_replies.pop_front() {
        return reply(status, body);
    }
    let req = match parse_submit(&p) {
        Ok(req) => req,
        Err(v) => return reply(200, json!({"status": 0, "request": v.code}).to_string()),
    };
    s.seen.submitted.push(req);
    s.next_id += 1;
    let id = 7_000_000 + s.next_id;
    s.checks.insert(id.to_string(), 0);
    s.in_flight += 1;
    s.seen.max_in_flight = s.seen.max_in_flight.max(s.in_flight);
    let request = if s.script.numeric_ids {
        json!(id)
    } else {
        json!(id.to_string())
    };
    reply(200, json!({"status": 1, "request": request}).to_string())
}

/// One task's current answer: `Ok(answer)`, `Err(code)` or `Err(CAPCHA_NOT_READY)`.
fn check(s: &mut Inner, id: &str) -> Result<String, &'static str> {
    let Some(checks) = s.checks.get_mut(id) else {
        return Err("ERROR_WRONG_CAPTCHA_ID");
    };
    *checks += 1;
    let done = s.script.unsolvable || *checks >= s.script.ready_after;
    if !done {
        return Err("CAPCHA_NOT_READY");
    }
    s.checks.remove(id);
    s.in_flight -= 1;
    if s.script.unsolvable {
        Err("ERROR_CAPTCHA_UNSOLVABLE")
    } else {
        Ok(format!("tok-{id}"))
    }
}

async fn res(
    State(inner): Shared,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let p = read(q, &headers, body).await;
    let mut s = inner.lock().unwrap();
    s.seen.res_requests += 1;
    if !check_auth(&mut s, &p) {
        return reply(200, "ERROR_KEY_DOES_NOT_EXIST".into());
    }
    let doc = match p.get(&["action"]).unwrap_or("") {
        "get" => match (p.get(&["ids"]), p.get(&["id"])) {
            (Some(ids), _) => {
                s.seen.batch_requests += 1;
                let ids: Vec<String> = ids.split(',').map(str::to_owned).collect();
                let parts: Vec<String> = match s.script.batch_mode {
                    BatchMode::Normal => ids
                        .iter()
                        .map(|id| check(&mut s, id).unwrap_or_else(|code| code.to_owned()))
                        .collect(),
                    // Leaves the tasks untouched, so single-id checks still find them.
                    BatchMode::Mismatch => vec!["CAPCHA_NOT_READY".to_owned(); ids.len() - 1],
                };
                json!({"status": 1, "request": parts.join("|")})
            }
            (None, Some(id)) => {
                s.seen.single_requests += 1;
                match check(&mut s, id) {
                    Ok(tok) => json!({"status": 1, "request": tok, "user_agent": "UA/mock"}),
                    Err(code) => json!({"status": 0, "request": code}),
                }
            }
            (None, None) => json!({"status": 0, "request": "ERROR_WRONG_ID_FORMAT"}),
        },
        "getbalance" => json!({"status": 1, "request": "3.14"}),
        "reportgood" | "reportbad" => json!({"status": 1, "request": "OK_REPORT_RECORDED"}),
        "threadsinfo" => json!({"threads": 8, "working_threads": s.in_flight}),
        _ => json!({"status": 0, "request": "ERROR_EMPTY_ACTION"}),
    };
    reply(200, Value::to_string(&doc))
}
