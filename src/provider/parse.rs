//! Lenient reading of `in.php`/`res.php` replies from providers (docs/PROTOCOL.md, "Upstream"):
//! JSON or plain text whatever we asked for, ids as strings or numbers, GeeTest answers as
//! objects, HTML error pages, bare codes, and `|`-joined batch answers.
//!
//! Owns: turning one HTTP status + body into an [`UpstreamReply`], and a batch answer into
//! per-task outcomes. Never panics and never trusts the body: codes are kept only when they look
//! like codes (they end up in logs and metric labels), anything else is `BAD_RESPONSE`.
//! Does not own: what a class means for retries (`classify`, `account`).

use serde_json::{Map, Value};

use super::PollOutcome;
use super::classify::code_error;
use super::error::ProviderError;
use crate::model::AnswerShape;
use crate::wire::inphp::InPhpDialect;
use crate::wire::inphp::codes;

/// The code for bodies that are neither an answer nor a provider code.
pub const BAD_RESPONSE: &str = "BAD_RESPONSE";

/// The optional fields some answers carry next to `request`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extras {
    /// `result`: where the captchaai SDK reads Enterprise and Cloudflare Challenge answers.
    pub result: Option<String>,
    /// `user_agent` / `useragent` / `userAgent`: the browser the answer is bound to.
    pub user_agent: Option<String>,
    /// `price`, as the provider wrote it.
    pub price: Option<String>,
}

/// What one upstream reply says.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamReply {
    /// Success: a task id, an answer, a balance or `OK_REPORT_RECORDED` in `request`. A JSON
    /// object in `request` (GeeTest) arrives re-serialized as a string.
    Ok { request: String, extras: Extras },
    /// `CAPCHA_NOT_READY`.
    NotReady,
    /// A provider code, an HTTP failure or an unreadable body, already classified.
    Error(ProviderError),
}

impl UpstreamReply {
    /// The outcome of a single-id poll. Permanent errors belong to the task
    /// ([`PollOutcome::Failed`]); every other error is about the request and is returned as `Err`
    /// so the poller retries the task rather than failing it.
    pub fn into_outcome(self) -> Result<PollOutcome, ProviderError> {
        match self {
            UpstreamReply::NotReady => Ok(PollOutcome::NotReady),
            UpstreamReply::Ok { request, extras } => {
                // The captchaai SDK reads `result` for the kinds that have it; a structured
                // `request` (GeeTest) is already normalized and wins.
                let structured = request.starts_with('{') || request.starts_with('[');
                let text = match extras.result {
                    Some(result) if !structured && !result.is_empty() => result,
                    _ => request,
                };
                if text.is_empty() {
                    return Err(bad_response("empty answer"));
                }
                Ok(PollOutcome::Ready {
                    text,
                    user_agent: extras.user_agent,
                    price: extras.price,
                })
            }
            UpstreamReply::Error(e) if e.class == super::ErrorClass::Permanent => {
                Ok(PollOutcome::Failed(e))
            }
            UpstreamReply::Error(e) => Err(e),
        }
    }
}

/// Reads one reply. `family` decides the class of family-specific codes (`ERROR_ZERO_BALANCE`).
pub fn parse_reply(family: InPhpDialect, status: u16, body: &str) -> UpstreamReply {
    if status == 429 || (500..=599).contains(&status) {
        // Overload or a broken server: whatever the body says (usually an HTML page) is noise.
        let code = format!("HTTP_{status}");
        return UpstreamReply::Error(code_error(&code, family, snippet(body)));
    }
    let reply = parse_body(family, body.trim());
    match reply {
        UpstreamReply::Error(e) if e.code == BAD_RESPONSE && !(200..=299).contains(&status) => {
            let code = format!("HTTP_{status}");
            UpstreamReply::Error(code_error(&code, family, e.detail))
        }
        other => other,
    }
}

fn parse_body(family: InPhpDialect, body: &str) -> UpstreamReply {
    if body.starts_with('{') || body.starts_with('"') {
        return match serde_json::from_str::<Value>(body) {
            Ok(Value::Object(map)) => parse_envelope(family, &map, body),
            // A bare JSON string: read its content like a plain-text body.
            Ok(Value::String(s)) => parse_plain(family, s.trim()),
            _ => UpstreamReply::Error(bad_response(snippet(body))),
        };
    }
    parse_plain(family, body)
}

/// `{"status":0|1,"request":...}` plus optional extra fields.
fn parse_envelope(family: InPhpDialect, map: &Map<String, Value>, body: &str) -> UpstreamReply {
    let status = map.get("status").and_then(|s| match s {
        Value::Number(n) => n.as_f64().map(|f| f != 0.0),
        Value::String(s) => Some(s.trim() != "0" && !s.trim().is_empty()),
        Value::Bool(b) => Some(*b),
        _ => None,
    });
    let request = match map.get("request") {
        Some(Value::String(s)) => s.trim().to_owned(),
        // CaptchaAI may send numeric task ids.
        Some(Value::Number(n)) => n.to_string(),
        // An object answer (GeeTest's): its kind's declaration reads it.
        Some(Value::Object(obj)) => return ok(Value::Object(obj.clone()).to_string(), map),
        Some(Value::Array(_)) => {
            return ok(
                map.get("request").map(Value::to_string).unwrap_or_default(),
                map,
            );
        }
        _ => String::new(),
    };
    if request == codes::NOT_READY {
        return UpstreamReply::NotReady;
    }
    match status {
        // A success that reads like an error code is an error (the compatible protocol never
        // puts `ERROR` in a success body).
        Some(true)
            if !looks_like_error(&request)
                && (!request.is_empty() || map.contains_key("result")) =>
        {
            ok(request, map)
        }
        Some(true) | Some(false) | None => match code_of(&request) {
            Some(code) if status == Some(false) || looks_like_error(&code) => {
                UpstreamReply::Error(code_error(&code, family, error_text(map)))
            }
            _ if status.is_none() && !request.is_empty() => ok(request, map),
            _ => UpstreamReply::Error(bad_response(snippet(body))),
        },
    }
}

fn parse_plain(family: InPhpDialect, body: &str) -> UpstreamReply {
    if body == codes::NOT_READY {
        return UpstreamReply::NotReady;
    }
    if let Some(payload) = body.strip_prefix("OK|") {
        if payload.trim().is_empty() {
            return UpstreamReply::Error(bad_response("empty OK| payload"));
        }
        return UpstreamReply::Ok {
            request: payload.trim().to_owned(),
            extras: Extras::default(),
        };
    }
    if body == codes::REPORT_RECORDED || is_decimal(body) {
        // Report acknowledgements and `getbalance`'s bare number.
        return UpstreamReply::Ok {
            request: body.to_owned(),
            extras: Extras::default(),
        };
    }
    match code_of(body) {
        Some(code) => UpstreamReply::Error(code_error(&code, family, "")),
        None => UpstreamReply::Error(bad_response(snippet(body))),
    }
}

/// A batched `res.php?action=get&ids=...` answer read before the envelope's rules: its
/// `request` is `|`-joined per id, and a part that is an error code (`ERROR_CAPTCHA_UNSOLVABLE`)
/// is that one task's failure, not the request's. `None` when the answer does not line up with
/// the `n` ids (then the caller reads it as a whole-request answer).
pub fn batch_reply(
    status: u16,
    body: &str,
    n: usize,
    family: InPhpDialect,
) -> Option<Vec<PollOutcome>> {
    if n < 2 || !(200..=299).contains(&status) {
        return None;
    }
    let request = match serde_json::from_str::<Value>(body.trim()).ok()? {
        Value::Object(map) => match map.get("request")? {
            Value::String(s) => s.clone(),
            _ => return None,
        },
        _ => return None,
    };
    split_batch(&request, n, family)
}

/// Splits an `ids=` answer (`263s2v|CAPCHA_NOT_READY|ERROR_CAPTCHA_UNSOLVABLE`) into one outcome
/// per id, in order. `None` when the parts do not line up with the ids (a count mismatch, an
/// empty part): the caller then polls the ids one by one.
pub fn split_batch(request: &str, n: usize, family: InPhpDialect) -> Option<Vec<PollOutcome>> {
    let parts: Vec<&str> = request.split('|').map(str::trim).collect();
    if parts.len() != n || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    let outcomes = parts
        .into_iter()
        .map(|part| {
            if part == codes::NOT_READY {
                return PollOutcome::NotReady;
            }
            match code_of(part).filter(|c| looks_like_error(c)) {
                Some(code) => PollOutcome::Failed(code_error(&code, family, "")),
                None => PollOutcome::Ready {
                    text: part.to_owned(),
                    user_agent: None,
                    price: None,
                },
            }
        })
        .collect();
    Some(outcomes)
}

fn ok(request: String, map: &Map<String, Value>) -> UpstreamReply {
    let text = |names: &[&str]| {
        names.iter().find_map(|n| match map.get(*n) {
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_owned()),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(v @ (Value::Object(_) | Value::Array(_))) => Some(v.to_string()),
            _ => None,
        })
    };
    // A key a kind keeps beside its token (2captcha's hCaptcha `respKey`), kept with the answer
    // for the kind's declaration to read (`AnswerShape::canonical`, once the kind is known).
    let beside: Map<String, Value> = map
        .iter()
        .filter(|(k, v)| {
            v.as_str().is_some_and(|s| !s.is_empty()) && AnswerShape::any_extra(|e| e == *k)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let request = if beside.is_empty() {
        request
    } else {
        let mut kept = Map::from_iter([("token".to_owned(), Value::String(request))]);
        kept.extend(beside);
        Value::Object(kept).to_string()
    };
    UpstreamReply::Ok {
        request,
        extras: Extras {
            result: text(&["result"]),
            user_agent: text(&["user_agent", "useragent", "userAgent"]),
            price: text(&["price"]),
        },
    }
}

/// `s` as a provider code if it looks like one: `ERROR: 1001`, or 2-64 of `[A-Z0-9_]` starting
/// with a letter. Bounding the shape keeps bodies out of metric labels.
fn code_of(s: &str) -> Option<String> {
    let s = s.trim();
    if let Some(digits) = s.strip_prefix("ERROR: ") {
        let digits: String = digits.chars().take_while(char::is_ascii_digit).collect();
        return (1..=6)
            .contains(&digits.len())
            .then(|| format!("ERROR: {digits}"));
    }
    let shaped = (2..=64).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    shaped.then(|| s.to_owned())
}

/// Codes that are errors even in a `status: 1` envelope or without a status.
fn looks_like_error(code: &str) -> bool {
    code.starts_with("ERROR")
        || matches!(
            code,
            "IP_BANNED" | "MAX_USER_TURN" | "TOO_MANY_BAD_IMAGES" | "REPORT_NOT_RECORDED"
        )
}

fn is_decimal(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty()
        && digits.len() <= 32
        && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && digits.bytes().filter(|b| *b == b'.').count() <= 1
        && digits.bytes().any(|b| b.is_ascii_digit())
}

fn error_text(map: &Map<String, Value>) -> String {
    match map.get("error_text") {
        Some(Value::String(s)) => snippet(s),
        _ => String::new(),
    }
}

fn bad_response(detail: impl Into<String>) -> ProviderError {
    ProviderError::new(super::ErrorClass::Transient, BAD_RESPONSE, detail)
}

/// The start of a body for an error detail: short, one line, printable.
pub(super) fn snippet(body: &str) -> String {
    let mut out: String = body
        .trim()
        .chars()
        .take(80)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if body.trim().chars().nth(80).is_some() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests;
