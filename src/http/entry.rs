//! The HTTP layer's body parsers without a server, for the fuzz targets in `fuzz/`
//! (docs/FUZZING.md): they drive exactly what the handlers run on a request body.

use axum::body::Bytes;

use crate::model::SolveRequest;

/// Parses a native JSON body as `POST /v1/solve` and `POST /v1/tasks` do. The error is the
/// `code` of the 4xx answer a caller would get.
pub fn parse_native_body(body: &[u8]) -> Result<SolveRequest, String> {
    let parsed =
        futures::executor::block_on(super::native::parse_native(Bytes::copy_from_slice(body)));
    parsed.map(|native| native.req).map_err(|e| e.code)
}
