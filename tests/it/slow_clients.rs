//! Slow, silent and idle clients against the real binary, over real sockets: every stalled
//! connection is closed by the timeout of the phase it stalls in (docs/CONFIGURATION.md
//! "Connections") while a caller waiting longer than every timeout for its solve is served; the
//! connection cap answers 503 with `Retry-After`; a request without a valid key is refused
//! before its body is read. Timeouts are set short in each test's configuration, and every wait
//! is for a socket's end, bounded only to end a hang.

use std::io::Write;
use std::time::Duration;

use futures::future::join_all;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::support::KEY;
use crate::support::eventually::eventually;
use crate::support::gateway::{GatewayProcess, Launch};

/// Ends a hang; never reached when the timeouts work.
const HANG: Duration = Duration::from_secs(60);

/// A gateway process on the in-process simulator, keyed, with `connections` as its
/// `[connections]` table and every solve taking `solve`.
async fn start_gateway(connections: &str, solve: &str) -> GatewayProcess {
    Launch::serve(format!(
        "provider = \"sim\"\nlisten = \"127.0.0.1:0\"\nwarmup_s = 0\ngateway_keys = [\"{KEY}\"]\n\
         [connections]\n{connections}\n\
         [sim]\nthreads = 50\nlatency = {{ recaptcha_v2 = \"{solve}\" }}\n"
    ))
    .start()
    .await
}

/// Reads until the server closes the connection (end of stream or a reset); returns what came.
async fn until_closed(stream: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one response (head and `Content-Length` body) and leaves the connection open.
async fn read_response(stream: &mut (impl AsyncRead + Unpin)) -> (u16, String, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if got.len() >= end + 4 + length {
                let status = head[9..12].parse().unwrap();
                let body = String::from_utf8_lossy(&got[end + 4..end + 4 + length]).into_owned();
                return (status, head, body);
            }
        }
        let n = stream.read(&mut buf).await.expect("the response arrives");
        assert!(
            n > 0,
            "closed mid-response: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
}

/// How a stalled client stalls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Stall {
    /// Connects and sends nothing.
    Silent,
    /// Sends half a request head, then nothing.
    HalfHead,
    /// Sends a head one byte every 200 ms, never finishing it.
    DrippingHead,
    /// Sends a keyed head and 10 bytes of a 100,000-byte body, then nothing.
    StalledBody,
    /// Sends that body at 50 bytes/s, in steps never 1 s apart.
    TricklingBody,
    /// Completes a request, then keeps the connection open without another.
    IdleKeepAlive,
}

const BODY_HEAD: &str = "POST /v1/solve HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n";

/// Opens one connection that stalls as `stall` says; returns it with the instant from which
/// its timeout cannot have started earlier.
async fn open(addr: &str, stall: Stall) -> (TcpStream, Instant) {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.expect("connect");
    match stall {
        Stall::Silent | Stall::DrippingHead => {}
        Stall::HalfHead => s
            .write_all(b"POST /v1/solve HTTP/1.1\r\nHost: gw\r\nContent-Le")
            .await
            .unwrap(),
        Stall::StalledBody | Stall::TricklingBody => {
            let head = format!("{BODY_HEAD}Authorization: Bearer {KEY}\r\n\r\n{{\"kind\": \"");
            s.write_all(head.as_bytes()).await.unwrap();
        }
        Stall::IdleKeepAlive => {
            s.write_all(b"GET /livez HTTP/1.1\r\nHost: gw\r\n\r\n")
                .await
                .unwrap();
            let (status, _, body) = read_response(&mut s).await;
            assert_eq!((status, body.as_str()), (200, "ok"));
        }
    }
    (s, started)
}

/// Waits for the server to close `s`, writing to it meanwhile as a dripping client does;
/// returns the time from `started` to the close.
async fn closed_after(mut s: TcpStream, stall: Stall, started: Instant) -> Duration {
    let drip: &[u8] = match stall {
        Stall::DrippingHead => b"GET /livez HTTP/1.1\r\nHost: gw\r\nX-Drip: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        Stall::TricklingBody => b"recaptcha_v2xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        _ => b"",
    };
    let step = if stall == Stall::TricklingBody { 10 } else { 1 };
    if drip.is_empty() {
        until_closed(&mut s).await;
        return started.elapsed();
    }
    // The client's own pace, not a wait for the server: it writes on a clock, as a slow client
    // does, until the server closes the connection.
    let mut every = tokio::time::interval(Duration::from_millis(200));
    let mut buf = [0u8; 1024];
    for chunk in drip.chunks(step).cycle() {
        tokio::select! {
            read = s.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            _ = every.tick() => {
                if s.write_all(chunk).await.is_err() {
                    break;
                }
            }
        }
    }
    started.elapsed()
}

fn stats(mut times: Vec<Duration>) -> String {
    times.sort();
    let median = times[times.len() / 2];
    let max = times[times.len() - 1];
    format!(
        "median {:.2} s, max {:.2} s",
        median.as_secs_f64(),
        max.as_secs_f64()
    )
}

#[tokio::test]
async fn stalled_clients_are_closed_by_their_timeouts_while_a_waiting_caller_is_served() {
    let gw = start_gateway(
        "header_timeout_s = 1\nidle_timeout_s = 3\nbody_timeout_s = 1\nmin_body_rate = 1000",
        "4s",
    )
    .await;
    let http = reqwest::Client::new();
    let rss_before = gw.memory_kb("VmRSS:");
    let plan = [
        (Stall::Silent, 600),
        (Stall::HalfHead, 600),
        (Stall::DrippingHead, 200),
        (Stall::StalledBody, 300),
        (Stall::TricklingBody, 100),
        (Stall::IdleKeepAlive, 200),
    ];
    let mut waits = Vec::new();
    for (stall, count) in plan {
        for _ in 0..count {
            let (s, started) = open(gw.addr(), stall).await;
            waits.push(tokio::spawn(async move {
                (stall, closed_after(s, stall, started).await)
            }));
        }
    }
    let opened = waits.len();

    // A caller whose solve takes longer than every timeout, asking while the stalled
    // connections are open: it is answered, not cut.
    let asked = Instant::now();
    let res = http
        .post(format!("{}/v1/solve", gw.base))
        .bearer_auth(KEY)
        .json(&json!({"kind": "recaptcha_v2", "sitekey": "6Le-slow", "pageurl": "https://example.com/"}))
        .send()
        .await
        .expect("the waiting caller's connection is not cut");
    let waited = asked.elapsed();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    let token = v["token"].as_str().expect("a token");
    let verdict = crate::support::verify_at(&http, &format!("{}/sim", gw.base), token).await;
    assert_eq!(verdict["success"], true, "{verdict}");
    assert!(
        waited >= Duration::from_secs(4),
        "the solve took {waited:?}"
    );

    let closed = tokio::time::timeout(HANG, join_all(waits))
        .await
        .expect("every stalled connection is closed by its timeout");
    let mut by_stall = std::collections::BTreeMap::<Stall, Vec<Duration>>::new();
    for joined in closed {
        let (stall, after) = joined.unwrap();
        by_stall.entry(stall).or_default().push(after);
    }
    // No connection is closed before its phase's timeout: a head gets 1 s from connect, a
    // kept-alive connection 3 s from its request, a body 1 s of grace.
    for (stall, times) in &by_stall {
        let floor = match stall {
            Stall::IdleKeepAlive => Duration::from_secs(3),
            _ => Duration::from_secs(1),
        };
        let earliest = times.iter().min().unwrap();
        assert!(earliest >= &floor, "{stall:?} closed after {earliest:?}");
    }
    let timed_out = |phase: &'static str| {
        let label = format!("phase=\"{phase}\"");
        let gw = &gw;
        let http = &http;
        async move {
            crate::support::metric_sum_where(
                http,
                &gw.base,
                "captcha_gateway_connections_timed_out_total",
                &[&label],
            )
            .await
        }
    };
    let (header, body, idle) = (
        timed_out("header").await,
        timed_out("body").await,
        timed_out("idle").await,
    );
    assert!(
        header >= 1400 && body >= 400 && idle >= 200,
        "{header} {body} {idle}"
    );
    let summary: Vec<String> = by_stall
        .iter()
        .map(|(stall, times)| format!("{stall:?} {} ({})", times.len(), stats(times.clone())))
        .collect();
    println!(
        "FIGURE slow_clients: {opened} stalled connections opened, {} closed by their timeout \
         (header 1 s, idle 3 s, body 1 s + 1000 B/s); {}; one caller waiting {:.1} s served; \
         gateway RSS {} kB before, {} kB peak (VmHWM), {} kB after",
        by_stall.values().map(Vec::len).sum::<usize>(),
        summary.join("; "),
        waited.as_secs_f64(),
        rss_before,
        gw.memory_kb("VmHWM:"),
        gw.memory_kb("VmRSS:"),
    );
}

#[tokio::test]
async fn past_the_cap_a_connection_is_answered_503_and_a_freed_place_is_served_again() {
    let gw = start_gateway("max = 20\nheader_timeout_s = 60", "100ms").await;
    // One kept-alive connection to watch the gauge through, and 19 silent ones: the cap is full.
    let (mut watcher, _) = open(gw.addr(), Stall::Silent).await;
    let mut held = Vec::new();
    for _ in 0..19 {
        held.push(open(gw.addr(), Stall::Silent).await.0);
    }
    let scrape = "GET /metrics HTTP/1.1\r\nHost: gw\r\n\r\n";
    let watching = tokio::sync::Mutex::new(&mut watcher);
    eventually(HANG, "all 20 connections to be counted", || async {
        let mut watcher = watching.lock().await;
        watcher.write_all(scrape.as_bytes()).await.unwrap();
        let (_, _, body) = read_response(&mut **watcher).await;
        body.lines().any(|l| l == "captcha_gateway_connections 20")
    })
    .await;
    let watcher = watching.into_inner();

    // The 21st: its head is read and answered at once, its body is not, and it is closed.
    let mut over = TcpStream::connect(gw.addr()).await.unwrap();
    let head = format!("{BODY_HEAD}Authorization: Bearer {KEY}\r\n\r\n");
    over.write_all(head.as_bytes()).await.unwrap();
    let answer = tokio::time::timeout(HANG, until_closed(&mut over))
        .await
        .expect("a connection past the cap is answered, not left hanging");
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1\r\n"), "{answer}");
    assert!(answer.contains("connection: close\r\n"), "{answer}");
    assert!(answer.contains("\"code\":\"overloaded\""), "{answer}");

    // The held connections were not disturbed: the watcher is still served.
    watcher.write_all(scrape.as_bytes()).await.unwrap();
    let (status, _, body) = read_response(watcher).await;
    assert_eq!(status, 200);
    assert!(
        body.lines()
            .any(|l| l == "captcha_gateway_connections_refused_total{answer=\"503\"} 1"),
        "{body}"
    );

    // A place freed is a place served.
    drop(held.pop());
    eventually(
        HANG,
        "a new connection to be served once a place is free",
        || async {
            let mut s = TcpStream::connect(gw.addr()).await.unwrap();
            s.write_all(b"GET /livez HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let got = until_closed(&mut s).await;
            got.starts_with(b"HTTP/1.1 200")
        },
    )
    .await;
}

/// Sends a head declaring a 5 MB body and 64 KiB of it, then only reads: the answer must come
/// without the rest of the body. Returns the status line and the body of the answer.
async fn refused_before_the_body(addr: &str, head: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&vec![b'a'; 64 * 1024]).await.unwrap();
    let (status, _, body) = tokio::time::timeout(HANG, read_response(&mut s))
        .await
        .unwrap_or_else(|_| panic!("answered before the body was sent: {head}"));
    // The connection is closed rather than the rest of the body read.
    tokio::time::timeout(HANG, until_closed(&mut s))
        .await
        .expect("the connection is closed after the refusal");
    (status, body)
}

#[tokio::test]
async fn a_big_body_without_a_valid_key_is_refused_before_it_is_read() {
    let gw = start_gateway("", "100ms").await;
    let wrong = "ffffffffffffffffffffffffffffffff";
    let length = "Content-Length: 5000000\r\n";
    let native = |auth: &str| {
        format!(
            "POST /v1/solve HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n{length}{auth}\r\n"
        )
    };

    let (status, body) = refused_before_the_body(gw.addr(), &native("")).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (401, Some("ERROR_WRONG_USER_KEY"))
    );
    let (status, body) = refused_before_the_body(
        gw.addr(),
        &native(&format!("Authorization: Bearer {wrong}\r\n")),
    )
    .await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (401, Some("ERROR_KEY_DOES_NOT_EXIST"))
    );
    let tokens = format!(
        "POST /v1/pools/tokens HTTP/1.1\r\nHost: gw\r\n{length}Authorization: bearer {wrong}\r\n\r\n"
    );
    assert_eq!(refused_before_the_body(gw.addr(), &tokens).await.0, 401);
    let seed = format!(
        "POST /solve HTTP/1.1\r\nHost: gw\r\n{length}Authorization: Bearer {wrong}\r\n\r\n"
    );
    assert_eq!(refused_before_the_body(gw.addr(), &seed).await.0, 401);
    // The compatible API: the key in the query string decides, in its protocol.
    let compat = format!(
        "POST /in.php?key={wrong}&json=1 HTTP/1.1\r\nHost: gw\r\n{length}Content-Type: multipart/form-data; boundary=x\r\n\r\n"
    );
    let (status, body) = refused_before_the_body(gw.addr(), &compat).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, v["request"].as_str()),
        (200, Some("ERROR_KEY_DOES_NOT_EXIST"))
    );
    // With a valid key, a body declared over the limit is refused unread too.
    let (status, body) = refused_before_the_body(
        gw.addr(),
        &native(&format!("Authorization: BEARER {KEY}\r\n")),
    )
    .await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (413, Some("body_too_large"))
    );
}

#[test]
fn bad_connection_settings_exit_2_naming_the_setting() {
    for (line, names) in [
        ("max = 0", "connections.max"),
        ("header_timeout_s = 0", "connections.header_timeout_s"),
        ("idle_timeout_s = 3601", "connections.idle_timeout_s"),
        ("body_timeout_s = -1", "connections.body_timeout_s"),
        ("min_body_rate = -5", "connections.min_body_rate"),
    ] {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(
            file,
            "provider = \"sim\"\nlisten = \"127.0.0.1:0\"\n[connections]\n{line}"
        )
        .unwrap();
        let path = file.path().to_str().unwrap();
        crate::cli::assert_config_error(&["serve", "--config", path], &[], names);
    }
}

#[tokio::test]
async fn tls_connections_get_the_same_timeouts() {
    use std::sync::Arc;

    use captcha_gateway::http::TlsSettings;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, ServerName};

    let ca = crate::support::certs::TestCa::new();
    let server = ca.server("gateway");
    let mut settings = crate::support::fast_settings();
    settings.tls = Some(TlsSettings::load(&server.cert, &server.key).unwrap());
    settings.connections.header_timeout = Duration::from_secs(1);
    settings.connections.idle_timeout = Duration::from_secs(2);
    let gw = crate::support::TestGateway::with(settings).await;

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca.ca_path()).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let connect = || async {
        let started = Instant::now();
        let tcp = TcpStream::connect(gw.gateway.addr).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        (
            connector.connect(name, tcp).await.expect("handshake"),
            started,
        )
    };

    // Silent after the handshake: the head's timeout runs from accept.
    let (mut silent, started) = connect().await;
    tokio::time::timeout(HANG, until_closed(&mut silent))
        .await
        .expect("a silent TLS connection is closed");
    assert!(started.elapsed() >= Duration::from_secs(1));
    // Idle after a request: the keep-alive timeout runs from the response.
    let (mut idle, _) = connect().await;
    let asked = Instant::now();
    idle.write_all(b"GET /livez HTTP/1.1\r\nHost: gw\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_response(&mut idle).await.0, 200);
    tokio::time::timeout(HANG, until_closed(&mut idle))
        .await
        .expect("an idle TLS connection is closed");
    assert!(asked.elapsed() >= Duration::from_secs(2));
}
