//! A fleet on `rediss://`: gateways share task records through a Redis that only speaks TLS,
//! trusting a private CA given as `redis_ca_file`; a gateway that does not trust that CA never
//! talks to it (it serves degraded instead).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cli::assert_config_error;
use crate::support::KEY;
use crate::support::certs::TestCa;
use crate::support::fleet::{SimServer, client};
use crate::support::gateway::GatewayProcess;
use crate::support::redis::{RedisServer, free_port};
use captcha_gateway::sim::LatencyRange;

async fn health(http: &reqwest::Client, gw: &GatewayProcess) -> String {
    let v: Value = http
        .get(format!("{}/health", gw.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["status"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_shares_tasks_over_rediss_with_a_private_ca() {
    let ca = TestCa::new();
    let server = ca.server("redis");
    let tls_port = free_port().to_string();
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        server.cert.to_str().unwrap(),
        "--tls-key-file",
        server.key.to_str().unwrap(),
        "--tls-ca-cert-file",
        ca.ca_path().to_str().unwrap(),
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://localhost:{tls_port}/");
    let sim = SimServer::start(
        LatencyRange {
            min: Duration::from_millis(50),
            max: Duration::from_millis(150),
        },
        50,
    )
    .await;
    let trusting = format!("redis_ca_file = \"{}\"", ca.ca_path().display());
    let a = GatewayProcess::start(&sim, &url, &trusting, 0.05).await;
    let b = GatewayProcess::start(&sim, &url, &trusting, 0.05).await;
    let http = client();

    let submitted = http
        .get(format!(
            "{}/in.php?key={KEY}&method=turnstile&sitekey=0x4-tls&pageurl=https://tls.example.com/",
            a.base
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let id = submitted
        .strip_prefix("OK|")
        .unwrap_or_else(|| panic!("in.php on a: {submitted}"));
    // The record is in Redis, so the other instance reads it.
    let done: Value = http
        .get(format!("{}/v1/tasks/{id}?wait=30", b.base))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "ready", "task {id} read through b: {done}");
    assert_eq!(health(&http, &a).await, "healthy");
    assert_eq!(health(&http, &b).await, "healthy");

    // Without the CA the certificate does not verify: the gateway works without the store.
    let untrusting = GatewayProcess::start(&sim, &url, "", 0.05).await;
    let solved: Value = http
        .post(format!("{}/v1/solve", untrusting.base))
        .bearer_auth(KEY)
        .json(&serde_json::json!({
            "kind": "turnstile", "sitekey": "0x4-tls", "pageurl": "https://tls.example.com/"
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        solved["token"].is_string(),
        "solves continue degraded: {solved}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = health(&http, &untrusting).await;
        if status == "degraded" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a gateway without the CA still says {status}: it trusted an unknown certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(redis);
}

#[test]
fn redis_ca_file_is_checked_at_startup() {
    let ca = TestCa::new();
    let not_pem = ca.dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let cases = [
        ("redis://127.0.0.1:1/", ca.ca_path()),
        ("rediss://127.0.0.1:1/", ca.dir.path().join("missing.pem")),
        ("rediss://127.0.0.1:1/", not_pem),
    ];
    for (url, ca_file) in cases {
        let config = ca.dir.path().join("gateway.toml");
        std::fs::write(
            &config,
            format!(
                "redis_url = \"{url}\"\nredis_ca_file = \"{}\"\n",
                ca_file.display()
            ),
        )
        .unwrap();
        assert_config_error(
            &[
                "serve",
                "--provider",
                "sim",
                "--config",
                config.to_str().unwrap(),
            ],
            &[],
            "redis_ca_file",
        );
    }
}
