//! One id per HTTP request (docs/API.md "Request ids"): the caller's `X-Request-Id` when it is
//! safe to repeat, a fresh one otherwise. It names the request's log span, goes back in the
//! response's `X-Request-Id` header on every route, and follows the work the request starts:
//! upstream tasks log it (their span is a child of the request's), and a task handed to the
//! queue carries it in its entry so the worker's lines for that task show it.
//!
//! A caller's value is accepted only when it is 1-64 characters of `A-Z a-z 0-9 - _ . :`: it is
//! repeated in logs and headers, where anything else could forge log lines, smuggle a header or
//! carry a secret. A refused value is replaced, never echoed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::http::{HeaderName, HeaderValue, Request, Response};
use rand::Rng;
use tokio::task::futures::TaskLocalFuture;
use tracing::Instrument;
use tracing::instrument::Instrumented;

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

/// The layer, outermost on a router: picks the id, opens the request's span, runs the rest
/// inside both, and sets the response header whatever the answer (errors and 404s included).
/// Hand-written rather than `middleware::from_fn`, which boxes a future and a copy of the route
/// per request (docs/BENCHMARKS.md). Its debug line ends each request with its status and time.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestIdLayer;

impl<S> tower::Layer<S> for RequestIdLayer {
    type Service = WithRequestId<S>;

    fn layer(&self, inner: S) -> WithRequestId<S> {
        WithRequestId { inner }
    }
}

#[derive(Clone, Debug)]
pub struct WithRequestId<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for WithRequestId<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Identified<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
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
        // Visible ASCII by `accept` and `fresh`, so this is always a valid header value.
        let header = HeaderValue::from_str(id.as_str()).ok();
        let answer = span.in_scope(|| self.inner.call(req));
        Identified {
            inner: CURRENT.scope(id, answer).instrument(span),
            header,
            started: Instant::now(),
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's answer, running in its span with its id current; it gets the id's header.
    pub struct Identified<F> {
        #[pin]
        inner: Instrumented<TaskLocalFuture<RequestId, F>>,
        header: Option<HeaderValue>,
        started: Instant,
    }
}

impl<F, B, E> Future for Identified<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let mut res = std::task::ready!(this.inner.as_mut().poll(cx));
        if let Ok(res) = &mut res {
            if let Some(header) = this.header.take() {
                res.headers_mut().insert(HEADER.clone(), header);
            }
            let took_ms = this.started.elapsed().as_secs_f64() * 1e3;
            this.inner
                .span()
                .in_scope(|| tracing::debug!(status = res.status().as_u16(), took_ms, "answered"));
        }
        Poll::Ready(res)
    }
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
