//! The OpenAPI 3.1 document of the JSON API (docs/openapi.json), compiled in and served at
//! `GET /openapi.json`. The test `contract` keeps it true: every JSON route is in it, and live
//! answers of each operation validate against it.

use axum::http::header;
use axum::response::IntoResponse;

/// docs/openapi.json, as served.
pub const OPENAPI_JSON: &str = include_str!("../../docs/openapi.json");

pub async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}
