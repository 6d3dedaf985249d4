//! The gateway against the simulator as a provider: the plan's thread cap holds, capacity errors
//! never reach callers, polls are batched, provider errors are retried or surfaced as codes.

use std::time::Duration;

use captcha_gateway::model::Kind;
use captcha_gateway::sim::LatencyRange;
use futures::future::join_all;
use serde_json::Value;

use crate::support::{TestGateway, fast_settings};

fn recaptcha(sitekey: &str) -> Vec<(&'static str, String)> {
    vec![
        ("method", "userrecaptcha".into()),
        ("googlekey", sitekey.into()),
        ("pageurl", "https://example.com/login".into()),
    ]
}

async fn solve_many(gw: &TestGateway, n: usize, distinct_targets: bool) -> Vec<Value> {
    let forms: Vec<_> = (0..n)
        .map(|i| {
            recaptcha(&if distinct_targets {
                format!("6Le-site-{i}")
            } else {
                "6Le-one".into()
            })
        })
        .collect();
    join_all(forms.iter().map(|f| {
        let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
        async move { gw.solve_compat(&pairs).await }
    }))
    .await
}

#[tokio::test]
async fn upstream_concurrency_never_exceeds_the_plan_threads() {
    let mut settings = fast_settings();
    settings.threads = Some(3);
    let gw = TestGateway::with(settings).await;
    let answers = solve_many(&gw, 12, true).await;
    assert!(answers.iter().all(|a| a["status"] == 1), "{answers:?}");
    assert_eq!(gw.stat("submits").await, 12);
    let peak = gw.stat("peak_concurrent").await;
    assert!(
        (1..=3).contains(&peak),
        "peak upstream concurrency {peak} exceeds 3 threads"
    );
    assert_eq!(gw.stat("capacity_rejections").await, 0);
}

#[tokio::test]
async fn capacity_errors_are_retried_and_never_reach_callers() {
    let mut settings = fast_settings();
    // The gateway believes in 6 threads, the provider grants 2 and answers the rest with
    // CaptchaAI's "no free threads" code. (`threadsinfo` soon lowers the cap to 2, so the
    // provider also refuses half the submits with that code although threads are free.)
    settings.threads = Some(6);
    settings.sim.threads = 2;
    settings.sim.capacity_code = "ERROR_ZERO_BALANCE".into();
    settings.sim.faults.capacity_error_rate = 0.5;
    settings.sim.seed = Some(10);
    settings.sim.latency.insert(
        Kind::RecaptchaV2,
        LatencyRange::fixed(Duration::from_millis(500)),
    );
    settings.account.capacity_backoff_base = Duration::from_millis(50);
    settings.account.capacity_backoff_max = Duration::from_millis(200);
    let gw = TestGateway::with(settings).await;
    let answers = solve_many(&gw, 6, true).await;
    for a in &answers {
        assert_eq!(a["status"], 1, "a capacity error reached a caller: {a}");
        gw.verify(a["request"].as_str().unwrap()).await.unwrap();
    }
    assert!(
        gw.stat("capacity_rejections").await + gw.stat("injected_errors").await > 0,
        "the provider did push back"
    );
    assert_eq!(gw.stat("submits").await, 6);
}

#[tokio::test]
async fn polls_are_batched_and_stay_within_the_per_task_budget() {
    let mut settings = fast_settings();
    settings.sim.latency.insert(
        Kind::RecaptchaV2,
        LatencyRange::fixed(Duration::from_millis(400)),
    );
    let gw = TestGateway::with(settings).await;
    let answers = solve_many(&gw, 30, true).await;
    assert!(answers.iter().all(|a| a["status"] == 1));
    let (calls, ids) = (gw.stat("res_calls").await, gw.stat("ids_polled").await);
    assert!(ids >= 30, "every task was polled: {ids}");
    assert!(
        calls * 2 <= ids,
        "{calls} res.php requests for {ids} id checks: not batched"
    );
    assert!(ids <= 30 * 20, "more than 20 checks per task");
}

#[tokio::test]
async fn unsolvable_tasks_end_with_the_terminal_code() {
    let mut settings = fast_settings();
    settings.sim.unsolvable_rate = 1.0;
    let gw = TestGateway::with(settings).await;
    let answer = gw
        .solve_compat(&[
            ("method", "turnstile"),
            ("sitekey", "0x4"),
            ("pageurl", "https://example.com/"),
        ])
        .await;
    assert_eq!(answer["status"], 0);
    assert_eq!(answer["request"], "ERROR_CAPTCHA_UNSOLVABLE");
    let res = gw
        .http
        .post(gw.url("/v1/solve"))
        .json(&serde_json::json!({"kind": "turnstile", "sitekey": "0x4", "pageurl": "https://example.com/"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 422);
    assert_eq!(
        res.json::<Value>().await.unwrap()["error"]["code"],
        "ERROR_CAPTCHA_UNSOLVABLE"
    );
}

#[tokio::test]
async fn transient_provider_errors_are_retried_transparently() {
    let mut settings = fast_settings();
    // A fixed seed and one caller at a time make the simulator's error draws repeatable.
    settings.sim.seed = Some(7);
    settings.sim.faults.server_error_rate = 0.25;
    settings.sim.faults.html_error_rate = 0.15;
    settings.account.transient_backoff = Duration::from_millis(20);
    settings.account.transient_retries = 5;
    let gw = TestGateway::with(settings).await;
    for i in 0..8 {
        let answer = gw
            .solve_compat(&[
                ("method", "userrecaptcha"),
                ("googlekey", &format!("6Le-t{i}")),
                ("pageurl", "https://example.com/"),
            ])
            .await;
        assert_eq!(answer["status"], 1, "{answer}");
    }
    assert!(
        gw.stat("injected_errors").await > 0,
        "the simulator did inject errors"
    );
}
