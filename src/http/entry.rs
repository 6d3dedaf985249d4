//! The HTTP layer's body parsers without a server, for the fuzz targets in `fuzz/`
//! (docs/FUZZING.md): they drive exactly what the handlers run on a request body.

use super::Limits;
use crate::model::SolveRequest;

/// Parses a native JSON body as `POST /v1/solve` and `POST /v1/tasks` do. The error is the
/// `code` of the 4xx answer a caller would get.
pub fn parse_native_body(body: &[u8]) -> Result<SolveRequest, String> {
    super::native::parse_native(body, Limits::default().max_solve_timeout)
        .map(|native| native.req)
        .map_err(|e| e.code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;

    #[test]
    fn the_fuzzing_entry_point_parses_like_the_handlers() {
        let req = parse_native_body(
            br#"{"kind": "turnstile", "sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://shop.example.com/"}"#,
        )
        .unwrap();
        assert_eq!(req.kind(), Kind::Turnstile);
        assert_eq!(parse_native_body(b"{").unwrap_err(), "bad_json");
        assert_eq!(
            parse_native_body(br#"{"kind": "recaptcha_v2", "sitekey": "k"}"#).unwrap_err(),
            "ERROR_PAGEURL"
        );
        // A timeout past `Duration`'s range once panicked in the handler.
        let huge = br#"{"kind": "recaptcha_v2", "sitekey": "k", "pageurl": "https://a.example/", "timeout_s": 1e20}"#;
        // Refused as `bad_timeout` (past the 600 s maximum), never a panic.
        assert_eq!(parse_native_body(huge).unwrap_err(), "bad_timeout");
    }
}
