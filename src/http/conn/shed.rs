//! What a connection past `max_connections` gets: its first request head is read and answered
//! `503 Service Unavailable` with `Retry-After: 1` and `Connection: close`, in the native error
//! shape, without reading any body; past [`SHED_SLOTS`](super::SHED_SLOTS) such connections at
//! once, it is closed as soon as it is accepted.
//!
//! Why answer rather than close: behind NGINX or an ingress, a 503 is what the proxy and the
//! clients already treat as "not processed here, safe to try another instance"
//! (`proxy_next_upstream http_503`, the balancing clients; docs/DEPLOY.md "Load balancing"), and
//! it is the same answer as the admission limit's. A connection closed after it was accepted
//! looks like an instance failing mid-request instead: nginx answers the caller 502 and does not
//! move a POST on (the request was sent), and a client cannot tell whether work started. Not
//! accepting at all would leave callers waiting silently in the kernel's backlog.
//! Reading a head costs a read buffer for a moment, so the head must come within
//! [`SHED_HEAD_TIMEOUT`] and the overflow has its own small cap.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::ConnSettings;

/// How long a connection past the cap may take over its head (and TLS handshake): an honest
/// client or proxy writes its head right after connecting.
pub const SHED_HEAD_TIMEOUT: Duration = Duration::from_secs(2);

const BODY: &str = r#"{"error":{"code":"overloaded","message":"this instance is at max_connections; retry here or elsewhere"}}"#;

/// The limits a connection past the cap is watched under.
pub fn shed_limits(settings: &ConnSettings) -> ConnSettings {
    ConnSettings {
        header_timeout: settings.header_timeout.min(SHED_HEAD_TIMEOUT),
        ..*settings
    }
}

/// Answers the first request on `stream` with the 503, then closes it.
pub fn serve_shed<S>(stream: S, read_buffer: usize) -> impl Future<Output = ()> + Send
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = http1::Builder::new();
    builder.keep_alive(false).max_buf_size(read_buffer);
    let service = service_fn(|_| async { Ok::<_, Infallible>(overloaded()) });
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    async move {
        if let Err(e) = connection.await {
            tracing::trace!(error = %e, "connection past the cap ended with an error");
        }
    }
}

fn overloaded() -> hyper::Response<Body> {
    let mut res = hyper::Response::new(Body::from(BODY));
    *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = res.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    res
}
