//! The Python client (clients/python, installed into the test venv by scripts/test), sync,
//! asyncio and the seed-002 `ClientLoadBalancer`, each run by tests/python/balancing.py.

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

use super::{Instance, simulator};
use crate::clients::python;
use crate::support::KEY;
use crate::support::redis::RedisServer;

/// Four rounds of 30 calls; the native modes add three tasks.
const ROUNDS: u64 = 4 * 30;

async fn python_client_survives_a_killed_gateway(mode: &str) {
    let redis = RedisServer::start();
    let sim = simulator().await;
    let mut gateways = Vec::new();
    for _ in 0..3 {
        gateways.push(Instance::start(&sim, &redis.url()).await);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/balancing.py");
    let mut child = Command::new(python())
        .arg(script)
        .arg(mode)
        .arg(KEY)
        .args(gateways.iter().map(|g| &g.base))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("python runs");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();

    assert_eq!(next(&mut lines, mode).await, "KILL");
    gateways[1].kill().await;
    stdin.write_all(b"GO\n").await.unwrap();
    assert_eq!(next(&mut lines, mode).await, "RESTART");
    gateways[1].restart().await;
    stdin.write_all(b"GO\n").await.unwrap();
    let result: Value =
        serde_json::from_str(&next(&mut lines, mode).await).expect("the result as JSON");
    let status = child.wait().await.unwrap();
    assert!(status.success(), "the {mode} script failed");

    println!(
        "FIGURE python {mode} client: re-admitted {:.3} s after the restart; {}",
        result["readmit_s"].as_f64().unwrap(),
        result["backends"]
    );
    let victim = &result["backends"][1];
    assert!(victim["ejections"].as_u64().unwrap() > 0, "{victim}");
    assert!(victim["readmissions"].as_u64().unwrap() > 0, "{victim}");
    let tokens = result["tokens"].as_array().unwrap();
    let calls = if mode == "seed" { ROUNDS } else { ROUNDS + 3 };
    assert_eq!(tokens.len() as u64, calls, "every call answered");
    assert_eq!(
        sim.sim.stats().submits,
        calls,
        "one upstream task per call, none twice"
    );
    let http = reqwest::Client::new();
    for token in tokens {
        let token = token.as_str().expect("a token");
        let v = sim.verify(&http, token).await;
        assert_eq!(v["success"], true, "{v}");
    }
}

/// The script's next line on stdout.
async fn next(lines: &mut Lines<BufReader<ChildStdout>>, mode: &str) -> String {
    lines
        .next_line()
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("the {mode} script ended early (its error is above)"))
}

#[tokio::test]
async fn python_sync_client_fails_over_from_a_killed_gateway_and_takes_it_back() {
    python_client_survives_a_killed_gateway("sync").await;
}

#[tokio::test]
async fn python_async_client_fails_over_from_a_killed_gateway_and_takes_it_back() {
    python_client_survives_a_killed_gateway("async").await;
}

#[tokio::test]
async fn seed_client_load_balancer_successor_fails_over_and_takes_the_worker_back() {
    python_client_survives_a_killed_gateway("seed").await;
}

/// The package's own unit tests (the balancer's rules, the judging of answers, the settings'
/// checks), with the venv's pytest.
#[tokio::test]
async fn python_client_unit_tests_pass() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/python/tests");
    let out = Command::new(python())
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(&dir)
        .output()
        .await
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
