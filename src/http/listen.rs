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
//! With `--tls-cert`/`--tls-key` the same connections are served inside rustls (`tls.rs`); the
//! handshake runs in the connection's task, never in the accept loop.
//!
//! Every connection, plain or TLS, is held to the connection layer's timeouts and cap (`conn/`):
//! its task runs the connection under one watcher, and a connection past `max_connections` is
//! answered 503 in a task of its own (`conn/shed.rs`).
//!
//! Measured with `captcha-gateway bench capacity` (docs/BENCHMARKS.md): 338 MB -> 185 MB peak
//! for 10,000 waiting callers.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use futures::FutureExt;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::conn::{Activity, Admit, Connections, Tracked, Watched, serve_shed, shed_limits, watch};

/// The accept queue of the API port. Linux drops a SYN that finds the queue full and the client
/// sends it again a second later, so a burst of new connections (a fleet reconnecting after a
/// deploy, an open-loop client catching up after a stall) waits 1 s or more for nothing; tokio's
/// default is 1,024. The kernel caps it at `net.core.somaxconn` (4,096 on current kernels).
const ACCEPT_BACKLOG: u32 = 4096;

/// Listens on `addr` with room for a burst of connections in the accept queue.
pub fn bind(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As `TcpListener::bind` does: a restarted gateway rebinds while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_BACKLOG)
}

/// hyper's smallest allowed read buffer.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// Pause after an accept error that is not about one connection (out of file descriptors):
/// retrying at once would spin on the same error.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How long a client may take over its TLS handshake. Handshakes run in the connection's own
/// task, so a silent client never holds up accepting; this bounds how long it holds that task
/// (and its socket) for nothing. `header_timeout` bounds the handshake and the head together.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` (over TLS when `tls` is given) until `shutdown` completes, then
/// lets every open connection finish its in-flight requests (idle keep-alive connections are
/// closed) for at most `grace`; connections still busy after that are dropped, so this returns
/// at most `grace` after `shutdown` completes whatever the callers do. Each connection is held to
/// `connections`' timeouts, and at most `max_connections` are served at once (`conn/`).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
    connections: Connections,
) -> io::Result<()> {
    let mut builder = http1::Builder::new();
    builder.max_buf_size(READ_BUFFER_BYTES);
    let graceful = GracefulShutdown::new();
    // Cancelled when the grace period is over: every connection task then drops its connection.
    let hard_stop = CancellationToken::new();
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
        let accepted = Instant::now();
        let permit = match connections.admit() {
            Admit::Serve(permit) => permit,
            Admit::Shed(permit) => {
                let limits = shed_limits(connections.settings());
                let tls = tls.clone();
                let answer = async move {
                    match tls {
                        None => serve_shed(stream, READ_BUFFER_BYTES).await,
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve_shed(stream, READ_BUFFER_BYTES).await;
                            }
                        }
                    }
                };
                let activity = Arc::new(Activity::new(accepted));
                let watched = watch(answer, activity, limits, hard_stop.clone());
                tokio::spawn(watched.map(move |_| drop(permit)));
                continue;
            }
            Admit::Close => {
                drop(stream);
                continue;
            }
        };
        let activity = Arc::new(Activity::new(accepted));
        let stream = Watched::new(stream, activity.clone());
        let service = Tracked::new(router.clone(), activity.clone());
        let (stop, conns) = (hard_stop.clone(), connections.clone());
        // Counted, and the socket closed, before its slot is given back (`Map` drops the watch
        // before it calls the closure).
        let ended = move |ended| {
            conns.ended(ended);
            drop(permit);
        };
        // Two task types: a plain connection's task does not carry room for the TLS state in
        // its future, nor an `async` frame around the connection (10,000 waiting callers pay
        // for every byte of it; docs/BENCHMARKS.md).
        match tls.clone() {
            None => {
                let served = graceful
                    .watch(builder.serve_connection(TokioIo::new(stream), service))
                    .map(log_end);
                let watched = watch(served, activity, connections.clone(), stop);
                tokio::spawn(watched.map(ended));
            }
            Some(acceptor) => {
                // Subscribed now, before any shutdown signal, so a connection whose handshake is
                // still running when shutdown starts is told about it once it is served.
                let served = serve_tls(
                    builder.clone(),
                    service,
                    graceful.watcher(),
                    stream,
                    acceptor,
                );
                let watched = watch(served, activity, connections.clone(), stop);
                tokio::spawn(watched.map(ended));
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_s = grace.as_secs_f64(),
            "shutdown grace period over; closing connections with requests still running"
        );
    }
    hard_stop.cancel();
    Ok(())
}

/// Serves one connection inside TLS once its handshake is done.
async fn serve_tls(
    builder: http1::Builder,
    service: Tracked,
    watcher: Watcher,
    stream: Watched<TcpStream>,
    acceptor: TlsAcceptor,
) {
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => {
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            log_end(watcher.watch(connection).await);
        }
        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!("TLS handshake timed out"),
    }
}

fn log_end(served: Result<(), hyper::Error>) {
    if let Err(e) = served {
        tracing::trace!(error = %e, "connection ended with an error");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// More connections than tokio's default backlog (1,024) arrive at once while nothing
    /// accepts: each completes its handshake in the accept queue. With a full queue Linux drops
    /// the SYN and the client only sends it again after a second or more, so the guard below
    /// (far beyond a loopback handshake) is what a too-small queue runs into.
    #[tokio::test]
    async fn a_burst_of_connections_waits_in_the_accept_queue() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let connects = (0..1_500).map(|_| TcpStream::connect(addr));
        let all = futures::future::join_all(connects);
        let connected = tokio::time::timeout(Duration::from_secs(30), all)
            .await
            .expect("every connection completed its handshake without a SYN sent again");
        assert!(
            connected.iter().all(Result::is_ok),
            "every connect succeeded"
        );
        drop(listener);
    }
}
