//! Keyed calls through the Rust client (client/): a call whose gateway started it and then
//! could not answer (the connection was reset, the gateway shut down) is sent to another
//! gateway with its `Idempotency-Key`, and the fleet gives it one answer. With the connection
//! lost, the retry joins the task already running (one upstream task); with a shutdown, the
//! stopping gateway cut its task and the retry starts the one that answers.

use std::time::Duration;

use captcha_gateway::sim::LatencyRange;
use captcha_gateway_client::{Client, SolveRequest};
use serde_json::Value;

use crate::clients::python;
use crate::support::KEY;
use crate::support::eventually::eventually;
use crate::support::fault_proxy::{FaultProxy, Mode};
use crate::support::fleet::SimServer;
use crate::support::gateway::GatewayProcess;
use crate::support::redis::RedisServer;

async fn simulator(min_ms: u64, max_ms: u64) -> SimServer {
    let latency = LatencyRange {
        min: Duration::from_millis(min_ms),
        max: Duration::from_millis(max_ms),
    };
    SimServer::start(latency, 100).await
}

fn client(backends: impl IntoIterator<Item = String>) -> Client {
    Client::builder()
        .backends(backends)
        .key(KEY)
        .retry_backoff(Duration::from_millis(10), Duration::from_millis(50))
        .probe_interval(None)
        .build()
        .expect("valid settings")
}

/// Who makes the keyed call: the Rust client, or the Python one (`sync` or `async`).
#[derive(Clone, Copy, Debug)]
enum Caller {
    Rust,
    Python(&'static str),
}

/// The call's token and how many calls each backend served, by the caller's own count.
type Outcome = (String, Vec<u64>);

/// Starts one keyed solve through `caller` over `backends`; resolves when it is answered.
fn keyed_call(
    caller: Caller,
    backends: Vec<String>,
    idem: &'static str,
    sitekey: &'static str,
) -> tokio::task::JoinHandle<Outcome> {
    tokio::spawn(async move {
        match caller {
            Caller::Rust => {
                let client = client(backends.clone());
                let request = SolveRequest::recaptcha_v2(sitekey, "https://keyed.example.com/")
                    .idempotency_key(idem);
                let answer = client
                    .solve(&request)
                    .await
                    .expect("the keyed call is answered");
                let served = backends
                    .iter()
                    .map(|b| {
                        let states = client.backends();
                        states
                            .iter()
                            .find(|s| &s.address == b)
                            .map_or(0, |s| s.served)
                    })
                    .collect();
                (answer.token_text().expect("a token").to_owned(), served)
            }
            Caller::Python(mode) => {
                let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/python/keyed_retry.py");
                let out = tokio::process::Command::new(python())
                    .arg(script)
                    .args([mode, KEY, idem, sitekey])
                    .args(&backends)
                    .kill_on_drop(true)
                    .output()
                    .await
                    .expect("python runs");
                assert!(
                    out.status.success(),
                    "the {mode} script failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let v: Value = serde_json::from_slice(&out.stdout).expect("the result as JSON");
                let served = backends
                    .iter()
                    .map(|b| {
                        v["backends"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|s| s["address"].as_str() == Some(b.as_str()))
                            .and_then(|s| s["served"].as_u64())
                            .unwrap_or(0)
                    })
                    .collect();
                (v["token"].as_str().expect("a token").to_owned(), served)
            }
        }
    })
}

/// The index of the gateway holding an admitted solve, once one does.
async fn gateway_running_it(gateways: &[&GatewayProcess]) -> usize {
    let http = reqwest::Client::new();
    let bases: Vec<String> = gateways.iter().map(|g| g.base.clone()).collect();
    let found = std::sync::Arc::new(std::sync::Mutex::new(None));
    eventually(
        Duration::from_secs(30),
        "a gateway running the call",
        || {
            let (http, bases, found) = (http.clone(), bases.clone(), found.clone());
            async move {
                for (i, base) in bases.iter().enumerate() {
                    let health: Value = match http.get(format!("{base}/health")).send().await {
                        Ok(res) => res.json().await.unwrap_or_default(),
                        Err(_) => continue,
                    };
                    if health["active_tasks"].as_u64().unwrap_or(0) > 0 {
                        *found.lock().unwrap() = Some(i);
                        return true;
                    }
                }
                false
            }
        },
    )
    .await;
    found.lock().unwrap().expect("found")
}

#[tokio::test]
async fn rust_client_keyed_call_whose_connection_was_reset_joins_its_task_elsewhere() {
    connection_reset(Caller::Rust, "6Le-keyed-reset-rust").await;
}

#[tokio::test]
async fn python_sync_keyed_call_whose_connection_was_reset_joins_its_task_elsewhere() {
    connection_reset(Caller::Python("sync"), "6Le-keyed-reset-py-sync").await;
}

#[tokio::test]
async fn python_async_keyed_call_whose_connection_was_reset_joins_its_task_elsewhere() {
    connection_reset(Caller::Python("async"), "6Le-keyed-reset-py-async").await;
}

/// The call's gateway keeps solving while the caller's connection to it is reset: the retry
/// on the other gateway joins the running task.
async fn connection_reset(caller: Caller, sitekey: &'static str) {
    let redis = RedisServer::start();
    let sim = simulator(1500, 2000).await;
    // The poller's 20 checks must cover the solve time.
    let a = GatewayProcess::start(&sim, &redis.url(), "", 0.25).await;
    let b = GatewayProcess::start(&sim, &redis.url(), "", 0.25).await;
    let mut proxies = Vec::new();
    for g in [&a, &b] {
        let addr = g.base.trim_start_matches("http://").parse().unwrap();
        proxies.push(FaultProxy::start(addr).await);
    }
    let backends: Vec<String> = proxies
        .iter()
        .map(|p| format!("http://{}", p.addr))
        .collect();
    let call = keyed_call(caller, backends, "reset-1", sitekey);

    // Once the upstream task runs, the road to its gateway breaks: the caller's connection is
    // reset after the request was sent, and the gateway keeps solving.
    let running = gateway_running_it(&[&a, &b]).await;
    eventually(Duration::from_secs(10), "the upstream submit", || async {
        sim.sim.stats().submits == 1
    })
    .await;
    proxies[running].set(Mode::Reset);

    let (token, served) = call.await.expect("the keyed call is answered");
    assert_eq!(
        sim.sim.stats().submits,
        1,
        "{caller:?}: the retry joined the running task"
    );
    let verdict = sim.verify(&reqwest::Client::new(), &token).await;
    assert_eq!(verdict["success"], true, "{verdict}");
    assert!(
        served[1 - running] > 0,
        "{caller:?}: the other gateway answered: {served:?}"
    );
}

#[tokio::test]
async fn rust_client_keyed_call_on_a_gateway_that_shuts_down_is_answered_by_another() {
    shut_down(Caller::Rust, "6Le-keyed-stop-rust").await;
}

#[tokio::test]
async fn python_sync_keyed_call_on_a_gateway_that_shuts_down_is_answered_by_another() {
    shut_down(Caller::Python("sync"), "6Le-keyed-stop-py-sync").await;
}

#[tokio::test]
async fn python_async_keyed_call_on_a_gateway_that_shuts_down_is_answered_by_another() {
    shut_down(Caller::Python("async"), "6Le-keyed-stop-py-async").await;
}

/// The call's gateway shuts down before the answer comes: it cuts its task, hands its claim
/// back and answers 503 `shutting_down`; the client moves the keyed call to the other gateway,
/// which takes the key over and adopts (polls) the provider task the stopped one submitted.
async fn shut_down(caller: Caller, sitekey: &'static str) {
    let redis = RedisServer::start();
    // Longer than the grace period: the stopping gateway cuts its task short.
    let sim = simulator(6000, 7000).await;
    let grace = "shutdown_grace_s = 2";
    let a = GatewayProcess::start(&sim, &redis.url(), grace, 0.5).await;
    let b = GatewayProcess::start(&sim, &redis.url(), grace, 0.5).await;
    let backends = vec![a.base.clone(), b.base.clone()];
    let call = keyed_call(caller, backends.clone(), "stop-1", sitekey);
    let gateways = [&a, &b];
    let running = gateway_running_it(&gateways).await;
    eventually(
        Duration::from_secs(10),
        "the upstream submit, noted for adoption",
        || async { sim.sim.stats().submits == 1 && redis.noted_provider_tasks().await == 1 },
    )
    .await;
    gateways[running].terminate();

    let (token, served) = call.await.expect("the keyed call is answered");
    let verdict = sim.verify(&reqwest::Client::new(), &token).await;
    assert_eq!(verdict["success"], true, "{verdict}");
    assert!(served[1 - running] > 0, "{caller:?}: {served:?}");
    // The stopped gateway's task was cut, and its provider task answered on the other one: the
    // key's task now, so a repeat gets its answer without another solve.
    let submits = sim.sim.stats().submits;
    assert_eq!(
        submits, 1,
        "the provider task the stopped gateway submitted was adopted, not submitted again"
    );
    let survivor = vec![backends[1 - running].clone()];
    let (again, _) = keyed_call(caller, survivor, "stop-1", sitekey)
        .await
        .unwrap();
    assert_eq!(again, token);
    assert_eq!(sim.sim.stats().submits, submits);
}
