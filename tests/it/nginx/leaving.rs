//! A caller that leaves a solve behind the shipped NGINX config: the name NGINX gives the solve
//! (`Idempotency-Scope: request`) lets it move between instances, not outlive its caller.

use std::time::Duration;

use super::Nginx;
use crate::support::eventually::eventually;
use crate::support::fleet::{SimServer, client};
use crate::support::gateway::SimAccountConfig;
use crate::support::redis::RedisServer;
use crate::support::{metric_sum, solve};

/// A caller that leaves a solve NGINX named for it (it sent no key of its own) takes its demand
/// with it, as it would without NGINX: the task ends, its admission slot comes back, and the
/// provider task it started answers the next caller for the same site instead of a record that
/// nobody will read (which made the next caller pay for a second one).
#[tokio::test]
async fn nginx_named_solve_ends_when_its_caller_leaves_and_its_provider_task_serves_the_next() {
    let redis = RedisServer::start();
    // The provider's time moves only when the test moves it: the first caller's task is still
    // running when that caller leaves, however slow the machine.
    let sim = SimServer::stalled(100).await;
    // Checks every 2 s (then 4 s): the 20-check budget outlasts the test.
    let gateway = SimAccountConfig::new(sim.addr, &redis.url())
        .threads(10)
        .poll_interval(2.0)
        .serve()
        .start()
        .await;
    // The shipped file lists three instances; here all three are the one gateway, whose
    // figures the test reads.
    let nginx = Nginx::start(&[
        gateway.base.clone(),
        gateway.base.clone(),
        gateway.base.clone(),
    ])
    .await;
    let http = client();
    let body = serde_json::json!({"kind": "recaptcha_v2", "sitekey": "6Le-leaves", "pageurl": "https://example.com/"});
    let metric = |name: &'static str| {
        let (http, base) = (http.clone(), gateway.base.clone());
        async move { metric_sum(&http, &base, name).await }
    };

    // A caller through NGINX, with no key of its own.
    let call = || {
        let (http, base, body) = (http.clone(), nginx.base.clone(), body.clone());
        tokio::spawn(async move { solve(&http, &base, body).await })
    };

    let leaving = call();
    eventually(
        Duration::from_secs(30),
        "the first caller's submit",
        || async { sim.sim.stats().submits == 1 },
    )
    .await;
    // The caller gives up: its connection to NGINX closes, and NGINX closes its own.
    leaving.abort();
    eventually(
        Duration::from_secs(30),
        "the leaving caller's task to end, and its slot and demand to go",
        || async {
            metric("captcha_gateway_active_solves").await == 0
                && metric("captcha_gateway_target_waiting").await == 0
        },
    )
    .await;

    let next = call();
    eventually(
        Duration::from_secs(30),
        "the next caller to wait",
        || async { metric("captcha_gateway_target_waiting").await == 1 },
    )
    .await;
    sim.sim.clock().advance(Duration::from_secs(1));
    let (status, answer) = next.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    let token = answer["token"].as_str().expect("a token");
    let verdict = sim.verify(&http, token).await;
    assert_eq!(verdict["success"], true, "{verdict}");
    assert_eq!(
        sim.sim.stats().submits,
        1,
        "the provider task the first caller started answered the next one"
    );
}
