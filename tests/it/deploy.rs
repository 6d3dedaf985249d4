//! The deployment files (deploy/k8s, compose.yaml, Dockerfile), checked without a cluster or a
//! Docker engine: every Kubernetes object against the official schemas (kubernetes-validate,
//! strict), the KEDA objects against the fields KEDA reads, names, ports, the stream and the
//! consumer group across files and against what the workers use, the NetworkPolicies against the
//! pods and ports they name, the Docker build context against what cargo reads (deploy_image.rs
//! builds from it), the command lines against the binary's own `--help`, and the TOML files
//! against the real settings loader. The checks live in tests/python/validate_deploy.py and its
//! deploycheck/ modules; the values they must agree on live here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use captcha_gateway::cli::ServeArgs;
use captcha_gateway::config;

use crate::clients::python;

const BIN: &str = env!("CARGO_BIN_EXE_captcha-gateway");

/// What every deployment file must agree on, in one place: the queue's name, and the stream and
/// group `captcha-gateway worker` reads, from the queue module itself.
const QUEUE: &str = "captcha";
pub(crate) fn stream() -> String {
    captcha_gateway::queue::keys::QueueKeys::new(QUEUE).tasks()
}
pub(crate) const GROUP: &str = captcha_gateway::queue::keys::GROUP;
const GATEWAY_PORT: u16 = 8080;
const WORKER_PORT: u16 = 9090;
/// The gateway's operations port (`--ops-listen`): the worker's shape.
const OPS_PORT: u16 = 9090;
/// The workers' longest retry delay by default (`[queue] retry_cap_s`): KEDA's cooldown must
/// outlast it.
fn retry_cap_s() -> f64 {
    captcha_gateway::queue::QueueSettings::default()
        .retry_cap
        .as_secs_f64()
}

fn expected() -> Value {
    json!({
        "queue": QUEUE,
        "stream": stream(),
        "group": GROUP,
        "gateway_port": GATEWAY_PORT,
        "worker_port": WORKER_PORT,
        "ops_port": OPS_PORT,
        "retry_cap_s": retry_cap_s(),
        // The Secrets the pods and KEDA read, and their keys: docs/DEPLOY.md creates each.
        "secrets": {
            "captcha-gateway-provider": ["api-key"],
            "captcha-gateway-redis": ["password"],
            "captcha-gateway-clients": ["keys"],
            "captcha-gateway-ops": ["key"],
        },
    })
}

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs one section of validate_deploy.py against the files under `root`.
pub(crate) fn section(root: &Path, name: &str) -> Value {
    section_with(root, name, &[])
}

/// Runs one section of validate_deploy.py with the section's own further arguments.
pub(crate) fn section_with(root: &Path, name: &str, more: &[&Path]) -> Value {
    let out = Command::new(python())
        .arg(repo().join("tests/python/validate_deploy.py"))
        .arg(root)
        .arg(name)
        .arg(expected().to_string())
        .args(more)
        // No __pycache__ written into the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "validate_deploy.py {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("validate_deploy.py prints JSON")
}

pub(crate) fn errors(report: &Value) -> Vec<String> {
    report["errors"]
        .as_array()
        .expect("an errors list")
        .iter()
        .map(|e| e.as_str().expect("each error is a line").to_owned())
        .collect()
}

fn assert_clean(name: &str) {
    let errors = errors(&section(&repo(), name));
    assert!(errors.is_empty(), "{name}:\n{}", errors.join("\n"));
}

#[test]
fn kubernetes_objects_pass_the_official_schemas_and_agree_across_files() {
    assert_clean("k8s");
}

#[test]
fn keda_objects_use_only_keda_fields_and_the_workers_stream_and_group() {
    assert_clean("keda");
}

#[test]
fn compose_services_ports_and_commands_agree_with_the_contract() {
    assert_clean("compose");
}

#[test]
fn dockerfile_is_multi_stage_non_root_and_copies_what_the_build_reads() {
    assert_clean("docker");
}

/// The long flags `captcha-gateway <sub> --help` lists; `None` when this binary has no such
/// subcommand.
fn help_flags(sub: &str) -> Option<BTreeSet<String>> {
    let out = Command::new(BIN)
        .args([sub, "--help"])
        .output()
        .expect("the binary runs");
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("unrecognized subcommand"),
            "{sub} --help failed: {stderr}"
        );
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(str::to_owned)
            .collect(),
    )
}

/// The long flags of one command line (`--name=value` or `--name value`).
fn flags_of(argv: &[Value]) -> Vec<String> {
    argv.iter()
        .filter_map(Value::as_str)
        .filter(|a| a.starts_with("--"))
        .map(|a| a.split('=').next().unwrap_or(a).to_owned())
        .collect()
}

#[test]
fn deploy_command_lines_use_only_flags_the_binary_has() {
    let facts = section(&repo(), "facts");
    let commands = facts["commands"].as_array().expect("a command list");
    assert!(
        commands.len() >= 6,
        "the gateway, worker and simulator command lines of deploy/k8s, compose.yaml and the Dockerfile: {commands:?}"
    );
    let mut problems = Vec::new();
    for command in commands {
        let argv = command["argv"].as_array().expect("argv");
        let sub = argv[0].as_str().expect("a subcommand");
        let place = command["where"].as_str().unwrap_or("?");
        let Some(help) = help_flags(sub) else {
            problems.push(format!("{place}: the binary has no `{sub}` command"));
            continue;
        };
        for flag in flags_of(argv) {
            if !help.contains(&flag) {
                problems.push(format!("{place}: `{sub} {flag}` is not in `{sub} --help`"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn deploy_config_files_load_as_settings() {
    let facts = section(&repo(), "facts");
    let configs = facts["configs"].as_array().expect("a config list");
    assert!(
        configs.len() >= 4,
        "the ConfigMap read by the gateway and worker pods, compose's file read by the gateway and workers: {configs:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    for (i, c) in configs.iter().enumerate() {
        let place = c["where"].as_str().unwrap_or("?");
        let path = dir.path().join(format!("{i}.toml"));
        std::fs::write(&path, c["toml"].as_str().expect("TOML text")).unwrap();
        // Only the variables the container really gets: a `key_env` naming any other fails.
        let env_names: BTreeSet<String> = c["env"]
            .as_array()
            .expect("env names")
            .iter()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect();
        let env = |name: &str| {
            env_names
                .contains(name)
                .then(|| "0123456789abcdef0123456789abcdef".to_owned())
        };
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        let settings = config::load_serve(&args, &env)
            .unwrap_or_else(|e| panic!("{place}: the config does not load: {e}"));
        assert!(
            !settings.accounts.is_empty(),
            "{place}: the plan's threads are in an [[accounts]] table"
        );
    }
}

/// A copy of the files the checks read, so they can be broken. The source folders are copied
/// too, not linked: Docker sends a link as a link, and the build context check walks them.
fn scratch_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = repo();
    for file in [
        "compose.yaml",
        "Dockerfile",
        ".dockerignore",
        "README.md",
        "Cargo.toml",
        "Cargo.lock",
        "docs/DEPLOY.md",
        "docs/openapi.json",
        "tests/python/keda_fields.schema.json",
        "deploy/compose/gateway.toml",
    ] {
        let to = dir.path().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root.join(file), &to).unwrap();
    }
    let k8s = dir.path().join("deploy/k8s");
    std::fs::create_dir_all(&k8s).unwrap();
    for entry in std::fs::read_dir(root.join("deploy/k8s")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), k8s.join(entry.file_name())).unwrap();
    }
    for folder in ["src", "lua", "balance", "benches", "client"] {
        copy_tree(&root.join(folder), &dir.path().join(folder));
    }
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// Replaces `from` (which must be there) by `to` in one copied file.
fn break_file(root: &Path, file: &str, from: &str, to: &str) {
    let path = root.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} has no {from:?} to break");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
}

/// Each check can fail: a copy of the files with eighteen typical mistakes, each reported by
/// name.
#[test]
fn the_checks_report_a_broken_deployment() {
    let dir = scratch_copy();
    let root = dir.path();
    // A stray secret beside the sources, for the .dockerignore mistake below to let in.
    std::fs::write(root.join(".env"), "CAPTCHAAI_API_KEY=x\n").unwrap();
    for section_name in ["k8s", "keda", "compose", "docker"] {
        let clean = errors(&section(root, section_name));
        assert!(clean.is_empty(), "the unbroken copy passes: {clean:?}");
    }
    let mistakes: &[(&str, &str, &str, &str, &str)] = &[
        // (section, file, from, to, what the report must say)
        (
            "keda",
            "deploy/k8s/keda.yaml",
            "stream: \"cg:q:{captcha}:tasks\"",
            "stream: \"cg:q:{captcha}:task\"",
            "stream 'cg:q:{captcha}:task'",
        ),
        (
            "keda",
            "deploy/k8s/keda.yaml",
            "pollingInterval: 15",
            "pollInterval: 15",
            "KEDA v2.20 fields",
        ),
        (
            "keda",
            "deploy/k8s/keda.yaml",
            "cooldownPeriod: 300",
            "cooldownPeriod: 30",
            "must exceed the longest retry delay 60",
        ),
        (
            "keda",
            "deploy/k8s/config.yaml",
            "threads = 15",
            "threads = 16",
            "ceil(plan threads 16 / --concurrency 5) = 4",
        ),
        (
            "k8s",
            "deploy/k8s/worker.yaml",
            "readOnlyRootFilesystem: true",
            "readOnlyRootFileSystem: true",
            "Kubernetes 1.30.0 schema",
        ),
        (
            "k8s",
            "deploy/k8s/gateway.yaml",
            "targetPort: http",
            "targetPort: web",
            "targetPort web is no containerPort",
        ),
        (
            "k8s",
            "deploy/k8s/kustomization.yaml",
            "  - disruption.yaml\n",
            "",
            "does not list disruption.yaml",
        ),
        (
            "k8s",
            "deploy/k8s/worker.yaml",
            "$(REDIS_PASSWORD)@captcha-redis",
            "hunter2@captcha-redis",
            "REDIS_URL holds a literal password",
        ),
        (
            "k8s",
            "deploy/k8s/gateway.yaml",
            "              path: /livez\n              port: ops",
            "              path: /livez\n              port: http",
            "startupProbe must probe the operations port 9090",
        ),
        (
            "k8s",
            "deploy/k8s/worker.yaml",
            "--grace-s=50",
            "--grace-s=70",
            "must exceed --grace-s 70",
        ),
        (
            "compose",
            "compose.yaml",
            "--listen=0.0.0.0:9090",
            "--listen=0.0.0.0:9091",
            "the contract says 9090",
        ),
        (
            "docker",
            "Dockerfile",
            "USER 65532:65532",
            "USER root",
            "USER root is root",
        ),
        (
            "docker",
            "Dockerfile",
            "COPY lua lua\n",
            "",
            "the build reads lua/lib/clock.lua (include_str!) but no COPY brings it",
        ),
        (
            "docker",
            "Dockerfile",
            "COPY client client\n",
            "",
            "the build reads client/Cargo.toml (workspace member client) but no COPY brings it",
        ),
        (
            "docker",
            ".dockerignore",
            "!balance/benches\n",
            "",
            "the build reads balance/benches/select.rs (the [[bench]] select of balance/Cargo.toml)",
        ),
        (
            "docker",
            ".dockerignore",
            "!Cargo.lock\n",
            "!Cargo.lock\n!.env\n",
            "lets .env into the build context",
        ),
        (
            "k8s",
            "deploy/k8s/network.yaml",
            "              app.kubernetes.io/component: worker\n        - namespaceSelector",
            "              app.kubernetes.io/component: workers\n        - namespaceSelector",
            "'app.kubernetes.io/component': 'workers'}} selects no pods of deploy/k8s",
        ),
        (
            "k8s",
            "deploy/k8s/network.yaml",
            "        - port: http\n",
            "        - port: metrics\n",
            "port metrics/TCP is no containerPort of Deployment/captcha-gateway",
        ),
    ];
    for (_, file, from, to, _) in mistakes {
        break_file(root, file, from, to);
    }
    let mut missed = Vec::new();
    for section_name in ["k8s", "keda", "compose", "docker"] {
        let reported = errors(&section(root, section_name)).join("\n");
        for (s, file, _, _, says) in mistakes {
            if *s == section_name && !reported.contains(says) {
                missed.push(format!("{file}: expected {says:?} in:\n{reported}"));
            }
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n\n"));
}
