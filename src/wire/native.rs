//! The native request body (`kind` plus that kind's parameters under their compatible-API names),
//! read without any protocol around it: `POST /v1/solve`, `POST /v1/tasks` and a queued task's
//! `request` field (docs/QUEUE.md) all go through [`parse_native_value`], so the same body means
//! the same request wherever it arrives.

use std::time::Duration;

use serde_json::Value;

use super::inphp::{Params, parse_submit, submit_params};
use crate::model::{Kind, SolveRequest, Validation};

/// A parsed native body.
#[derive(Debug, Clone)]
pub struct NativeRequest {
    pub req: SolveRequest,
    /// `timeout_s`, when given.
    pub timeout: Option<Duration>,
    /// `callback_url` as sent (checked by whoever takes callbacks).
    pub callback_url: Option<String>,
}

/// Parses a native body from its bytes. `max_timeout` bounds `timeout_s`.
pub fn parse_native(body: &[u8], max_timeout: Duration) -> Result<NativeRequest, Validation> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Validation::new("bad_json", format!("the body is not JSON: {e}")))?;
    parse_native_value(value, max_timeout)
}

/// Parses a native body already read as JSON. `max_timeout` bounds `timeout_s` (the caller hears
/// the bound, rather than having a larger value silently cut).
pub fn parse_native_value(
    value: Value,
    max_timeout: Duration,
) -> Result<NativeRequest, Validation> {
    let Value::Object(obj) = value else {
        return Err(Validation::new(
            "bad_json",
            "the body must be a JSON object",
        ));
    };
    let kind: Kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| Validation::new("bad_kind", "`kind` is missing"))?
        .parse()
        .map_err(|e: String| Validation::new("bad_kind", e))?;
    let timeout = timeout_field(obj.get("timeout_s"), max_timeout)?;
    let callback_url = match obj.get("callback_url") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(Validation::new(
                "bad_callback_url",
                "`callback_url` must be a string",
            ));
        }
    };
    let mut params = Params::from_json_object(obj);
    let (method, version) = match kind {
        Kind::RecaptchaV2 => ("userrecaptcha", Some("v2")),
        Kind::RecaptchaV3 => ("userrecaptcha", Some("v3")),
        Kind::Turnstile => ("turnstile", None),
        Kind::CloudflareChallenge => ("cloudflare_challenge", None),
        Kind::GeetestV3 => ("geetest", None),
        Kind::Image => ("base64", None),
        Kind::Text => ("textcaptcha", None),
    };
    params.set("method", method);
    if let Some(v) = version {
        params.set("version", v);
    }
    if kind == Kind::Text {
        if let Some(text) = params.get(&["text", "textcaptcha"]).map(str::to_owned) {
            params.set("textcaptcha", text);
        }
    }
    let req = parse_submit(&params)?;
    Ok(NativeRequest {
        req,
        timeout,
        callback_url,
    })
}

/// `timeout_s`: seconds greater than 0 and up to `max`.
fn timeout_field(value: Option<&Value>, max: Duration) -> Result<Option<Duration>, Validation> {
    seconds_value("timeout_s", "bad_timeout", value, max, false)
}

/// A JSON field of seconds (a number or a numeric string) within `0..=max` (`0 <` unless
/// `allow_zero`); the error names the field and the range, with `code`.
pub fn seconds_value(
    field: &str,
    code: &'static str,
    value: Option<&Value>,
    max: Duration,
    allow_zero: bool,
) -> Result<Option<Duration>, Validation> {
    let secs = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    secs.and_then(|s| checked_seconds(s, max, allow_zero))
        .map(Some)
        .ok_or_else(|| Validation::new(code, out_of_range(field, max, allow_zero)))
}

/// `s` seconds as a duration when it is finite and within `0..=max` (`0 < s` unless `allow_zero`).
pub fn checked_seconds(s: f64, max: Duration, allow_zero: bool) -> Option<Duration> {
    let low_ok = if allow_zero { s >= 0.0 } else { s > 0.0 };
    // `max` is a few minutes, so this comparison keeps `s` far from from_secs_f64's panic.
    let d =
        (s.is_finite() && low_ok && s <= max.as_secs_f64()).then(|| Duration::from_secs_f64(s))?;
    // 1e-300 is "greater than 0" but no time at all: a deadline already past.
    (allow_zero || !d.is_zero()).then_some(d)
}

/// The message of a number of seconds out of its range.
pub fn out_of_range(field: &str, max: Duration, allow_zero: bool) -> String {
    let low = if allow_zero {
        "from 0"
    } else {
        "greater than 0 and"
    };
    format!(
        "`{field}` must be a number of seconds {low} up to {}",
        max.as_secs_f64()
    )
}

/// `req` as a native API body (`POST /v1/solve`): `kind` plus the compatible parameter names,
/// which the native parser accepts. `serve --queue` writes queue entries in this form, so a
/// queued request means exactly what the same body means on `/v1/solve` (docs/QUEUE.md).
pub fn native_body(req: &SolveRequest) -> serde_json::Value {
    let mut body = serde_json::Map::new();
    body.insert("kind".into(), serde_json::json!(req.kind()));
    for (name, value) in submit_params(req) {
        // The kind says it; the native parser derives `method` from it.
        if name != "method" {
            body.insert(name.into(), serde_json::Value::String(value));
        }
    }
    serde_json::Value::Object(body)
}
