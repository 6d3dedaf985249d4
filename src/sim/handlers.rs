//! The simulator's HTTP endpoints: `/in.php` and `/res.php` in the compatible protocol, `/verify`
//! for site backends, `/stats` for tests and benchmarks, `/faults` to switch injected failures
//! while it runs.
//!
//! Owns turning HTTP into simulator calls and back. Parameters are read and replies rendered by
//! [`wire::inphp`](crate::wire::inphp), the same code the gateway's own API uses, so the simulator cannot
//! drift from the wire contract.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde::Serialize;
use serde_json::json;

use super::faults::{self, SubmitFault, WireFault};
use super::stats::Event;
use super::tasks::{Poll, Report};
use super::tokens::Verdict;
use super::{Faults, FaultsPatch, Simulator, Submit, answers};
use crate::model::{Kind, Millis};
use crate::wire::inphp::{Mode, Params, Reply, codes, parse_submit};

/// Largest request body read. Images are at most 1 MiB, about 1.4 MiB as base64; the rest is
/// headroom for multipart framing and instructions, and a bound on what one request can cost.
pub(super) const MAX_BODY: usize = 8 * 1024 * 1024;

/// Length of every API key clients accept (docs/PROTOCOL.md item 11).
pub(super) const KEY_LEN: usize = 32;

/// What an overloaded CaptchaAI front end sometimes sends instead of an API answer.
pub(super) const HTML_502: &str = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n\
     <center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";

pub(super) fn routes() -> Router<Arc<Simulator>> {
    Router::new()
        .route("/in.php", any(in_php))
        .route("/res.php", any(res_php))
        .route("/verify", any(verify))
        .route("/stats", get(stats))
        .route(
            "/faults",
            get(get_faults)
                .post(patch_faults)
                .put(patch_faults)
                .delete(clear_faults),
        )
}

async fn in_php(State(sim): State<Arc<Simulator>>, req: Request) -> Response {
    let reply = submit(&sim, req).await;
    with_wire_faults(&sim, reply).await
}

async fn res_php(State(sim): State<Arc<Simulator>>, req: Request) -> Response {
    let reply = results(&sim, req).await;
    with_wire_faults(&sim, reply).await
}

/// The reply as the injected wire faults leave it: held back, dropped, cut off, or intact. The
/// request has taken effect either way (a dropped submit still made its task).
pub(super) async fn with_wire_faults(sim: &Simulator, reply: Response) -> Response {
    let (delay, wire) = sim.wire_faults();
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    match wire {
        Some(WireFault::Drop) => faults::dropped_connection(),
        Some(WireFault::Malformed) => faults::malformed_reply(),
        None => reply,
    }
}

async fn get_faults(State(sim): State<Arc<Simulator>>) -> Json<Faults> {
    Json(sim.faults())
}

/// `POST /faults` with some of [`Faults`]' fields: those change, the others stay.
async fn patch_faults(State(sim): State<Arc<Simulator>>, body: axum::body::Bytes) -> Response {
    let bad = |message: String| {
        let error = json!({"error": {"code": "bad_faults", "message": message}});
        (StatusCode::BAD_REQUEST, Json(error)).into_response()
    };
    let patch = match FaultsPatch::from_json(&body) {
        Ok(p) => p,
        Err(message) => return bad(message),
    };
    match patch.apply(sim.faults()).and_then(|f| {
        sim.set_faults(f)?;
        Ok(f)
    }) {
        Ok(faults) => Json(faults).into_response(),
        Err(e) => bad(e.to_string()),
    }
}

/// `DELETE /faults`: every injected failure off.
async fn clear_faults(State(sim): State<Arc<Simulator>>) -> Json<Faults> {
    let off = Faults::default();
    // The defaults always validate.
    let _ = sim.set_faults(off);
    Json(off)
}

async fn submit(sim: &Simulator, req: Request) -> Response {
    let params = match read_params(req).await {
        Ok(p) => p,
        Err(reply) => return reply.into_response(),
    };
    let mode = Mode::from_json_flag(params.wants_json());
    if let Err(code) = check_key(sim, &params) {
        return Reply::error(mode, code).into_response();
    }
    let request = match parse_submit(&params) {
        Ok(r) => r,
        Err(invalid) => return Reply::error(mode, invalid.code).into_response(),
    };
    if !super::answers::solves(&request) {
        return Reply::error(mode, codes::BAD_PARAMETERS).into_response();
    }
    match sim.submit(&request) {
        Submit::Accepted(id) => Reply::ok(mode, id.to_string()).into_response(),
        Submit::NoCapacity => Reply::error(mode, &sim.settings.capacity_code).into_response(),
        Submit::Fault(SubmitFault::ServerError) => {
            Reply::error(mode, codes::SERVER_ERROR).into_response()
        }
        Submit::Fault(SubmitFault::Capacity) => {
            Reply::error(mode, &sim.settings.capacity_code).into_response()
        }
        Submit::Fault(SubmitFault::ZeroBalance) => {
            Reply::error(mode, codes::ZERO_BALANCE).into_response()
        }
        Submit::Fault(SubmitFault::HtmlError) => (
            StatusCode::BAD_GATEWAY,
            [(header::CONTENT_TYPE, HeaderValue::from_static("text/html"))],
            HTML_502,
        )
            .into_response(),
        Submit::Fault(SubmitFault::PlainError) => plain_error(),
    }
}

/// `ERROR_SERVER_ERROR` as plain text, whatever format the request asked for.
pub(super) fn plain_error() -> Response {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"))],
        codes::SERVER_ERROR,
    )
        .into_response()
}

async fn results(sim: &Simulator, req: Request) -> Response {
    sim.count(Event::ResCall);
    let params = match read_params(req).await {
        Ok(p) => p,
        Err(reply) => return reply.into_response(),
    };
    let mode = Mode::from_json_flag(params.wants_json());
    if let Err(code) = check_key(sim, &params) {
        return Reply::error(mode, code).into_response();
    }
    let action = params.get(&["action"]).map(str::to_ascii_lowercase);
    let reply = match action.as_deref() {
        None => Reply::error(mode, codes::EMPTY_ACTION),
        Some("get") => get_answers(sim, &params, mode, false),
        Some("get2") => get_answers(sim, &params, mode, true),
        Some("getbalance") => Reply::bare(mode, sim.settings.balance.clone()),
        Some("reportbad") => report(sim, &params, mode, false),
        Some("reportgood") => report(sim, &params, mode, true),
        // The captchaai SDK reads top-level integers, so this is one document in both modes.
        Some("threadsinfo") => Reply::document(json!({
            "threads": sim.settings.threads,
            "working_threads": sim.working_threads(),
        })),
        Some(_) => Reply::error(mode, codes::BAD_PARAMETERS),
    };
    reply.into_response()
}

/// `get`/`get2` with one `id`, or `get` with `ids=a,b,c` answered `|`-joined in order.
fn get_answers(sim: &Simulator, params: &Params, mode: Mode, with_price: bool) -> Reply {
    if let Some(list) = params.get(&["ids"]) {
        let ids: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if ids.is_empty() {
            return Reply::error(mode, codes::WRONG_ID_FORMAT);
        }
        let parsed: Vec<Result<Option<u64>, &str>> = ids.iter().map(|s| parse_id(s)).collect();
        let known: Vec<Option<u64>> = parsed.iter().map(|p| p.ok().flatten()).collect();
        let polls = sim.poll(&known);
        let parts = parsed
            .iter()
            .zip(polls)
            .map(|(parsed, poll)| match parsed {
                Err(code) => (*code).to_owned(),
                Ok(_) => match poll {
                    Poll::Ready(_, answer) => answer.text,
                    Poll::NotReady => codes::NOT_READY.to_owned(),
                    Poll::Unsolvable => codes::CAPTCHA_UNSOLVABLE.to_owned(),
                    Poll::Unknown => codes::WRONG_CAPTCHA_ID.to_owned(),
                },
            })
            .collect();
        return Reply::batch(mode, parts);
    }
    let id = match params.get(&["id"]).map(parse_id) {
        None => return Reply::error(mode, codes::WRONG_ID_FORMAT),
        Some(Err(code)) => return Reply::error(mode, code),
        Some(Ok(id)) => id,
    };
    let poll = sim.poll(&[id]).pop().unwrap_or(Poll::Unknown);
    match poll {
        Poll::Ready(kind, answer) => {
            let price = with_price.then(|| answers::price(kind));
            Reply::answer(mode, kind, &answer, price)
        }
        Poll::NotReady => Reply::not_ready(mode),
        Poll::Unsolvable => Reply::error(mode, codes::CAPTCHA_UNSOLVABLE),
        Poll::Unknown => Reply::error(mode, codes::WRONG_CAPTCHA_ID),
    }
}

fn report(sim: &Simulator, params: &Params, mode: Mode, good: bool) -> Reply {
    let id = match params.get(&["id"]).map(parse_id) {
        None => return Reply::error(mode, codes::WRONG_ID_FORMAT),
        Some(Err(code)) => return Reply::error(mode, code),
        Some(Ok(None)) => return Reply::error(mode, codes::WRONG_CAPTCHA_ID),
        Some(Ok(Some(id))) => id,
    };
    match sim.report(id, good) {
        Report::Recorded => Reply::bare(mode, codes::REPORT_RECORDED),
        Report::Duplicate => Reply::error(mode, codes::DUPLICATE_REPORT),
        Report::Unknown => Reply::error(mode, codes::WRONG_CAPTCHA_ID),
    }
}

/// The body `/verify` answers, shaped like Google's siteverify.
#[derive(Debug, Serialize)]
struct Verification {
    success: bool,
    #[serde(rename = "error-codes")]
    error_codes: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<Kind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    solved_at: Option<Millis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    age_ms: Option<Millis>,
}

/// `GET /verify?token=...` (also `response=`, Google's name, and POST forms): whether a token is
/// genuine, unused and unexpired. Using it consumes it.
async fn verify(State(sim): State<Arc<Simulator>>, req: Request) -> Response {
    let params = match read_params(req).await {
        Ok(p) => p,
        Err(reply) => return reply.into_response(),
    };
    let token = params.get(&["token", "response"]).unwrap_or("");
    let (verdict, now) = sim.verify(token);
    let (error, known) = match verdict {
        Verdict::Ok { kind, solved_at } => (None, Some((kind, solved_at))),
        Verdict::Duplicate { kind, solved_at } => (Some("duplicate"), Some((kind, solved_at))),
        Verdict::Expired { kind, solved_at } => (Some("expired"), Some((kind, solved_at))),
        Verdict::Invalid => (Some("invalid"), None),
    };
    Json(Verification {
        success: error.is_none(),
        error_codes: error.into_iter().collect(),
        kind: known.map(|(kind, _)| kind),
        solved_at: known.map(|(_, solved_at)| solved_at),
        age_ms: known.map(|(_, solved_at)| now.saturating_sub(solved_at)),
    })
    .into_response()
}

async fn stats(State(sim): State<Arc<Simulator>>) -> Json<super::SimStats> {
    Json(sim.stats())
}

async fn read_params(req: Request) -> Result<Params, Reply> {
    Params::from_request(req, MAX_BODY).await
}

/// docs/PROTOCOL.md item 11: bad length first, then membership of the configured keys.
fn check_key(sim: &Simulator, params: &Params) -> Result<(), &'static str> {
    let key = params.get(&["key"]).unwrap_or("");
    if sim.faults().reject_keys {
        return Err(codes::KEY_DOES_NOT_EXIST);
    }
    if key.chars().count() != KEY_LEN {
        return Err(codes::WRONG_USER_KEY);
    }
    let keys = &sim.settings.keys;
    if !keys.is_empty() && !keys.iter().any(|k| k == key) {
        return Err(codes::KEY_DOES_NOT_EXIST);
    }
    Ok(())
}

/// A task id as sent: digits only, else `ERROR_WRONG_ID_FORMAT`. `Ok(None)` is a well-formed id
/// too large to be one of ours.
pub(super) fn parse_id(raw: &str) -> Result<Option<u64>, &'static str> {
    let raw = raw.trim();
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(codes::WRONG_ID_FORMAT);
    }
    Ok(raw.parse().ok())
}
