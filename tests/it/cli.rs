//! The binary as operators run it: bad configuration is one line naming the setting and the fix,
//! with exit code 2; `serve --provider sim` starts and says where it listens.

use std::io::Write;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_captcha-gateway");

/// Runs the binary with a clean environment; returns (exit code, stderr).
fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub(crate) fn assert_config_error(args: &[&str], env: &[(&str, &str)], names: &str) {
    let (code, stderr) = run(args, env);
    assert_eq!(code, 2, "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains(names),
        "{args:?} should name {names}: {stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{stderr}"
    );
}

#[test]
fn bad_configuration_exits_2_with_one_line() {
    let sim = ["serve", "--provider", "sim", "--listen", "127.0.0.1:0"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        sim.iter().chain(extra).copied().collect()
    };
    assert_config_error(&with(&["--threads", "0"]), &[], "--threads");
    assert_config_error(&with(&["--max-concurrent", "0"]), &[], "--max-concurrent");
    assert_config_error(&with(&["--gateway-key", "short"]), &[], "--gateway-key");
    assert_config_error(
        &with(&["--redis-url", "http://u:hunter2@127.0.0.1:1"]),
        &[],
        "--redis-url",
    );
    assert_config_error(&with(&["--redis-required"]), &[], "--redis-required");
    let (_, stderr) = run(&with(&["--redis-url", "http://u:hunter2@127.0.0.1:1"]), &[]);
    assert!(
        !stderr.contains("hunter2"),
        "a password in a URL is never echoed: {stderr}"
    );
    assert_config_error(&with(&["--provider-url", "ftp://x"]), &[], "--provider-url");
    assert_config_error(
        &["serve", "--provider", "sim", "--listen", "0.0.0.0:0"],
        &[],
        "--gateway-key",
    );
    assert_config_error(
        &["serve", "--listen", "127.0.0.1:0"],
        &[],
        "CAPTCHAAI_API_KEY",
    );
    assert_config_error(&with(&[]), &[("MAX_CONCURRENT", "0")], "--max-concurrent");
    assert_config_error(
        &["simulate", "--latency", "recaptcha_v2=fast"],
        &[],
        "--latency",
    );
    assert_config_error(
        &["simulate", "--unsolvable-rate", "2"],
        &[],
        "unsolvable_rate",
    );

    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "provider = \"sim\"\nthreadz = 5").unwrap();
    let path = file.path().to_str().unwrap();
    assert_config_error(&["serve", "--config", path], &[], "threadz");
    let (code, stderr) = run(&["serve", "--provider", "warp"], &[]);
    assert_eq!(code, 2, "clap usage errors exit 2 too: {stderr}");
}

#[test]
fn pool_tables_are_checked_at_startup() {
    let pool = "[[pools]]\nsitekey = \"6Le\"\npageurl = \"https://example.com/\"\n";
    for (table, names) in [
        ("kind = \"image\"\nsize = 5", "pools[0].kind"),
        ("kind = \"recaptcha_v2\"\nsize = 0", "pools[0].size"),
        (
            "kind = \"recaptcha_v2\"\nsize = 5\ncolour = \"red\"",
            "colour",
        ),
    ] {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(
            file,
            "provider = \"sim\"\nlisten = \"127.0.0.1:0\"\n{pool}{table}"
        )
        .unwrap();
        let path = file.path().to_str().unwrap();
        assert_config_error(&["serve", "--config", path], &[], names);
    }
}

#[tokio::test]
async fn serve_with_the_simulator_starts_and_announces_its_address() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        file,
        "provider = \"sim\"\nlisten = \"127.0.0.1:0\"\n[sim]\nthreads = 7"
    )
    .unwrap();
    let (mut child, base, _stdout) =
        crate::support::fleet::spawn_serve(file.path(), &[], Stdio::null()).await;
    let res = reqwest::get(format!(
        "{base}/sim/res.php?key=0123456789abcdef0123456789abcdef&action=threadsinfo"
    ))
    .await
    .unwrap();
    let body = res.text().await.unwrap();
    let _ = child.kill().await;
    assert!(
        body.contains("\"threads\":7"),
        "the [sim] table of the config file applies: {body}"
    );
}
