//! What a scenario run produces ([`RunResult`]: named figures, each with its target, plus the
//! correctness failures), and the report over several runs: the median, min and max of every
//! figure, printed as a table and written as JSON with the machine it ran on.
//!
//! Owns aggregation and presentation only; scenarios decide what to measure.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

/// What a figure should be. A missed target is reported, never a failure of the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    AtLeast(f64),
    AtMost(f64),
    Exactly(f64),
}

impl Goal {
    fn met(self, value: f64) -> bool {
        match self {
            Goal::AtLeast(t) => value >= t,
            Goal::AtMost(t) => value <= t,
            Goal::Exactly(t) => (value - t).abs() < 1e-9,
        }
    }

    fn text(self) -> String {
        match self {
            Goal::AtLeast(t) => format!(">= {}", number(t)),
            Goal::AtMost(t) => format!("<= {}", number(t)),
            Goal::Exactly(t) => format!("= {}", number(t)),
        }
    }
}

/// One measured figure of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub value: f64,
    pub unit: &'static str,
    pub goal: Option<Goal>,
}

/// Everything one run of a scenario measured, and what went wrong in it.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    pub metrics: Vec<Metric>,
    /// Correctness failures (errors to callers, invalid or duplicate tokens): any of these makes
    /// the command exit non-zero.
    pub failures: Vec<String>,
    /// Context worth printing under the table (what limited the run, skipped comparisons).
    pub notes: Vec<String>,
}

impl RunResult {
    /// Records a figure without a target.
    pub fn info(&mut self, name: &'static str, value: f64, unit: &'static str) {
        self.metrics.push(Metric {
            name,
            value,
            unit,
            goal: None,
        });
    }

    /// Records a figure with its target.
    pub fn goal(&mut self, name: &'static str, value: f64, unit: &'static str, goal: Goal) {
        self.metrics.push(Metric {
            name,
            value,
            unit,
            goal: Some(goal),
        });
    }

    /// Records a correctness failure.
    pub fn fail(&mut self, what: impl Into<String>) {
        self.failures.push(what.into());
    }
}

/// The median of each figure over the runs, in first-seen order.
struct Row {
    name: &'static str,
    unit: &'static str,
    goal: Option<Goal>,
    values: Vec<f64>,
}

impl Row {
    fn median(&self) -> f64 {
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }
}

fn rows(runs: &[RunResult]) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for run in runs {
        for m in &run.metrics {
            match rows.iter_mut().find(|r| r.name == m.name) {
                Some(r) => r.values.push(m.value),
                None => rows.push(Row {
                    name: m.name,
                    unit: m.unit,
                    goal: m.goal,
                    values: vec![m.value],
                }),
            }
        }
    }
    rows
}

/// A number with as many decimals as its size deserves.
fn number(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if (v == v.trunc() && v.abs() < 1e15) || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The table printed at the end of a bench: one line per figure.
pub fn table(scenario: &str, runs: &[RunResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nbench {scenario}: {} run(s), median [min..max]",
        runs.len()
    );
    let _ = writeln!(
        out,
        "{:<34} {:>12} {:>22} {:<8} {:>12}  met",
        "figure", "median", "range", "unit", "target"
    );
    for r in rows(runs) {
        let min = r.values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = r.values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let median = r.median();
        let (target, met) = match r.goal {
            Some(g) => (g.text(), if g.met(median) { "yes" } else { "NO" }),
            None => (String::new(), ""),
        };
        let _ = writeln!(
            out,
            "{:<34} {:>12} {:>22} {:<8} {:>12}  {met}",
            r.name,
            number(median),
            format!("[{}..{}]", number(min), number(max)),
            r.unit,
            target
        );
    }
    // Notes usually repeat from run to run: print each once.
    let mut seen = std::collections::HashSet::new();
    for n in runs.iter().flat_map(|r| &r.notes) {
        if seen.insert(n) {
            let _ = writeln!(out, "note: {n}");
        }
    }
    for (i, run) in runs.iter().enumerate() {
        for f in &run.failures {
            let _ = writeln!(out, "FAILED (run {}): {f}", i + 1);
        }
    }
    out
}

/// The whole report as JSON: the command, the machine, every run and the medians.
pub fn json(scenario: &str, command: &str, runs: &[RunResult]) -> Value {
    let summary: Vec<Value> = rows(runs)
        .iter()
        .map(|r| {
            let median = r.median();
            json!({
                "name": r.name, "unit": r.unit, "median": median,
                "min": r.values.iter().copied().fold(f64::INFINITY, f64::min),
                "max": r.values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                "values": r.values,
                "target": r.goal.map(Goal::text),
                "met": r.goal.map(|g| g.met(median)),
            })
        })
        .collect();
    let per_run: Vec<Value> = runs
        .iter()
        .map(|run| {
            let figures: BTreeMap<&str, f64> =
                run.metrics.iter().map(|m| (m.name, m.value)).collect();
            json!({"figures": figures, "failures": run.failures, "notes": run.notes})
        })
        .collect();
    json!({
        "scenario": scenario,
        "command": command,
        "machine": machine(),
        "runs": per_run,
        "summary": summary,
        "failed": runs.iter().any(|r| !r.failures.is_empty()),
    })
}

/// Where the figures came from: CPU model and count, memory, kernel (from /proc; absent
/// fields stay null on systems without it).
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_mb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb / 1024);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_owned());
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "cpu_model": model,
        "mem_mb": mem_mb,
        "kernel": kernel,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_goals() {
        let run = |v: f64| RunResult {
            metrics: vec![Metric {
                name: "x",
                value: v,
                unit: "/s",
                goal: Some(Goal::AtLeast(2.0)),
            }],
            ..RunResult::default()
        };
        let runs = [run(1.0), run(3.0), run(2.5)];
        let j = json("t", "cmd", &runs);
        assert_eq!(j["summary"][0]["median"], 2.5);
        assert_eq!(j["summary"][0]["met"], true);
        assert_eq!(j["failed"], false);
        assert!(table("t", &runs).contains("2.50"));
        assert!(!Goal::AtMost(1.0).met(1.5));
        assert!(Goal::Exactly(40.0).met(40.0));
    }
}
