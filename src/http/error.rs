//! Errors of the native JSON API: `{"error": {"code", "message"}}` with a 4xx/5xx status.
//! Client mistakes are not logged as server errors; internal failures get a fixed message.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::engine::SolveError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: String,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.into(),
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn overloaded() -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                "this instance is at max_concurrent; retry here or elsewhere",
            )
        }
    }
}

impl From<SolveError> for ApiError {
    fn from(e: SolveError) -> Self {
        match e {
            SolveError::Timeout => Self::new(
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                "no answer before the deadline",
            ),
            SolveError::Failed(f) => {
                // The task itself cannot be solved (here), or a provider refused its
                // parameters (a pass-through type it does not have): the caller's to change,
                // not a provider failure.
                let task_level = [
                    crate::wire::inphp::codes::CAPTCHA_UNSOLVABLE,
                    crate::wire::taskapi::reply::TASK_NOT_SUPPORTED,
                    crate::wire::inphp::codes::BAD_PARAMETERS,
                ];
                let status = if task_level.contains(&f.code.as_str()) {
                    StatusCode::UNPROCESSABLE_ENTITY
                } else {
                    StatusCode::BAD_GATEWAY
                };
                Self::new(status, f.code, f.message)
            }
            SolveError::Unavailable => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the gateway cannot reach its store",
            ),
            // 503 with Retry-After: the request may move to another instance (docs/API.md).
            SolveError::ShuttingDown => Self {
                retry_after: Some(1),
                ..Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "shutting_down",
                    "this instance is shutting down; retry elsewhere",
                )
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({"error": {"code": &self.code, "message": self.message}}));
        let mut res = (self.status, body).into_response();
        res.extensions_mut()
            .insert(super::outcome::ErrorCode(self.code));
        if let Some(secs) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}
