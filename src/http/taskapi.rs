//! `POST /createTask`, `/getTaskResult`, `/getBalance` and the report calls at the root, as
//! anti-captcha and CapSolver clients send them (docs/API.md, "JSON task protocol").
//!
//! Owns: turning those bodies into engine calls and back. `clientKey` is a gateway key, read
//! with the same rules as `in.php`'s `key`; tasks go through the same admission, tenant limits
//! and engine as `in.php` tasks, so the same promises hold (once, fresh, exact demand, pools,
//! coalescing). Every error is `errorId` 1 with HTTP 200, as the protocol's clients expect.
//! Each caller is answered in its own provider's dialect, with exactly the fields that provider
//! documents (`taskapi::caller`).
//! Does not own the wire format (`taskapi`), shared with the simulator and the upstream client.

use std::time::Duration;

use axum::Json;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::AppState;
use crate::callback::Payload;
use crate::engine::{ReportOutcome, SolveError, TaskRecord, TaskState};
use crate::tenants::Refusal;
use crate::wire::inphp::{Mode, Reply, codes};
use crate::wire::taskapi::caller::{self, Finished, Hints};
use crate::wire::taskapi::reply::{BAD_REQUEST, NO_SUCH_CAPCHA_ID, TASK_NOT_SUPPORTED, error_body};
use crate::wire::taskapi::{TaskApiDialect, decode_create, task_id_from};

/// One reply: the body, and the code it carries for the request counter (`ok` for success).
struct Answer {
    body: Value,
    outcome: String,
}

impl Answer {
    fn ok(body: Value) -> Answer {
        Answer {
            body,
            outcome: "ok".into(),
        }
    }

    fn error(code: &str, detail: Option<&str>) -> Answer {
        let body = error_body(code, detail);
        let outcome = body["errorCode"].as_str().unwrap_or(code).to_owned();
        Answer { body, outcome }
    }
}

pub async fn create_task(State(state): State<AppState>, req: Request) -> Response {
    respond(&state, "createTask", req, create).await
}

pub async fn get_task_result(State(state): State<AppState>, req: Request) -> Response {
    respond(&state, "getTaskResult", req, result).await
}

pub async fn get_balance(State(state): State<AppState>, req: Request) -> Response {
    respond(&state, "getBalance", req, balance).await
}

/// anti-captcha's `reportIncorrect*` and 2captcha v2's `reportIncorrect`.
pub async fn report_incorrect(State(state): State<AppState>, req: Request) -> Response {
    respond(&state, "reportIncorrect", req, |s, b, _| {
        report(s, b, false)
    })
    .await
}

/// anti-captcha's `reportCorrectRecaptcha` and 2captcha v2's `reportCorrect`.
pub async fn report_correct(State(state): State<AppState>, req: Request) -> Response {
    respond(&state, "reportCorrect", req, |s, b, _| report(s, b, true)).await
}

/// Reads the body as a JSON object, runs `action`, counts the outcome. A body over the size
/// limit or not a JSON object is answered in the protocol's shape too. The key (`clientKey`) is
/// inside the body, so the body is read before any key check: bounded by `max_body_bytes`, and
/// refused unread when its declared length is over it.
async fn respond<F, Fut>(
    state: &AppState,
    endpoint: &'static str,
    req: Request,
    action: F,
) -> Response
where
    F: FnOnce(AppState, Map<String, Value>, TaskApiDialect) -> Fut,
    Fut: std::future::Future<Output = Answer>,
{
    let hints = Hints::of(req.headers());
    let body = super::input::read_limited(req.into_body(), state.limits.max_body_bytes).await;
    let answer = match body {
        Err(_) => Answer::error(codes::TOO_BIG_CAPTCHA_FILESIZE, None),
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(body)) => {
                let dialect = caller::dialect_of(&hints, &body);
                action(state.clone(), body, dialect).await
            }
            _ => Answer::error(BAD_REQUEST, Some("the body must be a JSON object")),
        },
    };
    let counted = if answer.outcome == "ok" {
        Reply::ok(Mode::Json, "")
    } else {
        Reply::error(Mode::Json, &answer.outcome)
    };
    state.metrics.compat_request(endpoint, &counted);
    Json(answer.body).into_response()
}

/// The tenant of `clientKey`, or the protocol's answer to a bad key.
fn tenant(state: &AppState, body: &Map<String, Value>) -> Result<String, Answer> {
    let key = body.get("clientKey").and_then(Value::as_str);
    state
        .auth
        .tenant(key)
        .map(|t| t.0)
        .map_err(|e| Answer::error(e.code(), None))
}

async fn create(state: AppState, body: Map<String, Value>, dialect: TaskApiDialect) -> Answer {
    let tenant = match tenant(&state, &body) {
        Ok(t) => t,
        Err(answer) => return answer,
    };
    let mut req = match decode_create(&body) {
        Ok(r) => r,
        Err(v) => return Answer::error(v.code, Some(&v.message)),
    };
    // anti-captcha's and 2captcha v2's `callbackUrl`: checked now, so a refused URL is refused
    // before any money is spent.
    let callback = match body.get("callbackUrl") {
        None | Some(Value::Null) => None,
        Some(Value::String(url)) if url.trim().is_empty() => None,
        Some(Value::String(url)) => match state.callbacks.check(url) {
            Ok(url) => Some(url),
            Err(e) => {
                let reason = format!("`callbackUrl`: {e}");
                return Answer::error(codes::BAD_PARAMETERS, Some(&reason));
            }
        },
        Some(_) => {
            return Answer::error(
                codes::BAD_PARAMETERS,
                Some("`callbackUrl` must be a string"),
            );
        }
    };
    // As for in.php: refuse only when this process holds as many tasks as it may, or the
    // fleet's threads are all taken with `max_thread_waiters` callers waiting here.
    if super::fleet_busy::refused(&state) {
        return Answer::error(codes::NO_SLOT_AVAILABLE, None);
    }
    let Some(permit) = state.admission.admit().await else {
        return Answer::error(codes::NO_SLOT_AVAILABLE, None);
    };
    let pass = match state.tenants.admit(&tenant, &mut req) {
        Ok(pass) => pass,
        Err(refusal) => return Answer::error(refusal_code(&refusal), Some(&refusal.message())),
    };
    let timeout = state.limits.compat_task_timeout;
    match state
        .submit_task(&tenant, req, timeout, (permit, pass))
        .await
    {
        Ok(id) => {
            if let Some(url) = callback {
                // What `getTaskResult` would answer once the task ended, with its id.
                let render = move |record: &TaskRecord| {
                    let mut body = result_body(dialect, record).body;
                    if let Value::Object(map) = &mut body {
                        map.insert("taskId".into(), caller::id_value(dialect, &record.id));
                    }
                    Payload::Json(body)
                };
                state.callbacks.after_task(
                    state.engine.clone(),
                    tenant,
                    id.clone(),
                    url,
                    timeout,
                    render,
                );
            }
            Answer::ok(caller::created(dialect, &id))
        }
        // Why no account here takes the task (the accounts there are, a pass-through type's
        // plain name), as `in.php` cannot say.
        Err(SolveError::Failed(f)) => Answer::error(&f.code, Some(&f.message)),
        Err(e) => Answer::error(e.code(), None),
    }
}

/// The compatible API's codes for a tenant refusal, so both protocols say the same.
fn refusal_code(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::KindNotAllowed { .. } => TASK_NOT_SUPPORTED,
        Refusal::MaxConcurrent { .. } => codes::NO_SLOT_AVAILABLE,
        Refusal::MaxSolvesPerHour { .. } => codes::ZERO_BALANCE,
    }
}

async fn result(state: AppState, body: Map<String, Value>, dialect: TaskApiDialect) -> Answer {
    let tenant = match tenant(&state, &body) {
        Ok(t) => t,
        Err(answer) => return answer,
    };
    let record = match task(&state, &tenant, &body).await {
        Ok(record) => record,
        // The shared store is away: the task may well be running; clients poll on.
        Err(codes::SERVER_ERROR) => {
            let id = task_id_from(body.get("taskId")).unwrap_or_default();
            return Answer::ok(caller::processing(dialect, &id));
        }
        Err(code) => return Answer::error(code, None),
    };
    result_body(dialect, &record)
}

/// `getTaskResult`'s answer for a task in `dialect`.
fn result_body(dialect: TaskApiDialect, record: &TaskRecord) -> Answer {
    match &record.state {
        TaskState::Pending => Answer::ok(caller::processing(dialect, &record.id)),
        TaskState::Ready(handout) => Answer::ok(caller::ready(
            dialect,
            &record.id,
            Finished {
                kind: handout.kind,
                answer: &handout.answer,
                // The gateway bills nothing per task, and its workers are not the caller's
                // business.
                cost: "0",
                ip: "",
                created_s: record.created_at / 1000,
                ended_s: record.finished_at.unwrap_or(record.created_at) / 1000,
            },
        )),
        TaskState::Failed(failure) => {
            let body = caller::failed(dialect, &record.id, &failure.code);
            let outcome = body["errorCode"].as_str().unwrap_or("error").to_owned();
            Answer { body, outcome }
        }
    }
}

async fn task(
    state: &AppState,
    tenant: &str,
    body: &Map<String, Value>,
) -> Result<TaskRecord, &'static str> {
    let id = task_id_from(body.get("taskId")).ok_or(NO_SUCH_CAPCHA_ID)?;
    match state.engine.task(tenant, &id, Duration::ZERO).await {
        Ok(Some(record)) => Ok(record),
        Ok(None) => Err(NO_SUCH_CAPCHA_ID),
        Err(_) => Err(codes::SERVER_ERROR),
    }
}

async fn balance(state: AppState, body: Map<String, Value>, dialect: TaskApiDialect) -> Answer {
    if let Err(answer) = tenant(&state, &body) {
        return answer;
    }
    match state.upstream.balance().await {
        Ok(text) => match text
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            Some(n) => Answer::ok(caller::balance(dialect, n)),
            None => Answer::error(
                codes::SERVER_ERROR,
                Some("the provider's balance is not a number"),
            ),
        },
        Err(failure) => Answer::error(&failure.code, None),
    }
}

async fn report(state: AppState, body: Map<String, Value>, good: bool) -> Answer {
    let tenant = match tenant(&state, &body) {
        Ok(t) => t,
        Err(answer) => return answer,
    };
    let record = match task(&state, &tenant, &body).await {
        Ok(record) => record,
        Err(code) => return Answer::error(code, None),
    };
    match state.engine.report_task(&tenant, &record.id, good).await {
        Ok(ReportOutcome::Recorded) => Answer::ok(json!({"errorId": 0, "status": "success"})),
        Ok(ReportOutcome::Duplicate) => Answer::error(codes::DUPLICATE_REPORT, None),
        Ok(ReportOutcome::UnknownTask) => Answer::error(NO_SUCH_CAPCHA_ID, None),
        Err(e) => Answer::error(e.code(), None),
    }
}
