//! The Rust client (client/).

use std::time::{Duration, Instant};

use captcha_gateway_client::{BackendState, Client, EjectionPolicy, SolveRequest, Strategy};
use futures::future::join_all;

use super::{Instance, simulator};
use crate::support::KEY;
use crate::support::redis::RedisServer;

const CALLS_PER_ROUND: usize = 30;

/// A distinct target per call: no call can be served by another's solve, so upstream submits
/// must equal calls exactly.
fn request(round: usize, i: usize) -> SolveRequest {
    SolveRequest::recaptcha_v2(
        &format!("6Le-rust-{round}-{i}"),
        "https://example.com/login",
    )
}

/// One round of concurrent calls; every one must succeed. Returns the tokens.
async fn round(client: &Client, round: usize) -> Vec<String> {
    let calls = (0..CALLS_PER_ROUND).map(|i| async move { client.solve(&request(round, i)).await });
    join_all(calls)
        .await
        .into_iter()
        .enumerate()
        .map(|(i, r)| match r {
            Ok(answer) => answer.token_text().expect("a token").to_owned(),
            Err(e) => panic!("round {round} call {i} failed: {e}"),
        })
        .collect()
}

fn state(client: &Client, base: &str) -> BackendState {
    client
        .backends()
        .into_iter()
        .find(|b| b.address == base)
        .expect("a configured gateway")
}

/// Waits for a health change (ejection, re-admission) until `done` holds.
async fn until(client: &Client, what: &str, done: impl Fn(&Client) -> bool) {
    let mut changes = client.health_changes();
    let wait = async {
        while !done(client) {
            changes.changed().await.expect("the client lives");
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}: {:?}", client.backends()));
}

#[tokio::test]
async fn rust_client_fails_over_from_a_killed_gateway_and_takes_it_back_after_restart() {
    killed_and_restarted(Strategy::LeastOutstanding).await;
}

#[tokio::test]
async fn rust_client_with_power_of_two_choices_fails_over_and_takes_it_back_too() {
    killed_and_restarted(Strategy::PowerOfTwoChoices).await;
}

async fn killed_and_restarted(strategy: Strategy) {
    let redis = RedisServer::start();
    let sim = simulator().await;
    let mut gateways = Vec::new();
    for _ in 0..3 {
        gateways.push(Instance::start(&sim, &redis.url()).await);
    }
    let client = Client::builder()
        .backends(gateways.iter().map(|g| g.base.clone()))
        .key(KEY)
        .strategy(strategy)
        .ejection(EjectionPolicy {
            consecutive_failures: 3,
            base_ejection: Duration::from_millis(300),
            max_ejection: Duration::from_secs(2),
        })
        .probe_interval(Some(Duration::from_millis(50)))
        .build()
        .expect("valid settings");
    let victim = gateways[1].base.clone();

    let mut tokens = round(&client, 0).await;
    for b in client.backends() {
        assert!(b.served > 0, "an idle fleet is used evenly: {b:?}");
        assert_eq!(b.ejections, 0, "{b:?}");
    }

    // Killed between rounds: nothing of ours is running there, so every call it refuses (the
    // port is closed) can go elsewhere without any being solved twice.
    gateways[1].kill().await;
    tokens.extend(round(&client, 1).await);
    until(&client, "the killed gateway's ejection", |c| {
        state(c, &victim).ejections > 0
    })
    .await;
    let before = state(&client, &victim);
    assert!(before.failures >= 3, "{before:?}");
    tokens.extend(round(&client, 2).await);

    gateways[1].restart().await;
    let restarted = Instant::now();
    until(&client, "the restarted gateway's re-admission", |c| {
        state(c, &victim).readmissions > 0
    })
    .await;
    let readmitted_after = restarted.elapsed();
    println!(
        "FIGURE rust client ({strategy:?}): re-admitted {readmitted_after:?} after the restart"
    );
    assert!(!state(&client, &victim).ejected);

    let served_before = state(&client, &victim).served;
    tokens.extend(round(&client, 3).await);
    let after = state(&client, &victim);
    assert!(
        after.served > served_before,
        "it takes calls again: {after:?}"
    );

    let calls = 4 * CALLS_PER_ROUND as u64;
    let stats = sim.sim.stats();
    assert_eq!(
        stats.submits, calls,
        "one upstream task per call, none twice"
    );
    let http = reqwest::Client::new();
    for token in &tokens {
        let v = sim.verify(&http, token).await;
        assert_eq!(v["success"], true, "{v}");
    }
    assert_eq!(sim.sim.stats().verify_ok, calls);
    println!("FIGURE rust client ({strategy:?}): {:?}", client.backends());
}

/// Three gateways whose solves take a second, so calls overlap for sure; the first one takes
/// `first_max_concurrent` at once, and every one has `tables`.
async fn slow_fleet(
    redis: &RedisServer,
    sim: &crate::support::fleet::SimServer,
    first_max_concurrent: u32,
    tables: &str,
) -> Vec<Instance> {
    let mut gateways =
        vec![Instance::start_with(sim, &redis.url(), first_max_concurrent, tables).await];
    for _ in 0..2 {
        gateways.push(Instance::start_with(sim, &redis.url(), 2000, tables).await);
    }
    gateways
}

fn passive_client(gateways: &[Instance]) -> Client {
    Client::builder()
        .backends(gateways.iter().map(|g| g.base.clone()))
        .key(KEY)
        .probe_interval(None)
        .build()
        .expect("valid settings")
}

#[tokio::test]
async fn rust_client_moves_calls_a_full_gateway_refused_to_the_others_and_solves_each_once() {
    let redis = RedisServer::start();
    let sim = crate::support::fleet::SimServer::start(
        captcha_gateway::sim::LatencyRange::fixed(Duration::from_secs(1)),
        5000,
    )
    .await;
    let gateways = slow_fleet(&redis, &sim, 2, "").await;
    let client = passive_client(&gateways);
    let tokens = round(&client, 0).await;
    assert_eq!(tokens.len(), CALLS_PER_ROUND);
    let full = state(&client, &gateways[0].base);
    // Least-outstanding sent it a third of the calls at once; it took two.
    assert!(full.failures > 0, "it refused some: {full:?}");
    assert!(full.served <= 2, "{full:?}");
    assert_eq!(
        sim.sim.stats().submits,
        CALLS_PER_ROUND as u64,
        "a refused call started nothing: one upstream task per call"
    );
}

#[tokio::test]
async fn rust_client_returns_a_429_at_once_and_holds_it_against_no_gateway() {
    let redis = RedisServer::start();
    let sim = crate::support::fleet::SimServer::start(
        captcha_gateway::sim::LatencyRange::fixed(Duration::from_secs(1)),
        5000,
    )
    .await;
    let tenant =
        format!("[[tenants]]\nname = \"scrapers\"\nkeys = [\"{KEY}\"]\nmax_concurrent = 1\n");
    let gateways = slow_fleet(&redis, &sim, 2000, &tenant).await;
    let client = passive_client(&gateways);
    // Six at once: two per gateway, and each gateway lets the tenant hold one.
    let calls = (0..6).map(|i| {
        let client = &client;
        async move { client.solve(&request(9, i)).await }
    });
    let results = join_all(calls).await;
    let limited = results
        .iter()
        .filter(|r| matches!(r, Err(captcha_gateway_client::Error::FleetLimited { .. })))
        .count();
    let solved = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!((solved, limited), (3, 3), "{results:?}");
    for b in client.backends() {
        assert_eq!(
            (b.failures, b.ejections),
            (0, 0),
            "a 429 is not the gateway's fault: {b:?}"
        );
    }
    assert_eq!(
        sim.sim.stats().submits,
        3,
        "a limited call was not sent elsewhere"
    );
}

#[tokio::test]
async fn rust_client_reads_a_task_from_another_gateway_when_the_one_that_took_it_is_gone() {
    let redis = RedisServer::start();
    let sim = simulator().await;
    let mut gateways = Vec::new();
    for _ in 0..3 {
        gateways.push(Instance::start(&sim, &redis.url()).await);
    }
    let client = passive_client(&gateways);
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push(client.submit(&request(7, i)).await.expect("submitted"));
    }
    let taken: std::collections::HashSet<_> = tasks.iter().map(|t| t.address.clone()).collect();
    assert_eq!(taken.len(), 3, "submits are spread: {tasks:?}");
    let mut tokens = Vec::new();
    for task in &tasks {
        match client
            .task(task, Duration::from_secs(30))
            .await
            .expect("read")
        {
            captcha_gateway_client::TaskState::Ready(answer) => {
                tokens.push(answer.token_text().unwrap().to_owned())
            }
            other => panic!("{task:?}: {other:?}"),
        }
    }
    // The gateway that took the first task dies; the tasks live in Redis, and a read is safe
    // to repeat, so another gateway answers it.
    let first = &tasks[0];
    let index = gateways
        .iter()
        .position(|g| g.base == first.address)
        .unwrap();
    gateways[index].kill().await;
    match client
        .task(first, Duration::ZERO)
        .await
        .expect("read elsewhere")
    {
        captcha_gateway_client::TaskState::Ready(answer) => {
            assert_eq!(answer.token_text(), Some(tokens[0].as_str()))
        }
        other => panic!("{other:?}"),
    }
    assert!(state(&client, &first.address).failures > 0);
    assert_eq!(sim.sim.stats().submits, 6);
}

#[tokio::test]
async fn rust_client_probes_eject_a_frozen_gateway_and_take_it_back_when_it_thaws() {
    let redis = RedisServer::start();
    let sim = simulator().await;
    let mut gateways = Vec::new();
    for _ in 0..3 {
        gateways.push(Instance::start(&sim, &redis.url()).await);
    }
    let client = Client::builder()
        .backends(gateways.iter().map(|g| g.base.clone()))
        .key(KEY)
        .ejection(EjectionPolicy {
            consecutive_failures: 3,
            base_ejection: Duration::from_millis(300),
            max_ejection: Duration::from_secs(2),
        })
        .probe_interval(Some(Duration::from_millis(50)))
        .probe_timeout(Duration::from_millis(200))
        .build()
        .expect("valid settings");
    let frozen = gateways[2].base.clone();
    let mut tokens = round(&client, 0).await;
    let served = state(&client, &frozen).served;

    // SIGSTOP: the port still accepts connections (the kernel's backlog) but nothing answers,
    // the failure a liveness check by connection misses. Probes time out and eject it before
    // any caller is sent there.
    gateways[2].signal("STOP");
    until(&client, "the frozen gateway's ejection", |c| {
        state(c, &frozen).ejections > 0
    })
    .await;

    gateways[2].signal("CONT");
    let thawed = Instant::now();
    until(&client, "the thawed gateway's re-admission", |c| {
        state(c, &frozen).readmissions > 0
    })
    .await;
    println!(
        "FIGURE rust client: frozen gateway re-admitted {:?} after SIGCONT",
        thawed.elapsed()
    );
    tokens.extend(round(&client, 1).await);
    assert!(
        state(&client, &frozen).served > served,
        "it takes calls again"
    );
    assert_eq!(sim.sim.stats().submits, tokens.len() as u64);
}
