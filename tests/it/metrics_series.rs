//! `/metrics` after many targets: a live scrape passes `promtool check
//! metrics` (Prometheus' own exposition parser and linter), carries every series once (two
//! pages of one site share a label, which Prometheus rejects when repeated; promtool 2.42 does
//! not check that, so the test does), and shows per-target series only for the busiest
//! `metrics_top_targets`, the rest summed under `target="other"`. `/` and `GET /v1/pools` are
//! bounded the same way.
//!
//! The names: a live scrape under the simulator of a serve process, of a serve process
//! with `--queue` and of a queue worker carries every family docs/API.md "Metrics" promises for
//! it, under the one prefix, and passes promtool.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::process::{Command, Stdio};

use futures::future::join_all;
use serde_json::Value;

use crate::queue::support::worker_on;
use crate::support::eventually::eventually;
use crate::support::fleet::SimServer;
use crate::support::redis::RedisServer;
use crate::support::{KEY, TestGateway, fast_settings};

const TOP: usize = 3;

/// Series identity: the sample name and its label pairs in a canonical order.
fn series_of(line: &str) -> (String, BTreeMap<String, String>) {
    let (head, _value) = line.rsplit_once(' ').expect("a sample line has a value");
    let Some((name, labels)) = head.split_once('{') else {
        return (head.to_owned(), BTreeMap::new());
    };
    let labels = labels.strip_suffix('}').expect("labels close");
    let mut pairs = BTreeMap::new();
    // Label values here never contain `",`; escaped quotes stay inside their value.
    for pair in labels.split("\",").filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once("=\"").expect("name=\"value\"");
        pairs.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
    }
    (name.to_owned(), pairs)
}

/// Every sample line's series, with how often it appears.
fn series_counts(text: &str) -> HashMap<(String, BTreeMap<String, String>), usize> {
    let mut counts = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        *counts.entry(series_of(line)).or_insert(0) += 1;
    }
    counts
}

/// `promtool check metrics`: exit 1 is a parse error, exit 3 lint problems. It reads the
/// Prometheus text format, where an OpenMetrics counter's `<name>_total` samples look like a
/// family of their own without help text; that one lint finding is expected, any other fails.
fn promtool_check(text: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool on PATH (scripts/test installs the prometheus package)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.code() {
        Some(0) => Ok(()),
        Some(3) => {
            let unexpected: Vec<&str> = said
                .lines()
                .filter(|line| {
                    let counter_total = line
                        .strip_suffix(" no help text")
                        .and_then(|name| name.strip_suffix("_total"))
                        .is_some_and(|base| text.contains(&format!("# HELP {base} ")));
                    !counter_total
                })
                .collect();
            if unexpected.is_empty() {
                Ok(())
            } else {
                Err(unexpected.join("\n"))
            }
        }
        _ => Err(said),
    }
}

#[test]
fn the_series_check_catches_a_repeated_series() {
    // What an unbounded report would scrape: three pages of one site, three samples, one label.
    let repeated = "# HELP captcha_gateway_pool_ready Ready answers pooled per target.\n\
        # TYPE captcha_gateway_pool_ready gauge\n\
        captcha_gateway_pool_ready{target=\"turnstile:shop.example.com\"} 0\n\
        captcha_gateway_pool_ready{target=\"turnstile:shop.example.com\"} 0\n# EOF\n";
    let counts = series_counts(repeated);
    assert_eq!(counts.values().copied().max(), Some(2));
}

#[tokio::test]
async fn metrics_series_are_unique_and_bounded_after_many_targets() {
    let mut settings = fast_settings();
    settings.engine.metrics_top_targets = TOP;
    let gw = TestGateway::with(settings).await;
    // Three pages of one site, then sites with 1..=6 pages: 24 targets, one caller each, so
    // the busiest labels are the sites with the most pages (targets are summed by label first).
    let mut solves = Vec::new();
    for p in 0..3 {
        solves.push(format!("https://shop.example.com/item/{p}"));
    }
    for site in 1..=6 {
        for caller in 0..site {
            solves.push(format!("https://site{site}.example.net/page/{caller}"));
        }
    }
    let answers = join_all(solves.iter().map(|url| async {
        gw.solve_compat(&[
            ("method", "turnstile"),
            ("sitekey", "0x4AAAAAAA-metrics"),
            ("pageurl", url.as_str()),
        ])
        .await
    }))
    .await;
    for a in &answers {
        assert_eq!(a["status"], 1, "{a}");
    }

    let (status, text) = gw.get_text("/metrics").await;
    assert_eq!(status, 200);
    promtool_check(&text).unwrap_or_else(|e| panic!("promtool rejects the scrape: {e}\n{text}"));
    let counts = series_counts(&text);
    let repeated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "repeated series: {repeated:?}\n{text}");

    // Per-target series: the busiest TOP labels plus `other`, whatever the number of targets.
    let targets_of = |name: &str| -> BTreeMap<String, String> {
        counts
            .keys()
            .filter(|(n, _)| n == name)
            .filter_map(|(_, l)| l.get("target").cloned())
            .map(|t| {
                let line = text
                    .lines()
                    .find(|line| line.starts_with(&format!("{name}{{target=\"{t}\"}}")))
                    .unwrap();
                (t, line.rsplit_once(' ').unwrap().1.to_owned())
            })
            .collect()
    };
    let arrivals = targets_of("captcha_gateway_target_arrivals_total");
    let expected: BTreeMap<String, String> = [
        ("turnstile:site6.example.net", "6"),
        ("turnstile:site5.example.net", "5"),
        ("turnstile:site4.example.net", "4"),
        // shop.example.com (3 pages, 3 callers) + site1..3 (1 + 2 + 3 callers)
        ("other", "9"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(arrivals, expected, "{text}");
    assert!(text.contains("captcha_gateway_targets 24\n"), "{text}");

    // `GET /v1/pools` and `/` are bounded the same way.
    let pools: Value = gw
        .http
        .get(gw.url("/v1/pools"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pools = pools.as_array().expect("an array");
    assert_eq!(pools.len(), TOP + 1, "{pools:?}");
    let other = pools.last().unwrap();
    assert_eq!(other["id"], "other");
    assert_eq!(other["targets"], 24 - TOP, "{other}");
    let (_, page) = gw.get_text("/").await;
    assert_eq!(page.matches("<tr><td>").count(), TOP + 1, "{page}");
}

/// Families every process that solves has (serve, and a worker): the engine's, the store's,
/// the upstream accounts', the pools' and the build.
const SOLVING_FAMILIES: &[&str] = &[
    "captcha_gateway_answers",
    "captcha_gateway_handout_seconds",
    "captcha_gateway_solve_duration_seconds",
    "captcha_gateway_ready_to_caller_seconds",
    "captcha_gateway_active_solves",
    "captcha_gateway_max_concurrent",
    "captcha_gateway_running_limit",
    "captcha_gateway_upstream_requests",
    "captcha_gateway_upstream_threads_in_use",
    "captcha_gateway_upstream_threads_cap",
    "captcha_gateway_upstream_in_flight",
    "captcha_gateway_upstream_breaker_open",
    "captcha_gateway_upstream_breaker_opened",
    "captcha_gateway_upstream_usable",
    "captcha_gateway_upstream_tasks",
    "captcha_gateway_upstream_reports",
    "captcha_gateway_pool_ready",
    "captcha_gateway_pool_hits",
    "captcha_gateway_pool_expired_unused",
    "captcha_gateway_target_arrivals",
    "captcha_gateway_target_in_flight",
    "captcha_gateway_target_waiting",
    "captcha_gateway_new_tasks",
    "captcha_gateway_refills",
    "captcha_gateway_waits_served",
    "captcha_gateway_imported",
    "captcha_gateway_targets",
    "captcha_gateway_store_up",
    "captcha_gateway_build_info",
];

/// Families only a serve process has (its APIs and tenants).
const SERVE_FAMILIES: &[&str] = &[
    "captcha_gateway_requests",
    "captcha_gateway_solve_errors",
    "captcha_gateway_pool_target",
    "captcha_gateway_upstream_balance",
    "captcha_gateway_tenant_requests",
    "captcha_gateway_tenant_in_flight",
    "captcha_gateway_tenant_solves_last_hour",
];

/// The queue's depth, on serve with `--queue` and on workers.
const QUEUE_FAMILIES: &[&str] = &[
    "captcha_gateway_queue_pending",
    "captcha_gateway_queue_lag",
    "captcha_gateway_queue_retry_scheduled",
    "captcha_gateway_queue_dead_letters",
];

/// The families of `text` with at least one sample (`# TYPE` names the family; a counter's
/// samples add `_total`, a histogram's `_bucket`, `_sum` and `_count`).
fn families_with_samples(text: &str) -> std::collections::BTreeSet<String> {
    let declared: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let samples: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    declared
        .into_iter()
        .filter(|family| {
            samples.iter().any(|name| {
                name.strip_prefix(family)
                    .is_some_and(|rest| ["", "_total", "_bucket", "_sum", "_count"].contains(&rest))
            })
        })
        .map(str::to_owned)
        .collect()
}

/// Asserts a scrape carries `expected`, has one prefix, repeats no series and passes promtool.
fn assert_scrape(what: &str, text: &str, expected: &[&[&str]]) {
    let present = families_with_samples(text);
    let missing: Vec<&str> = expected
        .iter()
        .flat_map(|set| set.iter().copied())
        .filter(|f| !present.contains(*f))
        .collect();
    assert!(missing.is_empty(), "{what}: missing {missing:?}\n{text}");
    let foreign: Vec<&String> = present
        .iter()
        .filter(|f| !f.starts_with("captcha_gateway_"))
        .collect();
    assert!(foreign.is_empty(), "{what}: other prefixes {foreign:?}");
    promtool_check(text).unwrap_or_else(|e| panic!("{what}: promtool rejects it: {e}\n{text}"));
    let counts = series_counts(text);
    let repeated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "{what}: repeated {repeated:?}");
}

#[test]
fn the_family_check_needs_samples() {
    let text = "# TYPE captcha_gateway_answers counter\n\
        # TYPE captcha_gateway_handout_seconds histogram\n\
        captcha_gateway_handout_seconds_count{kind=\"turnstile\"} 1\n# EOF\n";
    let present = families_with_samples(text);
    assert!(present.contains("captcha_gateway_handout_seconds"));
    assert!(!present.contains("captcha_gateway_answers"), "{present:?}");
}

#[tokio::test]
async fn a_serve_scrape_has_every_contract_family() {
    let mut settings = fast_settings();
    let table: toml::Value = toml::from_str(
        "[[pools]]\nkind = \"turnstile\"\nsitekey = \"0x4AAAAAAA-pool\"\n\
         pageurl = \"https://pool.example.com/\"\nsize = 1\n",
    )
    .unwrap();
    let pools: Vec<captcha_gateway::pools::PoolTable> =
        table["pools"].clone().try_into().expect("a pool table");
    settings.pools =
        captcha_gateway::pools::specs(&pools, captcha_gateway::model::TargetPolicy::default())
            .unwrap();
    let gw = TestGateway::with(settings).await;

    // The compatible API, the native API (an answer, and a deadline too short for any), and
    // the worker API.
    let answer = gw
        .solve_compat(&[
            ("method", "turnstile"),
            ("sitekey", "0x4AAAAAAA-metrics"),
            ("pageurl", "https://compat.example.com/"),
        ])
        .await;
    assert_eq!(answer["status"], 1, "{answer}");
    let native = |timeout_s: f64| {
        serde_json::json!({
            "kind": "turnstile",
            "sitekey": "0x4AAAAAAA-metrics",
            "pageurl": "https://native.example.com/",
            "timeout_s": timeout_s,
        })
    };
    let (status, body) = crate::support::solve(&gw.http, &gw.url(""), native(30.0)).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = crate::support::solve(&gw.http, &gw.url(""), native(0.01)).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (504, &"timeout".into()),
        "{body}"
    );
    let worker: Value = gw
        .http
        .post(gw.url("/solve"))
        .bearer_auth(KEY)
        .json(&serde_json::json!({
            "method": "turnstile",
            "sitekey": "0x4AAAAAAA-metrics",
            "pageurl": "https://worker.example.com/",
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(worker["solution"].is_string(), "{worker}");

    // The balance is read at start and the pool fills in the background.
    eventually(
        std::time::Duration::from_secs(30),
        "the balance read and the pool filled",
        || async {
            let (_, text) = gw.get_text("/metrics").await;
            text.contains("captcha_gateway_upstream_balance{")
                && text.contains(
                    "captcha_gateway_pool_ready{target=\"turnstile:pool.example.com\"} 1\n",
                )
        },
    )
    .await;
    let (_, text) = gw.get_text("/metrics").await;
    assert_scrape("serve", &text, &[SOLVING_FAMILIES, SERVE_FAMILIES]);
    for api in ["compat", "native", "worker"] {
        assert!(
            text.contains(&format!("captcha_gateway_requests_total{{api=\"{api}\"")),
            "{api}: {text}"
        );
    }
    assert!(
        text.contains(
            "captcha_gateway_solve_errors_total{kind=\"turnstile\",code=\"timeout\"} 1\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("captcha_gateway_store_up{store=\"memory\"} 1\n"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_scrapes_have_every_contract_family() {
    let redis = RedisServer::start();
    let latency = captcha_gateway::sim::LatencyRange {
        min: std::time::Duration::from_millis(50),
        max: std::time::Duration::from_millis(150),
    };
    let sim = SimServer::start(latency, 100).await;
    let queue_front = crate::queue::support::front_end(&sim, &redis.url())
        .start()
        .await;
    let front = queue_front.base.clone();
    let worker = worker_on(sim.addr, &redis.url(), "").start().await;
    let http = reqwest::Client::new();
    let (status, body) = crate::support::solve(
        &http,
        &front,
        serde_json::json!({
            "kind": "turnstile",
            "sitekey": "0x4AAAAAAA-queue",
            "pageurl": "https://queue.example.com/",
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let scrape = |base: String| {
        let http = http.clone();
        async move {
            http.get(format!("{base}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    eventually(
        std::time::Duration::from_secs(30),
        "the worker counted the entry",
        || async { worker.metric("captcha_gateway_queue_processed_total").await >= 1 },
    )
    .await;
    let worker_text = scrape(worker.base.clone()).await;
    assert_scrape(
        "worker",
        &worker_text,
        &[
            SOLVING_FAMILIES,
            QUEUE_FAMILIES,
            &["captcha_gateway_queue_processed"],
        ],
    );
    assert!(
        worker_text.contains(
            "captcha_gateway_queue_processed_total{queue=\"captcha\",outcome=\"written\"} 1\n"
        ),
        "{worker_text}"
    );
    let front_text = scrape(front.clone()).await;
    assert_scrape(
        "serve --queue",
        &front_text,
        &[QUEUE_FAMILIES, &["captcha_gateway_requests"]],
    );
    assert!(
        front_text.contains("captcha_gateway_queue_lag{queue=\"captcha\"} 0\n"),
        "{front_text}"
    );
}
