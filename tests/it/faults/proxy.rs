//! The fault proxy itself, so the other fault tests can trust what it does.

use super::*;
use crate::support::fault_proxy::{FaultProxy, Mode};

/// The proxy itself, against an echo server: passing echoes, a stalled stream resumes intact,
/// a reset connection reads an RST, and a blackholed one is closed when the proxy passes again
/// (what it swallowed is gone).
#[tokio::test]
async fn the_fault_proxy_passes_stalls_resets_and_blackholes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo_addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let proxy = FaultProxy::start(echo_addr).await;
    let connect = || tokio::net::TcpStream::connect(proxy.addr);
    let mut buf = [0u8; 5];

    let mut conn = connect().await.unwrap();
    conn.write_all(b"hello").await.unwrap();
    within(SOON, "echo through the proxy", conn.read_exact(&mut buf))
        .await
        .unwrap();
    assert_eq!(&buf, b"hello");

    proxy.set(Mode::Stall);
    conn.write_all(b"world").await.unwrap();
    proxy.set(Mode::Pass);
    within(SOON, "a stalled stream resumes", conn.read_exact(&mut buf))
        .await
        .unwrap();
    assert_eq!(&buf, b"world", "nothing lost while stalled");

    proxy.set(Mode::Reset);
    let read = within(SOON, "an existing connection reset", conn.read(&mut buf)).await;
    assert!(
        matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{read:?}"
    );
    let mut fresh = connect().await.unwrap();
    let read = within(SOON, "a new connection reset", fresh.read(&mut buf)).await;
    assert!(
        matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{read:?}"
    );

    proxy.set(Mode::Blackhole);
    let mut hole = connect().await.unwrap();
    hole.write_all(b"gone!").await.unwrap();
    eventually_showing(SOON, "the proxy swallowed the bytes", || async {
        (proxy.swallowed() >= 5, proxy.swallowed())
    })
    .await;
    proxy.set(Mode::Pass);
    let read = within(SOON, "a blackholed connection ends", hole.read(&mut buf)).await;
    assert!(
        matches!(&read, Ok(0)) || read.is_err(),
        "no echo of swallowed bytes: {read:?}"
    );
    let mut after = connect().await.unwrap();
    after.write_all(b"again").await.unwrap();
    within(SOON, "passing again", after.read_exact(&mut buf))
        .await
        .unwrap();
    assert_eq!(&buf, b"again");
}

/// Dropped replies, against an echo server that counts what reaches it: the request arrives,
/// the echo is thrown away, and the connection ends when the proxy passes again (the streams
/// are out of step).
#[tokio::test]
async fn the_fault_proxy_drops_replies_to_requests_that_arrived() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo_addr = echo.local_addr().unwrap();
    let arrived = Arc::new(AtomicU64::new(0));
    let counter = arrived.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    counter.fetch_add(n as u64, Ordering::SeqCst);
                    if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let proxy = FaultProxy::start(echo_addr).await;
    let mut conn = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();

    proxy.set(Mode::DropReplies);
    conn.write_all(b"lost?").await.unwrap();
    eventually_showing(
        SOON,
        "the request arrived and its echo was dropped",
        || async {
            let (arrived, dropped) = (arrived.load(Ordering::SeqCst), proxy.swallowed());
            (arrived >= 5 && dropped >= 5, (arrived, dropped))
        },
    )
    .await;
    proxy.set(Mode::Pass);
    let mut buf = [0u8; 5];
    let read = within(SOON, "the connection ends", conn.read(&mut buf)).await;
    assert!(
        matches!(&read, Ok(0)) || read.is_err(),
        "no echo of a dropped reply: {read:?}"
    );
}
