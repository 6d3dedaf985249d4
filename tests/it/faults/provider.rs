//! The provider misbehaving (every fault the simulator injects) and the road to it breaking
//! (the fault proxy between gateway and simulator).

use captcha_gateway::sim::{Faults, SimStats};

use super::*;
use crate::support::fault_proxy::{FaultProxy, Mode};
use crate::support::fleet::client;
use crate::support::redis::RedisServer;

/// Each fault runs on its own simulator, Redis and gateway, all at once: the phases share
/// nothing, so the test takes as long as its slowest fault rather than the sum of them.
#[tokio::test]
async fn every_injected_provider_fault_gets_callers_an_answer_and_frees_every_slot() {
    let off = Faults::default();
    let faults = [
        (
            "capacity errors",
            Faults {
                capacity_error_rate: 1.0,
                ..off
            },
        ),
        (
            "zero balance",
            Faults {
                zero_balance_rate: 1.0,
                ..off
            },
        ),
        (
            "HTML 502 pages",
            Faults {
                html_error_rate: 1.0,
                ..off
            },
        ),
        (
            "server errors",
            Faults {
                server_error_rate: 1.0,
                ..off
            },
        ),
        (
            "malformed JSON",
            Faults {
                malformed_rate: 1.0,
                ..off
            },
        ),
        (
            "dropped connections",
            Faults {
                drop_rate: 1.0,
                ..off
            },
        ),
        (
            "slow replies",
            Faults {
                slow_rate: 1.0,
                slow_ms: 5_000,
                ..off
            },
        ),
        (
            "a bit of everything",
            Faults {
                capacity_error_rate: 0.1,
                html_error_rate: 0.1,
                drop_rate: 0.15,
                malformed_rate: 0.15,
                slow_rate: 0.2,
                slow_ms: 1_000,
                ..off
            },
        ),
    ];
    let phases = join_all(
        faults
            .into_iter()
            .enumerate()
            .map(|(i, (name, fault))| one_injected_fault(i, name, fault)),
    )
    .await;
    let injected = |f: fn(&SimStats) -> u64| phases.iter().map(|(stats, _)| f(stats)).sum::<u64>();
    let totals = (
        injected(|s| s.injected_errors),
        injected(|s| s.dropped_connections),
        injected(|s| s.malformed_replies),
        injected(|s| s.slow_replies),
    );
    assert!(
        totals.0 > 0 && totals.1 > 0 && totals.2 > 0 && totals.3 > 0,
        "every fault was injected (errors, drops, malformed, slow): {totals:?}"
    );
    // Each refused submit is counted under its class (docs/API.md "Metrics").
    for result in ["ok", "capacity", "transient"] {
        let counted: u64 = phases
            .iter()
            .flat_map(|(_, metrics)| metrics.lines())
            .filter(|l| l.starts_with("captcha_gateway_upstream_requests_total{"))
            .filter(|l| {
                l.contains("endpoint=\"submit\"") && l.contains(&format!("result=\"{result}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        assert!(counted > 0, "no submit counted as {result} in any phase");
    }
}

/// One fault on a gateway of its own: callers under it get answers, its slots come back once
/// it stops, and the gateway serves again. Returns what the simulator injected and the
/// gateway's metrics.
async fn one_injected_fault(i: usize, name: &str, fault: Faults) -> (SimStats, String) {
    let redis = RedisServer::start();
    let sim = simulator().await;
    let gw = logged_gateway(&sim, &redis.url(), "compat_task_timeout_s = 5").await;
    let http = client();
    sim.sim.set_faults(fault).expect("valid faults");
    load(&http, &gw.base, &format!("6Le-fault-{i}"), 8, name).await;
    sim.sim.set_faults(Faults::default()).expect("valid faults");
    assert_slots_return(&http, &gw.base, name).await;
    assert_serves_again(&http, &gw.base, &format!("6Le-after-{i}"), name).await;
    let metrics = metrics_text(&http, &gw.base).await;
    assert_never_panicked(&gw);
    (sim.sim.stats(), metrics)
}

/// Each way of breaking the road on a gateway of its own, all at once (as above).
#[tokio::test]
async fn a_broken_road_to_the_provider_gets_callers_an_answer_and_frees_every_slot() {
    join_all(
        [Mode::Blackhole, Mode::Reset, Mode::Stall]
            .into_iter()
            .enumerate()
            .map(|(i, mode)| one_broken_road(i, mode)),
    )
    .await;
}

async fn one_broken_road(i: usize, mode: Mode) {
    let redis = RedisServer::start();
    let sim = simulator().await;
    let proxy = FaultProxy::start(sim.addr).await;
    let gw = logged_gateway(
        &behind(&sim, proxy.addr),
        &redis.url(),
        "compat_task_timeout_s = 5",
    )
    .await;
    let http = client();
    let context = format!("provider road {mode:?}");
    assert_serves_again(&http, &gw.base, &format!("6Le-road-before-{i}"), &context).await;
    proxy.set(mode);
    load(&http, &gw.base, &format!("6Le-road-{i}"), 6, &context).await;
    proxy.set(Mode::Pass);
    assert_slots_return(&http, &gw.base, &context).await;
    assert_serves_again(&http, &gw.base, &format!("6Le-road-after-{i}"), &context).await;
    assert_never_panicked(&gw);
}

/// Callers already waiting on running tasks when the road to the provider breaks: once it heals
/// (before their deadlines), every one gets its answer; none is lost to a failed poll.
#[tokio::test]
async fn callers_waiting_when_the_road_to_the_provider_breaks_get_their_answers_once_it_heals() {
    let redis = RedisServer::start();
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_millis(1_500)), 200).await;
    let proxy = FaultProxy::start(sim.addr).await;
    let gw = logged_gateway(&behind(&sim, proxy.addr), &redis.url(), "").await;
    let http = client();
    for (i, mode) in [Mode::Blackhole, Mode::Reset, Mode::Stall]
        .into_iter()
        .enumerate()
    {
        let context = format!("provider road {mode:?} under waiting callers");
        let before = sim.sim.stats();
        let waiting: Vec<_> = (0..5)
            .map(|_| {
                let (http, base) = (http.clone(), gw.base.clone());
                let body = body(&format!("6Le-heal-{i}"), 25.0);
                tokio::spawn(async move { solve(&http, &base, body).await })
            })
            .collect();
        eventually_showing(SOON, &format!("{context}: tasks started"), || async {
            let submits = sim.sim.stats().submits - before.submits;
            (submits >= 5, submits)
        })
        .await;
        proxy.set(mode);
        // The answers become ready upstream while the gateway cannot reach them.
        eventually_showing(
            SOON,
            &format!("{context}: tasks ready upstream"),
            || async {
                let now = sim.sim.stats();
                let ready = now.solved - before.solved;
                (ready >= 5, ready)
            },
        )
        .await;
        if mode == Mode::Blackhole {
            // The gateway did try the road while it was broken (its polls went into the hole).
            eventually_showing(SOON, &format!("{context}: polls swallowed"), || async {
                (proxy.swallowed() > 0, proxy.swallowed())
            })
            .await;
        }
        proxy.set(Mode::Pass);
        for w in waiting {
            let (status, v) = within(SOON, &context, w).await.expect("the caller's task");
            assert_eq!(status, 200, "{context}: {v}");
        }
        assert_slots_return(&http, &gw.base, &context).await;
    }
    // The log is really captured (so the panic check below reads something): the failed polls
    // were logged.
    let text = gw.log();
    assert!(text.contains("poll request failed"), "log:\n{text}");
    assert_never_panicked(&gw);
}

/// The switch over HTTP on the gateway's own port (`--provider sim` serves the simulator under
/// `/sim`), and a dropped connection as a client really sees it on a socket.
#[tokio::test]
async fn sim_faults_switch_over_http_and_a_dropped_reply_fails_on_the_wire() {
    let gw = crate::support::TestGateway::start().await;
    let http = reqwest::Client::new();
    let set = |body: &'static str| {
        http.post(gw.url("/sim/faults"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let res = set(r#"{"drop_rate": 1}"#)
        .await
        .expect("the switch answers");
    assert_eq!(res.status(), 200);
    let res_php = format!("/res.php?key={}&action=getbalance", crate::support::KEY);
    let dropped = http.get(gw.sim_url(&res_php)).send().await;
    let failed = match dropped {
        Err(_) => true,
        Ok(r) => r.bytes().await.is_err(),
    };
    assert!(failed, "a dropped reply never completes on the wire");
    assert_eq!(gw.stat("dropped_connections").await, 1);

    let bad = set(r#"{"drop_rate": 2}"#)
        .await
        .expect("the switch answers");
    assert_eq!(bad.status(), 400);
    let current: Value = http
        .get(gw.url("/sim/faults"))
        .send()
        .await
        .expect("the switch answers")
        .json()
        .await
        .expect("JSON faults");
    assert_eq!(
        current["drop_rate"], 1.0,
        "a refused change changes nothing"
    );

    let cleared = http
        .delete(gw.url("/sim/faults"))
        .send()
        .await
        .expect("the switch answers");
    assert_eq!(cleared.status(), 200);
    let balance = http
        .get(gw.sim_url(&res_php))
        .send()
        .await
        .expect("served again")
        .text()
        .await
        .expect("a complete reply");
    assert_eq!(balance, "100.00");
}
