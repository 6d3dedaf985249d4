//! The image's build stage without a Docker engine: the build context laid out as `docker build`
//! sends it (.dockerignore with Docker's pattern rules), the build stage's COPY lines applied to
//! it in order, then the build stage's own cargo command run there, offline, against the
//! registry already on this machine. A file the build needs that the context or the COPY lines
//! leave out fails here as it would fail in `docker build` (and in `docker compose up --build`).
//! The layout is tests/python/deploycheck/context.py's, the one the static `docker` checks read.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::deploy::{errors, repo, section, section_with};

/// Where the build stage is laid out: under the test target's own scratch folder, at a fixed
/// path, so the context's own crates checked by one run serve the next (a new path would leave
/// a new copy of their artifacts behind each time).
fn stage_root() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("docker-build-stage")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().expect("strings").to_owned())
        .collect()
}

/// Lays out the build stage of the Dockerfile under `root` into `out` (emptied first).
fn lay_out(root: &Path, out: &Path) -> Value {
    if out.exists() {
        std::fs::remove_dir_all(out).unwrap();
    }
    std::fs::create_dir_all(out).unwrap();
    section_with(root, "image", &[out])
}

/// The Dockerfile's `cargo build --release --locked --bin captcha-gateway`, checked in the
/// laid-out context with `cargo check --locked --offline` over every workspace member's
/// library, binaries and benches. Check, not build: cargo loads the same manifests, resolves
/// the same lock file, runs the same build scripts and expands the same `include_str!`, so it
/// needs exactly the files a build needs (the targets checked are a superset of the image's
/// one binary); only code generation and linking are left out, and they read nothing from the
/// source tree. In the dev profile and the repository's own `target/`, with the features the
/// test command's `cargo clippy --workspace --all-targets` resolved, so the registry crates
/// clippy checked serve here: only the context's own crates are checked (about 50 CPU-seconds,
/// where the release profile in a folder of its own checked every dependency again, 2.5
/// CPU-minutes on every fresh clone).
#[test]
fn docker_build_stage_compiles_offline_from_the_build_context() {
    let base = stage_root();
    let fs = base.join("fs");
    let report = lay_out(&repo(), &fs);
    let problems = errors(&report);
    assert!(problems.is_empty(), "the build stage: {problems:?}");
    let argv = strings(&report["cargo"]);
    assert_eq!(
        argv.get(..2),
        Some(&["cargo".to_owned(), "build".to_owned()][..]),
        "the build stage runs `cargo build ...`: {argv:?}"
    );
    for wanted in [&["--locked"][..], &["--bin", "captcha-gateway"]] {
        assert!(
            argv.windows(wanted.len()).any(|w| w == wanted),
            "the build stage builds the binary from the lock file ({wanted:?}): {argv:?}"
        );
    }
    let workdir = report["workdir"].as_str().expect("a WORKDIR");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target folder holds its tmp folder");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let check = [
        "check",
        "--locked",
        "--offline",
        "--workspace",
        "--lib",
        "--bins",
        "--benches",
    ];
    let out = Command::new(cargo)
        .args(check)
        .current_dir(fs.join(workdir.trim_start_matches('/')))
        .env("CARGO_TARGET_DIR", target)
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "`cargo {}` in the build stage's {workdir} failed, as `docker build` would:\n{}",
        check.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes `files` (relative paths) under a new folder with this .dockerignore.
fn tree(dockerignore: &str, files: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".dockerignore"), dockerignore).unwrap();
    for f in files {
        let path = dir.path().join(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, f).unwrap();
    }
    dir
}

/// Docker's rules, not .gitignore's: `*` stays within a folder, `**` crosses any number of
/// them, a pattern that takes a folder takes what is under it, `!` takes a path back, the last
/// pattern that matches wins, a leading `/` or `./` means the context's top.
#[test]
fn the_deploy_context_follows_dockers_ignore_rules() {
    let files = [
        "Cargo.toml",
        "README.md",
        "docs/a.md",
        "docs/openapi.json",
        "src/main.rs",
        "src/keys/dev.pem",
        "src/deep/er/x.pem",
        "target/debug/big",
        "crate/target/x",
        "crate/src/lib.rs",
        "a/b",
        "a/x/y/b",
        "a/x/c",
    ];
    let dockerignore = "\
# a comment, then patterns
*
!Cargo.toml
!/src
**/*.pem
!src/keys/dev.pem
!docs
!./crate
crate/target
!a/**/b
!README.md
*.md
";
    let dir = tree(dockerignore, &files);
    let got = strings(&section(dir.path(), "context")["context"]);
    // README.md: taken back, then dropped by the later `*.md`; docs/a.md: `*.md` matches only
    // at the top (neither the path nor its folder `docs` matches it).
    let want = [
        "Cargo.toml",
        "a/b",
        "a/x/y/b",
        "crate/src/lib.rs",
        "docs/a.md",
        "docs/openapi.json",
        "src/keys/dev.pem",
        "src/main.rs",
    ];
    assert_eq!(got, want);
}

/// COPY as Docker applies it: a folder's contents into the destination, a file into a folder
/// destination by its name or onto a file destination, several sources into a folder, a wildcard,
/// a relative destination under WORKDIR; `COPY --from` and the runtime stage's lines are not the
/// build context's.
#[test]
fn the_deploy_build_stage_applies_copy_lines_in_order() {
    let dir = tree(
        "*\n!Cargo.toml\n!Cargo.lock\n!src\n!conf\n!extra\n",
        &[
            "Cargo.toml",
            "Cargo.lock",
            "src/main.rs",
            "src/nested/mod.rs",
            "conf/a.toml",
            "conf/b.toml",
            "conf/c.txt",
            "extra/x",
            "left/out",
        ],
    );
    let dockerfile = "\
# syntax=docker/dockerfile:1
FROM rust:1-bookworm AS build
WORKDIR /work
WORKDIR app
COPY Cargo.toml Cargo.lock ./
COPY src code
COPY conf/*.toml settings/
COPY extra/x renamed
COPY --from=tools /bin/tool /usr/bin/tool
RUN --mount=type=cache,target=/usr/local/cargo/registry \\
    cargo build --release --locked \\
    && cp target/release/app /out/app

FROM debian:12-slim
COPY --from=build /out/app /app
COPY src /elsewhere
";
    std::fs::write(dir.path().join("Dockerfile"), dockerfile).unwrap();
    let out = tempfile::tempdir().unwrap();
    let report = lay_out(dir.path(), out.path());
    assert!(errors(&report).is_empty(), "{report}");
    assert_eq!(report["workdir"], "/work/app");
    assert_eq!(
        strings(&report["cargo"]),
        ["cargo", "build", "--release", "--locked"]
    );
    assert_eq!(
        strings(&report["copied"]),
        [
            "/work/app/Cargo.lock",
            "/work/app/Cargo.toml",
            "/work/app/code/main.rs",
            "/work/app/code/nested/mod.rs",
            "/work/app/renamed",
            "/work/app/settings/a.toml",
            "/work/app/settings/b.toml",
        ]
    );
    let renamed = std::fs::read_to_string(out.path().join("work/app/renamed")).unwrap();
    assert_eq!(renamed, "extra/x", "the file's content, under its new name");
    assert!(!out.path().join("elsewhere").exists());

    // A source the context leaves out is what `docker build` stops on.
    std::fs::write(
        dir.path().join("Dockerfile"),
        dockerfile.replace("COPY extra/x renamed", "COPY left renamed"),
    )
    .unwrap();
    let report = lay_out(dir.path(), out.path());
    assert_eq!(
        errors(&report),
        ["COPY left: not in the build context (.dockerignore or missing)"]
    );
}
