//! `Idempotency-Key` on `POST /v1/solve`, `POST /v1/tasks` and the worker API's `POST /solve`
//! (docs/API.md "Idempotency keys"):
//! two gateway processes on one Redis, the same keyed call sent to both at once and again later,
//! make one upstream task and give every caller its answer or id; the embedded store keeps the
//! same promise and scopes keys per tenant; a bad key is a 400, a reused one a 422.

use std::io::Write;
use std::time::Duration;

use captcha_gateway::cli::ServeArgs;
use captcha_gateway::config::{self, Settings};
use captcha_gateway::sim::LatencyRange;
use futures::future::join_all;
use serde_json::{Value, json};

use crate::support::fleet::{SimServer, client};
use crate::support::gateway::GatewayProcess;
use crate::support::redis::RedisServer;
use crate::support::{KEY, TestGateway, fast_settings};

fn body(sitekey: &str) -> Value {
    json!({"kind": "recaptcha_v2", "sitekey": sitekey, "pageurl": "https://idem.example.com/"})
}

/// One keyed POST: status and JSON body.
async fn post(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    gateway_key: &str,
    idem: &str,
    body: &Value,
) -> (u16, Value) {
    let res = http
        .post(format!("{base}{path}"))
        .bearer_auth(gateway_key)
        .header("Idempotency-Key", idem)
        .json(body)
        .send()
        .await
        .expect("the gateway answers");
    let status = res.status().as_u16();
    (status, res.json().await.expect("a JSON body"))
}

/// Solves that take long enough for calls sent at once to overlap.
async fn slow_simulator() -> SimServer {
    let latency = LatencyRange {
        min: Duration::from_millis(400),
        max: Duration::from_millis(600),
    };
    SimServer::start(latency, 100).await
}

#[tokio::test]
async fn the_same_key_on_two_gateways_sharing_redis_is_one_upstream_task() {
    let redis = RedisServer::start();
    let sim = slow_simulator().await;
    let a = GatewayProcess::start(&sim, &redis.url(), "", 0.05).await;
    let b = GatewayProcess::start(&sim, &redis.url(), "", 0.05).await;
    let bases = [a.base.as_str(), b.base.as_str()];
    let http = client();
    let solve = body("6Le-idem-solve");

    // Three callers on each gateway at once, then one more on each after the answer came.
    let calls = (0..6).map(|i| post(&http, bases[i % 2], "/v1/solve", KEY, "order-1", &solve));
    let mut answers = join_all(calls).await;
    for base in bases {
        answers.push(post(&http, base, "/v1/solve", KEY, "order-1", &solve).await);
    }
    let (_, first) = &answers[0];
    for (status, answer) in &answers {
        assert_eq!(*status, 200, "{answer}");
        assert_eq!(answer["token"], first["token"], "one answer for the key");
        assert_eq!(answer["task_id"], first["task_id"], "one upstream task");
    }
    assert_eq!(
        sim.sim.stats().submits,
        1,
        "one upstream task for eight calls"
    );
    let token = first["token"].as_str().expect("a token");
    let verdict = sim.verify(&http, token).await;
    assert_eq!(verdict["success"], true, "{verdict}");

    // The asynchronous API: one task id from both gateways, however often asked.
    let task = body("6Le-idem-task");
    let calls = (0..4).map(|i| post(&http, bases[i % 2], "/v1/tasks", KEY, "order-2", &task));
    let created = join_all(calls).await;
    let id = created[0].1["task_id"].clone();
    for (status, answer) in &created {
        assert_eq!(*status, 202, "{answer}");
        assert_eq!(answer["task_id"], id, "one task for the key");
    }
    let done: Value = http
        .get(format!(
            "{}/v1/tasks/{}?wait=30",
            b.base,
            id.as_str().unwrap()
        ))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "ready", "{done}");
    let (status, again) = post(&http, &a.base, "/v1/tasks", KEY, "order-2", &task).await;
    assert_eq!((status, &again["task_id"]), (202, &id), "{again}");
    assert_eq!(
        sim.sim.stats().submits,
        2,
        "one more upstream task, for the second key"
    );

    // A key names one body: another body under it is refused on every gateway, and solves nothing.
    for base in bases {
        let (status, refused) =
            post(&http, base, "/v1/solve", KEY, "order-1", &body("6Le-other")).await;
        assert_eq!(status, 422, "{refused}");
        assert_eq!(refused["error"]["code"], "idempotency_key_reused");
    }
    assert_eq!(sim.sim.stats().submits, 2);
}

#[tokio::test]
async fn keys_out_of_range_are_refused_before_any_work() {
    let gw = TestGateway::start().await;
    let long = "k".repeat(256);
    for bad in ["", "with space", long.as_str(), "é"] {
        for path in ["/v1/solve", "/v1/tasks"] {
            let res = gw
                .http
                .post(gw.url(path))
                .bearer_auth(KEY)
                .header("Idempotency-Key", bad.as_bytes())
                .json(&body("6Le-bad-key"))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status().as_u16(), 400, "{bad:?} on {path}");
            let v: Value = res.json().await.unwrap();
            assert_eq!(v["error"]["code"], "bad_idempotency_key", "{v}");
        }
    }
    assert_eq!(gw.stat("submits").await, 0, "nothing was solved");
}

const ALPHA: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const BETA: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

/// Fast simulator settings with two tenants, loaded as `serve` loads them.
fn two_tenants() -> Settings {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(
        file,
        "provider = \"sim\"\nlisten = \"127.0.0.1:0\"\n\
         [[tenants]]\nname = \"alpha\"\nkeys = [\"{ALPHA}\"]\n\
         [[tenants]]\nname = \"beta\"\nkeys = [\"{BETA}\"]\n"
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(file.path().to_owned()),
        ..ServeArgs::default()
    };
    let loaded = config::load_serve(&args, &|_| None).expect("the test config is valid");
    let mut settings = fast_settings();
    settings.tenants = loaded.tenants;
    settings.gateway_keys = loaded.gateway_keys;
    settings
}

#[tokio::test]
async fn the_embedded_store_keeps_one_task_per_key_and_tenant() {
    let gw = TestGateway::with(two_tenants()).await;
    let base = gw.url("");
    let solve = body("6Le-idem-embedded");
    let calls = (0..4).map(|_| post(&gw.http, &base, "/v1/solve", ALPHA, "k-1", &solve));
    let answers = join_all(calls).await;
    for (status, answer) in &answers {
        assert_eq!(*status, 200, "{answer}");
        assert_eq!(answer["token"], answers[0].1["token"]);
    }
    assert_eq!(gw.stat("submits").await, 1);

    // The same key from another tenant is that tenant's own task.
    let (status, beta) = post(&gw.http, &base, "/v1/solve", BETA, "k-1", &solve).await;
    assert_eq!(status, 200, "{beta}");
    assert_ne!(beta["token"], answers[0].1["token"]);
    assert_eq!(gw.stat("submits").await, 2);
    for token in [&beta["token"], &answers[0].1["token"]] {
        gw.verify(token.as_str().unwrap())
            .await
            .expect("a valid token");
    }

    // A task id from /v1/tasks under a key is the one a repeat gets, and /v1/solve under the
    // same key and body waits on that task instead of starting another.
    let (status, task) = post(&gw.http, &base, "/v1/tasks", ALPHA, "k-2", &solve).await;
    assert_eq!(status, 202, "{task}");
    let (_, again) = post(&gw.http, &base, "/v1/tasks", ALPHA, "k-2", &solve).await;
    assert_eq!(again["task_id"], task["task_id"]);
    let (status, solved) = post(&gw.http, &base, "/v1/solve", ALPHA, "k-2", &solve).await;
    assert_eq!(status, 200, "{solved}");
    assert_eq!(gw.stat("submits").await, 3, "k-2 is one task");
}

#[tokio::test]
async fn a_key_whose_gateway_was_killed_mid_solve_is_taken_over_by_another() {
    killed_mid_solve("/v1/solve", "token").await;
}

/// The seed's worker API takes the key too (the shipped NGINX config names every `/solve`).
#[tokio::test]
async fn a_worker_api_solve_whose_gateway_was_killed_is_taken_over_by_another() {
    killed_mid_solve("/solve", "solution").await;
}

/// A keyed solve on `path` whose gateway is killed after submitting: the repeat on another
/// gateway takes the key over once the dead one's lease lapsed, and adopts (polls) the provider
/// task it had submitted. `answer_field` is the field the token comes in.
async fn killed_mid_solve(path: &'static str, answer_field: &str) {
    let redis = RedisServer::start();
    let latency = LatencyRange {
        min: Duration::from_secs(4),
        max: Duration::from_secs(5),
    };
    let sim = SimServer::start(latency, 100).await;
    // The poller's 20 checks must cover the solve time.
    let mut a = GatewayProcess::start(&sim, &redis.url(), "", 0.5).await;
    let b = GatewayProcess::start(&sim, &redis.url(), "", 0.5).await;
    let http = client();
    let solve = body(&format!("6Le-idem-killed{}", path.replace('/', "-")));
    let first = tokio::spawn({
        let (http, base, solve) = (http.clone(), a.base.clone(), solve.clone());
        async move {
            http.post(format!("{base}{path}"))
                .bearer_auth(KEY)
                .header("Idempotency-Key", "killed-1")
                .json(&solve)
                .send()
                .await
        }
    });
    crate::support::eventually::eventually(
        Duration::from_secs(10),
        "the upstream submit, noted for adoption",
        || async { sim.sim.stats().submits == 1 && redis.noted_provider_tasks().await == 1 },
    )
    .await;
    a.kill().await;
    assert!(
        first.await.unwrap().is_err(),
        "the first caller lost its connection"
    );

    // The repeat finds the key bound to a task whose runner is gone (its lease lapses), and
    // takes it over instead of waiting for an answer that cannot come.
    let (status, answer) = post(&http, &b.base, path, KEY, "killed-1", &solve).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        sim.sim.stats().submits,
        1,
        "the killed gateway's provider task answered: it was adopted, not submitted again"
    );
    let token = answer[answer_field].as_str().expect("a token");
    let verdict = sim.verify(&http, token).await;
    assert_eq!(verdict["success"], true, "{verdict}");
    let (_, again) = post(&http, &b.base, path, KEY, "killed-1", &solve).await;
    assert_eq!(
        again[answer_field], answer[answer_field],
        "the key names the new task now"
    );
    assert_eq!(sim.sim.stats().submits, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_front_ends_hand_one_task_per_key_to_the_workers() {
    use crate::queue::support::worker_on;
    let redis = RedisServer::start();
    let sim = slow_simulator().await;
    let front_a = crate::queue::support::front_end(&sim, &redis.url())
        .start()
        .await;
    let front_b = crate::queue::support::front_end(&sim, &redis.url())
        .start()
        .await;
    let _worker = worker_on(sim.addr, &redis.url(), "").start().await;
    let http = client();
    let bases = [front_a.base.as_str(), front_b.base.as_str()];

    let solve = body("6Le-idem-queued");
    let calls = (0..4).map(|i| post(&http, bases[i % 2], "/v1/solve", KEY, "q-1", &solve));
    let answers = join_all(calls).await;
    for (status, answer) in &answers {
        assert_eq!(*status, 200, "{answer}");
        assert_eq!(answer["token"], answers[0].1["token"]);
    }
    let task = body("6Le-idem-queued-task");
    let calls = (0..4).map(|i| post(&http, bases[i % 2], "/v1/tasks", KEY, "q-2", &task));
    let created = join_all(calls).await;
    for (status, answer) in &created {
        assert_eq!(*status, 202, "{answer}");
        assert_eq!(answer["task_id"], created[0].1["task_id"]);
    }
    let id = created[0].1["task_id"].as_str().unwrap();
    let done: Value = http
        .get(front_a.url(&format!("/v1/tasks/{id}?wait=30")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "ready", "{done}");
    assert_eq!(sim.sim.stats().submits, 2, "one upstream task per key");
}
