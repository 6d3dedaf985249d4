//! The shipped alert rules and Grafana dashboard, checked without a live gateway: promtool
//! accepts the rules, their unit tests and the sample scrape configuration; every alert says
//! what to do and links a section of docs/OPERATIONS.md that exists; the dashboard is JSON
//! Grafana imports (datasource as an input, unique panel ids, every variable it uses defined)
//! and every query in it is PromQL that Prometheus parses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs promtool with `args` in `dir`; panics with its output unless it succeeds.
fn promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool on PATH (scripts/test installs the prometheus package)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{said}");
    said
}

/// A YAML file as JSON, read by PyYAML in the test virtualenv (no YAML crate in the build).
pub fn yaml(path: &Path) -> Value {
    let out = Command::new(crate::clients::python())
        .args([
            "-c",
            "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)",
        ])
        .arg(path)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "reading {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("PyYAML prints JSON")
}

/// Every alerting rule of deploy/prometheus/alerts.yml.
pub fn alert_rules() -> Vec<Value> {
    let rules = yaml(&repo().join("deploy/prometheus/alerts.yml"));
    let groups = rules["groups"].as_array().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

pub fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo().join("deploy/grafana/captcha-gateway.json"))
        .expect("the dashboard exists");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(nested) = p["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

/// Every PromQL expression of the dashboard: panel targets, then variable queries.
pub fn dashboard_queries(dashboard: &Value) -> (Vec<String>, Vec<String>) {
    let exprs = panels(dashboard)
        .iter()
        .filter_map(|p| p["targets"].as_array())
        .flatten()
        .map(|t| t["expr"].as_str().expect("a target has expr").to_owned())
        .collect();
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let q = &v["query"];
            q["query"]
                .as_str()
                .or(q.as_str())
                .expect("a query")
                .to_owned()
        })
        .collect();
    (exprs, variables)
}

/// The PromQL of docs/OPERATIONS.md's ```promql blocks: one query a line, `#` lines are
/// comments, an indented line continues the one before.
pub fn operations_queries() -> Vec<String> {
    let page = std::fs::read_to_string(repo().join("docs/OPERATIONS.md")).unwrap();
    let mut out: Vec<String> = Vec::new();
    let mut inside = false;
    for line in page.lines() {
        if line.starts_with("```") {
            inside = line == "```promql";
            continue;
        }
        if !inside || line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        match out.last_mut() {
            Some(last) if line.starts_with(' ') => {
                last.push(' ');
                last.push_str(line.trim());
            }
            _ => out.push(line.trim().to_owned()),
        }
    }
    out
}

/// `promtool check rules` on `exprs` as recording rules: Prometheus' own parser reads each.
fn check_parses(exprs: &[String]) {
    let mut file = String::from("groups:\n  - name: queries\n    rules:\n");
    for (i, expr) in exprs.iter().enumerate() {
        let expr = serde_json::to_string(expr).unwrap();
        file.push_str(&format!(
            "      - record: query:{i}\n        expr: {expr}\n"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("queries.yml"), &file).unwrap();
    let said = promtool(dir.path(), &["check", "rules", "queries.yml"]);
    assert!(
        said.contains(&format!("{} rules found", exprs.len())),
        "{said}"
    );
}

/// The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let dir = repo().join("deploy/prometheus");
    let checked = promtool(&dir, &["check", "rules", "alerts.yml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&dir, &["test", "rules", "alerts_test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Checked where it would run: beside its rules and the operations key file it reads (its
    // content is the operator's; promtool wants the file to exist).
    let deployed = tempfile::tempdir().unwrap();
    for file in ["prometheus.yml", "alerts.yml"] {
        std::fs::copy(dir.join(file), deployed.path().join(file)).unwrap();
    }
    std::fs::write(
        deployed.path().join("captcha-gateway-ops.key"),
        "ops-key-of-the-operator-0123\n",
    )
    .unwrap();
    promtool(deployed.path(), &["check", "config", "prometheus.yml"]);
}

#[test]
fn every_alert_says_what_to_do_links_its_runbook_and_is_unit_tested() {
    let operations = std::fs::read_to_string(repo().join("docs/OPERATIONS.md"))
        .expect("docs/OPERATIONS.md exists");
    let anchors: BTreeSet<String> = operations
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect();
    let rules = alert_rules();
    assert!(rules.len() >= 9, "{} rules", rules.len());
    let mut names = BTreeSet::new();
    for rule in &rules {
        let name = rule["alert"].as_str().expect("alerting rules only");
        assert!(names.insert(name.to_owned()), "{name} twice");
        let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        let notes = &rule["annotations"];
        for field in ["summary", "description"] {
            let text = notes[field].as_str().unwrap_or_default();
            assert!(text.len() > 20, "{name}: {field} {text:?}");
        }
        let runbook = notes["runbook_url"].as_str().unwrap_or_default();
        let section = runbook
            .strip_prefix("docs/OPERATIONS.md#")
            .unwrap_or_else(|| panic!("{name}: runbook_url {runbook:?}"));
        assert!(
            anchors.contains(section),
            "{name}: docs/OPERATIONS.md has no heading with anchor #{section}"
        );
    }

    // Each alert has an eval where it fires and one where nothing does; promtool compares the
    // whole set of alerts at each, so the series beside the firing one are checked not to fire.
    let tests = yaml(&repo().join("deploy/prometheus/alerts_test.yml"));
    let mut seen: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for case in tests["tests"].as_array().expect("tests") {
        for eval in case["alert_rule_test"].as_array().expect("alert_rule_test") {
            let name = eval["alertname"].as_str().unwrap().to_owned();
            let fires = eval["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
            let entry = seen.entry(name).or_default();
            if fires {
                entry.0 = true;
            } else {
                entry.1 = true;
            }
        }
    }
    for name in &names {
        assert_eq!(
            seen.get(name),
            Some(&(true, true)),
            "{name}: alerts_test.yml needs an eval where it fires and one where it does not"
        );
    }
}

#[test]
fn the_grafana_dashboard_is_importable() {
    let d = dashboard();
    let inputs = d["__inputs"].as_array().expect("__inputs");
    assert!(
        inputs
            .iter()
            .any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"),
        "{inputs:?}"
    );
    assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(d["id"].is_null(), "an exported dashboard carries no id");

    let mut ids = BTreeSet::new();
    let mut drawn = 0;
    for p in panels(&d) {
        let id = p["id"].as_u64().expect("a numeric panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        let pos = &p["gridPos"];
        let (x, w) = (pos["x"].as_u64().unwrap(), pos["w"].as_u64().unwrap());
        assert!(x + w <= 24 && pos["h"].as_u64().unwrap() > 0, "{pos}");
        if p["type"] == "row" {
            continue;
        }
        drawn += 1;
        let title = p["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "panel {id} has no title");
        assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title} queries nothing");
        let ref_ids: BTreeSet<_> = targets.iter().filter_map(|t| t["refId"].as_str()).collect();
        assert_eq!(ref_ids.len(), targets.len(), "{title}: refIds repeat");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
        }
    }
    assert!(drawn >= 20, "{drawn} panels");

    // Every `$variable` a query uses is defined (Grafana's own `$__...` aside), and variables'
    // own queries use the datasource input too.
    let defined: BTreeSet<String> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|v| assert_eq!(v["datasource"]["uid"], "${DS_PROMETHEUS}", "{v}"))
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect();
    let (exprs, variables) = dashboard_queries(&d);
    for q in exprs.iter().chain(&variables) {
        for (at, _) in q.match_indices('$') {
            let name: String = q[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                name.starts_with("__") || defined.contains(&name),
                "${name} is not a variable of the dashboard: {q}"
            );
        }
    }
}

/// A dashboard query as Prometheus receives it: Grafana's variables replaced by what "All"
/// and a 15 s scrape interval give.
pub fn as_prometheus_sees_it(expr: &str) -> String {
    let mut out = expr
        .replace("$__rate_interval", "1m")
        .replace("$__interval", "15s")
        .replace("$__range", "1h");
    for name in [
        "job", "instance", "kind", "target", "account", "queue", "tenant",
    ] {
        out = out.replace(&format!("${name}"), ".*");
    }
    out
}

#[test]
fn every_dashboard_query_is_promql_that_prometheus_parses() {
    let (exprs, _) = dashboard_queries(&dashboard());
    let exprs: Vec<String> = exprs.iter().map(|e| as_prometheus_sees_it(e)).collect();
    check_parses(&exprs);
}

#[test]
fn every_query_of_the_operations_guide_is_promql_that_prometheus_parses() {
    let queries = operations_queries();
    assert!(queries.len() >= 8, "{queries:?}");
    check_parses(&queries);
}

#[test]
fn the_anchor_reader_matches_github() {
    assert_eq!(
        anchor(" CaptchaGatewayQueueLagGrowing"),
        "captchagatewayqueuelaggrowing"
    );
    assert_eq!(
        anchor("Sizing threads: arrivals x solve time"),
        "sizing-threads-arrivals-x-solve-time"
    );
}
