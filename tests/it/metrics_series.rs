//! `/metrics` after many targets (issue 8, defect 4): a live scrape passes `promtool check
//! metrics` (Prometheus' own exposition parser and linter), carries every series once (two
//! pages of one site share a label, which Prometheus rejects when repeated; promtool 2.42 does
//! not check that, so the test does), and shows per-target series only for the busiest
//! `metrics_top_targets`, the rest summed under `target="other"`. `/` and `GET /v1/pools` are
//! bounded the same way.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::process::{Command, Stdio};

use futures::future::join_all;
use serde_json::Value;

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
    // What the gateway scraped before issue 8: three pages of one site, three samples, one label.
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
