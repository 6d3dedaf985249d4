//! The pool endpoints of the native API: `GET /v1/pools` (per-target figures) and
//! `POST /v1/pools/tokens` (import answers obtained elsewhere). Same key and error conventions as
//! the rest of `/v1` (`Authorization: Bearer`, `{"error": {"code", "message"}}`).
//!
//! Owns the wire format only; the import rules live in `pools::import`.

use std::time::UNIX_EPOCH;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::error::ApiError;
use super::input::LimitedBody;
use super::native_key::{NativeTenant, tenant};
use super::{AppState, BearerKey};
use crate::engine::SolveError;
use crate::model::{Kind, Millis, Reuse};
use crate::pools::{self, ImportError, ImportToken, MAX_IMPORT};
use crate::wire::native::NativeRequest;

/// `GET /v1/pools`: configured pools and the busiest `metrics_top_targets` other targets, one
/// entry each, then one `other` entry summing the rest (docs/API.md).
pub async fn list(State(state): State<AppState>, key: BearerKey) -> Result<Json<Value>, ApiError> {
    tenant(&state, &key)?;
    let figures = state
        .engine
        .store()
        .figures()
        .await
        .map_err(|_| SolveError::Unavailable)?;
    let top = state.engine.settings().metrics_top_targets;
    Ok(Json(json!(state.pools.top_views(
        figures,
        top,
        pools::GroupBy::Target
    ))))
}

/// `POST /v1/pools/tokens`: `{kind, <target parameters>, tokens: [{token, solved_at,
/// user_agent?}]}` -> `{accepted, rejected: [{index, reason}]}`. Problems with the request as a
/// whole are a 400; problems with one token are reported under its index.
pub async fn import_tokens(
    State(state): State<AppState>,
    _: NativeTenant,
    LimitedBody(body): LimitedBody,
) -> Result<Json<Value>, ApiError> {
    let (native, offered) = parse_import(&body, state.limits.max_solve_timeout)?;
    let outcome = pools::import(&state.engine, &state.pools, &native.req, offered)
        .await
        .map_err(|e| match e {
            ImportError::NotPoolable(kind) => not_poolable(kind),
            ImportError::Unavailable => ApiError::from(SolveError::Unavailable),
        })?;
    let rejected: Vec<Value> = outcome
        .rejected
        .iter()
        .map(|(index, reason)| json!({"index": index, "reason": reason}))
        .collect();
    Ok(Json(
        json!({"accepted": outcome.accepted, "rejected": rejected}),
    ))
}

/// An import body: the target's request and each offered token (or why it cannot be read).
pub(super) fn parse_import(
    body: &[u8],
    max_timeout: std::time::Duration,
) -> Result<(NativeRequest, Vec<Result<ImportToken, String>>), ApiError> {
    let mut value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("bad_json", format!("the body is not JSON: {e}")))?;
    // Checked before the target parameters, so an image import hears "not poolable", not
    // "the image body is missing".
    if let Some(kind) = value
        .get("kind")
        .and_then(Value::as_str)
        .and_then(|k| k.parse::<Kind>().ok())
    {
        if kind.reuse() != (Reuse::SingleUse { poolable: true }) {
            return Err(not_poolable(kind));
        }
    }
    let tokens = match value.get("tokens") {
        Some(Value::Array(t)) if !t.is_empty() && t.len() <= MAX_IMPORT => t,
        _ => {
            return Err(ApiError::bad_request(
                "bad_tokens",
                format!("`tokens` must be an array of 1 to {MAX_IMPORT} objects"),
            ));
        }
    };
    let offered: Vec<_> = tokens.iter().map(parse_token).collect();
    // The rest of the body is the target, read as the native API reads a request.
    if let Some(object) = value.as_object_mut() {
        object.remove("tokens");
    }
    let native = crate::wire::native::parse_native_value(value, max_timeout)
        .map_err(|v| ApiError::bad_request(v.code, v.message))?;
    Ok((native, offered))
}

fn not_poolable(kind: Kind) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "not_poolable",
        ImportError::NotPoolable(kind).to_string(),
    )
}

/// One entry of `tokens`, or why it cannot be read.
fn parse_token(v: &Value) -> Result<ImportToken, String> {
    let token = v
        .get("token")
        .and_then(Value::as_str)
        .ok_or("`token` must be a string")?;
    let solved_at = match v.get("solved_at") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => rfc3339_ms(s),
        _ => None,
    }
    .ok_or("`solved_at` must be an RFC 3339 time or unix milliseconds")?;
    let user_agent = match v.get("user_agent") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("`user_agent` must be a string".to_owned()),
    };
    Ok(ImportToken {
        token: token.to_owned(),
        solved_at,
        user_agent,
    })
}

/// An RFC 3339 time (`Z` or a `+HH:MM`/`-HH:MM` offset) as unix milliseconds.
fn rfc3339_ms(s: &str) -> Option<Millis> {
    let s = s.trim();
    let (utc, offset_min) = match s.strip_suffix(['Z', 'z']) {
        Some(rest) => (format!("{rest}Z"), 0i64),
        None => {
            let split = s.len().checked_sub(6).filter(|i| s.is_char_boundary(*i))?;
            let (local, offset) = s.split_at(split);
            let sign = match offset.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return None,
            };
            let (h, m) = offset[1..].split_once(':')?;
            let two_digits = |x: &str| x.len() == 2 && x.bytes().all(|b| b.is_ascii_digit());
            if !two_digits(h) || !two_digits(m) {
                return None;
            }
            let minutes = h.parse::<i64>().ok()? * 60 + m.parse::<i64>().ok()?;
            (format!("{local}Z"), sign * minutes)
        }
    };
    let at = humantime::parse_rfc3339_weak(&utc).ok()?;
    let ms = i64::try_from(at.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    u64::try_from(ms.checked_sub(offset_min * 60_000)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn times_come_in_utc_with_offsets_or_as_milliseconds() {
        let utc = rfc3339_ms("2026-11-30T06:03:16.799Z").unwrap();
        assert_eq!(rfc3339_ms("2026-11-30T08:03:16.799+02:00"), Some(utc));
        assert_eq!(rfc3339_ms("2026-11-30T01:03:16.799-05:00"), Some(utc));
        for bad in [
            "",
            "yesterday",
            "2026-11-30",
            "2026-11-30T06:03:16+2:00",
            "Z",
        ] {
            assert_eq!(rfc3339_ms(bad), None, "{bad}");
        }
        let t = parse_token(&json!({"token": "t", "solved_at": 1_700_000_000_000u64})).unwrap();
        assert_eq!((t.solved_at, t.user_agent), (1_700_000_000_000, None));
        let t = parse_token(
            &json!({"token": "t", "solved_at": "2026-11-30T06:03:16.799Z", "user_agent": "UA/1"}),
        )
        .unwrap();
        assert_eq!((t.solved_at, t.user_agent.as_deref()), (utc, Some("UA/1")));
        for bad in [
            json!("just-a-string"),
            json!({"token": 5, "solved_at": 1}),
            json!({"token": "t"}),
            json!({"token": "t", "solved_at": -1}),
            json!({"token": "t", "solved_at": 1, "user_agent": 7}),
        ] {
            assert!(parse_token(&bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn time_and_token_parsing_never_panic(s in "\\PC{0,40}", n in any::<i64>()) {
            let _ = rfc3339_ms(&s);
            let _ = parse_token(&json!({"token": s, "solved_at": s}));
            let _ = parse_token(&json!({"token": "t", "solved_at": n}));
        }
    }
}
