//! Range checks for the numbers and sizes a native-API caller sends, before anything uses them.
//!
//! Owns: reading request bodies with a size limit (a JSON 413 rather than axum's plain-text one),
//! `timeout_s` in bodies, `wait` in the task query string, and task ids in paths. Every check
//! answers a 4xx [`ApiError`] naming the field; no caller-sent number reaches a conversion that
//! can panic (`Duration::from_secs_f64` panics on values past `u64::MAX` seconds).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde_json::Value;

use super::AppState;
use super::error::ApiError;

/// A request body of at most `Limits::max_body_bytes`, or a 413 `body_too_large` in the native
/// error format.
pub struct LimitedBody(pub Bytes);

impl FromRequest<AppState> for LimitedBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        read_limited(req.into_body(), state.limits.max_body_bytes)
            .await
            .map(LimitedBody)
    }
}

/// Reads `body` up to `max` bytes. A body that is longer, or that breaks off, is an error.
pub async fn read_limited(body: Body, max: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, max).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is over {max} bytes (or was cut off)"),
        )
    })
}

/// A number of seconds from 0 to `max` given as a JSON value (a number, or a numeric string as
/// some clients send), or an error naming `field`. `None` when absent or null. Zero is refused
/// when `allow_zero` is false (a solve with no time to run cannot succeed).
pub fn seconds_field(
    field: &str,
    code: &str,
    value: Option<&Value>,
    max: Duration,
    allow_zero: bool,
) -> Result<Option<Duration>, ApiError> {
    let secs = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    secs.and_then(|s| checked_seconds(s, max, allow_zero))
        .map(Some)
        .ok_or_else(|| out_of_range(code, field, max, allow_zero))
}

/// `s` seconds as a duration when it is finite and within `0..=max` (`0 < s` unless `allow_zero`).
pub fn checked_seconds(s: f64, max: Duration, allow_zero: bool) -> Option<Duration> {
    let low_ok = if allow_zero { s >= 0.0 } else { s > 0.0 };
    // `max` is a few minutes, so this comparison keeps `s` far from from_secs_f64's panic.
    (s.is_finite() && low_ok && s <= max.as_secs_f64()).then(|| Duration::from_secs_f64(s))
}

fn out_of_range(code: &str, field: &str, max: Duration, allow_zero: bool) -> ApiError {
    let low = if allow_zero {
        "from 0"
    } else {
        "greater than 0 and"
    };
    ApiError::bad_request(
        code,
        format!(
            "`{field}` must be a number of seconds {low} up to {}",
            max.as_secs_f64()
        ),
    )
}

/// `wait` from the query string of `GET /v1/tasks/{id}`: 0 (answer at once) when absent, else
/// seconds from 0 to `max`. Other parameters are ignored, as everywhere in the API.
pub fn wait_query(query: Option<&str>, max: Duration) -> Result<Duration, ApiError> {
    let Some(raw) = query.and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "wait")
            .map(|(_, v)| v.into_owned())
    }) else {
        return Ok(Duration::ZERO);
    };
    raw.trim()
        .parse::<f64>()
        .ok()
        .and_then(|s| checked_seconds(s, max, true))
        .ok_or_else(|| out_of_range("bad_wait", "wait", max, true))
}

/// Task ids are digit strings of at most 20 characters (what `engine::submit` makes and
/// `res.php` accepts); anything else is refused before it reaches the store.
pub fn task_id(id: &str) -> Result<&str, ApiError> {
    if !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(id)
    } else {
        Err(ApiError::bad_request(
            "bad_task_id",
            "the task id in the path must be 1 to 20 digits",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const MAX: Duration = Duration::from_secs(600);

    #[test]
    fn seconds_are_range_checked_and_name_their_field() {
        let ok = |v: Value| seconds_field("timeout_s", "bad_timeout", Some(&v), MAX, false);
        assert_eq!(ok(json!(30)).unwrap(), Some(Duration::from_secs(30)));
        assert_eq!(ok(json!("2.5")).unwrap(), Some(Duration::from_millis(2500)));
        assert_eq!(ok(json!(600)).unwrap(), Some(MAX));
        assert_eq!(
            seconds_field("timeout_s", "bad_timeout", None, MAX, false).unwrap(),
            None
        );
        for bad in [
            json!(1e20),
            json!(600.001),
            json!(0),
            json!(-1),
            json!("NaN"),
            json!("inf"),
            json!("1e400"),
            json!(true),
            json!([1]),
        ] {
            let e = ok(bad.clone()).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
            assert_eq!(e.code, "bad_timeout", "{bad}");
            assert!(e.message.contains("`timeout_s`"), "{}", e.message);
        }
    }

    #[test]
    fn wait_is_optional_and_bounded() {
        assert_eq!(wait_query(None, MAX).unwrap(), Duration::ZERO);
        assert_eq!(wait_query(Some("x=1"), MAX).unwrap(), Duration::ZERO);
        assert_eq!(
            wait_query(Some("wait=1.5"), MAX).unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(wait_query(Some("wait=0"), MAX).unwrap(), Duration::ZERO);
        for bad in [
            "wait=1e20",
            "wait=-1",
            "wait=abc",
            "wait=",
            "wait=NaN",
            "wait=601",
        ] {
            let e = wait_query(Some(bad), MAX).unwrap_err();
            assert_eq!(e.code, "bad_wait", "{bad}");
        }
    }

    #[test]
    fn task_ids_are_short_digit_strings() {
        assert!(task_id("123456789012345").is_ok());
        for bad in ["", "12a", "١٢٣", "123456789012345678901", "../x"] {
            assert_eq!(task_id(bad).unwrap_err().code, "bad_task_id", "{bad}");
        }
    }

    proptest! {
        #[test]
        fn any_number_or_query_is_checked_without_panicking(
            f in any::<f64>(), s in "\\PC{0,30}", q in "[a-z=&%0-9.eE+-]{0,40}",
        ) {
            for allow_zero in [true, false] {
                if let Some(d) = checked_seconds(f, MAX, allow_zero) {
                    prop_assert!(d <= MAX);
                }
                let _ = seconds_field("timeout_s", "bad_timeout", Some(&json!(f)), MAX, allow_zero);
                let _ = seconds_field("timeout_s", "bad_timeout", Some(&json!(s)), MAX, allow_zero);
            }
            if let Ok(d) = wait_query(Some(&format!("wait={s}")), MAX) {
                prop_assert!(d <= MAX);
            }
            let _ = wait_query(Some(&q), MAX);
            let _ = task_id(&s);
        }
    }
}
