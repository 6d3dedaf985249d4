//! The `bench` tool keeps working: its scenarios run in their `--quick` size through the real
//! binary, and their correctness figures (not timings) are what we assert.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Runs `captcha-gateway bench <scenario> --quick --json FILE` and returns the exit status and
/// the summary figures by name (their median).
fn bench(scenario: &str) -> (bool, Value, impl Fn(&str) -> f64) {
    bench_with(scenario, &[])
}

/// [`bench`] with more arguments.
fn bench_with(scenario: &str, args: &[&OsStr]) -> (bool, Value, impl Fn(&str) -> f64) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args(["bench", scenario, "--quick", "--json"])
        .arg(&json)
        .args(args)
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

/// Three days of a daily rush in virtual time: the predictive pool, having seen the first day,
/// serves the second and third days' rush from its first minutes where the reactive one is
/// still catching up; both serve most of the day, and both waste answers in the quiet hours.
#[test]
fn bench_cycle_serves_a_recurring_rush_from_a_predictive_pool() {
    let (ok, report, figure) = bench("cycle");
    assert!(ok, "bench cycle failed: {report}");
    assert_eq!(figure("days"), 3.0);
    let (reactive, predictive) = (
        figure("rise_hit_rate_reactive"),
        figure("rise_hit_rate_predictive"),
    );
    assert!(predictive >= 0.9 && predictive > reactive, "{report}");
    for mode in ["reactive", "predictive"] {
        let day = figure(&format!("day_hit_rate_{mode}"));
        assert!((0.5..=1.0).contains(&day), "{mode}: {report}");
        assert!(figure(&format!("solves_per_day_{mode}")) > 0.0);
    }
}

/// The plan advisor on an hour of a busy fleet's history (`--quick`): it advises, replays the
/// hour whole under both plans, and recommends pools for the busy targets.
#[test]
fn bench_advise_replays_the_history_it_is_given() {
    let (ok, report, figure) = bench("advise");
    assert!(ok, "bench advise failed: {report}");
    assert_eq!(
        figure("callers"),
        36_000.0,
        "10 a second for an hour, every one replayed"
    );
    assert_eq!(figure("pools_advised"), 4.0);
    assert!(
        figure("replay_recommended_pool_hit_rate") >= 0.9,
        "{report}"
    );
    assert_eq!(figure("replay_now_pool_hit_rate"), 0.0);
}

/// The gateway, configured as a real provider's user would (no poll settings), serves every
/// caller a valid token from a simulator whose solve times it is never told, within the check
/// budget. (How fast is the bench's to measure, not this test's.)
#[test]
fn bench_polling_serves_every_caller_within_the_check_budget() {
    let (ok, report, figure) = bench("polling");
    assert!(ok, "bench polling failed: {report}");
    for setting in ["fast", "slow"] {
        assert_eq!(figure(&format!("{setting}_callers_measured")), 20.0);
        assert!(figure(&format!("{setting}_tasks_measured")) >= 1.0);
        let checks = figure(&format!("{setting}_checks_per_task"));
        assert!((1.0..=20.0).contains(&checks), "{setting}: {checks}");
    }
}

/// Queued tasks through real worker processes: the run fails unless every task got one ready
/// result with a token valid once; each task cost one upstream task, within the plan's threads.
#[test]
fn bench_queue_gets_one_ready_result_per_task_through_the_workers() {
    let (ok, report, figure) = bench("queue");
    assert!(ok, "bench queue failed: {report}");
    assert_eq!(figure("instant: upstream submits per task"), 1.0);
    assert_eq!(figure("seed: upstream submits per task"), 1.0);
    assert!(figure("seed: peak upstream tasks") <= 15.0);
}

/// A worker `kill -9`ed while it solves, on the stream and on seed 003's list: the run fails
/// unless every task got one valid answer, and none of its provider tasks was paid for twice.
#[test]
fn bench_worker_kill_pays_no_provider_task_twice() {
    let (ok, report, figure) = bench("worker-kill");
    assert!(ok, "bench worker-kill failed: {report}");
    assert_eq!(figure("stream: provider tasks paid twice"), 0.0);
    assert_eq!(figure("seed list: provider tasks paid twice"), 0.0);
    assert!(figure("stream: tasks the killed worker held") >= 1.0);
    assert!(figure("seed list: tasks the killed worker held") >= 1.0);
}

/// The seed stack's folder in this repository.
fn seed_stack_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/seed_stack")
}

/// A copy of the seed stack's folder in a temporary directory of its own: a test tells its
/// gunicorn processes from another test's by their `--chdir`.
fn seed_stack_copy() -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for file in ["app.py", "requirements.txt"] {
        std::fs::copy(seed_stack_dir().join(file), copy.path().join(file)).unwrap();
    }
    copy
}

/// The pids of live gunicorn processes serving the app in `dir` (Linux; a zombie's command line
/// is empty, so it does not count).
fn gunicorns_in(dir: &Path) -> Vec<u32> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            cmdline.contains("gunicorn") && cmdline.contains(&dir)
        })
        .collect()
}

/// The gateway's pool hit path against seed 002's Flask worker on gunicorn reading seed 000's
/// Redis list, with the venv's Python (scripts/test installs bench/seed_stack/requirements.txt
/// into it): every token of either system valid and handed out once, no seed-stack answer that
/// was not a cached token, both rates and their ratio reported, and no gunicorn left behind.
#[test]
fn bench_seed_stack_compares_both_systems_on_valid_tokens_handed_out_once() {
    let copy = seed_stack_copy();
    let dir = copy.path();
    let python = crate::clients::python();
    let args = [
        OsStr::new("--python"),
        python.as_os_str(),
        OsStr::new("--seed-stack-dir"),
        dir.as_os_str(),
    ];
    let (ok, report, figure) = bench_with("seed-stack", &args);
    assert!(ok, "bench seed-stack failed: {report}");
    assert_eq!(report["failed"], false);
    assert_eq!(figure("gateway_pool_hit_rate"), 1.0);
    assert_eq!(figure("gateway_tokens_handed_out_twice"), 0.0);
    assert_eq!(
        figure("seed_cached_share"),
        1.0,
        "every answer a cached token"
    );
    assert_eq!(figure("seed_tokens_handed_out_twice"), 0.0);
    assert_eq!(figure("seed_tokens_lost"), 0.0);
    let (gateway, seed) = (figure("gateway_hits_per_s"), figure("seed_answers_per_s"));
    assert!(gateway > 0.0 && seed > 0.0, "{gateway} / {seed}");
    let ratio = figure("ratio_gateway_to_seed");
    assert!((ratio - gateway / seed).abs() <= 1e-6 * ratio, "{ratio}");
    assert!(
        figure("seed_gunicorn_cores") > 0.0,
        "gunicorn's CPU is measured"
    );
    within(
        std::time::Duration::from_secs(10),
        "no gunicorn left after the bench",
        || gunicorns_in(dir).is_empty().then_some(()),
    );
}

/// A Python without Flask, gunicorn or redis stops the scenario before anything starts, with one
/// line that names the fix.
#[test]
fn bench_seed_stack_without_the_packages_names_the_requirements_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args(["bench", "seed-stack", "--quick", "--python", "false"])
        .arg("--seed-stack-dir")
        .arg(seed_stack_dir())
        .env("RUST_LOG", "warn")
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let error: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(error.len(), 1, "{stderr}");
    assert!(
        error[0].contains("pip install -r ") && error[0].contains("seed_stack/requirements.txt"),
        "{stderr}"
    );
}

#[test]
fn an_interrupted_seed_stack_bench_takes_every_gunicorn_process_with_it() {
    let copy = seed_stack_copy();
    let mut bench = Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args(["bench", "seed-stack", "--python"])
        .arg(crate::clients::python())
        .arg("--seed-stack-dir")
        .arg(copy.path())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // The seed stack is up once gunicorn's master and both workers are there; the full-size
    // run then has tens of seconds to go.
    let limit = std::time::Duration::from_secs(60);
    within(limit, "gunicorn's master and two workers", || {
        (gunicorns_in(copy.path()).len() >= 3).then_some(())
    });
    let sent = Command::new("kill")
        .args(["-TERM", &bench.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = within(limit, "the bench exits", || bench.try_wait().unwrap());
    let mut stderr = String::new();
    std::io::Read::read_to_string(bench.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(out.code(), Some(130), "{stderr}");
    within(limit, "every gunicorn process gone", || {
        gunicorns_in(copy.path()).is_empty().then_some(())
    });
}

/// The child processes of `pid` (Linux).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Whether `pid` is a live process (not gone, not a zombie waiting to be reaped).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

/// Polls `check` until it yields, failing the test after `limit` (a guard, not a timing).
fn within<T>(limit: std::time::Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn an_interrupted_bench_stops_and_takes_its_gateway_with_it() {
    let mut bench = Command::new(env!("CARGO_BIN_EXE_captcha-gateway"))
        .args(["bench", "capacity"])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let pid = bench.id();
    // The scenario has started once its gateway (`serve`, its own process) is there.
    let limit = std::time::Duration::from_secs(60);
    let gateway = within(limit, "the gateway process", || {
        children(pid).into_iter().next()
    });
    let sent = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = within(limit, "the bench exits", || bench.try_wait().unwrap());
    let mut stderr = String::new();
    std::io::Read::read_to_string(bench.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(out.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    within(limit, "the gateway process gone", || {
        (!running(gateway)).then_some(())
    });
}
