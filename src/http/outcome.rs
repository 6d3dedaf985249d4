//! Counts native-API and worker-API requests in `captcha_gateway_requests_total` (docs/API.md
//! "Metrics"): error responses carry their code as a response extension, read here once the
//! handler has answered, so every way a handler can end (extractor refusals included) counts.
//! The compatible API counts its own replies (their code is in the body, with HTTP 200).

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::AppState;

/// The error code of an error response, for the outcome label.
#[derive(Debug, Clone)]
pub struct ErrorCode(pub String);

/// `api` and `endpoint` labels of a route this middleware counts; `None` for routes it does not.
fn labels(path: &str) -> Option<(&'static str, &'static str)> {
    Some(match path {
        "/v1/solve" => ("native", "solve"),
        "/v1/tasks" => ("native", "create_task"),
        "/v1/tasks/{id}" => ("native", "get_task"),
        "/v1/usage" => ("native", "usage"),
        "/v1/pools" => ("native", "pools"),
        "/v1/pools/tokens" => ("native", "import_tokens"),
        "/solve" => ("worker", "solve"),
        _ => return None,
    })
}

pub async fn count(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .and_then(|p| labels(p.as_str()));
    let res = next.run(req).await;
    if let Some((api, endpoint)) = route {
        let status = res.status();
        let outcome = match res.extensions().get::<ErrorCode>() {
            Some(ErrorCode(code)) => code.as_str(),
            None if status.is_success() => "ok",
            // An answer without a code (a framework rejection): its HTTP status.
            None => status.as_str(),
        };
        state.metrics.request(api, endpoint, outcome);
    }
    res
}
