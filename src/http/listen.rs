//! Serves the router over TCP with hyper directly rather than `axum::serve`, because a gateway
//! holds one connection per waiting caller (10,000 in the `capacity` benchmark) and the
//! per-connection cost is decided here:
//! - the router is converted into routes once; `axum::serve` re-converts it for every accepted
//!   connection (`Router::with_state` per connection: about 8 KB of cloned routes each);
//! - HTTP/1 read buffers are capped at hyper's minimum (8 KB). Requests are small JSON or forms;
//!   an image upload is read in more, smaller chunks, which costs little next to its solve, while
//!   the adaptive default lets an idle waiting connection keep a 16 KB buffer;
//! - HTTP/1.1 only. Every client library of these APIs speaks HTTP/1.1 to a plain-text port, and
//!   proxies (nginx, ingress controllers) forward HTTP/1.1 to pods; serving cleartext HTTP/2 as
//!   well (hyper-util's `auto` builder) costs about 1.6 KB more per connection for nobody.
//!
//! Measured with `captcha-gateway bench capacity` (docs/BENCHMARKS.md): 338 MB -> 185 MB peak
//! for 10,000 waiting callers.

use std::future::Future;
use std::io;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// hyper's smallest allowed read buffer.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// Pause after an accept error that is not about one connection (out of file descriptors):
/// retrying at once would spin on the same error.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` completes, then lets every open connection
/// finish its in-flight requests (idle keep-alive connections are closed) and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let mut builder = http1::Builder::new();
    builder.max_buf_size(READ_BUFFER_BYTES);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::trace!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Errors that end one accepted connection, not the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
