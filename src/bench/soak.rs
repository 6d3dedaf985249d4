//! `soak`: a million distinct page URLs through one gateway process, to show memory stays flat. A
//! scraper visits thousands of pages per site, and each page is a target of its own; with idle
//! targets retired (`target_idle_s`, short here so retirement happens during the run) and the
//! report bounded (`metrics_top_targets`), the gateway's resident memory, its `/metrics` size
//! and its live targets must level off instead of growing with every page.
//!
//! Callers run a closed loop of `/v1/solve` on Turnstile pages of 200 sites, a new page every
//! time. After each tenth of the pages the gateway's resident memory (`VmRSS`), the size of a
//! `/metrics` scrape and its `captcha_gateway_targets` gauge are sampled. The figures are those samples
//! after the first tenth (warm-up: allocator arenas, connection pools) and at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use tokio::time::Instant;

use super::load::{self, LoopOutcome};
use super::report::RunResult;
use super::rig::{GatewaySpec, GatewayUnderTest, SimServer, secs};
use super::{BenchError, Opts};

/// Seconds an unused target is kept in the soak: long against the 10-20 ms solves, short
/// against the run, so most pages retire during it.
const TARGET_IDLE_S: u64 = 5;
const SITES: u64 = 200;

/// One sample of the gateway's footprint.
#[derive(Debug, Clone, Copy)]
struct Sample {
    pages: u64,
    rss_mb: f64,
    metrics_bytes: usize,
    live_targets: f64,
}

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    let pages: u64 = if opts.quick { 4_000 } else { 1_000_000 };
    let duration = Duration::from_secs_f64(opts.duration_or(60.0, 4.0 * 3600.0));
    let concurrency = opts.concurrency.unwrap_or(64);
    let sim = SimServer::start(2_000, secs(0.01, 0.02)).await?;
    let mut spec = GatewaySpec::new(2_000, 0.01, 0.01);
    spec.max_requests_per_second = 5_000.0;
    spec.redis_url = opts.redis_url.clone();
    spec.top = format!("target_idle_s = {TARGET_IDLE_S}\n");
    let gw = GatewayUnderTest::process(&spec, &sim).await?;
    let pid = gw.pid();
    let client = load::client(concurrency);
    let next_page = Arc::new(AtomicU64::new(0));
    let run = format!("{:08x}", rand::random::<u32>());
    let bar = load::bar(pages, "soak: distinct pages solved");
    let start = Instant::now();
    let mut result = RunResult::default();
    let mut samples = vec![sample(&client, &gw.base, pid, 0).await?];
    let mut total = LoopOutcome::default();
    let phase = pages.div_ceil(10);
    for _ in 0..10 {
        let left = duration.saturating_sub(start.elapsed());
        if left.is_zero() {
            result.notes.push(format!(
                "stopped by --duration after {} pages",
                next_page.load(Ordering::Relaxed)
            ));
            break;
        }
        let init = {
            let (client, base, next_page, run) = (
                client.clone(),
                gw.base.clone(),
                next_page.clone(),
                run.clone(),
            );
            move || (client.clone(), base.clone(), next_page.clone(), run.clone())
        };
        let outcome = load::closed_loop(
            concurrency,
            phase as usize,
            left,
            &bar,
            init,
            |(client, base, next_page, run)| async move {
                let n = next_page.fetch_add(1, Ordering::Relaxed);
                let body = page_body(&run, n);
                let r = load::solve(&client, &base, body)
                    .await
                    .map(|s| (s.token, s.source == "pool"));
                ((client, base, next_page, run), r)
            },
        )
        .await;
        // Tokens are not kept: a million of them would only weigh on the bench process.
        total.done += outcome.done;
        total.errors += outcome.errors;
        total.elapsed += outcome.elapsed;
        total.first_errors.extend(outcome.first_errors);
        let done = total.done as u64 + total.errors as u64;
        samples.push(sample(&client, &gw.base, pid, done).await?);
    }
    bar.finish_and_clear();
    gw.stop().await;
    report(&mut result, &samples, &total);
    Ok(result)
}

/// A Turnstile solve for page `n` of one of the sites: a target nobody asked for before.
fn page_body(run: &str, n: u64) -> Bytes {
    Bytes::from(
        json!({
            "kind": "turnstile",
            "sitekey": "0x4AAAAAAA-soak",
            "pageurl": format!("https://site{}.soak-{run}.example/item/{n}", n % SITES),
        })
        .to_string(),
    )
}

async fn sample(
    client: &reqwest::Client,
    base: &str,
    pid: u32,
    pages: u64,
) -> Result<Sample, BenchError> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| BenchError::Setup(format!("/metrics: {}", e.without_url())))?
        .text()
        .await
        .map_err(|e| BenchError::Setup(format!("/metrics: {e}")))?;
    let live_targets = text
        .lines()
        .find_map(|l| l.strip_prefix("captcha_gateway_targets "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN);
    Ok(Sample {
        pages,
        rss_mb: rss_mb(pid),
        metrics_bytes: text.len(),
        live_targets,
    })
}

fn report(result: &mut RunResult, samples: &[Sample], total: &LoopOutcome) {
    let (first, last) = (samples[0], samples[samples.len() - 1]);
    let warm = samples.get(1).copied().unwrap_or(first);
    result.info("pages solved", total.done as f64, "");
    result.info("pages per second", total.rate(), "/s");
    result.info("RSS before load", first.rss_mb, "MB");
    result.info("RSS after the first tenth", warm.rss_mb, "MB");
    result.info("RSS at the end", last.rss_mb, "MB");
    let most_rss = samples.iter().map(|s| s.rss_mb).fold(0.0, f64::max);
    result.info("RSS highest sample", most_rss, "MB");
    result.info(
        "/metrics after the first tenth",
        warm.metrics_bytes as f64,
        "bytes",
    );
    result.info("/metrics at the end", last.metrics_bytes as f64, "bytes");
    result.info("live targets after the first tenth", warm.live_targets, "");
    result.info("live targets at the end", last.live_targets, "");
    for s in samples {
        result.notes.push(format!(
            "after {:>8} pages: RSS {:>6.1} MB, /metrics {:>6} bytes, {:>6} live targets",
            s.pages, s.rss_mb, s.metrics_bytes, s.live_targets
        ));
    }
    if total.errors > 0 {
        result.fail(format!(
            "{} of {} callers got an error, first: {:?}",
            total.errors,
            total.done + total.errors,
            total.first_errors.first()
        ));
    }
}

/// Resident memory of process `pid` now, in MB (`VmRSS`).
fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}
