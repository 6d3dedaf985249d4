//! `captcha-gateway status`: the dashboard's figures as one screen of text. Exit 0 with the
//! summary; exit 1 with one line when the gateway cannot be reached or answers something else.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::StatusArgs;
use crate::secret::redact_url;
use crate::status::report::{Percentiles, StatusReport};

/// Pool rows printed; the rest are counted in one line.
const POOL_ROWS: usize = 8;

pub async fn run(args: &StatusArgs) -> ExitCode {
    match fetch(args).await {
        Ok(report) => {
            print!("{}", render(&report, &redact_url(&args.url)));
            ExitCode::SUCCESS
        }
        Err(line) => {
            eprintln!("status: {line}");
            ExitCode::from(1)
        }
    }
}

async fn fetch(args: &StatusArgs) -> Result<StatusReport, String> {
    fetch_json(args, "/v1/status", "a status report").await
}

/// `path` (with its query) of the gateway `args` names, read as JSON; the error is one line
/// that never shows the URL's password. `what` names the expected answer.
pub(crate) async fn fetch_json<T: serde::de::DeserializeOwned>(
    args: &StatusArgs,
    path: &str,
    what: &str,
) -> Result<T, String> {
    let shown = redact_url(&args.url);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(args.timeout_s))
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
    let url = format!("{}{path}", args.url.trim_end_matches('/'));
    let mut req = http.get(&url);
    if let Some(key) = args.ops_key.as_ref().or(args.key.as_ref()) {
        req = req.bearer_auth(&key.0);
    }
    // reqwest's error text names the URL, which may hold a password: say what failed instead.
    let res = req.send().await.map_err(|e| {
        let why = if e.is_timeout() {
            "no answer in time"
        } else if e.is_connect() {
            "connection refused or host unreachable"
        } else if e.is_builder() {
            "not a valid URL"
        } else {
            "request failed"
        };
        format!("cannot reach the gateway at {shown} ({why})")
    })?;
    if res.status() == reqwest::StatusCode::UNAUTHORIZED {
        return Err(format!(
            "the gateway at {shown} wants its operations key: pass --ops-key or set CAPTCHA_GATEWAY_OPS_KEY"
        ));
    }
    if !res.status().is_success() {
        return Err(format!(
            "the gateway at {shown} answered HTTP {} to {path}",
            res.status().as_u16()
        ));
    }
    res.json()
        .await
        .map_err(|_| format!("{shown}{path} did not answer {what}"))
}

fn rate(r: f64) -> String {
    if r == 0.0 {
        "0".into()
    } else if r >= 100.0 {
        format!("{r:.0}")
    } else if r >= 10.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.2}")
    }
}

fn secs(s: Option<f64>) -> String {
    match s {
        None => "-".into(),
        Some(s) if s < 1.0 => format!("{:.0} ms", s * 1000.0),
        Some(s) => format!("{s:.1} s"),
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{:.0}%", x * 100.0))
}

/// Eight levels of block, one per history point: the shape of the last minutes.
fn sparkline(values: &[f64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().copied().fold(0.0_f64, f64::max);
    values
        .iter()
        .map(|v| {
            if max <= 0.0 {
                BARS[0]
            } else {
                BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

/// `14 s` or `5 min`.
fn span(secs: f64) -> String {
    if secs >= 90.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{:.0} s", secs.max(1.0))
    }
}

fn meter(used: u64, cap: u64) -> String {
    const WIDTH: u64 = 20;
    let filled = (used.min(cap) * WIDTH).checked_div(cap).unwrap_or(0);
    format!(
        "[{}{}]",
        "#".repeat(filled as usize),
        ".".repeat((WIDTH - filled) as usize)
    )
}

fn latency_line(out: &mut String, label: &str, p: &Percentiles) {
    let _ = writeln!(
        out,
        "  {label:<22} {:>7} {:>9} {:>9} {:>9}",
        p.count,
        secs(p.p50),
        secs(p.p90),
        secs(p.p99)
    );
}

/// "2 instances" for a fleet of `serve` processes; "1 front end, 2 workers" once workers publish.
fn fleet_words(f: &crate::status::report::FleetInfo) -> String {
    let count = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let role = |name: &str| f.roles.get(name).copied().unwrap_or(0);
    if role("worker") == 0 && role("other") == 0 {
        return count(f.instances, "instance", "instances");
    }
    [
        ("serve", "front end", "front ends"),
        ("worker", "worker", "workers"),
        ("other", "other", "others"),
    ]
    .iter()
    .filter(|(name, ..)| role(name) > 0)
    .map(|(name, one, many)| count(role(name), one, many))
    .collect::<Vec<_>>()
    .join(", ")
}

/// The summary, at most about 40 lines whatever the fleet's size.
pub fn render(r: &StatusReport, url: &str) -> String {
    let mut out = String::new();
    let store = if r.fleet.store == "redis" {
        "fleet via Redis"
    } else {
        "embedded store"
    };
    let _ = writeln!(
        out,
        "captcha-gateway {} at {url} · {store} · {}",
        r.version,
        fleet_words(&r.fleet)
    );
    let (per, tot) = (&r.answers.per_s, &r.answers.total);
    let _ = writeln!(
        out,
        "answers/s, last min   {:>8}   pool {}  solved {}  shared {}",
        rate(per.pool + per.solved + per.shared),
        rate(per.pool),
        rate(per.solved),
        rate(per.shared)
    );
    let _ = writeln!(
        out,
        "answers since start   {:>8}   pool {}  solved {}  shared {}",
        tot.pool + tot.solved + tot.shared,
        tot.pool,
        tot.solved,
        tot.shared
    );
    let rates: Vec<f64> = r
        .history
        .iter()
        .map(|p| p.pool + p.solved + p.shared)
        .collect();
    if !rates.is_empty() {
        let label = format!("last {}", span(rates.len() as f64 * r.interval_s));
        let _ = writeln!(out, "{label:<22}{}", sparkline(&rates));
    }
    let _ = writeln!(
        out,
        "solves held           {:>8} of {} (limit {})",
        r.admission.active, r.admission.running_limit, r.admission.max_concurrent
    );
    let in_use: u64 = r.accounts.iter().map(|a| a.threads_in_use).sum();
    let cap: u64 = r.accounts.iter().map(|a| a.threads_cap).sum();
    let _ = writeln!(out, "upstream threads      {in_use:>8} of {cap} in use");
    for a in &r.accounts {
        let _ = writeln!(
            out,
            "  {:<20} {:>4} / {:<4} {} {:<9} submits {} solved {} failed {} timed out {}",
            a.name,
            a.threads_in_use,
            a.threads_cap,
            meter(a.threads_in_use, a.threads_cap),
            a.state,
            a.submits,
            a.solved,
            a.failed,
            a.timeouts
        );
    }
    let _ = writeln!(
        out,
        "pools ({} targets)     ready / target   in flight  waiting  hit rate  waste",
        r.targets
    );
    for p in r.pools.iter().take(POOL_ROWS) {
        let target = p.target_size.map_or_else(|| "-".into(), |t| t.to_string());
        let _ = writeln!(
            out,
            "  {:<30} {:>5} / {:<6} {:>9} {:>8} {:>9} {:>6}",
            p.target,
            p.ready,
            target,
            p.in_flight,
            p.waiting,
            pct(p.hit_rate),
            pct(p.waste_rate)
        );
    }
    if r.pools.len() > POOL_ROWS {
        let _ = writeln!(out, "  ... and {} more rows", r.pools.len() - POOL_ROWS);
    }
    let label = format!("latency, last {}", span(r.window_s));
    let _ = writeln!(out, "{label:<30} n       p50       p90       p99");
    latency_line(&mut out, "request -> answer", &r.latency.handout);
    latency_line(&mut out, "upstream solve", &r.latency.solve);
    latency_line(
        &mut out,
        "answer age at handout",
        &r.latency.ready_to_caller,
    );
    let errors: Vec<_> = r.errors.iter().filter(|e| e.total > 0).collect();
    if errors.is_empty() {
        let _ = writeln!(out, "errors                none since start");
    } else {
        let _ = writeln!(out, "errors                 /min     total");
        for e in errors.iter().take(8) {
            let _ = writeln!(
                out,
                "  {:<20} {:>6} {:>9}",
                e.class,
                rate(e.per_min),
                e.total
            );
        }
    }
    match &r.queue {
        None => {
            let _ = writeln!(
                out,
                "queue                 none (tasks are solved in this process)"
            );
        }
        Some(q) => {
            let show = |v: Option<u64>| v.map_or_else(|| "unknown".into(), |v| v.to_string());
            let _ = writeln!(
                out,
                "queue {:<15} lag {}  dead letters {}",
                q.name,
                show(q.lag),
                show(q.dead_letters)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::report::*;

    #[test]
    fn the_summary_names_every_section_and_stays_one_screen() {
        let mut r = StatusReport {
            version: "9.9.9".into(),
            interval_s: 5.0,
            window_s: 300.0,
            ..StatusReport::default()
        };
        r.fleet.store = "redis".into();
        r.fleet.instances = 3;
        r.answers.total = BySource {
            pool: 7,
            solved: 11,
            shared: 2,
        };
        r.pools = (0..30)
            .map(|i| PoolRow {
                target: format!("turnstile:site{i}.example"),
                ..PoolRow::default()
            })
            .collect();
        r.accounts = vec![AccountRow {
            name: "main".into(),
            threads_in_use: 4,
            threads_cap: 10,
            ..AccountRow::default()
        }];
        let text = render(&r, "http://gw:8080");
        assert!(text.contains("3 instances"), "{text}");
        r.fleet.roles = [("serve".to_owned(), 1), ("worker".to_owned(), 2)].into();
        let text = render(&r, "http://gw");
        assert!(text.contains("1 front end, 2 workers"), "{text}");
        assert!(text.contains("fleet via Redis"), "{text}");
        assert!(text.contains("pool 7  solved 11  shared 2"), "{text}");
        assert!(text.contains("[########............]"), "{text}");
        assert!(text.contains("... and 22 more rows"), "{text}");
        assert!(text.lines().count() <= 40, "{} lines", text.lines().count());
    }

    #[test]
    fn the_sparkline_spans_the_eight_levels() {
        assert_eq!(sparkline(&[0.0, 1.0, 2.0]), "▁▅█");
        assert_eq!(sparkline(&[0.0, 0.0]), "▁▁");
    }
}
