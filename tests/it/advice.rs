//! The plan advisor against a known demand: a real gateway on the simulator, callers in two
//! phases (3, then 8 always waiting, solves of 1-1.5 s), and the advice read back from
//! `GET /v1/advice` and `captcha-gateway advise`. Little's law says the second phase keeps
//! about 8 upstream tasks in flight; the advice must find that peak, in the second phase, from
//! the figures the gateway recorded, and count every caller.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use captcha_gateway::model::Kind;
use captcha_gateway::sim::LatencyRange;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::support::eventually::eventually;
use crate::support::{KEY, TestGateway, fast_settings};

const BUCKET: Duration = Duration::from_secs(4);
const PHASE: Duration = Duration::from_secs(12);

/// `callers` loops that each keep one solve waiting at the gateway until `until`; returns
/// how many solves they made.
async fn closed_loop(gw: &Arc<TestGateway>, callers: u64, until: Instant, made: &Arc<AtomicU64>) {
    let loops: Vec<_> = (0..callers)
        .map(|c| {
            let (gw, made) = (gw.clone(), made.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while Instant::now() < until {
                    i += 1;
                    let body = json!({"kind": "recaptcha_v2", "sitekey": format!("6Le-advice-{callers}-{c}-{i}"), "pageurl": "https://advice.example.com/"});
                    let res = gw
                        .http
                        .post(gw.url("/v1/solve"))
                        .bearer_auth(KEY)
                        .json(&body)
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
                    made.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for l in loops {
        l.await.unwrap();
    }
}

async fn advice(gw: &TestGateway, query: &str) -> Value {
    let res = gw
        .http
        .get(gw.url(&format!("/v1/advice{query}")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

/// Test settings with reCAPTCHA solves of 1-1.5 s, samples every 100 ms and `BUCKET` buckets.
fn slow_solves() -> captcha_gateway::config::Settings {
    let mut settings = fast_settings();
    settings.status_every = Duration::from_millis(100);
    settings.demand_bucket = BUCKET;
    // Checks every 25 ms for the whole of a 1.5 s solve.
    settings.poll.max_polls_per_task = 100;
    settings.sim.latency.insert(
        Kind::RecaptchaV2,
        LatencyRange {
            min: Duration::from_millis(1000),
            max: Duration::from_millis(1500),
        },
    );
    settings
}

/// The advice over the last 10 minutes, once the demand log counts all `calls`.
async fn advice_counting(gw: &TestGateway, calls: u64) -> Value {
    eventually(
        Duration::from_secs(10),
        "the demand log to count every caller",
        || async { advice(gw, "?window_s=600").await["kinds"][0]["callers"] == calls },
    )
    .await;
    advice(gw, "?window_s=600").await
}

#[tokio::test]
async fn the_advice_finds_the_peak_littles_law_implies_and_counts_every_caller() {
    let gw = Arc::new(TestGateway::with(slow_solves()).await);
    let made = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    closed_loop(&gw, 3, start + PHASE, &made).await;
    let second_phase_ms = captcha_gateway::model::now_ms();
    closed_loop(&gw, 8, Instant::now() + PHASE, &made).await;
    let calls = made.load(Ordering::Relaxed);

    let a = advice_counting(&gw, calls).await;
    let t = &a["threads"];
    let peak = t["littles_law_at_peak"].as_f64().unwrap();
    println!("FIGURE advice: {calls} calls; {a}");
    // 8 callers always waiting, each solve 1-1.5 s of a 1.05-1.55 s cycle: about 7.7 in flight.
    // A solve counts whole in the bucket it ends in, so one bucket's figure is off by at most
    // the longest solve over the bucket's span: 8 +- 8 * 1.5 / 4.
    assert!((5.0..=11.0).contains(&peak), "{a}");
    let peak_at = t["peak_at_ms"].as_u64().unwrap();
    assert!(
        peak_at + BUCKET.as_millis() as u64 > second_phase_ms,
        "the peak is in the second phase: {a}"
    );
    let observed = t["observed_peak_in_use"].as_u64().unwrap();
    assert!((1..=8).contains(&observed), "{a}");
    let needed = (peak + 2.0 * peak.sqrt()).ceil() as u64;
    assert_eq!(t["recommended"].as_u64().unwrap(), needed.max(observed));
    assert_eq!(t["cap"], 50);
    let k = &a["kinds"][0];
    assert_eq!(k["kind"], "recaptcha_v2");
    assert_eq!(k["solves"], calls, "one upstream solve per caller");
    let mean = k["mean_solve_s"].as_f64().unwrap();
    assert!((1.0..=1.6).contains(&mean), "{a}");
    assert_eq!(k["pool_hit_rate"], 0.0);

    // The same advice as text from the command, and a window it refuses.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args(["advise", "--url", &gw.url(""), "--window-h", "1"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.starts_with(&format!("threads: {} recommended", t["recommended"])),
        "{text}"
    );
    assert!(text.contains("recaptcha_v2"), "{text}");
    let res = gw
        .http
        .get(gw.url("/v1/advice?window_s=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["code"], "bad_window_s", "{v}");
}

/// Gateways on one Redis each write their share of every bucket: the advice on either counts
/// both's callers (`scope: fleet`); a gateway on its own store advises from its own.
#[tokio::test]
async fn gateways_on_one_redis_advise_from_the_whole_fleets_demand() {
    let redis = crate::support::redis::RedisServer::start();
    let on_redis = || {
        let mut settings = fast_settings();
        settings.status_every = Duration::from_millis(100);
        settings.demand_bucket = BUCKET;
        settings.redis = Some(captcha_gateway::engine::store::redis::RedisSettings::new(
            vec![redis.url()],
            false,
        ));
        settings
    };
    let a = TestGateway::with(on_redis()).await;
    let b = TestGateway::with(on_redis()).await;
    for (g, gw, n) in [(0, &a, 3), (1, &b, 5)] {
        for i in 0..n {
            let body = json!({"kind": "turnstile", "sitekey": format!("0x4-fleet-{g}-{i}"), "pageurl": "https://advice.example.com/"});
            let res = gw
                .http
                .post(gw.url("/v1/solve"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
        }
    }
    for gw in [&a, &b] {
        eventually(
            Duration::from_secs(10),
            "each gateway's advice to count both's callers",
            || async { advice(gw, "?window_s=600").await["kinds"][0]["callers"] == 8 },
        )
        .await;
        let v = advice(gw, "?window_s=600").await;
        assert_eq!(v["scope"], "fleet", "{v}");
        assert_eq!(v["kinds"][0]["kind"], "turnstile", "{v}");
        assert_eq!(v["kinds"][0]["solves"], 8, "{v}");
    }

    let mut settings = fast_settings();
    settings.status_every = Duration::from_millis(100);
    let alone = TestGateway::with(settings).await;
    let v = advice(&alone, "").await;
    assert_eq!(v["scope"], "instance", "{v}");
    assert_eq!(v["kinds"], json!([]), "{v}");
}

/// A plan too small for its callers: 6 always waiting on a 2-thread plan. The threads in use
/// sit at the cap, so Little's law alone says 2; the callers that waited for a thread count as
/// demand, and the advice is above the plan.
#[tokio::test]
async fn callers_waiting_for_a_full_plan_raise_the_advice_above_it() {
    let mut settings = slow_solves();
    settings.threads = Some(2);
    let gw = Arc::new(TestGateway::with(settings).await);
    let made = Arc::new(AtomicU64::new(0));
    closed_loop(&gw, 6, Instant::now() + PHASE, &made).await;
    let calls = made.load(Ordering::Relaxed);
    let a = advice_counting(&gw, calls).await;
    let t = &a["threads"];
    println!("FIGURE advice on a full plan: {a}");
    assert_eq!(t["cap"], 2, "{a}");
    assert_eq!(t["observed_peak_in_use"], 2, "{a}");
    let peak = t["littles_law_at_peak"].as_f64().unwrap();
    assert!(
        peak <= 2.0 * (1.0 + 1.5 / 4.0),
        "in flight is held at the cap: {a}"
    );
    let waiting = t["waiting_at_peak"].as_u64().unwrap();
    assert!((2..=4).contains(&waiting), "6 callers, 2 threads: {a}");
    let demand = peak + waiting as f64;
    let needed = (demand + 2.0 * demand.sqrt()).ceil() as u64;
    assert_eq!(t["recommended"].as_u64().unwrap(), needed.max(2), "{a}");
    assert!(needed > 2, "{a}");
}
