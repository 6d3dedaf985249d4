//! A TCP proxy that breaks the road on command: put between the gateway and Redis, or between
//! the gateway and the provider, it forwards bytes until a test switches it to a fault, and
//! forwards again when switched back.
//!
//! Modes (they apply to new and existing connections alike):
//!
//! - [`Mode::Pass`]: forward both ways.
//! - [`Mode::Blackhole`]: accept and read, never answer and forward nothing (a host that vanished
//!   behind a firewall). Bytes swallowed here are lost, so when the proxy passes again those
//!   connections are closed and clients must reconnect.
//! - [`Mode::Reset`]: close every connection with a TCP RST, new ones at once (a crashed peer).
//! - [`Mode::Stall`]: stop forwarding mid-stream without closing or reading (a peer that hangs);
//!   nothing is lost, and passing again resumes each stream where it stopped.
//! - [`Mode::DropReplies`]: forward what clients send, throw away what the server answers (a
//!   command that reached Redis and ran, its reply lost on the way back). Like a blackhole, the
//!   streams are out of step afterwards, so passing again closes them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Blackhole,
    Reset,
    Stall,
    DropReplies,
    /// Requests pass; replies wait in the socket until another mode lets them through intact.
    HoldReplies,
}

pub struct FaultProxy {
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
    accept: JoinHandle<()>,
    swallowed: Arc<AtomicU64>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `target` (in [`Mode::Pass`]).
    pub async fn start(target: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let (mode, _) = watch::channel(Mode::Pass);
        let modes = mode.clone();
        let swallowed = Arc::new(AtomicU64::new(0));
        let counter = swallowed.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, target, modes.subscribe(), counter.clone()));
            }
        });
        FaultProxy {
            addr,
            mode,
            accept,
            swallowed,
        }
    }

    /// Switches every connection, present and future, to `mode`.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Bytes read and thrown away (blackholed requests, dropped replies), over all connections.
    pub fn swallowed(&self) -> u64 {
        self.swallowed.load(Ordering::SeqCst)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Connection tasks end when they see the sender gone.
        self.accept.abort();
    }
}

/// How a stretch of one mode ended.
enum Ended {
    /// The mode changed: look again.
    Switched,
    /// A side closed or the proxy is gone: the connection is over.
    Closed,
}

async fn relay(
    mut client: TcpStream,
    target: SocketAddr,
    mut mode: watch::Receiver<Mode>,
    swallowed_bytes: Arc<AtomicU64>,
) {
    let mut upstream: Option<TcpStream> = None;
    let mut swallowed = false;
    loop {
        let current = *mode.borrow_and_update();
        let ended = match current {
            Mode::Reset => {
                reset(client);
                return;
            }
            Mode::Stall => match mode.changed().await {
                Ok(()) => Ended::Switched,
                Err(_) => Ended::Closed,
            },
            Mode::Blackhole => {
                swallowed = true;
                swallow(&mut client, &mut mode, &swallowed_bytes).await
            }
            Mode::DropReplies | Mode::HoldReplies => {
                swallowed |= current == Mode::DropReplies;
                if upstream.is_none() {
                    match TcpStream::connect(target).await {
                        Ok(s) => upstream = Some(s),
                        Err(_) => {
                            reset(client);
                            return;
                        }
                    }
                }
                let Some(up) = upstream.as_mut() else { return };
                let replies = match current {
                    Mode::DropReplies => Replies::Drop(&swallowed_bytes),
                    _ => Replies::Hold,
                };
                pump(&mut client, up, &mut mode, replies).await
            }
            Mode::Pass if swallowed => {
                // The stream lost bytes while blackholed: it cannot be resumed.
                reset(client);
                return;
            }
            Mode::Pass => {
                if upstream.is_none() {
                    match TcpStream::connect(target).await {
                        Ok(s) => upstream = Some(s),
                        Err(_) => {
                            reset(client);
                            return;
                        }
                    }
                }
                let Some(up) = upstream.as_mut() else { return };
                pump(&mut client, up, &mut mode, Replies::Pass).await
            }
        };
        if matches!(ended, Ended::Closed) {
            return;
        }
    }
}

/// Reads and discards what the client sends until the mode changes or the client leaves.
async fn swallow(
    client: &mut TcpStream,
    mode: &mut watch::Receiver<Mode>,
    swallowed: &AtomicU64,
) -> Ended {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = client.read(&mut buf) => match read {
                Ok(0) | Err(_) => return Ended::Closed,
                Ok(n) => {
                    swallowed.fetch_add(n as u64, Ordering::SeqCst);
                }
            },
            changed = mode.changed() => return match changed {
                Ok(()) => Ended::Switched,
                Err(_) => Ended::Closed,
            },
        }
    }
}

/// What [`pump`] does with what the server sends.
enum Replies<'a> {
    Pass,
    /// Counted here and discarded.
    Drop(&'a AtomicU64),
    /// Left unread, so it reaches the client once the mode changes.
    Hold,
}

/// Copies both ways until the mode changes or both directions have ended, replies as `replies`
/// says.
async fn pump(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    mode: &mut watch::Receiver<Mode>,
    replies: Replies<'_>,
) -> Ended {
    let (mut client_read, mut client_write) = client.split();
    let (mut up_read, mut up_write) = upstream.split();
    let mut to_up = vec![0u8; 16 * 1024];
    let mut to_client = vec![0u8; 16 * 1024];
    let (mut client_done, mut up_done) = (false, false);
    loop {
        if client_done && up_done {
            return Ended::Closed;
        }
        tokio::select! {
            read = client_read.read(&mut to_up), if !client_done => match read {
                Ok(0) | Err(_) => {
                    client_done = true;
                    let _ = up_write.shutdown().await;
                }
                Ok(n) => {
                    if up_write.write_all(&to_up[..n]).await.is_err() {
                        return Ended::Closed;
                    }
                }
            },
            read = up_read.read(&mut to_client), if !up_done && !matches!(replies, Replies::Hold) => match read {
                Ok(0) | Err(_) => {
                    up_done = true;
                    let _ = client_write.shutdown().await;
                }
                Ok(n) => {
                    if let Replies::Drop(dropped) = replies {
                        dropped.fetch_add(n as u64, Ordering::SeqCst);
                    } else if client_write.write_all(&to_client[..n]).await.is_err() {
                        return Ended::Closed;
                    }
                }
            },
            changed = mode.changed() => return match changed {
                Ok(()) => Ended::Switched,
                Err(_) => Ended::Closed,
            },
        }
    }
}

/// Closes with an RST instead of a FIN: a zero linger makes the close abortive.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}
