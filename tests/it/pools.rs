//! Warm pools end to end: a configured pool refills its whole deficit at once, pooled answers
//! verify once at the simulator, imported answers obey freshness and once, and `/v1/pools` and
//! `/metrics` show the figures. Waits poll the gateway or the simulator until a condition holds,
//! bounded by one generous timeout; nothing asserts on elapsed time.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use captcha_gateway::config::Secret;
use captcha_gateway::model::{Kind, TargetPolicy};
use captcha_gateway::pools::{PoolSpec, PoolTable, specs};
use captcha_gateway::sim::LatencyRange;
use futures::future::join_all;
use serde_json::{Value, json};

use crate::support::eventually::eventually;
use crate::support::{KEY, TestGateway, fast_settings};

const V2_LABEL: &str = "recaptcha_v2:example.com";

/// Pools from `[[pools]]` TOML, validated the way the config file is.
fn pools(toml_text: &str) -> Vec<PoolSpec> {
    #[derive(serde::Deserialize)]
    struct File {
        pools: Vec<PoolTable>,
    }
    let file: File = toml::from_str(toml_text).expect("test TOML parses");
    specs(&file.pools, TargetPolicy::default()).expect("test pools are valid")
}

impl TestGateway {
    async fn pool_views(&self) -> Vec<Value> {
        let res = self
            .http
            .get(self.url("/v1/pools"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    }

    /// The `/v1/pools` entry labelled `label` (each test has one target per label).
    async fn pool_view(&self, label: &str) -> Value {
        self.pool_views()
            .await
            .into_iter()
            .find(|v| v["label"] == label)
            .unwrap_or(Value::Null)
    }

    async fn solve_v1(&self, body: &Value) -> Value {
        let res = self
            .http
            .post(self.url("/v1/solve"))
            .bearer_auth(KEY)
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    }

    async fn import(&self, body: &Value) -> (u16, Value) {
        let res = self
            .http
            .post(self.url("/v1/pools/tokens"))
            .bearer_auth(KEY)
            .json(body)
            .send()
            .await
            .unwrap();
        (res.status().as_u16(), res.json().await.unwrap())
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test]
async fn a_pool_of_twenty_refills_all_twenty_at_once_and_its_answers_verify_once() {
    pool_of_twenty(fast_settings()).await;
}

#[tokio::test]
async fn the_same_pool_on_the_redis_store() {
    let redis = crate::support::redis::RedisServer::start();
    let mut settings = fast_settings();
    settings.redis = Some(captcha_gateway::engine::store::redis::RedisSettings::new(
        vec![redis.url()],
        false,
    ));
    pool_of_twenty(settings).await;
}

#[tokio::test]
async fn the_same_pool_on_a_redis_cluster() {
    let cluster = crate::support::redis::RedisCluster::start();
    let urls = cluster.urls().split(',').map(str::to_owned).collect();
    let mut settings = fast_settings();
    settings.redis = Some(captcha_gateway::engine::store::redis::RedisSettings::new(
        urls, true,
    ));
    pool_of_twenty(settings).await;
}

async fn pool_of_twenty(mut settings: captcha_gateway::config::Settings) {
    // Long enough that twenty refills started together are all seen running at once.
    let solve_time = Duration::from_secs(4);
    settings
        .sim
        .latency
        .insert(Kind::RecaptchaV2, LatencyRange::fixed(solve_time));
    // First check when the answer is due, so each task stays within its poll budget.
    settings.poll.first_check = Some(solve_time);
    settings.pools = pools(
        r#"[[pools]]
           kind = "recaptcha_v2"
           sitekey = "6Le-pool"
           pageurl = "https://example.com/login"
           size = 20"#,
    );
    let gw = TestGateway::with(settings).await;
    eventually(Duration::from_secs(60), "the pool fills", || async {
        gw.pool_view(V2_LABEL).await["pooled"] == 20
    })
    .await;
    assert_eq!(gw.stat("submits").await, 20);
    assert_eq!(gw.stat("current_concurrent").await, 0);

    let ask = json!({"kind": "recaptcha_v2", "sitekey": "6Le-pool", "pageurl": "https://example.com/login?session=7"});
    let taken = join_all((0..20).map(|_| gw.solve_v1(&ask))).await;
    let mut tokens = HashSet::new();
    for t in &taken {
        assert_eq!(t["source"], "pool", "{t}");
        tokens.insert(t["token"].as_str().unwrap().to_owned());
    }
    assert_eq!(tokens.len(), 20, "no answer handed out twice");

    // The twenty refills run together: the simulator sees twenty tasks at once, not one.
    eventually(
        Duration::from_secs(60),
        "twenty refills run at once",
        || async { gw.stat("current_concurrent").await >= 20 },
    )
    .await;
    assert_eq!(
        gw.stat("peak_concurrent").await,
        20,
        "never more than the deficit"
    );
    assert_eq!(gw.stat("submits").await, 40);

    for t in &tokens {
        gw.verify(t)
            .await
            .unwrap_or_else(|e| panic!("pooled token {t} did not verify: {e}"));
        assert!(gw.verify(t).await.is_err(), "a token verifies only once");
    }
    assert_eq!(gw.stat("verify_duplicate").await, 20);

    eventually(
        Duration::from_secs(60),
        "the pool is full again",
        || async { gw.pool_view(V2_LABEL).await["pooled"] == 20 },
    )
    .await;
    let v = gw.pool_view(V2_LABEL).await;
    assert_eq!(v["kind"], "recaptcha_v2");
    assert_eq!(
        (v["pool_hits"].as_u64(), v["refills"].as_u64()),
        (Some(20), Some(40))
    );
    assert_eq!(
        (v["new_tasks"].as_u64(), v["arrivals"].as_u64()),
        (Some(40), Some(20))
    );
    assert_eq!(v["hit_rate"], 1.0);
    assert_eq!(v["waste_rate"], 0.0);
    assert_eq!(
        (v["target_size"].as_u64(), v["mode"].as_str()),
        (Some(20), Some("fixed"))
    );
    assert_eq!(
        gw.stat("submits").await,
        40,
        "a full pool starts nothing more"
    );

    let (_, metrics) = gw.get_text("/metrics").await;
    for needle in [
        "captcha_gateway_pool_target{target=\"recaptcha_v2:example.com\"} 20",
        "captcha_gateway_pool_ready{target=\"recaptcha_v2:example.com\"} 20",
        "captcha_gateway_pool_hits_total{target=\"recaptcha_v2:example.com\"} 20",
        "captcha_gateway_refills_total{target=\"recaptcha_v2:example.com\"} 40",
        "captcha_gateway_target_arrivals_total{target=\"recaptcha_v2:example.com\"} 20",
    ] {
        assert!(metrics.contains(needle), "missing {needle} in:\n{metrics}");
    }
}

#[tokio::test]
async fn imported_tokens_are_handed_out_from_the_pool_only_while_fresh() {
    // A short lifetime, so a token can run out of life within the test: with the default
    // min_remaining of 10 s, an answer is handed out during its first 10 s.
    const LIFE_MS: u64 = 20_000;
    const SHELF_MS: u64 = 10_000;
    let mut settings = fast_settings();
    settings
        .engine
        .lifetimes
        .insert(Kind::Turnstile, Duration::from_millis(LIFE_MS));
    settings.pools = pools(
        r#"[[pools]]
           kind = "recaptcha_v3"
           sitekey = "6Le-auto"
           pageurl = "https://auto.example/"
           action = "login"
           size = "auto"
           max = 30"#,
    );
    let gw = TestGateway::with(settings).await;
    let target =
        json!({"kind": "turnstile", "sitekey": "0x4AAA-import", "pageurl": "https://example.com/"});
    let with_tokens = |tokens: Value| {
        let mut body = target.clone();
        body["tokens"] = tokens;
        body
    };
    let iso = |ms: u64| {
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
    };
    let now = now_ms();
    let (status, reply) = gw
        .import(&with_tokens(json!([
            {"token": "harvested-1", "solved_at": iso(now - 1_000)},
            // 11 s old: 9 s left, under min_remaining.
            {"token": "harvested-old", "solved_at": now - SHELF_MS - 1_000},
            {"token": "harvested-2", "solved_at": now - 2_000, "user_agent": "UA/9"},
            {"token": "harvested-1", "solved_at": now - 1_000},
        ])))
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["accepted"], 2, "{reply}");
    let rejected = reply["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 2, "{reply}");
    assert_eq!(rejected[0]["index"], 1);
    assert!(
        rejected[0]["reason"]
            .as_str()
            .unwrap()
            .contains("min_remaining")
    );
    assert_eq!(rejected[1]["index"], 3, "the same token twice: {reply}");

    // Earliest expiry first, each once, with the user agent it came with.
    let first = gw.solve_v1(&target).await;
    assert_eq!(
        (first["source"].as_str(), first["token"].as_str()),
        (Some("pool"), Some("harvested-2"))
    );
    assert_eq!(first["user_agent"], "UA/9");
    let second = gw.solve_v1(&target).await;
    assert_eq!(
        (second["source"].as_str(), second["token"].as_str()),
        (Some("pool"), Some("harvested-1"))
    );
    let third = gw.solve_v1(&target).await;
    assert_eq!(third["source"], "solved", "the pool is empty: {third}");
    gw.verify(third["token"].as_str().unwrap()).await.unwrap();

    // Accepted with 1.5 s to spare: once that has passed it must never be handed out.
    let solved_at = now_ms() + 1_500 - SHELF_MS;
    let (_, reply) = gw
        .import(&with_tokens(
            json!([{"token": "short-lived", "solved_at": solved_at}]),
        ))
        .await;
    assert_eq!(reply["accepted"], 1, "{reply}");
    // Waiting here lets the token age on the wall clock; no other task is waited for.
    let unusable_at = solved_at + SHELF_MS + 50;
    tokio::time::sleep(Duration::from_millis(unusable_at.saturating_sub(now_ms()))).await;
    let after = gw.solve_v1(&target).await;
    assert_eq!(after["source"], "solved", "{after}");
    assert_ne!(after["token"], "short-lived");
    let v = gw.pool_view("turnstile:example.com").await;
    assert_eq!(
        (v["imported"].as_u64(), v["expired_unused"].as_u64()),
        (Some(3), Some(1)),
        "{v}"
    );
    assert_eq!(
        (v["pool_hits"].as_u64(), v["arrivals"].as_u64()),
        (Some(2), Some(4)),
        "{v}"
    );
    assert_eq!(v["hit_rate"], 0.5);
    assert!(v.get("target_size").is_none(), "not a configured pool: {v}");

    // A configured auto pool shows before anyone calls, at its min.
    let auto = gw.pool_view("recaptcha_v3:auto.example").await;
    assert_eq!(
        (auto["mode"].as_str(), auto["target_size"].as_u64()),
        (Some("auto"), Some(0)),
        "{auto}"
    );
}

#[tokio::test]
async fn bad_imports_are_400_with_a_code() {
    let mut settings = fast_settings();
    settings.gateway_keys = vec![Secret(KEY.to_owned())];
    let gw = TestGateway::with(settings).await;
    let token = json!([{"token": "t", "solved_at": now_ms()}]);
    let cases = [
        (
            json!({"kind": "image", "body": "aGk=", "tokens": token}),
            "not_poolable",
        ),
        (
            json!({"kind": "geetest_v3", "gt": "g", "challenge": "c", "pageurl": "https://e.com/", "tokens": token}),
            "not_poolable",
        ),
        (
            json!({"kind": "turnstile", "sitekey": "0x4", "pageurl": "https://e.com/"}),
            "bad_tokens",
        ),
        (
            json!({"kind": "turnstile", "sitekey": "0x4", "pageurl": "https://e.com/", "tokens": []}),
            "bad_tokens",
        ),
        (
            json!({"kind": "turnstile", "sitekey": "0x4", "pageurl": "https://e.com/", "tokens": "t"}),
            "bad_tokens",
        ),
        (
            json!({"kind": "recaptcha_v2", "pageurl": "https://e.com/", "tokens": token}),
            "ERROR_GOOGLEKEY",
        ),
        (json!({"kind": "keycaptcha", "tokens": token}), "bad_kind"),
    ];
    for (body, code) in cases {
        let (status, reply) = gw.import(&body).await;
        assert_eq!(status, 400, "{body}: {reply}");
        assert_eq!(reply["error"]["code"], code, "{body}: {reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let res = gw
        .http
        .post(gw.url("/v1/pools/tokens"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    for path in ["/v1/pools", "/v1/pools/tokens"] {
        let res = if path.ends_with("tokens") {
            gw.http.post(gw.url(path)).json(&json!({})).send().await
        } else {
            gw.http.get(gw.url(path)).send().await
        }
        .unwrap();
        assert_eq!(res.status(), 401, "{path} needs the key");
    }
    // Rejected and refused imports stored nothing.
    assert_eq!(gw.pool_views().await, Vec::<Value>::new());
}
