//! `/in.php` and `/res.php`, exactly as clients of 2captcha and CaptchaAI expect them
//! (docs/PROTOCOL.md items 1-15): HTTP 200 for every API-level error, plain or JSON per `json=1`.

use std::time::Duration;

use axum::body::HttpBody;
use axum::extract::{Request, State};
use serde_json::json;

use super::AppState;
use crate::callback::Payload;
use crate::engine::{ReportOutcome, TaskRecord, TaskState};
use crate::wire::inphp::{Mode, Params, Reply, codes, parse_submit, plain_answer};

/// Most ids one `ids=` request may name, as 2captcha's batch form is used with.
const MAX_BATCH_IDS: usize = 100;

pub async fn submit(State(state): State<AppState>, req: Request) -> Reply {
    let reply = match read_params(&state, req).await {
        Ok(params) => submit_task(&state, &params).await,
        Err(reply) => reply,
    };
    state.metrics.compat_request("in", &reply);
    reply
}

pub async fn result(State(state): State<AppState>, req: Request) -> Reply {
    let reply = match read_params(&state, req).await {
        Ok(params) => result_action(&state, &params).await,
        Err(reply) => reply,
    };
    state.metrics.compat_request("res", &reply);
    reply
}

/// The request's parameters, query and body merged. A `key` in the query string is checked
/// first, so a wrong one is answered without reading the body (a multipart image, say; hyper
/// then closes the connection rather than read the rest). A key sent only in the body means
/// the body is read, bounded by `max_body_bytes`. A client sending a wrong key in the query and
/// a good one in the body (where it would win) is refused: no client library does that.
async fn read_params(state: &AppState, req: Request) -> Result<Params, Reply> {
    // A request without a body (a `res.php` poll) has nothing to save: its query is read once.
    if !state.auth.is_open() && !HttpBody::is_end_stream(req.body()) {
        let query = Params::read(req.uri().query(), None, Default::default()).await;
        if let Some(key) = query.get(&["key"]) {
            if let Err(e) = state.auth.tenant(Some(key)) {
                return Err(Reply::error(
                    Mode::from_json_flag(query.wants_json()),
                    e.code(),
                ));
            }
        }
    }
    Params::from_request(req, state.limits.max_body_bytes).await
}

async fn submit_task(state: &AppState, params: &Params) -> Reply {
    let mode = Mode::from_json_flag(params.wants_json());
    let tenant = match state.auth.tenant(params.get(&["key"])) {
        Ok(t) => t,
        Err(e) => return Reply::error(mode, e.code()),
    };
    let mut req = match parse_submit(params) {
        Ok(r) => r,
        Err(v) => return Reply::error_because(mode, v.code, &v.message),
    };
    // 2captcha's `pingback`: checked now, so a refused URL is refused before any money is spent.
    let pingback = match params.get(&["pingback"]).map(|u| state.callbacks.check(u)) {
        None => None,
        Some(Ok(url)) => Some(url),
        Some(Err(e)) => {
            let reason = format!("`pingback`: {e}");
            return Reply::error_because(mode, codes::BAD_PARAMETERS, &reason);
        }
    };
    // Clients never retry a refusal by themselves (item 12), so we only refuse when this process
    // holds as many tasks as it is allowed to; `threadsinfo` reports the same figures.
    // The fleet's threads are all taken and callers already wait here: the compatible
    // protocol's word for "no thread now, retry later".
    if super::fleet_busy::refused(state) {
        return Reply::error(mode, codes::NO_SLOT_AVAILABLE);
    }
    let Some(permit) = state.admission.admit().await else {
        return Reply::error(mode, codes::NO_SLOT_AVAILABLE);
    };
    let pass = match state.tenants.admit(&tenant.0, &mut req) {
        Ok(pass) => pass,
        Err(refusal) => return super::usage::compat_refusal(mode, &refusal),
    };
    let timeout = state.limits.compat_task_timeout;
    match state
        .submit_task(&tenant.0, req, timeout, (permit, pass))
        .await
    {
        Ok(id) => {
            if let Some(url) = pingback {
                state.callbacks.after_task(
                    state.engine.clone(),
                    tenant.0,
                    id.clone(),
                    url,
                    timeout,
                    pingback_payload,
                );
            }
            Reply::ok(mode, id)
        }
        Err(e) => Reply::error(mode, e.code()),
    }
}

async fn result_action(state: &AppState, params: &Params) -> Reply {
    let mode = Mode::from_json_flag(params.wants_json());
    let tenant = match state.auth.tenant(params.get(&["key"])) {
        Ok(t) => t.0,
        Err(e) => return Reply::error(mode, e.code()),
    };
    let action = params.get(&["action"]).map(str::to_ascii_lowercase);
    match action.as_deref() {
        None => Reply::error(mode, codes::EMPTY_ACTION),
        Some("get" | "get2") if params.get(&["ids"]).is_some() => {
            batch(state, &tenant, params.get(&["ids"]).unwrap_or(""), mode).await
        }
        Some(a @ ("get" | "get2")) => {
            let price = (a == "get2").then_some("0");
            match task(state, &tenant, params.get(&["id"])).await {
                Ok(record) => match record.state {
                    TaskState::Pending => Reply::not_ready(mode),
                    TaskState::Ready(h) => Reply::answer(mode, h.kind, &h.answer, price),
                    TaskState::Failed(f) => Reply::error(mode, &f.code),
                },
                // The record cannot be read now (the shared store is away): the task may well
                // be running, and clients treat every error here as final, so they poll on.
                Err(codes::SERVER_ERROR) => Reply::not_ready(mode),
                Err(code) => Reply::error(mode, code),
            }
        }
        Some(a @ ("reportbad" | "reportgood")) => {
            let id = match task(state, &tenant, params.get(&["id"])).await {
                Ok(record) => record.id,
                Err(code) => return Reply::error(mode, code),
            };
            match state
                .engine
                .report_task(&tenant, &id, a == "reportgood")
                .await
            {
                Ok(ReportOutcome::Recorded) => Reply::bare(mode, codes::REPORT_RECORDED),
                Ok(ReportOutcome::Duplicate) => Reply::error(mode, codes::DUPLICATE_REPORT),
                Ok(ReportOutcome::UnknownTask) => Reply::error(mode, codes::WRONG_CAPTCHA_ID),
                Err(e) => Reply::error(mode, e.code()),
            }
        }
        Some("getbalance") => match state.upstream.balance().await {
            Ok(balance) => Reply::bare(mode, balance),
            Err(f) => Reply::error(mode, &f.code),
        },
        // The gateway's own capacity, the figures consistent with the only capacity error it
        // sends (item 12): `ERROR_NO_SLOT_AVAILABLE` exactly when working_threads reaches threads.
        Some("threadsinfo") => {
            let (mut threads, mut working) = (state.admission.max(), state.admission.active());
            // A tenant with `max_concurrent` is also refused at its own limit: it sees whichever
            // of the two has fewer free slots, so the rule above holds for it too.
            if let Some((limit, held)) = state.tenants.concurrency(&tenant) {
                if limit.saturating_sub(held) < threads.saturating_sub(working) {
                    (threads, working) = (limit, held);
                }
            }
            // The provider account's figures beside them: its effective cap and the threads
            // taken, fleet-wide with Redis (docs/API.md).
            Reply::document(json!({
                "status": 1,
                "threads": threads,
                "working_threads": working,
                "upstream_threads": state.upstream.effective_threads(),
                "upstream_working_threads": state.upstream.in_flight(),
            }))
        }
        Some(_) => Reply::error(mode, codes::BAD_PARAMETERS),
    }
}

/// 2captcha's pingback body: `id` and `code` (the answer as `res.php` writes it in plain text,
/// or the error code the task ended with).
fn pingback_payload(record: &TaskRecord) -> Payload {
    let code = match &record.state {
        TaskState::Ready(h) => plain_answer(h.kind, h.answer.text.clone()),
        TaskState::Failed(f) => f.code.clone(),
        TaskState::Pending => codes::NOT_READY.to_owned(),
    };
    Payload::Form(vec![
        ("id".into(), record.id.clone()),
        ("code".into(), code),
    ])
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit())
}

async fn task(
    state: &AppState,
    tenant: &str,
    id: Option<&str>,
) -> Result<TaskRecord, &'static str> {
    let id = id.ok_or(codes::WRONG_CAPTCHA_ID)?;
    if !valid_id(id) {
        return Err(codes::WRONG_ID_FORMAT);
    }
    match state.engine.task(tenant, id, Duration::ZERO).await {
        Ok(Some(record)) => Ok(record),
        Ok(None) => Err(codes::WRONG_CAPTCHA_ID),
        Err(_) => Err(codes::SERVER_ERROR),
    }
}

/// `ids=a,b,c`: one part per id, `|`-joined in request order (2captcha's batch form).
async fn batch(state: &AppState, tenant: &str, ids: &str, mode: Mode) -> Reply {
    let ids: Vec<&str> = ids
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if ids.is_empty() || ids.len() > MAX_BATCH_IDS {
        return Reply::error(mode, codes::WRONG_ID_FORMAT);
    }
    let mut parts = Vec::with_capacity(ids.len());
    for id in ids {
        parts.push(match task(state, tenant, Some(id)).await {
            Ok(record) => match record.state {
                TaskState::Pending => codes::NOT_READY.to_owned(),
                TaskState::Ready(h) => plain_answer(h.kind, h.answer.text),
                TaskState::Failed(f) => f.code,
            },
            Err(codes::SERVER_ERROR) => codes::NOT_READY.to_owned(),
            Err(code) => code.to_owned(),
        });
    }
    Reply::batch(mode, parts)
}
