//! `captcha-gateway status`: the same figures as `/v1/status` on one screen, and one clear line
//! with exit code 1 when the gateway cannot be reached.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use super::status;
use crate::support::eventually::eventually;
use crate::support::redis::free_port;
use crate::support::{TestGateway, fast_settings, solve};

const BIN: &str = env!("CARGO_BIN_EXE_captcha-gateway");

async fn run(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || Command::new(BIN).args(args).output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_command_prints_the_live_figures() {
    let mut settings = fast_settings();
    settings.status_every = Duration::from_millis(300);
    let gw = TestGateway::with(settings).await;
    for i in 0..4 {
        let body = json!({"kind": "turnstile", "sitekey": "0x4AAA",
                          "pageurl": format!("https://cli{}.example/", i % 2)});
        assert_eq!(solve(&gw.http, &gw.url(""), body).await.0, 200);
    }
    // At rest the totals hold still, so the command must print exactly what the endpoint says.
    eventually(Duration::from_secs(30), "nothing in flight", || async {
        status(&gw).await["accounts"][0]["threads_in_use"] == 0
    })
    .await;
    let s = status(&gw).await;
    let t = &s["answers"]["total"];
    let out = run(vec!["status".into(), "--url".into(), gw.url("")]).await;
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    let (pool, solved, shared) = (
        t["pool"].as_u64().unwrap(),
        t["solved"].as_u64().unwrap(),
        t["shared"].as_u64().unwrap(),
    );
    assert!(solved > 0);
    let totals = format!("pool {pool}  solved {solved}  shared {shared}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("answers since start") && l.ends_with(&totals)),
        "{totals} in:\n{text}"
    );
    assert!(text.contains("embedded store · 1 instance"), "{text}");
    assert!(text.contains("sim"), "the account is listed:\n{text}");
    assert!(
        text.contains("turnstile:cli0.example"),
        "the targets are listed:\n{text}"
    );
    assert!(text.lines().count() <= 40, "one screen:\n{text}");
}

#[tokio::test]
async fn the_status_command_says_in_one_line_when_the_gateway_is_unreachable() {
    let url = format!("http://user:hunter2@127.0.0.1:{}", free_port());
    let out = run(vec!["status".into(), "--url".into(), url]).await;
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("status: cannot reach the gateway at"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "the password stays out: {err}");
}
