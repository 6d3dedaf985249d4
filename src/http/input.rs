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

use super::AppState;
use super::error::ApiError;
use crate::wire::native::checked_seconds;

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

/// Reads `body` up to `max` bytes. A body that is longer, or that breaks off, is an error; one
/// whose `Content-Length` is already over `max` is refused without reading any of it.
pub async fn read_limited(body: Body, max: usize) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is over {max} bytes (or was cut off)"),
        )
    };
    if crate::wire::inphp::declared_over(&body, max) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, max)
        .await
        .map_err(|_| too_large())
}

fn out_of_range(code: &str, field: &str, max: Duration, allow_zero: bool) -> ApiError {
    ApiError::bad_request(
        code,
        crate::wire::native::out_of_range(field, max, allow_zero),
    )
}

/// `wait` from the query string of `GET /v1/tasks/{id}`: 0 (answer at once) when absent, else
/// seconds from 0 to `max`. Other parameters are ignored, as everywhere in the API.
pub fn wait_query(query: Option<&str>, max: Duration) -> Result<Duration, ApiError> {
    seconds_query(query, "wait", max, Duration::ZERO)
}

/// The value of `field` in a query string, if present.
fn query_value(query: Option<&str>, field: &str) -> Option<String> {
    query.and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == field)
            .map(|(_, v)| v.into_owned())
    })
}

/// Seconds named `field` in a query string: `default` when absent, else above 0 (0 too when
/// `default` is 0) and at most `max`; otherwise 400 `bad_<field>` saying the range.
pub fn seconds_query(
    query: Option<&str>,
    field: &str,
    max: Duration,
    default: Duration,
) -> Result<Duration, ApiError> {
    let Some(raw) = query_value(query, field) else {
        return Ok(default);
    };
    let allow_zero = default.is_zero();
    raw.trim()
        .parse::<f64>()
        .ok()
        .and_then(|s| checked_seconds(s, max, allow_zero))
        .ok_or_else(|| out_of_range(&format!("bad_{field}"), field, max, allow_zero))
}

/// Seconds named `field` in a query string, if present: from 0 to `max`, else 400
/// `bad_<field>`.
pub fn optional_seconds_query(
    query: Option<&str>,
    field: &str,
    max: Duration,
) -> Result<Option<Duration>, ApiError> {
    if query_value(query, field).is_none() {
        return Ok(None);
    }
    seconds_query(query, field, max, Duration::ZERO).map(Some)
}

/// A share named `field` in a query string (`0.95`): `default` when absent, else from 0.01 to
/// 0.999 (a share of 1 is never reached by a pool of any size); otherwise 400 `bad_<field>`.
pub fn share_query(query: Option<&str>, field: &str, default: f64) -> Result<f64, ApiError> {
    let Some(raw) = query_value(query, field) else {
        return Ok(default);
    };
    raw.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| (0.01..=0.999).contains(v))
        .ok_or_else(|| {
            ApiError::bad_request(
                format!("bad_{field}"),
                format!("{field} must be a share from 0.01 to 0.999"),
            )
        })
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
    use serde_json::Value;

    /// The shared parser's seconds field, in this layer's error shape.
    fn seconds_field(
        field: &str,
        code: &'static str,
        value: Option<&Value>,
        max: Duration,
        allow_zero: bool,
    ) -> Result<Option<Duration>, ApiError> {
        crate::wire::native::seconds_value(field, code, value, max, allow_zero)
            .map_err(|v| ApiError::bad_request(v.code, v.message))
    }
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
            json!(1e-300),
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
                    prop_assert!(allow_zero || !d.is_zero());
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
