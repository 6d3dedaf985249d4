//! Several provider accounts (docs/API.md "Accounts and failover"): an account whose key is
//! refused, then whose front end answers HTML 502s, is taken out of rotation while every task
//! succeeds through the other; it is probed and re-admitted once healthy. An account without
//! money is paused, not crashed; `/readyz` fails only when no account can take work.

use std::time::{Duration, Instant};

use captcha_gateway::config::{AccountProvider, AccountSpec, Settings};
use captcha_gateway::sim::{Faults, LatencyRange, SimSettings};
use futures::future::join_all;
use serde_json::{Value, json};

use crate::support::eventually::eventually;
use crate::support::fleet::SimServer;
use crate::support::{KEY, TestGateway, fast_settings, metric_sum, solve, verify_at};

pub(crate) const LATENCY: LatencyRange = LatencyRange {
    min: Duration::from_millis(50),
    max: Duration::from_millis(150),
};

pub(crate) fn account(name: &str, sim: &SimServer, threads: u32) -> AccountSpec {
    AccountSpec {
        name: name.into(),
        provider: AccountProvider::Sim,
        base_url: Some(url::Url::parse(&format!("http://{}", sim.addr)).unwrap()),
        key: None,
        threads: Some(threads),
        weight: 1,
        kinds: Vec::new(),
    }
}

/// A gateway routing over `accounts`, with breakers quick enough for a test.
pub(crate) fn settings(accounts: Vec<AccountSpec>) -> Settings {
    let mut s = fast_settings();
    s.accounts = accounts;
    s.upstream.breaker.open_for = Duration::from_millis(100);
    s.upstream.breaker.open_max = Duration::from_millis(400);
    s.upstream.balance_every = Duration::from_millis(100);
    s
}

/// `n` concurrent native solves of distinct targets; every one must succeed with a token that
/// one of `sims` accepts exactly once. Returns how long the slowest took.
async fn solve_all(gw: &TestGateway, sims: &[&SimServer], n: usize, tag: &str) -> Duration {
    let started = Instant::now();
    let base = gw.url("");
    let replies = join_all((0..n).map(|i| {
        let body = json!({
            "kind": "recaptcha_v2",
            "sitekey": format!("6Le-{tag}-{i}"),
            "pageurl": "https://example.com/login",
            "timeout_s": 30,
        });
        solve(&gw.http, &base, body)
    }))
    .await;
    let took = started.elapsed();
    for (status, reply) in replies {
        assert_eq!(status, 200, "every task succeeds ({tag}): {reply}");
        let token = reply["token"].as_str().expect("a token");
        let mut accepted = 0;
        for sim in sims {
            let base = format!("http://{}", sim.addr);
            if verify_at(&gw.http, &base, token).await["success"] == true {
                accepted += 1;
            }
        }
        assert_eq!(accepted, 1, "{tag}: the token is genuine and fresh");
    }
    took
}

async fn health(gw: &TestGateway) -> Value {
    gw.http
        .get(gw.url("/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn state_of(gw: &TestGateway, name: &str) -> String {
    let h = health(gw).await;
    let accounts = h["accounts"].as_array().expect("accounts in /health");
    let a = accounts
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {h}"));
    a["state"].as_str().unwrap().to_owned()
}

fn accepted_submits(sim: &SimServer) -> u64 {
    sim.sim.stats().submits
}

fn set_faults(sim: &SimServer, faults: Faults) {
    sim.sim.set_faults(faults).expect("valid faults");
}

#[tokio::test]
async fn a_refused_then_failing_account_is_bypassed_probed_and_readmitted() {
    let a = SimServer::start(LATENCY, 4).await;
    let b = SimServer::start(LATENCY, 4).await;
    // a is preferred while it has free threads, so a lone task goes to a.
    let mut preferred = account("a", &a, 4);
    preferred.weight = 1000;
    let gw = TestGateway::with(settings(vec![preferred, account("b", &b, 4)])).await;
    let sims = [&a, &b];

    // Healthy: more tasks than one account's threads, so both take some.
    solve_all(&gw, &sims, 12, "warm").await;
    assert!(accepted_submits(&a) > 0 && accepted_submits(&b) > 0);
    assert_eq!(state_of(&gw, "a").await, "closed");
    let mut lone = Vec::new();
    for i in 0..5 {
        lone.push(solve_all(&gw, &sims, 1, &format!("lone-{i}")).await);
    }
    lone.sort();

    // a's key is revoked: its breaker opens, every task succeeds through b.
    set_faults(
        &a,
        Faults {
            reject_keys: true,
            ..Faults::default()
        },
    );
    let a_before = accepted_submits(&a);
    // The first task after the key is refused goes to a, is refused and moves on to b.
    let failed_over = solve_all(&gw, &sims, 1, "first-refused").await;
    solve_all(&gw, &sims, 12, "refused").await;
    assert_eq!(accepted_submits(&a), a_before, "a accepted nothing");
    assert_ne!(state_of(&gw, "a").await, "closed");
    assert!(
        metric_sum(
            &gw.http,
            &gw.url(""),
            "captcha_gateway_upstream_breaker_opened_total"
        )
        .await
            >= 1
    );

    // Then its front end answers HTML 502s: still out, still probed, tasks still succeed.
    set_faults(
        &a,
        Faults {
            html_error_rate: 1.0,
            ..Faults::default()
        },
    );
    let probes_before = a.sim.stats().injected_errors;
    eventually(
        Duration::from_secs(20),
        "a half-open probe reaches the failing account",
        || async {
            solve_all(&gw, &sims, 4, "html").await;
            a.sim.stats().injected_errors > probes_before
        },
    )
    .await;
    assert_eq!(accepted_submits(&a), a_before, "a accepted nothing");
    assert_ne!(state_of(&gw, "a").await, "closed");

    // Healthy again: a probe succeeds, the breaker closes, a takes tasks again.
    set_faults(&a, Faults::default());
    eventually(
        Duration::from_secs(20),
        "the healed account is re-admitted",
        || async {
            solve_all(&gw, &sims, 8, "healed").await;
            accepted_submits(&a) > a_before && state_of(&gw, "a").await == "closed"
        },
    )
    .await;
    let ready = gw.http.get(gw.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    // The figure for the time-to-fail-over note: a lone task's time when healthy (median of
    // five) against the first one after the preferred account's key was refused.
    eprintln!(
        "failover: a lone task took {:?} healthy (median of 5), {failed_over:?} as the first \
         after its account's key was refused",
        lone[2]
    );
}

#[tokio::test]
async fn an_empty_account_is_paused_and_readiness_fails_only_with_no_account_left() {
    let a = SimServer::start(LATENCY, 4).await;
    let broke = SimServer::with_settings(
        SimSettings {
            threads: 4,
            balance: "0.00".into(),
            ..SimSettings::default()
        },
        LATENCY,
    )
    .await;
    let gw = TestGateway::with(settings(vec![
        account("a", &a, 4),
        account("broke", &broke, 4),
    ]))
    .await;
    eventually(
        Duration::from_secs(10),
        "the spend guard pauses it",
        || async { state_of(&gw, "broke").await == "paused" },
    )
    .await;
    solve_all(&gw, &[&a, &broke], 10, "paused").await;
    assert_eq!(
        accepted_submits(&broke),
        0,
        "nothing went to the empty account"
    );
    let ready = gw.http.get(gw.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200, "one account left is enough");

    // The other key is refused too: no account can take work.
    set_faults(
        &a,
        Faults {
            reject_keys: true,
            ..Faults::default()
        },
    );
    eventually(Duration::from_secs(10), "readiness fails", || async {
        let res = gw.http.get(gw.url("/readyz")).send().await.unwrap();
        res.status() == 503
    })
    .await;
    let (status, reply) = solve(
        &gw.http,
        &gw.url(""),
        json!({"kind": "turnstile", "sitekey": "0x4-none", "pageurl": "https://example.com/", "timeout_s": 2}),
    )
    .await;
    eprintln!("no account left: {status} {reply}");
    assert_ne!(status, 200, "{reply}");
    assert!(
        reply.to_string().len() < 2_000,
        "a short, clear error: {reply}"
    );
}

#[tokio::test]
async fn a_task_the_provider_cannot_solve_is_not_tried_at_another_account() {
    let unsolvable = SimServer::with_settings(
        SimSettings {
            threads: 4,
            unsolvable_rate: 1.0,
            ..SimSettings::default()
        },
        LATENCY,
    )
    .await;
    let other = SimServer::start(LATENCY, 4).await;
    let mut preferred = account("preferred", &unsolvable, 4);
    preferred.weight = 1000;
    let gw = TestGateway::with(settings(vec![preferred, account("other", &other, 4)])).await;
    let (status, reply) = solve(
        &gw.http,
        &gw.url(""),
        json!({"kind": "recaptcha_v2", "sitekey": "6Le-unsolvable", "pageurl": "https://example.com/", "timeout_s": 20}),
    )
    .await;
    assert_ne!(status, 200, "{reply}");
    assert_eq!(
        reply["error"]["code"], "ERROR_CAPTCHA_UNSOLVABLE",
        "{reply}"
    );
    assert_eq!(unsolvable.sim.stats().submits, 1);
    assert_eq!(other.sim.stats().submits, 0, "a task's own failure stays");
    assert_eq!(
        state_of(&gw, "preferred").await,
        "closed",
        "the account works"
    );
}

#[tokio::test]
async fn reports_go_to_the_account_that_solved_the_task() {
    let a = SimServer::start(LATENCY, 2).await;
    let b = SimServer::start(LATENCY, 2).await;
    let gw = TestGateway::with(settings(vec![account("a", &a, 2), account("b", &b, 2)])).await;
    let gw = &gw;
    let ids = join_all((0..6).map(|i| async move {
        let form = [
            ("method", "userrecaptcha".to_owned()),
            ("googlekey", format!("6Le-report-{i}")),
            ("pageurl", "https://example.com/".to_owned()),
            ("json", "1".to_owned()),
            ("key", KEY.to_owned()),
        ];
        let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (_, body) = gw.post_form("/in.php", &pairs).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        let id = v["request"].as_str().unwrap().to_owned();
        gw.wait_task(&id).await;
        id
    }))
    .await;
    assert!(
        a.sim.stats().solved > 0 && b.sim.stats().solved > 0,
        "both solved some"
    );
    for id in &ids {
        let (_, body) = gw
            .get_text(&format!(
                "/res.php?key={KEY}&action=reportbad&json=1&id={id}"
            ))
            .await;
        assert!(body.contains("OK_REPORT_RECORDED"), "{body}");
    }
    // Each simulator counts a report only for a task it ran: six reports, each at its solver.
    let (bad_a, bad_b) = (a.sim.stats().reports_bad, b.sim.stats().reports_bad);
    assert_eq!(bad_a + bad_b, 6);
    assert_eq!(
        (bad_a, bad_b),
        (a.sim.stats().solved, b.sim.stats().solved),
        "each report went to the account that solved its task"
    );
    let metrics = gw
        .http
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(&format!(
            "captcha_gateway_upstream_reports_total{{account=\"a\",verdict=\"bad\"}} {bad_a}"
        )),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_waiting_task_is_answered_by_its_account_once_a_probe_readmits_it() {
    let only = SimServer::start(LATENCY, 2).await;
    let mut s = settings(vec![account("only", &only, 2)]);
    // Long enough that the faults below are switched off before the first probe; a probe that
    // still meets them only delays the answer to the next one.
    s.upstream.breaker.open_for = Duration::from_secs(2);
    s.upstream.breaker.open_max = Duration::from_secs(4);
    let gw = TestGateway::with(s).await;
    set_faults(
        &only,
        Faults {
            reject_keys: true,
            ..Faults::default()
        },
    );
    let base = gw.url("");
    let http = gw.http.clone();
    let waiting = tokio::spawn(async move {
        solve(
            &http,
            &base,
            json!({"kind": "turnstile", "sitekey": "0x4-wait", "pageurl": "https://example.com/", "timeout_s": 30}),
        )
        .await
    });
    eventually(Duration::from_secs(10), "the account is out", || async {
        state_of(&gw, "only").await == "open"
    })
    .await;
    let ready = gw.http.get(gw.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503, "no account can take work");
    set_faults(&only, Faults::default());
    let (status, reply) = waiting.await.unwrap();
    assert_eq!(status, 200, "the task waited for the probe: {reply}");
    gw.http
        .get(format!("http://{}/verify", only.addr))
        .query(&[("token", reply["token"].as_str().unwrap())])
        .send()
        .await
        .unwrap();
    assert_eq!(state_of(&gw, "only").await, "closed");
    assert_eq!(
        only.sim.stats().submits,
        1,
        "one task, submitted once accepted"
    );
}

#[tokio::test]
async fn tasks_in_flight_when_a_key_is_revoked_finish_at_the_other_account() {
    let slow = LatencyRange::fixed(Duration::from_millis(800));
    let a = SimServer::start(slow, 4).await;
    let b = SimServer::start(LATENCY, 4).await;
    let mut preferred = account("a", &a, 4);
    preferred.weight = 1000;
    let gw = TestGateway::with(settings(vec![preferred, account("b", &b, 4)])).await;
    let sims = [&a, &b];
    let burst = solve_all(&gw, &sims, 4, "in-flight");
    tokio::pin!(burst);
    // Wait until a holds the burst's tasks, then revoke its key under them.
    let mut revoked = false;
    tokio::select! {
        _ = &mut burst => {}
        () = async {
            eventually(Duration::from_secs(10), "a holds tasks", || async {
                a.sim.stats().current_concurrent >= 2
            })
            .await;
        } => {
            set_faults(&a, Faults { reject_keys: true, ..Faults::default() });
            revoked = true;
        }
    }
    assert!(
        revoked,
        "the burst was still running at a when its key was revoked"
    );
    burst.await;
    assert_eq!(a.sim.stats().solved, 0, "no answer came from a");
    assert!(b.sim.stats().submits >= 2, "b took over a's tasks");
}

#[tokio::test]
async fn an_account_only_gets_the_kinds_it_takes() {
    let images = SimServer::start(LATENCY, 4).await;
    let any = SimServer::start(LATENCY, 4).await;
    let mut image_only = account("images", &images, 4);
    image_only.kinds = vec![captcha_gateway::model::Kind::Image];
    // Preferred by weight, yet never given a kind it does not take.
    image_only.weight = 1000;
    let gw = TestGateway::with(settings(vec![image_only, account("any", &any, 4)])).await;
    solve_all(&gw, &[&images, &any], 8, "kinds").await;
    assert_eq!(images.sim.stats().submits, 0);
    assert_eq!(any.sim.stats().submits, 8);
}

/// An account of the JSON task protocol, at a simulator (which speaks it too).
pub(crate) fn json_account(name: &str, provider: AccountProvider, sim: &SimServer) -> AccountSpec {
    AccountSpec {
        provider,
        key: Some(captcha_gateway::secret::Secret(
            "jsonjsonjsonjsonjsonjsonjsonjson".into(),
        )),
        ..account(name, sim, 4)
    }
}

/// A kind whose declaration says a provider does not solve it never goes to that provider's
/// accounts (anti-captcha and CapSolver ask no text questions), and with no account left that
/// solves it the caller is told so, with the accounts there are.
#[tokio::test]
async fn a_kind_goes_only_to_accounts_whose_provider_solves_it() {
    let anti = SimServer::start(LATENCY, 4).await;
    let any = SimServer::start(LATENCY, 4).await;
    let mut preferred = json_account("ac", AccountProvider::AntiCaptcha, &anti);
    preferred.weight = 1000;
    let gw = TestGateway::with(settings(vec![preferred, account("any", &any, 4)])).await;
    let question = |i: usize| json!({"kind": "text", "text": format!("2 + {i}?"), "timeout_s": 30});
    for i in 0..4 {
        let (status, reply) = solve(&gw.http, &gw.url(""), question(i)).await;
        assert_eq!(status, 200, "{reply}");
    }
    assert_eq!(anti.sim.stats().submits, 0, "anti-captcha was never asked");
    assert_eq!(any.sim.stats().submits, 4);

    let only_anti = TestGateway::with(settings(vec![json_account(
        "ac",
        AccountProvider::AntiCaptcha,
        &anti,
    )]))
    .await;
    let (status, reply) = solve(&only_anti.http, &only_anti.url(""), question(9)).await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (422, Some("ERROR_TASK_NOT_SUPPORTED")),
        "{reply}"
    );
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("text") && message.contains("ac (anticaptcha)"),
        "{message}"
    );
    // An asynchronous caller hears it when it submits, not at its first poll.
    let (status, body) = only_anti
        .get_text(&format!("/in.php?key={KEY}&method=post&textcaptcha=2%2B2"))
        .await;
    assert_eq!((status, body.as_str()), (200, "ERROR_TASK_NOT_SUPPORTED"));
    assert_eq!(anti.sim.stats().submits, 0);
}

#[tokio::test]
async fn accounts_of_the_json_task_protocol_solve_and_fail_over() {
    let a = SimServer::start(LATENCY, 4).await;
    let b = SimServer::start(LATENCY, 4).await;
    let gw = TestGateway::with(settings(vec![
        json_account("ac", AccountProvider::AntiCaptcha, &a),
        json_account("cs", AccountProvider::CapSolver, &b),
    ]))
    .await;
    let sims = [&a, &b];
    // More tasks than one account's threads: both protocols' clients solve some.
    solve_all(&gw, &sims, 12, "json-warm").await;
    assert!(accepted_submits(&a) > 0 && accepted_submits(&b) > 0);

    set_faults(
        &a,
        Faults {
            reject_keys: true,
            ..Faults::default()
        },
    );
    let a_before = accepted_submits(&a);
    solve_all(&gw, &sims, 12, "json-refused").await;
    assert_eq!(
        accepted_submits(&a),
        a_before,
        "the refused account accepted nothing"
    );
    assert_ne!(state_of(&gw, "ac").await, "closed");

    set_faults(&a, Faults::default());
    eventually(
        Duration::from_secs(20),
        "the healed JSON account is re-admitted",
        || async {
            solve_all(&gw, &sims, 8, "json-healed").await;
            accepted_submits(&a) > a_before && state_of(&gw, "ac").await == "closed"
        },
    )
    .await;
}
