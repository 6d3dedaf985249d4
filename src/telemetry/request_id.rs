//! One id per HTTP request (docs/API.md "Request ids"): the caller's `X-Request-Id` when it is
//! safe to repeat, a fresh one otherwise. It names the request's log span, goes back in the
//! response's `X-Request-Id` header on every route, and follows the work the request starts:
//! upstream tasks log it (their span is a child of the request's), and a task handed to the
//! queue carries it in its entry so the worker's lines for that task show it.
//!
//! A caller's value is accepted only when it is 1-64 characters of `A-Z a-z 0-9 - _ . :`: it is
//! repeated in logs and headers, where anything else could forge log lines, smuggle a header or
//! carry a secret. A refused value is replaced, never echoed.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use rand::Rng;

/// The header a request id travels in, both ways.
pub static HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest caller-chosen id repeated back: room for a UUID with a prefix, or a trace id.
pub const MAX_LEN: usize = 64;

tokio::task_local! {
    /// The id of the request whose handler is running (the queue's front end reads it).
    static CURRENT: RequestId;
}

/// A request's id, safe to log and to put in a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(String);

impl RequestId {
    /// The caller's id when it is safe to repeat, otherwise `None`.
    pub fn accept(raw: &[u8]) -> Option<RequestId> {
        let safe = !raw.is_empty()
            && raw.len() <= MAX_LEN
            && raw
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
        // Checked ASCII above, so the conversion cannot fail.
        safe.then(|| RequestId(String::from_utf8_lossy(raw).into_owned()))
    }

    /// A fresh id: 128 random bits as 32 hex digits.
    pub fn fresh() -> RequestId {
        RequestId(format!("{:032x}", rand::rng().random::<u128>()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id of the request being handled on this task, if any.
    pub fn current() -> Option<RequestId> {
        CURRENT.try_with(Clone::clone).ok()
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Middleware, outermost on the router: picks the id, opens the request's span, runs the rest
/// inside both, and sets the response header whatever the answer (errors and 404s included).
pub async fn layer(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&HEADER)
        .and_then(|v| RequestId::accept(v.as_bytes()))
        .unwrap_or_else(RequestId::fresh);
    req.extensions_mut().insert(id.clone());
    // The path only: compatible clients send their key in the query string.
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %req.method(),
        path = %req.uri().path(),
    );
    let header = HeaderValue::from_str(id.as_str()).expect("a request id is visible ASCII");
    let mut response =
        tracing::Instrument::instrument(CURRENT.scope(id, next.run(req)), span).await;
    response.headers_mut().insert(HEADER.clone(), header);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_ids_are_kept_and_others_refused() {
        for ok in ["abc", "0f9e-uuid-like_1.2:3", &"a".repeat(MAX_LEN)] {
            assert_eq!(RequestId::accept(ok.as_bytes()).unwrap().as_str(), ok);
        }
        for refused in [
            "",
            &"a".repeat(MAX_LEN + 1),
            "has space",
            "line\nbreak",
            "quote\"",
            "key=secret",
            "user:pass@host",
            "é",
        ] {
            assert!(
                RequestId::accept(refused.as_bytes()).is_none(),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn fresh_ids_are_acceptable_and_distinct() {
        let (a, b) = (RequestId::fresh(), RequestId::fresh());
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert!(RequestId::accept(a.as_str().as_bytes()).is_some());
    }
}
