//! The `bench` tool keeps working: its scenarios run in their `--quick` size through the real
//! binary, and their correctness figures (not timings) are what we assert.

use std::process::Command;

use serde_json::Value;

/// Runs `captcha-gateway bench <scenario> --quick --json FILE` and returns the exit status and
/// the summary figures by name (their median).
fn bench(scenario: &str) -> (bool, Value, impl Fn(&str) -> f64) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args(["bench", scenario, "--quick", "--json"])
        .arg(&json)
        .env("RUST_LOG", "warn")
        .output()
        .expect("the binary runs");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_else(|e| {
        panic!(
            "bench {scenario} wrote no JSON ({e}); stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }))
    .unwrap();
    let summary = report["summary"].clone();
    let figure = move |name: &str| {
        summary
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .and_then(|f| f["median"].as_f64())
            .unwrap_or_else(|| panic!("figure {name} missing"))
    };
    (out.status.success(), report, figure)
}

#[test]
fn bench_burst_reports_exact_demand_and_no_duplicates() {
    let (ok, report, figure) = bench("burst");
    assert!(ok, "bench burst failed: {report}");
    assert_eq!(report["failed"], false);
    assert_eq!(figure("callers_served"), 40.0);
    assert_eq!(
        figure("upstream_tasks"),
        40.0,
        "exact demand: one task per caller"
    );
    assert_eq!(figure("tokens_handed_out_twice"), 0.0);
    assert_eq!(figure("expired"), 0.0);
    assert!(report["machine"]["cpus"].as_u64().unwrap() >= 1);
}

#[test]
fn bench_hit_takes_every_token_from_the_pool_once() {
    let (ok, report, figure) = bench("hit");
    assert!(ok, "bench hit failed: {report}");
    assert_eq!(figure("pool_hit_rate"), 1.0, "no solve left the pool");
    assert_eq!(figure("tokens_handed_out_twice"), 0.0);
    assert!(figure("solves_per_s") > 0.0);
}
