//! The dashboard in headless Chromium (Debian's `chromium`, which `scripts/test` installs):
//! under load the rendered page shows non-zero live figures, and each matches a `/metrics`
//! scrape taken around the page load (counters between the scrape before and the one after);
//! once the load stops and the pool is full, the page and the metrics agree exactly. The
//! gateway has an operations key: the page opened without it shows no figure and says so, and
//! opened as `/#key=...` it sends the key with its reads. A screenshot goes to
//! `target/dashboard.png`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::{Load, OPS_KEY, POOL_LABEL, POOL_SIZE, Scrape, advice, pool, status};
use crate::support::eventually::eventually;
use crate::support::{TestGateway, fast_settings};

const CHROMIUM: &str = "/usr/bin/chromium";

fn chromium_args(profile: &Path) -> Vec<String> {
    vec![
        "--headless".into(),
        // Tests run as root in containers, where Chromium's sandbox cannot start.
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--hide-scrollbars".into(),
        "--no-first-run".into(),
        format!("--user-data-dir={}", profile.display()),
        "--window-size=1366,900".into(),
        // Virtual time runs the page's script (its first fetch of /v1/status included) and
        // then stops, so the DOM is read once the page has drawn the figures.
        "--virtual-time-budget=4000".into(),
    ]
}

async fn chromium(extra: &[String], url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(CHROMIUM);
    cmd.args(chromium_args(profile.path()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("chromium finishes")
        .unwrap_or_else(|e| panic!("{CHROMIUM} runs (scripts/test installs it): {e}"));
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The `data-value` of the first element with `data-figure="name"` after `from` in `dom`.
fn figure_after(dom: &str, from: usize, name: &str) -> Option<String> {
    let needle = format!("data-figure=\"{name}\"");
    let at = from + dom[from..].find(&needle)?;
    let tag_end = at + dom[at..].find('>')?;
    let tag_start = dom[..at].rfind('<')?;
    let tag = &dom[tag_start..tag_end];
    let v = tag.find("data-value=\"")? + "data-value=\"".len();
    let len = tag[v..].find('"')?;
    Some(tag[v..v + len].to_owned())
}

fn figure(dom: &str, name: &str) -> f64 {
    let v = figure_after(dom, 0, name).unwrap_or_else(|| panic!("the page shows {name}"));
    v.parse()
        .unwrap_or_else(|_| panic!("{name} is a number, not {v:?}"))
}

/// A figure in the pool row of `label`.
fn pool_figure(dom: &str, label: &str, name: &str) -> f64 {
    let row = dom
        .find(&format!("data-pool=\"{label}\""))
        .unwrap_or_else(|| panic!("the page has a pool row for {label}"));
    let v = figure_after(dom, row, name).unwrap_or_else(|| panic!("{label} shows {name}"));
    v.parse().unwrap()
}

/// A figure in the plan advice's row for `kind`.
fn advice_kind_figure(dom: &str, kind: &str, name: &str) -> f64 {
    let row = dom
        .find(&format!("data-advice-kind=\"{kind}\""))
        .unwrap_or_else(|| panic!("the advice has a row for {kind}"));
    let v = figure_after(dom, row, name).unwrap_or_else(|| panic!("{kind} shows {name}"));
    v.parse().unwrap()
}

/// The entry of the advice's `list` whose `key` is `value`.
fn entry(advice: &serde_json::Value, list: &str, key: &str, value: &str) -> serde_json::Value {
    advice[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e[key] == value)
        .cloned()
        .unwrap_or_else(|| panic!("the advice's {list} has {key} {value}: {advice}"))
}

/// The seconds the page's windowed figures cover (`window_s` of the report).
fn window_s(dom: &str) -> f64 {
    let at = dom
        .find("data-window-s=\"")
        .expect("the page says its window")
        + 15;
    dom[at..at + dom[at..].find('"').unwrap()].parse().unwrap()
}

fn between(what: &str, low: u64, value: f64, high: u64) {
    assert!(
        low as f64 <= value && value <= high as f64,
        "{what}: the page shows {value}, /metrics said {low} before and {high} after"
    );
}

/// The `/metrics` families the test compares with (docs/API.md "Metrics").
const ANSWERS: &str = "captcha_gateway_answers_total";
const HANDOUTS: &str = "captcha_gateway_handout_seconds_count";
const SOLVES: &str = "captcha_gateway_solve_duration_seconds_count";
const SOLVE_ERRORS: &str = "captcha_gateway_solve_errors_total";
const POOL_READY: &str = "captcha_gateway_pool_ready";
const POOL_TARGET: &str = "captcha_gateway_pool_target";
const THREADS_CAP: &str = "captcha_gateway_upstream_threads_cap";
const TARGET_IN_FLIGHT: &str = "captcha_gateway_target_in_flight";

fn screenshot_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/dashboard.png")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dashboard_shows_live_figures_that_match_metrics() {
    let mut settings = fast_settings();
    settings.pools = pool();
    // The one account is the simulator's, priced by the thread.
    settings.prices = captcha_gateway::status::advice::prices::Prices {
        currency: "USD".into(),
        providers: vec![captcha_gateway::status::advice::prices::ProviderPrices {
            provider: "sim".into(),
            thread_month: Some(2.0),
            per_1000: Vec::new(),
        }],
    };
    // Samples every second: a ring of 180 reaches back three minutes, so the page's history
    // fills quickly and its windowed figures cover the whole test.
    settings.status_every = Duration::from_secs(1);
    let ops = captcha_gateway::http::OpsInput {
        key_env: Some(captcha_gateway::config::Secret(OPS_KEY.into())),
        ..Default::default()
    };
    settings.ops = captcha_gateway::http::ops_settings(ops, settings.listen)
        .unwrap()
        .0;
    let gw = TestGateway::with(settings).await;
    let with_key = gw.url(&format!("/#key={OPS_KEY}"));
    let load = Load::start(&gw, 8);
    eventually(
        Duration::from_secs(60),
        "history with answers from every source",
        || async {
            let s = status(&gw).await;
            let t = &s["answers"]["total"];
            let live = s["history"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["pool"].as_f64() > Some(0.0) || p["solved"].as_f64() > Some(0.0))
                .count();
            t["pool"].as_u64() > Some(0) && t["solved"].as_u64() > Some(0) && live >= 3
        },
    )
    .await;

    let keyless = chromium(&["--dump-dom".into()], &gw.url("/")).await;
    assert!(
        keyless.contains("data-status=\"key-needed\""),
        "without the key the page says it needs one"
    );
    assert!(
        !keyless.contains(POOL_LABEL),
        "without the key no figure shows"
    );

    let before = Scrape::take(&gw).await;
    let dom = chromium(&["--dump-dom".into()], &with_key).await;
    let after = Scrape::take(&gw).await;
    let shot = screenshot_path();
    chromium(&[format!("--screenshot={}", shot.display())], &with_key).await;
    let answered = load.answers.clone();
    load.stop().await;

    assert!(
        dom.contains("data-status=\"ok\""),
        "the page loaded /v1/status with the key"
    );
    assert_eq!(figure_after(&dom, 0, "store").as_deref(), Some("memory"));
    assert_eq!(figure(&dom, "instances"), 1.0);
    let (b, a) = (&before, &after);
    // The engine counts each handout for /metrics, then for the status page, in one step: a
    // figure read between two scrapes lies between their values.
    for source in ["pool", "solved", "shared"] {
        let name = format!("answers-total-{source}");
        let label = format!("source=\"{source}\"");
        between(
            &name,
            b.sum(ANSWERS, &label),
            figure(&dom, &name),
            a.sum(ANSWERS, &label),
        );
    }
    let caller_timeouts = "code=\"timeout\"";
    between(
        "error-total-caller_timeout",
        b.sum(SOLVE_ERRORS, caller_timeouts),
        figure(&dom, "error-total-caller_timeout"),
        a.sum(SOLVE_ERRORS, caller_timeouts),
    );
    // Latency counts cover the page's window: everything since start while the gateway is
    // younger than the window (the page says how long it covers), else the last minutes only.
    let from_start = window_s(&dom) < 300.0;
    for (name, metric) in [
        ("latency-handout-count", HANDOUTS),
        ("latency-solve-count", SOLVES),
    ] {
        let low = if from_start { b.sum(metric, "") } else { 0 };
        between(name, low, figure(&dom, name), a.sum(metric, ""));
    }
    let handed_out = figure(&dom, "latency-handout-count");
    assert!(handed_out <= answered.load(std::sync::atomic::Ordering::Relaxed) as f64);
    for live in [
        "answers-total-pool",
        "answers-total-solved",
        "answers-total-shared",
        "answers-rate",
        "error-total-caller_timeout",
        "latency-handout-p50",
        "latency-solve-p50",
    ] {
        assert!(figure(&dom, live) > 0.0, "{live} is live, not zero");
    }
    let cap = figure(&dom, "threads-cap");
    between(
        "threads-cap",
        b.sum(THREADS_CAP, ""),
        cap,
        a.sum(THREADS_CAP, ""),
    );
    assert!(figure(&dom, "threads-in-use") <= cap);
    let target = format!("target=\"{POOL_LABEL}\"");
    assert_eq!(
        pool_figure(&dom, POOL_LABEL, "pool-target"),
        b.sum(POOL_TARGET, &target) as f64
    );
    assert!(pool_figure(&dom, POOL_LABEL, "pool-ready") <= POOL_SIZE as f64);
    let points: u64 = {
        let at = dom
            .find("data-points=\"")
            .expect("the rate chart says its points")
            + 13;
        dom[at..at + dom[at..].find('"').unwrap()].parse().unwrap()
    };
    assert!(
        points >= 3,
        "the rate chart draws the history ({points} points)"
    );
    assert!(dom.contains("<polyline"), "the rate chart has its lines");

    // At rest, with the pool full, gauges hold still: page and metrics agree exactly.
    eventually(Duration::from_secs(60), "the pool refills", || async {
        let s = Scrape::take(&gw).await;
        s.sum(POOL_READY, &target) == POOL_SIZE && s.sum(TARGET_IN_FLIGHT, "") == 0
    })
    .await;
    let advice_before = advice(&gw).await;
    let rest = chromium(&["--dump-dom".into()], &with_key).await;
    let scrape = Scrape::take(&gw).await;
    let advice_after = advice(&gw).await;
    assert_eq!(
        pool_figure(&rest, POOL_LABEL, "pool-ready"),
        scrape.sum(POOL_READY, &target) as f64
    );
    assert_eq!(figure(&rest, "threads-in-use"), 0.0);
    for source in ["pool", "solved", "shared"] {
        assert_eq!(
            figure(&rest, &format!("answers-total-{source}")),
            scrape.sum(ANSWERS, &format!("source=\"{source}\"")) as f64,
            "at rest the {source} answers agree exactly"
        );
    }
    if window_s(&rest) < 300.0 {
        for (name, metric) in [
            ("latency-handout-count", HANDOUTS),
            ("latency-solve-count", SOLVES),
        ] {
            assert_eq!(figure(&rest, name), scrape.sum(metric, "") as f64, "{name}");
        }
    }
    // The plan advice beside the live figures: what `GET /v1/advice` says. Its figures only
    // grow as the log counts more (the busiest bucket's demand, the callers), so the page's
    // lie between a read before it loaded and one after.
    assert!(
        rest.contains("id=\"advice-card\" data-status=\"ok\""),
        "the page read /v1/advice with the key"
    );
    let grown = |what: &str, page: f64, before: &serde_json::Value, after: &serde_json::Value| {
        let (b, a) = (before.as_f64().unwrap(), after.as_f64().unwrap());
        assert!(
            b <= page && page <= a,
            "{what}: the page shows {page}, /v1/advice said {b} before and {a} after"
        );
    };
    let (ab, aa) = (&advice_before, &advice_after);
    grown(
        "advice-threads-recommended",
        figure(&rest, "advice-threads-recommended"),
        &ab["threads"]["recommended"],
        &aa["threads"]["recommended"],
    );
    assert_eq!(
        figure(&rest, "advice-threads-cap"),
        aa["threads"]["cap"].as_f64().unwrap()
    );
    assert!(figure(&rest, "advice-threads-recommended") >= 1.0);
    for kind in ["recaptcha_v2", "turnstile", "text"] {
        let at = |a: &serde_json::Value| entry(a, "kinds", "kind", kind)["callers"].clone();
        let page = advice_kind_figure(&rest, kind, "advice-callers");
        assert!(page > 0.0, "{kind} callers are counted");
        grown(&format!("{kind} callers"), page, &at(ab), &at(aa));
    }
    // The plan priced: the threads the plan allows at 2.0 a month, on the account's row and in
    // the sum (the cap holds still at rest).
    let cap = figure(&rest, "advice-threads-cap");
    assert_eq!(figure(&rest, "advice-cost-now"), cap * 2.0);
    let row = rest
        .find("data-advice-account=\"sim\"")
        .expect("the advice has a row for the account");
    let account_cost: f64 = figure_after(&rest, row, "advice-account-cost-now")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(account_cost, cap * 2.0);
    assert_eq!(
        aa["cost"]["now_per_month"].as_f64(),
        Some(cap * 2.0),
        "{aa}"
    );
    // Each kind's pool hit rate as the advice said it, before or after the page read it.
    for kind in ["recaptcha_v2", "turnstile"] {
        let rate =
            |a: &serde_json::Value| entry(a, "kinds", "kind", kind)["pool_hit_rate"].as_f64();
        let page = advice_kind_figure(&rest, kind, "advice-pool-hit-rate");
        assert!(
            [rate(ab), rate(aa)].contains(&Some(page)),
            "{kind}: the page shows {page}: {ab} / {aa}"
        );
    }
    // The configured pool's advice and the window replayed, as `/v1/advice` said them.
    let pool_advice = |a: &serde_json::Value| entry(a, "pools", "label", POOL_LABEL);
    let (pb, pa) = (pool_advice(ab), pool_advice(aa));
    let row = rest
        .find(&format!(
            "data-advice-pool=\"{}\"",
            pa["id"].as_str().unwrap()
        ))
        .expect("the page has a row for the configured pool");
    let pool_figure = |name: &str| -> f64 {
        figure_after(&rest, row, name)
            .unwrap_or_else(|| panic!("the pool row shows {name}"))
            .parse()
            .unwrap()
    };
    assert_eq!(pool_figure("advice-pool-size-now"), POOL_SIZE as f64);
    let recommended = pool_figure("advice-pool-recommended");
    assert!(
        [pb["recommended"].as_f64(), pa["recommended"].as_f64()].contains(&Some(recommended)),
        "the page recommends {recommended}: {pb} / {pa}"
    );
    // What the log saw of the pool (its callers served from it), as the advice said before or
    // after the page read it: the page reads once a minute, so it may predate the hits.
    let seen = pool_figure("advice-pool-seen-hit-rate");
    assert!(
        [pb["seen_hit_rate"].as_f64(), pa["seen_hit_rate"].as_f64()].contains(&Some(seen)),
        "the page shows a seen hit rate of {seen}: {pb} / {pa}"
    );
    let replayed = rest
        .find("data-advice-replay=\"now\"")
        .expect("the page shows the replay of the plan now");
    let threads: f64 = figure_after(&rest, replayed, "advice-replay-threads")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(threads, cap, "the plan now is replayed with its cap");
    assert!(rest.contains("data-advice-replay=\"recommended\""));
    // The demand log counts from the process's start: at rest it counts every pool hit the
    // engine counted (those handed out before its first sample too).
    let pool_total = status(&gw).await["answers"]["total"]["pool"]
        .as_u64()
        .unwrap();
    assert!(pool_total > 0);
    eventually(
        Duration::from_secs(10),
        "the advice to count every pool hit",
        || async {
            let a = advice(&gw).await;
            let hits: f64 = a["kinds"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| {
                    let answered = k["callers"].as_f64().unwrap() - k["failed"].as_f64().unwrap();
                    k["pool_hit_rate"].as_f64().unwrap_or(0.0) * answered
                })
                .sum();
            hits.round() as u64 == pool_total
        },
    )
    .await;
    assert!(
        std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0) > 10_000,
        "the screenshot {} is written",
        shot.display()
    );
}
