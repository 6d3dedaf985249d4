//! The simulator's JSON task protocol: `/createTask`, `/getTaskResult`, `/getBalance` and the
//! report calls, on the same task table, thread limit, faults and tokens as `/in.php`, so an
//! upstream client of the anti-captcha, CapSolver or 2captcha v2 family can be rehearsed
//! against it (docs/API.md, "JSON task protocol").
//!
//! Owns turning those bodies into simulator calls and back; the wire format (type names, task
//! fields, solution objects, error bodies, which dialect a caller speaks and the fields each
//! dialect's replies carry) is [`taskapi`](crate::wire::taskapi), the gateway's own.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value, json};

use super::faults::SubmitFault;
use super::handlers::{HTML_502, KEY_LEN, MAX_BODY, plain_error, with_wire_faults};
use super::stats::Event;
use super::tasks::{Poll, Report};
use super::{Simulator, Submit, answers};
use crate::wire::inphp::codes;
use crate::wire::taskapi::caller::{self, Finished, Hints};
use crate::wire::taskapi::reply::{BAD_REQUEST, NO_SUCH_CAPCHA_ID, TASK_NOT_SUPPORTED, error_body};
use crate::wire::taskapi::{TaskApiDialect, decode_create, task_id_from};

pub(super) fn routes() -> Router<Arc<Simulator>> {
    Router::new()
        .route("/createTask", post(create_task))
        .route("/getTaskResult", post(get_task_result))
        .route("/getBalance", post(get_balance))
        .route("/reportIncorrect", post(report_incorrect))
        .route("/reportIncorrectRecaptcha", post(report_incorrect))
        .route("/reportIncorrectImageCaptcha", post(report_incorrect))
        .route("/reportCorrect", post(report_correct))
        .route("/reportCorrectRecaptcha", post(report_correct))
}

async fn create_task(State(sim): State<Arc<Simulator>>, req: Request) -> Response {
    let reply = match authorized(&sim, req).await {
        Ok((body, dialect)) => create(&sim, &body, dialect),
        Err(reply) => reply,
    };
    with_wire_faults(&sim, reply).await
}

async fn get_task_result(State(sim): State<Arc<Simulator>>, req: Request) -> Response {
    // Counted with `res.php` calls: both are what a poll costs the provider.
    sim.count(Event::ResCall);
    let reply = match authorized(&sim, req).await {
        Ok((body, dialect)) => result(&sim, &body, dialect),
        Err(reply) => reply,
    };
    with_wire_faults(&sim, reply).await
}

async fn get_balance(State(sim): State<Arc<Simulator>>, req: Request) -> Response {
    let reply = match authorized(&sim, req).await {
        Ok((_, dialect)) => {
            let balance = sim.settings.balance.trim().parse::<f64>().ok();
            match balance.and_then(serde_json::Number::from_f64) {
                Some(n) => ok(caller::balance(dialect, n)),
                None => error(codes::SERVER_ERROR),
            }
        }
        Err(reply) => reply,
    };
    with_wire_faults(&sim, reply).await
}

async fn report_incorrect(State(sim): State<Arc<Simulator>>, req: Request) -> Response {
    report(&sim, req, false).await
}

async fn report_correct(State(sim): State<Arc<Simulator>>, req: Request) -> Response {
    report(&sim, req, true).await
}

fn ok(body: Value) -> Response {
    Json(body).into_response()
}

fn error(code: &str) -> Response {
    Json(error_body(code, None)).into_response()
}

/// The body as a JSON object whose `clientKey` is accepted: 32 characters (as `in.php` keys)
/// and one of the configured keys where some are configured; with the dialect its sender speaks.
async fn authorized(
    sim: &Simulator,
    req: Request,
) -> Result<(Map<String, Value>, TaskApiDialect), Response> {
    let hints = Hints::of(req.headers());
    let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|_| error(codes::TOO_BIG_CAPTCHA_FILESIZE))?;
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&bytes) else {
        return Err(error(BAD_REQUEST));
    };
    let key = body.get("clientKey").and_then(Value::as_str).unwrap_or("");
    let keys = &sim.settings.keys;
    let revoked = sim.faults().reject_keys;
    if revoked
        || key.chars().count() != KEY_LEN
        || (!keys.is_empty() && !keys.iter().any(|k| k == key))
    {
        return Err(error(codes::KEY_DOES_NOT_EXIST));
    }
    let dialect = caller::dialect_of(&hints, &body);
    Ok((body, dialect))
}

fn create(sim: &Simulator, body: &Map<String, Value>, dialect: TaskApiDialect) -> Response {
    let request = match decode_create(body) {
        Ok(r) => r,
        Err(invalid) => {
            return Json(error_body(invalid.code, Some(&invalid.message))).into_response();
        }
    };
    if !answers::solves(&request) {
        return error(TASK_NOT_SUPPORTED);
    }
    match sim.submit(&request) {
        Submit::Accepted(id) => ok(caller::created(dialect, &id.to_string())),
        Submit::NoCapacity | Submit::Fault(SubmitFault::Capacity) => {
            error(&sim.settings.capacity_code)
        }
        Submit::Fault(SubmitFault::ServerError) => error(codes::SERVER_ERROR),
        Submit::Fault(SubmitFault::ZeroBalance) => error(codes::ZERO_BALANCE),
        Submit::Fault(SubmitFault::HtmlError) => (
            StatusCode::BAD_GATEWAY,
            [(header::CONTENT_TYPE, HeaderValue::from_static("text/html"))],
            HTML_502,
        )
            .into_response(),
        Submit::Fault(SubmitFault::PlainError) => plain_error(),
    }
}

/// A task id of ours: digits that fit a `u64` (an id too large to be ours is simply unknown).
fn our_id(body: &Map<String, Value>) -> Option<u64> {
    task_id_from(body.get("taskId"))?.parse().ok()
}

fn result(sim: &Simulator, body: &Map<String, Value>, dialect: TaskApiDialect) -> Response {
    let id = our_id(body);
    let poll = sim.poll(&[id]).pop().unwrap_or(Poll::Unknown);
    let id = id.map(|n| n.to_string()).unwrap_or_default();
    match poll {
        Poll::Ready(kind, answer) => {
            let done = Finished {
                kind,
                answer: &answer,
                cost: answers::price(kind),
                ip: "127.0.0.1",
                created_s: answer.solved_at / 1000,
                ended_s: answer.solved_at / 1000,
            };
            ok(caller::ready(dialect, &id, done))
        }
        Poll::NotReady => ok(caller::processing(dialect, &id)),
        Poll::Unsolvable => ok(caller::failed(dialect, &id, codes::CAPTCHA_UNSOLVABLE)),
        Poll::Unknown => error(NO_SUCH_CAPCHA_ID),
    }
}

async fn report(sim: &Simulator, req: Request, good: bool) -> Response {
    let body = match authorized(sim, req).await {
        Ok((body, _)) => body,
        Err(reply) => return reply,
    };
    let Some(id) = our_id(&body) else {
        return error(NO_SUCH_CAPCHA_ID);
    };
    match sim.report(id, good) {
        Report::Recorded => ok(json!({"errorId": 0, "status": "success"})),
        Report::Duplicate => error(codes::DUPLICATE_REPORT),
        Report::Unknown => error(NO_SUCH_CAPCHA_ID),
    }
}
