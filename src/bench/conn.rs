//! A minimal HTTP/1.1 keep-alive client for the hot loops of `hit` and `seed-stack`, where the
//! load generator shares two cores with the gateway and Redis: a request is a pre-built byte
//! string, a reply is read by `Content-Length`. It costs a fraction of a general client's CPU per request, so
//! the gateway, not the load, is what the figure measures.
//!
//! Only what the gateway sends is understood: a status line, headers with `Content-Length`,
//! a body. Anything else is an error, never a silent misread.

use std::io;
use std::sync::Mutex;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One keep-alive connection.
pub struct RawConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

impl RawConn {
    pub async fn connect(addr: &str) -> io::Result<RawConn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(RawConn {
            stream,
            buf: Vec::with_capacity(4096),
        })
    }

    /// Sends `request` and returns the status and body of the reply.
    pub async fn send(&mut self, request: &[u8]) -> io::Result<(u16, &[u8])> {
        self.stream.write_all(request).await?;
        self.buf.clear();
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.read_more().await?;
        };
        let head = std::str::from_utf8(&self.buf[..head_end]).map_err(|_| bad("head"))?;
        let status = head
            .get(9..12)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| bad("status line"))?;
        let length = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            })
            .ok_or_else(|| bad("no content-length"))?;
        while self.buf.len() < head_end + length {
            self.read_more().await?;
        }
        Ok((status, &self.buf[head_end..head_end + length]))
    }

    async fn read_more(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

/// One request on `conn`, opened to `addr` on first use, with what `read` makes of the reply's
/// status and body. The connection comes back unless the exchange itself failed (it is then
/// dropped, and the next call opens another).
pub async fn exchange<T>(
    conn: Option<RawConn>,
    addr: &str,
    request: &[u8],
    read: impl FnOnce(u16, &[u8]) -> Result<T, String>,
) -> (Option<RawConn>, Result<T, String>) {
    let mut conn = match conn {
        Some(c) => c,
        None => match RawConn::connect(addr).await {
            Ok(c) => c,
            Err(e) => return (None, Err(format!("connect: {e}"))),
        },
    };
    let outcome = match conn.send(request).await {
        Ok((status, body)) => read(status, body),
        Err(e) => return (None, Err(format!("request failed: {e}"))),
    };
    (Some(conn), outcome)
}

/// A `POST` with a JSON body and the bench key as bearer token.
pub fn post_json(host: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        super::load::KEY,
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// A `GET`.
pub fn get(host: &str, path_and_query: &str) -> Vec<u8> {
    format!("GET {path_and_query} HTTP/1.1\r\nhost: {host}\r\n\r\n").into_bytes()
}

/// Idle connections to one address, for open-loop load where requests overlap.
pub struct ConnPool {
    addr: String,
    idle: Mutex<Vec<RawConn>>,
}

impl ConnPool {
    pub fn new(addr: &str) -> Self {
        Self {
            addr: addr.to_owned(),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle connection, or a new one.
    pub async fn take(&self) -> io::Result<RawConn> {
        let idle = self
            .idle
            .lock()
            .expect("never poisoned: no panics under it")
            .pop();
        match idle {
            Some(c) => Ok(c),
            None => RawConn::connect(&self.addr).await,
        }
    }

    /// Returns a connection whose last exchange went well.
    pub fn give(&self, conn: RawConn) {
        self.idle
            .lock()
            .expect("never poisoned: no panics under it")
            .push(conn);
    }
}
