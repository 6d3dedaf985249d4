//! One HTTP exchange with a provider, shared by every protocol's client: a bounded body read,
//! transport errors that name the problem but never the request (its URL or body carries the
//! key), and redaction of a key a provider echoes back.

use std::time::Duration;

use super::error::{ErrorClass, ProviderError};
use super::parse::BAD_RESPONSE;

/// Connection setup should be quick; a slow handshake is a sick route, better retried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The official captchaai SDK's per-request timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends `request` and reads at most `max_body` bytes of its reply: the status and the body
/// as text. A broken upstream streaming without end cannot exhaust memory.
pub(super) async fn send(
    request: reqwest::RequestBuilder,
    max_body: usize,
    key: &str,
) -> Result<(u16, String), ProviderError> {
    let mut resp = request
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await
        .map_err(|e| transport(e, key))?;
    let status = resp.status().as_u16();
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport(e, key))? {
        if body.len() + chunk.len() > max_body {
            return Err(ProviderError::new(
                ErrorClass::Transient,
                BAD_RESPONSE,
                format!("reply larger than {max_body} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A transport failure without the URL (its query string may carry the key) and with the
/// causes, which name the problem (refused, reset, DNS) but not the request.
fn transport(err: reqwest::Error, key: &str) -> ProviderError {
    let timed_out = err.is_timeout();
    let err = err.without_url();
    let mut detail = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        detail.push_str(": ");
        detail.push_str(&cause.to_string());
        source = cause.source();
    }
    if timed_out {
        detail = format!("timed out: {detail}");
    }
    redact(ProviderError::transport(detail), key)
}

/// Belt and braces: a provider echoing our key in an error text must not leak it either.
pub(super) fn redact(mut err: ProviderError, key: &str) -> ProviderError {
    if !key.is_empty() && err.detail.contains(key) {
        err.detail = err.detail.replace(key, "<key>");
    }
    err
}
