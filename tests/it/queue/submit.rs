//! `captcha-gateway submit`: a thousand tasks from a JSON-lines file through two workers, every
//! result printed once; its exit codes for failed, timed-out and malformed work.

use std::collections::HashSet;
use std::io::Write;
use std::process::Output;

use serde_json::Value;

use super::support::worker_on;
use crate::support::fleet::SimServer;
use crate::support::redis::RedisServer;
use crate::support::verify_at;

async fn submit(redis_url: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .arg("submit")
        .args(["--redis-url", redis_url])
        .args(args)
        .env_clear()
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("submit runs")
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tasks_from_a_file_each_get_one_valid_result() {
    let redis = RedisServer::start();
    let sim = SimServer::start(
        captcha_gateway::sim::LatencyRange {
            min: std::time::Duration::from_millis(20),
            max: std::time::Duration::from_millis(200),
        },
        1000,
    )
    .await;
    let _workers = [
        worker_on(sim.addr, &redis.url(), "").start().await,
        worker_on(sim.addr, &redis.url(), "").start().await,
    ];
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for i in 0..1000 {
        // Ten targets; every task its own single-use token.
        writeln!(
            file,
            r#"{{"kind": "recaptcha_v2", "sitekey": "6Le-submit-{}", "pageurl": "https://submit.example/{}", "id": "job-{i}"}}"#,
            i % 10,
            i % 10
        )
        .unwrap();
    }
    let out = submit(&redis.url(), &["--file", file.path().to_str().unwrap()]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("1000 tasks, 1000 ready, 0 failed"),
        "{stderr}"
    );
    let results = lines(&out);
    assert_eq!(results.len(), 1000);
    let ids: HashSet<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 1000, "each task printed once");
    assert!(ids.contains("job-0") && ids.contains("job-999"));
    let mut tokens = HashSet::new();
    let (http, sim_base) = (reqwest::Client::new(), format!("http://{}", sim.addr));
    for r in &results {
        assert_eq!(r["status"], "ready", "{r}");
        let token = r["answer"].as_str().expect("an answer");
        assert!(tokens.insert(token.to_owned()), "a token reached two tasks");
        let verdict = verify_at(&http, &sim_base, token).await;
        assert_eq!(verdict["success"], true, "{token}: {verdict}");
    }

    // The same ids again: idempotency keys are what dedupes, not ids, so these are new tasks,
    // and `--no-wait` returns with their ids at once.
    let out = submit(
        &redis.url(),
        &[
            "--kind",
            "turnstile",
            "--param",
            "sitekey=0x4A-submit",
            "--param",
            "pageurl=https://submit.example/t",
            "--count",
            "3",
            "--no-wait",
        ],
    )
    .await;
    assert!(out.status.success());
    assert!(lines(&out).iter().all(|l| l["status"] == "queued"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_exits_non_zero_when_a_task_has_no_result_and_two_for_a_bad_line() {
    let redis = RedisServer::start();
    // No worker: nothing is solved before the timeout.
    let out = submit(
        &redis.url(),
        &[
            "--kind",
            "turnstile",
            "--param",
            "sitekey=0x4A",
            "--param",
            "pageurl=https://submit.example/",
            "--count",
            "2",
            "--timeout-s",
            "1",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let results = lines(&out);
    assert_eq!(results.len(), 2);
    assert!(
        results.iter().all(|r| r["status"] == "timeout"),
        "{results:?}"
    );

    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        file,
        r#"{{"kind": "turnstile", "sitekey": "0x4A", "pageurl": "https://a.example/"}}"#
    )
    .unwrap();
    writeln!(file, r#"{{"kind": "turnstile", "sitekey": "0x4A"}}"#).unwrap();
    let out = submit(&redis.url(), &["--file", file.path().to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--file") && stderr.contains("line 2"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    // Nothing of the file was enqueued: the stream holds only the two tasks above.
    let mut conn = super::support::raw(&redis.url()).await;
    let len: u64 = redis::cmd("XLEN")
        .arg("cg:q:{captcha}:tasks")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 2);
}
