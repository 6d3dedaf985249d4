//! `captcha-gateway advise`: the plan advice of a running gateway (`GET /v1/advice`) as text,
//! each recommendation with the figures it comes from, or as the endpoint's JSON. Exit 0 with
//! the advice; exit 1 with one line when the gateway cannot be reached or answers something else.

use std::fmt::Write as _;
use std::process::ExitCode;

use serde_json::Value;

use super::status::fetch_json;
use crate::cli::AdviseArgs;
use crate::status::advice::Advice;

pub async fn run(args: &AdviseArgs) -> ExitCode {
    let window_s = (args.window_h * 3600.0).round().max(1.0);
    let mut path = format!("/v1/advice?window_s={window_s}&hit_rate={}", args.hit_rate);
    if let Some(w) = args.wait_s {
        path.push_str(&format!("&wait_s={w}"));
    }
    let fetched: Result<Value, String> = fetch_json(&args.gateway, &path, "plan advice").await;
    let advice = fetched.and_then(|v| {
        let advice = serde_json::from_value::<Advice>(v.clone())
            .map_err(|_| format!("{path} did not answer plan advice"))?;
        Ok((v, advice))
    });
    match advice {
        Ok((raw, _)) if args.json => {
            println!("{raw}");
            ExitCode::SUCCESS
        }
        Ok((_, advice)) => {
            print!("{}", render(&advice));
            ExitCode::SUCCESS
        }
        Err(line) => {
            eprintln!("advise: {line}");
            ExitCode::from(1)
        }
    }
}

/// `1 thread`, `5 threads`.
fn threads(n: u64) -> String {
    if n == 1 {
        "1 thread".to_owned()
    } else {
        format!("{n} threads")
    }
}

fn render(a: &Advice) -> String {
    let mut out = String::new();
    let t = &a.threads;
    let _ = writeln!(
        out,
        "threads: {} recommended (the plan allows {} now)",
        t.recommended, t.cap
    );
    let _ = writeln!(out, "  {}", t.how);
    for acc in &a.accounts {
        let _ = writeln!(
            out,
            "account {} ({}): {} recommended (allows {} now; {:.2} in use at its peak, {} waiting, most seen {}; {} solves){}",
            acc.name,
            acc.provider,
            acc.recommended,
            acc.cap,
            acc.littles_law_at_peak,
            acc.waiting_at_peak,
            acc.observed_peak_in_use,
            acc.solves,
            acc.cost.as_ref().map_or_else(String::new, |c| {
                let unpriced = if c.unpriced_kinds.is_empty() {
                    String::new()
                } else {
                    format!(", no price for {}", c.unpriced_kinds.join(", "))
                };
                format!(
                    "; {:.2} {cur} a month now, {:.2} {cur} as recommended{unpriced}",
                    c.now_per_month,
                    c.recommended_per_month,
                    cur = c.currency
                )
            })
        );
    }
    if let Some(w) = &a.queue_workers {
        let _ = writeln!(
            out,
            "queue workers: maxReplicaCount {} ({} running now)\n  {}",
            w.max_replica_count, w.workers_now, w.how
        );
    }
    if let Some(c) = &a.cost {
        let _ = writeln!(
            out,
            "cost: {:.2} {cur} a month now, {:.2} {cur} as recommended\n  {}",
            c.now_per_month,
            c.recommended_per_month,
            c.how,
            cur = c.currency
        );
    }
    render_pools(&mut out, a);
    if let Some(r) = &a.replay {
        render_replay(&mut out, r);
    }
    let _ = writeln!(
        out,
        "window: {:.1} h, {} {} of {:.0} s with demand",
        a.window_s as f64 / 3600.0,
        a.buckets,
        if a.buckets == 1 { "bucket" } else { "buckets" },
        a.bucket_s
    );
    if a.kinds.is_empty() {
        let _ = writeln!(out, "no demand in the window");
    }
    for k in &a.kinds {
        let mean = k
            .mean_solve_s
            .map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s"));
        let held = if k.solves > 0 {
            format!("{:.1} s", k.thread_seconds / k.solves as f64)
        } else {
            "-".to_owned()
        };
        let hits = k
            .pool_hit_rate
            .map_or_else(|| "-".to_owned(), |r| format!("{:.0} %", r * 100.0));
        let spread = match (k.solve_p50_s, k.solve_p95_s) {
            (Some(p50), Some(p95)) => format!(", p50 {p50:.1} s, p95 {p95:.1} s"),
            (Some(p50), None) => format!(", p50 {p50:.1} s"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "{:<22} callers {:>8} (peak {:.2}/s, {} hung up)  solves {:>8} (peak {:.2}/s, mean {mean}{spread}, thread held {held})  pool hits {hits}  failed {}",
            k.kind,
            k.callers,
            k.peak_callers_per_s,
            k.departed,
            k.solves,
            k.peak_solves_per_s,
            k.failed
        );
    }
    out
}

fn render_pools(out: &mut String, a: &Advice) {
    for p in &a.pools {
        let now = match (p.size_now, &p.mode_now) {
            (Some(n), Some(mode)) => format!("{mode} {n} now"),
            _ => "no pool now".to_owned(),
        };
        let replayed = |r: Option<f64>| r.map_or_else(|| "-".to_owned(), percent);
        let _ = writeln!(
            out,
            "pool {} ({}): {} recommended for {} of callers ({now}); it serves {} by the model \
             and {} in the replay, the pool now {} and {}; it wastes {:.0} answers a day ({:.2} \
             threads){}",
            p.label,
            short_id(&p.id),
            p.recommended,
            percent(a.pool_hit_rate_goal),
            percent(p.hit_rate),
            replayed(p.replayed_hit_rate),
            percent(p.hit_rate_now),
            replayed(p.replayed_hit_rate_now),
            p.waste_per_day,
            p.waste_threads,
            p.waste_cost_per_month
                .map_or_else(String::new, |c| format!(", {c:.2} a month"))
        );
        let _ = writeln!(out, "  {}", p.how);
    }
}

fn render_replay(out: &mut String, r: &crate::status::advice::replay::Replay) {
    for (name, p) in [("now", &r.now), ("recommended", &r.recommended)] {
        let hits = p.pool_hit_rate.map_or_else(|| "-".to_owned(), percent);
        let cost = p
            .cost_per_month
            .map_or_else(String::new, |c| format!(", {c:.2} a month"));
        let _ = writeln!(
            out,
            "replay {name:<11} {}: {} of {} callers waited for a thread (mean {:.1} s, \
             p95 {:.1} s, max {:.1} s), {} refused, {} past their deadline; pool hits {hits}; \
             {} expired unused; {} solves{cost}",
            threads(p.threads),
            p.waited,
            p.callers,
            p.mean_wait_s,
            p.p95_wait_s,
            p.max_wait_s,
            p.refused,
            p.timed_out,
            p.wasted,
            p.solves
        );
    }
    if let Some(w) = &r.for_wait {
        let fewer = w
            .p95_wait_one_fewer_s
            .map_or_else(String::new, |s| format!(", {s:.1} s with one fewer"));
        let verdict = if w.met {
            ""
        } else {
            " (not met by any plan searched)"
        };
        let _ = writeln!(
            out,
            "replay for a p95 wait of {:.1} s: {} (p95 {:.1} s{fewer}){verdict}",
            w.wait_target_s,
            threads(w.threads),
            w.p95_wait_s
        );
    }
    let complete = if r.complete {
        ""
    } else {
        " (cut short: too many events)"
    };
    let _ = writeln!(out, "  {}{complete}", r.how);
}

fn percent(share: f64) -> String {
    format!("{:.1} %", share * 100.0)
}

/// The first 12 characters of a target id, as logs show it.
fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
