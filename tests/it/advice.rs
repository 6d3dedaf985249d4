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

/// `callers` loops that each keep one reCAPTCHA solve waiting at the gateway until `until`;
/// counts the solves they made in `made`.
async fn closed_loop(gw: &Arc<TestGateway>, callers: u64, until: Instant, made: &Arc<AtomicU64>) {
    closed_loop_of(gw, "recaptcha_v2", callers, until, made).await;
}

async fn closed_loop_of(
    gw: &Arc<TestGateway>,
    kind: &'static str,
    callers: u64,
    until: Instant,
    made: &Arc<AtomicU64>,
) {
    let loops: Vec<_> = (0..callers)
        .map(|c| {
            let (gw, made) = (gw.clone(), made.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while Instant::now() < until {
                    i += 1;
                    let name = format!("advice-{callers}-{c}-{i}");
                    let body = match kind {
                        "image" => json!({"kind": kind, "body": image_of(&name)}),
                        _ => json!({"kind": kind, "sitekey": name, "pageurl": "https://advice.example.com/"}),
                    };
                    solved(&gw, &body).await;
                    made.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for l in loops {
        l.await.unwrap();
    }
}

/// `GET /v1/advice{query}`: its status and body.
async fn advice_reply(gw: &TestGateway, query: &str) -> (u16, Value) {
    let res = gw
        .http
        .get(gw.url(&format!("/v1/advice{query}")))
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.json().await.unwrap())
}

/// `GET /v1/advice{query}` refused with 400 and `code`.
async fn refused(gw: &TestGateway, query: &str, code: &str) {
    let (status, v) = advice_reply(gw, query).await;
    assert_eq!(status, 400, "{query}");
    assert_eq!(v["error"]["code"], code, "{v}");
}

/// `captcha-gateway advise --url base --window-h 1` and `more` arguments: what it printed.
pub async fn advise_text(base: &str, more: &[&str]) -> String {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args(["advise", "--url", base, "--window-h", "1"])
        .args(more)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    text
}

/// One `POST /v1/solve` of `body`, answered.
async fn solved(gw: &TestGateway, body: &Value) {
    let res = gw
        .http
        .post(gw.url("/v1/solve"))
        .bearer_auth(KEY)
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
}

/// A distinct image per `name`, large enough to be taken for one.
fn image_of(name: &str) -> String {
    use base64::Engine as _;
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend(name.bytes().cycle().take(200));
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

async fn advice(gw: &TestGateway, query: &str) -> Value {
    let (status, v) = advice_reply(gw, query).await;
    assert_eq!(status, 200, "{v}");
    v
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
    let text = advise_text(&gw.url(""), &[]).await;
    assert!(
        text.starts_with(&format!("threads: {} recommended", t["recommended"])),
        "{text}"
    );
    assert!(text.contains("recaptcha_v2"), "{text}");
    refused(&gw, "?window_s=0", "bad_window_s").await;
}

/// A 2-thread plan that refuses callers once 2 wait (`max_thread_waiters = 2`, 429
/// `fleet_busy`): 8 callers, each coming back after a refusal's `Retry-After`. The refused
/// callers are demand the plan never carried: the advice counts them above the cap and the
/// waiting, each caller for one thread at most however often it was refused.
#[tokio::test]
async fn callers_refused_for_want_of_threads_count_as_demand() {
    let mut settings = slow_solves();
    settings.threads = Some(2);
    settings.limits.max_thread_waiters = Some(2);
    let gw = Arc::new(TestGateway::with(settings).await);
    let until = Instant::now() + PHASE;
    let loops: Vec<_> = (0..8)
        .map(|c| {
            let gw = gw.clone();
            tokio::spawn(async move {
                let (mut answered, mut refused) = (0u64, 0u64);
                while Instant::now() < until {
                    let body = json!({"kind": "recaptcha_v2", "sitekey": format!("6Le-refused-{c}-{answered}-{refused}"), "pageurl": "https://advice.example.com/"});
                    let res = gw.http.post(gw.url("/v1/solve")).json(&body).send().await.unwrap();
                    match res.status().as_u16() {
                        200 => answered += 1,
                        429 => {
                            refused += 1;
                            // As a client does: back after the refusal's Retry-After.
                            let after: u64 = res.headers()["retry-after"].to_str().unwrap().parse().unwrap();
                            tokio::time::sleep(Duration::from_secs(after)).await;
                        }
                        other => panic!("{other}: {}", res.text().await.unwrap()),
                    }
                }
                (answered, refused)
            })
        })
        .collect();
    let (mut answered, mut refused) = (0, 0);
    for l in loops {
        let (a, r) = l.await.unwrap();
        (answered, refused) = (answered + a, refused + r);
    }
    assert!(refused > 0, "the plan refused callers");
    let a = advice_counting(&gw, answered).await;
    println!("FIGURE advice with refusals: {answered} answered, {refused} refused; {a}");
    let t = &a["threads"];
    let at_peak = t["refused_at_peak"].as_u64().unwrap();
    assert!((1..=refused).contains(&at_peak), "{a}");
    assert!(
        t["how"].as_str().unwrap().contains("callers were refused"),
        "{a}"
    );
    // The refused callers' threads: more than none, at most one for each caller refused (8
    // less the 2 in use), however often it was.
    let peak = t["littles_law_at_peak"].as_f64().unwrap();
    let waiting = t["waiting_at_peak"].as_f64().unwrap();
    let refused_threads = t["demand_at_peak"].as_f64().unwrap() - peak - waiting;
    assert!(refused_threads > 0.0 && refused_threads <= 6.0, "{a}");
    let demand = t["demand_at_peak"].as_f64().unwrap();
    let needed = (demand + 2.0 * demand.sqrt()).ceil() as u64;
    assert_eq!(t["recommended"].as_u64().unwrap(), needed.max(2), "{a}");
    // The replay holds callers up under the plan as configured (2 threads, 2 may wait) and the
    // recommended plan fewer of them. It replays the callers that were answered, at random times
    // within their buckets, so whether it also turns some away depends on how they cluster: a
    // run under the full suite's load replayed 11 waits and no refusal.
    let r = &a["replay"];
    let held_up =
        |plan: &str| r[plan]["waited"].as_u64().unwrap() + r[plan]["refused"].as_u64().unwrap();
    assert!(held_up("now") > 0, "{r}");
    assert!(held_up("recommended") < held_up("now"), "{r}");
}

/// As users run it: the accounts' default polling, which knows nothing of the simulator's
/// latencies. Images take the simulator 1-1.5 s, and the poller's first check comes after the
/// kind's typical 1 s, then every 5 s until it learns better: a thread is held well past the
/// solve. 6 callers always waiting hold about 6 threads whatever the polling, and the advice
/// must count that, not the solve time's share of it.
#[tokio::test]
async fn under_default_polling_the_advice_counts_threads_for_as_long_as_they_are_held() {
    let mut settings = fast_settings();
    settings.poll = captcha_gateway::provider::PollSettings::default();
    settings.status_every = Duration::from_millis(100);
    settings.demand_bucket = Duration::from_secs(10);
    settings.sim.latency.insert(
        Kind::Image,
        LatencyRange {
            min: Duration::from_millis(1000),
            max: Duration::from_millis(1500),
        },
    );
    let gw = Arc::new(TestGateway::with(settings).await);
    let made = Arc::new(AtomicU64::new(0));
    const CALLERS: u64 = 6;
    let phase = Duration::from_secs(30);
    let start = Instant::now();
    closed_loop_of(&gw, "image", CALLERS, start + phase, &made).await;
    let elapsed = start.elapsed().as_secs_f64();
    let calls = made.load(Ordering::Relaxed);
    let a = advice_counting(&gw, calls).await;
    println!("FIGURE advice under default polling: {calls} calls in {elapsed:.1} s; {a}");
    let k = &a["kinds"][0];
    assert_eq!(
        (k["kind"].as_str(), k["solves"].as_u64()),
        (Some("image"), Some(calls))
    );
    // Each caller held a thread from its first submit to its last answer, but for the moments
    // between an answer and its next submit: the threads held, summed, are CALLERS times the
    // time the loops ran, less those moments.
    let held = k["thread_seconds"].as_f64().unwrap();
    let expected = CALLERS as f64 * elapsed;
    assert!(
        (0.9 * expected..=expected).contains(&held),
        "{held:.1} s held of {expected:.1} s: {a}"
    );
    // The solve time is shorter than the thread was held (the polling delay).
    let mean_solve = k["mean_solve_s"].as_f64().unwrap();
    assert!(mean_solve * calls as f64 <= held, "{a}");
    // No bucket holds more than CALLERS threads on average, but for the tasks that end in it
    // counted whole (at most one per caller, each held under the phase): the busiest is
    // between the window's average and that.
    let t = &a["threads"];
    let peak = t["littles_law_at_peak"].as_f64().unwrap();
    let span = a["bucket_s"].as_f64().unwrap();
    let average = held / (a["buckets"].as_u64().unwrap() as f64 * span);
    assert!(peak >= average - 1e-9, "{a}");
    assert!(peak <= CALLERS as f64 * (1.0 + elapsed / span), "{a}");
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

/// As a user sets it up: a config file with two accounts of two providers at the simulator,
/// each taking its own kind, at default polling, and `[prices]` for both (CaptchaAI by the
/// thread, 2captcha by the solve). The advice sizes and prices each account from what it did.
#[tokio::test]
async fn each_account_is_advised_and_priced_as_the_configuration_states() {
    use crate::support::fleet::SimServer;
    use crate::support::gateway::Launch;
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_millis(300)), 100).await;
    let config = format!(
        "listen = \"127.0.0.1:0\"\n\
         [[accounts]]\nname = \"main\"\nprovider = \"captchaai\"\nbase_url = \"http://{sim}\"\n\
         key_env = \"MAIN_KEY\"\nthreads = 4\nkinds = [\"image\"]\n\
         [[accounts]]\nname = \"solo\"\nprovider = \"2captcha\"\nbase_url = \"http://{sim}\"\n\
         key_env = \"SOLO_KEY\"\nthreads = 10\nkinds = [\"text\"]\n\
         [prices]\ncurrency = \"USD\"\n\
         [prices.captchaai]\nthread_month = 1.8\n\
         [prices.2captcha]\nper_1000 = {{ text = 0.7 }}\n",
        sim = sim.addr
    );
    let gw = Launch::serve(config)
        .env("MAIN_KEY", KEY)
        .env("SOLO_KEY", KEY)
        .log("warn")
        .start()
        .await;
    let http = reqwest::Client::new();
    let until = Instant::now() + Duration::from_secs(6);
    let calls: Vec<_> = (0..6)
        .map(|c| {
            let (http, base) = (http.clone(), gw.base.clone());
            tokio::spawn(async move {
                let mut made = 0u64;
                while Instant::now() < until {
                    let name = format!("accounts-{c}-{made}");
                    let body = if c < 4 {
                        json!({"kind": "image", "body": image_of(&name)})
                    } else {
                        json!({"kind": "text", "text": format!("What is {name}?")})
                    };
                    let (status, answer) = crate::support::solve(&http, &base, body).await;
                    assert_eq!(status, 200, "{answer}");
                    made += 1;
                }
                (c < 4, made)
            })
        })
        .collect();
    let (mut images, mut texts) = (0, 0);
    for c in calls {
        match c.await.unwrap() {
            (true, n) => images += n,
            (false, n) => texts += n,
        }
    }
    let read = || async {
        http.get(format!("{}/v1/advice?window_s=3600", gw.base))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    eventually(
        Duration::from_secs(20),
        "the demand log to count every solve of both accounts",
        || async {
            let a = read().await;
            a["accounts"][0]["solves"] == images && a["accounts"][1]["solves"] == texts
        },
    )
    .await;
    let a = read().await;
    println!("FIGURE advice per account: {images} images, {texts} texts; {a}");
    let (main, solo) = (&a["accounts"][0], &a["accounts"][1]);
    assert_eq!(
        (main["name"].as_str(), main["provider"].as_str()),
        (Some("main"), Some("captchaai"))
    );
    assert_eq!(
        (solo["name"].as_str(), solo["provider"].as_str()),
        (Some("solo"), Some("2captcha"))
    );
    assert_eq!(
        (main["cap"].as_u64(), solo["cap"].as_u64()),
        (Some(4), Some(10))
    );
    // 4 image callers always waiting on a 4-thread plan: the samples saw some of its threads
    // in use (all 4 when one fell at the right moment), and the advice is never below that.
    let rec = main["recommended"].as_u64().unwrap();
    let seen = main["observed_peak_in_use"].as_u64().unwrap();
    assert!((1..=4).contains(&seen) && rec >= seen, "{a}");
    let cost = &main["cost"];
    assert_eq!(cost["currency"], "USD");
    assert!(
        (cost["threads_now_per_month"].as_f64().unwrap() - 4.0 * 1.8).abs() < 1e-9,
        "{a}"
    );
    assert!(
        (cost["threads_recommended_per_month"].as_f64().unwrap() - rec as f64 * 1.8).abs() < 1e-9,
        "{a}"
    );
    assert_eq!(
        cost["solves_per_month"],
        Value::Null,
        "a thread plan pays for its solves: {a}"
    );
    // 2captcha bills the solves: its texts at 0.7 per 1000, at the window's rate over a month.
    let cost = &solo["cost"];
    let monthly = cost["solves_per_month"].as_f64().unwrap();
    assert!(monthly > 0.0, "{a}");
    assert_eq!(cost["now_per_month"], cost["recommended_per_month"], "{a}");
    assert_eq!(cost["threads_now_per_month"], Value::Null, "{a}");
    let total = &a["cost"];
    let sum = 4.0 * 1.8 + monthly;
    assert!(
        (total["now_per_month"].as_f64().unwrap() - sum).abs() < 1e-6,
        "{a}"
    );

    let text = advise_text(&gw.base, &[]).await;
    assert!(text.contains("account main (captchaai): "), "{text}");
    assert!(text.contains("account solo (2captcha): "), "{text}");
    assert!(text.contains("7.20 USD a month now"), "{text}");
    assert!(text.contains("\ncost: "), "{text}");
}

/// `P(Poisson(m) <= s - 1)`, summed term by term: the test's own arithmetic for what a pool of
/// `s` serves.
fn served(s: u64, m: f64) -> f64 {
    let (mut term, mut sum) = ((-m).exp(), 0.0);
    for k in 0..s {
        if k > 0 {
            term *= m / k as f64;
        }
        sum += term;
    }
    sum
}

/// The smallest pool serving `h` of callers arriving at `rate` with refills taking `lead`.
fn quantile(h: f64, rate: f64, lead: f64) -> u64 {
    (1..).find(|s| served(*s, rate * lead) >= h).unwrap()
}

/// `rate` callers a second for one reCAPTCHA target (a sitekey on a page) until `until`, each
/// sent without waiting for the ones before it; returns how many were sent once all are answered.
async fn open_loop(gw: &Arc<TestGateway>, site: &str, rate: f64, until: Instant) -> u64 {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let mut calls = Vec::new();
    while Instant::now() < until {
        tick.tick().await;
        let gw = gw.clone();
        let body = json!({"kind": "recaptcha_v2", "sitekey": format!("key-{site}"), "pageurl": format!("https://{site}/login")});
        calls.push(tokio::spawn(async move { solved(&gw, &body).await }));
    }
    let sent = calls.len() as u64;
    for c in calls {
        c.await.unwrap();
    }
    sent
}

/// Done-means of the pool advice: a known demand on two targets (one at 4, then 12 callers a
/// second; one at 2 a second throughout), no pool configured. The advice must size each
/// target's pool for the stated hit rate between what its quiet and its busy phase alone
/// would need (the Poisson quantile of callers per lead time, at rates the profile sets and
/// the lead time the gateway measured), and the replay of the window must show the size
/// serving that share of the target's callers, where no pool (the plan now) serves none.
#[tokio::test]
async fn pools_are_sized_for_a_stated_hit_rate_and_the_replay_shows_them_meeting_it() {
    let gw = Arc::new(TestGateway::with(slow_solves()).await);
    let (busy, steady) = ("pools-a.example.com", "pools-b.example.com");
    let start = Instant::now();
    let background = {
        let gw = gw.clone();
        tokio::spawn(async move { open_loop(&gw, steady, 2.0, start + 2 * PHASE).await })
    };
    let quiet = open_loop(&gw, busy, 4.0, start + PHASE).await;
    let rush = open_loop(&gw, busy, 12.0, start + 2 * PHASE).await;
    let calls = quiet + rush + background.await.unwrap();

    advice_counting(&gw, calls).await;
    let a = advice(&gw, "?window_s=600&hit_rate=0.95").await;
    println!("FIGURE pool advice: {calls} calls; {}", a["pools"]);
    assert_eq!(a["pool_hit_rate_goal"], 0.95);
    let pools = a["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 2, "{a}");
    let (p, b) = (&pools[0], &pools[1]);
    assert_eq!(p["label"], format!("recaptcha_v2:{busy}"));
    assert_eq!(p["callers"], quiet + rush);
    assert_eq!(b["label"], format!("recaptcha_v2:{steady}"));
    assert_eq!(p["size_now"], Value::Null);
    assert_eq!(p["hit_rate_now"], 0.0);

    // The busiest bucket is one of the rush: 12 a second (a bucket may straddle a phase edge,
    // and arrivals lag their ticks under load).
    let peak = p["peak_callers_per_s"].as_f64().unwrap();
    assert!((9.0..=15.0).contains(&peak), "{p}");
    // Refills take a solve's thread time: 1-1.5 s at the simulator, plus the poll that saw it.
    let lead = p["lead_s"].as_f64().unwrap();
    assert!((1.0..=2.5).contains(&lead), "{p}");
    // The pool serves 95 % of the window's callers: no fewer than the quiet phase alone needs,
    // no more than the busiest bucket alone does.
    let h = 0.95;
    let size = p["recommended"].as_u64().unwrap();
    let (least, most) = (quantile(h, 4.0, lead), quantile(h, peak, lead));
    assert!((least..=most).contains(&size), "{least}..={most}: {p}");
    assert!(p["hit_rate"].as_f64().unwrap() >= h, "{p}");
    assert!(b["recommended"].as_u64().unwrap() < size, "{b}");

    // The replay: the plan now (no pools) serves nobody from a pool; the recommended pools
    // serve the stated share, within three standard errors of the callers replayed.
    let r = &a["replay"];
    assert_eq!(r["now"]["callers"], calls, "{r}");
    assert_eq!(r["now"]["pool_hits"], 0, "{r}");
    assert_eq!(r["now"]["threads"], 50);
    assert_eq!(r["recommended"]["threads"], a["threads"]["recommended"]);
    assert_eq!(p["replayed_hit_rate_now"], Value::Null);
    let replayed = p["replayed_hit_rate"].as_f64().unwrap();
    let n = (quiet + rush) as f64;
    let tolerance = 3.0 * (h * (1.0 - h) / n).sqrt();
    assert!(
        replayed >= h - tolerance,
        "{replayed} < {h} - {tolerance}: {r}"
    );

    // A lower goal asks for no more answers; the command shows the pools and both replays.
    let lower = advice(&gw, "?window_s=600&hit_rate=0.8").await;
    assert!(lower["pools"][0]["recommended"].as_u64().unwrap() <= size);
    let text = advise_text(&gw.url(""), &["--hit-rate", "0.8", "--wait-s", "0.5"]).await;
    let line = format!(
        "pool recaptcha_v2:{busy} ({}): {} recommended for 80.0 % of callers (no pool now)",
        &p["id"].as_str().unwrap()[..12],
        lower["pools"][0]["recommended"]
    );
    assert!(text.contains(&line), "{line}\n{text}");
    assert!(text.contains("replay now         50 threads"), "{text}");
    assert!(text.contains("replay recommended"), "{text}");
    assert!(text.contains("replay for a p95 wait of 0.5 s: "), "{text}");
    // A stated wait: the fewest threads whose replay keeps 95 % of waits within it, at most the
    // recommendation (which no caller waits on), and one fewer would not.
    let w = advice(&gw, "?window_s=600&wait_s=0.5").await;
    let fw = &w["replay"]["for_wait"];
    assert_eq!(fw["met"], true, "{fw}");
    let threads = fw["threads"].as_u64().unwrap();
    assert!(
        threads <= w["threads"]["recommended"].as_u64().unwrap(),
        "{w}"
    );
    assert!(fw["p95_wait_s"].as_f64().unwrap() <= 0.5, "{fw}");
    if threads > 1 {
        assert!(fw["p95_wait_one_fewer_s"].as_f64().unwrap() > 0.5, "{fw}");
    }
    assert_eq!(a["replay"]["for_wait"], Value::Null, "no target, no search");
    refused(&gw, "?wait_s=-1", "bad_wait_s").await;
    for bad in ["1", "0", "abc", "0.9999"] {
        refused(&gw, &format!("?hit_rate={bad}"), "bad_hit_rate").await;
    }
}
