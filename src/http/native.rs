//! The native JSON API: `POST /v1/solve` (synchronous), `POST /v1/tasks` and
//! `GET /v1/tasks/{id}?wait=SECONDS` (asynchronous, long-poll). Keys come as
//! `Authorization: Bearer <key>`; errors are `{"error": {"code", "message"}}` with a 4xx/5xx.

use std::time::{Duration, UNIX_EPOCH};

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::future::Either;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::auth::Tenant;
use super::error::ApiError;
use super::idempotency::{self, Found, IdemKey};
use super::input::{self, LimitedBody};
use super::native_key::{NativeTenant, tenant};
use super::{AppState, BearerKey};
use crate::callback::Payload;
use crate::engine::{Handout, TaskRecord, TaskState};
use crate::model::{Kind, SolveRequest};
use crate::wire::native::NativeRequest;

/// Parses a native body (`crate::wire::native::parse_native`, shared with the queue) into the API's
/// error shape. `max_timeout` bounds `timeout_s`.
pub(super) fn parse_native(body: &[u8], max_timeout: Duration) -> Result<NativeRequest, ApiError> {
    crate::wire::native::parse_native(body, max_timeout)
        .map_err(|v| ApiError::bad_request(v.code, v.message))
}

/// A millisecond wall-clock time as RFC 3339, written straight into the answer.
fn iso_millis<S: serde::Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_rfc3339_millis(
        UNIX_EPOCH + Duration::from_millis(*ms),
    ))
}

/// A geetest answer is its provider's JSON object, handed on as an object; any other token is
/// text.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Token<'a> {
    Text(std::borrow::Cow<'a, str>),
    Object(Value),
}

/// A handout as native callers read it (docs/API.md), serialized from the handout itself: the
/// pool hit is the call a fleet makes most, and building a JSON tree first cost it a tenth of
/// the handler (docs/BENCHMARKS.md). Fields in alphabetical order, as they always came.
#[derive(serde::Serialize)]
pub(super) struct HandoutBody<'a> {
    #[serde(serialize_with = "iso_millis")]
    expires_at: u64,
    /// What the answer carries beside its token (hCaptcha's `respKey`), under the provider's
    /// names; absent when nothing was given.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    extras: serde_json::Map<String, Value>,
    kind: Kind,
    #[serde(serialize_with = "iso_millis")]
    solved_at: u64,
    source: crate::model::Source,
    task_id: Option<&'a str>,
    token: Token<'a>,
    user_agent: Option<&'a str>,
}

impl<'a> HandoutBody<'a> {
    pub(super) fn of(h: &'a Handout) -> Self {
        let text = h.answer.text.as_str();
        let shape = h.kind.spec().answer;
        let mut extras = serde_json::Map::new();
        // Checked before parsing: a token is the hot path's answer, and is never parsed (nor
        // is one of a kind that keeps nothing beside it).
        let token = if shape.is_object() {
            serde_json::from_str(text).map_or(Token::Text(text.into()), Token::Object)
        } else {
            let (token, beside) = shape.token_parts(text);
            extras.extend(beside.into_iter().map(|(k, v)| (k.to_owned(), v.into())));
            Token::Text(token)
        };
        HandoutBody {
            expires_at: h.answer.expires_at,
            extras,
            kind: h.kind,
            solved_at: h.answer.solved_at,
            source: h.source,
            task_id: h.answer.upstream.as_ref().map(|u| u.task_id.as_str()),
            token,
            user_agent: h.answer.user_agent.as_deref(),
        }
    }
}

fn clamp(state: &AppState, asked: Option<Duration>) -> Duration {
    asked
        .unwrap_or(state.limits.default_solve_timeout)
        .min(state.limits.max_solve_timeout)
}

/// `POST /v1/solve`. A plain function that reads the request before it returns the future that
/// waits: only what the wait needs is kept in every waiting caller's future, not the extractors'
/// arguments and their copies (docs/BENCHMARKS.md "Capacity").
pub fn solve(
    State(state): State<AppState>,
    NativeTenant(tenant): NativeTenant,
    headers: HeaderMap,
    LimitedBody(body): LimitedBody,
) -> impl Future<Output = Result<Response, ApiError>> + Send {
    // A one-chunk body, and every header value, is a slice of hyper's connection read buffer:
    // holding either while the solve waits would keep that buffer and make hyper allocate
    // another (see listen.rs); both are dropped here.
    let (mut req, deadline, idem) = match read_solve(&state, &tenant, headers, body) {
        Ok(read) => read,
        Err(e) => return Either::Left(std::future::ready(Err(e))),
    };
    Either::Right(async move {
        let result = match idem {
            Some(idem) => {
                // Boxed: keyed calls are the rarer path, and its larger future would otherwise
                // size every waiting caller's (docs/BENCHMARKS.md "Hot path and capacity").
                Box::pin(state.solve_keyed(&tenant.0, &idem, req, deadline)).await?
            }
            None => {
                let _admitted = state.admit_native(&tenant.0, &mut req).await?;
                state.solve_now(&tenant.0, req, deadline).await
            }
        };
        Ok(Json(HandoutBody::of(&result?)).into_response())
    })
}

/// A `/v1/solve` call's request, deadline and idempotency key.
fn read_solve(
    state: &AppState,
    tenant: &Tenant,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(SolveRequest, Instant, Option<IdemKey>), ApiError> {
    let NativeRequest {
        req,
        timeout,
        callback_url,
    } = parse_native(&body, state.limits.max_solve_timeout)?;
    if callback_url.is_some() {
        return Err(ApiError::bad_request(
            "bad_callback_url",
            "`callback_url` is for POST /v1/tasks; /v1/solve answers in the response",
        ));
    }
    let idem = idempotency::read(&headers, &tenant.0, &body)?;
    Ok((req, Instant::now() + clamp(state, timeout), idem))
}

pub async fn create_task(
    State(state): State<AppState>,
    NativeTenant(tenant): NativeTenant,
    headers: HeaderMap,
    LimitedBody(body): LimitedBody,
) -> Result<Response, ApiError> {
    let mut native = parse_native(&body, state.limits.max_solve_timeout)?;
    let idem = idempotency::read(&headers, &tenant.0, &body)?.map(IdemKey::outliving_the_request);
    // A one-chunk body, and every header value, is a slice of hyper's connection read buffer:
    // holding either while the solve waits would keep that buffer and make hyper allocate
    // another (see listen.rs).
    drop((body, headers));
    let callback = native
        .callback_url
        .as_deref()
        .map(|u| state.callbacks.check(u))
        .transpose()
        .map_err(|e| ApiError::bad_request("bad_callback_url", format!("`callback_url`: {e}")))?;
    // A repeat of a keyed call joins its task before any limit is asked: it starts nothing.
    if let Some(idem) = &idem {
        if let Found::Join(id) = state.find_keyed(&tenant.0, idem).await? {
            return Ok(accepted(&id));
        }
    }
    let (permit, pass) = state.admit_native(&tenant.0, &mut native.req).await?;
    let timeout = clamp(&state, native.timeout);
    let (id, started) = match &idem {
        Some(idem) => {
            state
                .submit_keyed(&tenant.0, idem, native.req, timeout, (permit, pass))
                .await?
        }
        None => (
            state
                .submit_task(&tenant.0, native.req, timeout, (permit, pass))
                .await?,
            true,
        ),
    };
    // A joined task already has the first call's callback (same body, so the same URL).
    if let Some(url) = callback.filter(|_| started) {
        state.callbacks.after_task(
            state.engine.clone(),
            tenant.0,
            id.clone(),
            url,
            timeout,
            |record| Payload::Json(task_json(record)),
        );
    }
    Ok(accepted(&id))
}

fn accepted(id: &str) -> Response {
    (
        StatusCode::ACCEPTED,
        Json(json!({"task_id": id, "status": "pending"})),
    )
        .into_response()
}

pub async fn get_task(
    State(state): State<AppState>,
    key: BearerKey,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant(&state, &key)?;
    // A path that does not even decode (`%FF`) gets the same JSON answer as a malformed id.
    let id = id.map(|Path(id)| id).unwrap_or_default();
    let id = input::task_id(&id)?;
    let wait = input::wait_query(query.as_deref(), state.limits.max_solve_timeout)?;
    let record = state
        .engine
        .task(&tenant.0, id, wait)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_task",
                "no such task for this key (results are kept 20 minutes)",
            )
        })?;
    Ok(Json(task_json(&record)))
}

fn task_json(r: &TaskRecord) -> Value {
    match &r.state {
        TaskState::Pending => json!({"task_id": r.id, "status": "pending", "kind": r.kind}),
        TaskState::Ready(h) => {
            json!({"task_id": r.id, "status": "ready", "kind": r.kind, "result": HandoutBody::of(h)})
        }
        TaskState::Failed(f) => {
            json!({"task_id": r.id, "status": "failed", "kind": r.kind, "error": {"code": f.code, "message": f.message}})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Answer, Source, UpstreamRef};

    fn handout(kind: Kind, text: &str, user_agent: Option<&str>, task: Option<&str>) -> Handout {
        Handout {
            kind,
            answer: Answer {
                text: text.into(),
                user_agent: user_agent.map(str::to_owned),
                solved_at: 1_700_000_000_123,
                expires_at: 1_700_000_120_456,
                upstream: task.map(|t| UpstreamRef {
                    account: "acct".into(),
                    task_id: t.into(),
                }),
            },
            source: Source::Pool,
        }
    }

    /// The bytes native callers have always read: every field, in alphabetical order, times as
    /// RFC 3339 with milliseconds, a geetest answer as an object when it is one.
    #[test]
    fn a_handout_is_written_as_native_callers_read_it() {
        let cases = [
            (
                handout(Kind::RecaptchaV2, "tok\"en", None, None),
                r#"{"expires_at":"2023-11-14T22:15:20.456Z","kind":"recaptcha_v2","solved_at":"2023-11-14T22:13:20.123Z","source":"pool","task_id":null,"token":"tok\"en","user_agent":null}"#,
            ),
            (
                handout(Kind::Turnstile, "t", Some("UA/1"), Some("42")),
                r#"{"expires_at":"2023-11-14T22:15:20.456Z","kind":"turnstile","solved_at":"2023-11-14T22:13:20.123Z","source":"pool","task_id":"42","token":"t","user_agent":"UA/1"}"#,
            ),
            (
                handout(Kind::GeetestV3, r#"{"geetest_validate":"v"}"#, None, None),
                r#"{"expires_at":"2023-11-14T22:15:20.456Z","kind":"geetest_v3","solved_at":"2023-11-14T22:13:20.123Z","source":"pool","task_id":null,"token":{"geetest_validate":"v"},"user_agent":null}"#,
            ),
            // What a kind keeps beside its token, under `extras`.
            (
                handout(
                    Kind::Hcaptcha,
                    r#"{"respKey":"E0_k","token":"P1_t"}"#,
                    None,
                    None,
                ),
                r#"{"expires_at":"2023-11-14T22:15:20.456Z","extras":{"respKey":"E0_k"},"kind":"hcaptcha","solved_at":"2023-11-14T22:13:20.123Z","source":"pool","task_id":null,"token":"P1_t","user_agent":null}"#,
            ),
            (
                handout(Kind::GeetestV3, "not json", None, None),
                r#"{"expires_at":"2023-11-14T22:15:20.456Z","kind":"geetest_v3","solved_at":"2023-11-14T22:13:20.123Z","source":"pool","task_id":null,"token":"not json","user_agent":null}"#,
            ),
        ];
        for (h, want) in cases {
            assert_eq!(serde_json::to_string(&HandoutBody::of(&h)).unwrap(), want);
        }
    }
}
