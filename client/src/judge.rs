//! How one attempt ended: what it says about the gateway's health (an [`Outcome`] for the
//! balancer) and whether the call may go to another gateway.
//!
//! A call is sent again when the gateway refused it at admission (503 `overloaded` /
//! `WORKER_AT_CAPACITY`, before any work started), when the connection was never made, or, after
//! it may have started, when it carries an idempotency key (the caller's, or one the client
//! generated): gateways on one Redis then resume the same task, so it is not solved twice. A 429
//! is a fleet-wide limit: every gateway would answer the same, so it is returned at once.

use std::time::Duration;

use captcha_gateway_balance::Outcome;
use serde_json::Value;

use crate::Error;

/// The codes of a refusal at admission, when the instance is full: native and seed worker API.
const ADMISSION_REFUSALS: [&str; 2] = ["overloaded", "WORKER_AT_CAPACITY"];

/// The longest `Retry-After` taken as sent; a larger one is capped (a gateway never asks for
/// more than an hour, so more is a broken header, not advice).
const LONGEST_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// What to do after an attempt.
#[derive(Debug)]
pub(crate) enum Next {
    /// Hand this to the caller: the answer's body, or an error that another gateway would
    /// repeat (or that must not be repeated).
    Done(Result<Value, Error>),
    /// Send the call to another gateway if attempts remain; else this is the last error.
    Retry(Error),
}

/// How an attempt that got an HTTP answer ended.
pub(crate) fn answer(
    address: &str,
    status: u16,
    retry_after: Option<&str>,
    body: &[u8],
    repeatable: bool,
) -> (Outcome, Next) {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    if (200..300).contains(&status) {
        let next = match json {
            Some(v) => Next::Done(Ok(v)),
            None => Next::Done(Err(Error::BadAnswer {
                address: address.to_owned(),
                what: format!("{status} with a body that is not JSON"),
            })),
        };
        return (Outcome::Success, next);
    }
    let retry_after = retry_after.and_then(parse_retry_after);
    // A gateway error is `{"error": {"code", "message"}}` (native) or `{"error": "CODE"}`
    // (seed worker API); anything else (an HTML page of a proxy) is not the gateway's answer.
    let (code, message) = match json.as_ref().map(|v| &v["error"]) {
        Some(Value::Object(e)) => (
            e.get("code").and_then(Value::as_str).map(str::to_owned),
            e.get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ),
        Some(Value::String(code)) => (Some(code.clone()), String::new()),
        _ => (None, String::new()),
    };
    let api = |code: Option<String>, message: String| Error::Api {
        address: address.to_owned(),
        status,
        code: code.unwrap_or_else(|| format!("http_{status}")),
        message,
        retry_after,
    };
    match status {
        429 => (
            Outcome::FleetLimited,
            Next::Done(Err(Error::FleetLimited {
                address: address.to_owned(),
                code: code.unwrap_or_else(|| "http_429".into()),
                message,
                retry_after,
            })),
        ),
        503 if code
            .as_deref()
            .is_some_and(|c| ADMISSION_REFUSALS.contains(&c)) =>
        {
            (
                Outcome::Shed,
                Next::Retry(Error::Refused {
                    address: address.to_owned(),
                    code: code.unwrap_or_default(),
                    retry_after,
                }),
            )
        }
        // `shutting_down` or `unavailable`: this instance cannot serve, but it may have started
        // the call, so only a repeatable call moves on.
        503 => (
            Outcome::Shed,
            unless_repeatable(api(code, message), repeatable),
        ),
        // The gateway's own verdict on the solve (provider failure, deadline): it works.
        502 | 504 if code.is_some() => (Outcome::Success, Next::Done(Err(api(code, message)))),
        500..=599 => (
            Outcome::ServerError,
            unless_repeatable(api(code, message), repeatable),
        ),
        // Other 4xx: about the request, and the instance answered it.
        _ => (Outcome::Success, Next::Done(Err(api(code, message)))),
    }
}

/// How an attempt without an HTTP answer ended.
pub(crate) fn transport(
    address: &str,
    error: &reqwest::Error,
    repeatable: bool,
) -> (Outcome, Next) {
    // The innermost cause says what happened ("Connection refused"); the outer ones repeat
    // the URL.
    let mut cause: &dyn std::error::Error = error;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let what = cause.to_string();
    if error.is_connect() {
        // Never reached the gateway: nothing can have started there.
        let e = Error::Transport {
            address: address.to_owned(),
            what: format!("could not connect: {what}"),
            sent: false,
        };
        return (Outcome::ConnectFailed, Next::Retry(e));
    }
    let (outcome, what) = if error.is_timeout() {
        (Outcome::ServerError, format!("no answer in time: {what}"))
    } else {
        (Outcome::ConnectFailed, format!("connection lost: {what}"))
    };
    let e = Error::Transport {
        address: address.to_owned(),
        what,
        sent: true,
    };
    (outcome, unless_repeatable(e, repeatable))
}

fn unless_repeatable(error: Error, repeatable: bool) -> Next {
    if repeatable {
        Next::Retry(error)
    } else {
        Next::Done(Err(error))
    }
}

/// `Retry-After` in seconds (the gateway never sends a date); `None` when unreadable.
fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: u64 = value.trim().parse().ok()?;
    Some(Duration::from_secs(secs).min(LONGEST_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(status: u16, body: &str, repeatable: bool) -> (Outcome, Next) {
        answer("http://gw", status, Some("1"), body.as_bytes(), repeatable)
    }

    fn retried(next: &Next) -> bool {
        matches!(next, Next::Retry(_))
    }

    #[test]
    fn admission_refusals_move_on_and_count_against_the_instance() {
        for body in [
            r#"{"error": {"code": "overloaded", "message": "full"}}"#,
            r#"{"error": "WORKER_AT_CAPACITY"}"#,
        ] {
            let (outcome, next) = judge(503, body, false);
            assert_eq!(outcome, Outcome::Shed);
            assert!(retried(&next), "{body}");
        }
    }

    #[test]
    fn a_429_is_the_fleets_and_is_neither_retried_nor_held_against_the_instance() {
        let (outcome, next) = judge(429, r#"{"error": {"code": "tenant_max_concurrent"}}"#, true);
        assert_eq!(outcome, Outcome::FleetLimited);
        match next {
            Next::Done(Err(e @ Error::FleetLimited { .. })) => {
                assert_eq!(e.retry_after(), Some(Duration::from_secs(1)))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn work_that_may_have_started_is_repeated_only_with_an_idempotency_key() {
        let shutting = r#"{"error": {"code": "shutting_down", "message": "m"}}"#;
        for (status, body) in [(503, shutting), (500, "oops"), (502, "<html>")] {
            let (_, once) = judge(status, body, false);
            assert!(!retried(&once), "{status} {body}");
            let (_, again) = judge(status, body, true);
            assert!(retried(&again), "{status} {body}");
        }
    }

    #[test]
    fn the_gateways_own_verdicts_are_answers_from_a_working_instance() {
        for (status, code) in [
            (502, "ERROR_PROXY"),
            (504, "timeout"),
            (422, "ERROR_CAPTCHA_UNSOLVABLE"),
            (400, "bad_kind"),
        ] {
            let body = format!(r#"{{"error": {{"code": "{code}", "message": "m"}}}}"#);
            let (outcome, next) = judge(status, &body, true);
            assert_eq!(outcome, Outcome::Success, "{status}");
            assert!(
                matches!(&next, Next::Done(Err(Error::Api { code: c, .. })) if c == code),
                "{next:?}"
            );
        }
    }

    #[test]
    fn retry_after_is_read_and_capped() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("99999999"), Some(LONGEST_RETRY_AFTER));
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }
}
