//! `--tls-cert` / `--tls-key`: the gateway serves HTTPS with a certificate made here (a test CA
//! and a leaf for 127.0.0.1), so `2captcha-python` reaches it with nothing but
//! `server="127.0.0.1:PORT"` (it always speaks https), trusting the CA through
//! `REQUESTS_CA_BUNDLE` exactly as its users would.

use std::path::{Path, PathBuf};

use captcha_gateway::http::TlsSettings;
use serde_json::{Value, json};

use crate::support::certs::TestCa;
use crate::support::{KEY, TestGateway, fast_settings};

/// A certificate authority and a server certificate for 127.0.0.1 signed by it, as PEM files.
struct TestPki {
    _ca: TestCa,
    ca_pem: PathBuf,
    cert_pem: PathBuf,
    key_pem: PathBuf,
}

impl TestPki {
    fn new() -> Self {
        let ca = TestCa::new();
        let server = ca.server("gateway");
        Self {
            ca_pem: ca.ca_path(),
            cert_pem: server.cert,
            key_pem: server.key,
            _ca: ca,
        }
    }

    fn gateway_settings(&self) -> captcha_gateway::config::Settings {
        let mut settings = fast_settings();
        settings.tls = Some(TlsSettings::load(&self.cert_pem, &self.key_pem).unwrap());
        settings
    }

    fn client(&self) -> reqwest::Client {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&self.ca_pem).unwrap()).unwrap();
        reqwest::Client::builder()
            .add_root_certificate(ca)
            .build()
            .unwrap()
    }
}

#[tokio::test]
async fn the_2captcha_python_client_reaches_the_gateway_by_host_and_port_alone() {
    let pki = TestPki::new();
    let gw = TestGateway::with(pki.gateway_settings()).await;
    assert_eq!(gw.gateway.scheme, "https");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/clients.py");
    let out = tokio::process::Command::new(crate::clients::python())
        .arg(script)
        .arg("twocaptcha_server")
        .arg(gw.gateway.addr.to_string())
        .arg(KEY)
        .env("REQUESTS_CA_BUNDLE", &pki.ca_pem)
        .output()
        .await
        .expect("python runs");
    assert!(
        out.status.success(),
        "2captcha-python over https failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out: Value = serde_json::from_slice(&out.stdout).expect("the script prints JSON");
    let token = out["results"][0]["answer"].as_str().expect("a token");
    gw.verify(token).await.expect("the token verifies");
    assert!(out["extras"]["balance"].as_f64().is_some(), "{out}");
}

#[tokio::test]
async fn https_serves_every_api_and_plain_http_gets_no_answer() {
    let pki = TestPki::new();
    let gw = TestGateway::with(pki.gateway_settings()).await;
    let https = pki.client();
    let base = format!("https://{}", gw.gateway.addr);
    // A client that connects and never says a word holds only its own task: the handshake runs
    // off the accept loop, so everyone else is served meanwhile.
    let _silent = tokio::net::TcpStream::connect(gw.gateway.addr)
        .await
        .unwrap();
    let res = https
        .post(format!("{base}/v1/solve"))
        .bearer_auth(KEY)
        .json(&json!({"kind": "turnstile", "sitekey": "0x4AAAAAAAtls", "pageurl": "https://tls.example.com/"}))
        .send()
        .await
        .expect("an https answer");
    assert_eq!(res.status().as_u16(), 200);
    let body: Value = res.json().await.unwrap();
    gw.verify(body["token"].as_str().unwrap()).await.unwrap();
    let threads = https
        .get(format!("{base}/res.php?key={KEY}&action=threadsinfo"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(threads.contains("\"threads\""), "{threads}");

    // A client that does not trust the CA is refused at the handshake, and plain HTTP on the TLS
    // port never gets an HTTP answer.
    assert!(reqwest::get(format!("{base}/livez")).await.is_err());
    let plain = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap()
        .get(format!("http://{}/livez", gw.gateway.addr))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP got an answer: {plain:?}");
    // The listener is still serving after both.
    let live = https.get(format!("{base}/livez")).send().await.unwrap();
    assert_eq!(live.status().as_u16(), 200);
}
