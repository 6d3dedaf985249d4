//! The binary as operators run it: bad configuration is one line naming the setting and the fix,
//! with exit code 2; `serve --provider sim` starts and says where it listens.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::gateway::{Launch, Stderr};

const BIN: &str = env!("CARGO_BIN_EXE_captcha-gateway");

/// Runs the binary with a clean environment; returns (exit code, stderr).
pub(crate) fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
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
    assert_config_error(&with(&["--warmup-s", "3601"]), &[], "--warmup-s");
    assert_config_error(&with(&["--warmup-s=-1"]), &[], "--warmup-s");
    assert_config_error(&with(&[]), &[("WARMUP_S", "NaN")], "--warmup-s");
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
    for hostile in ["0", "-1", "1e9", "99999999999999999999"] {
        let flag = format!("--concurrency={hostile}");
        let (code, stderr) = run(&["bench", "seed-stack", &flag], &[]);
        assert_eq!(code, 2, "--concurrency {hostile}: {stderr}");
        assert!(stderr.contains("--concurrency"), "{stderr}");
    }
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

#[test]
fn account_tables_are_checked_at_startup() {
    let sim = "[[accounts]]\nname = \"local\"\nprovider = \"sim\"\n";
    for (extra, env, names) in [
        (
            "[[accounts]]\nname = \"main\"\nprovider = \"captchaai\"\nkey = \"KeyWrittenInTheFile\"\n",
            &[][..],
            "accounts.main.key",
        ),
        (
            "[[accounts]]\nname = \"main\"\nprovider = \"captchaai\"\nkey_env = \"MAIN_KEY\"\n",
            &[][..],
            "accounts.main.key_env",
        ),
        (
            "[[accounts]]\nname = \"local\"\nprovider = \"sim\"\n",
            &[][..],
            "accounts.local: the name is used twice",
        ),
        (
            "[[accounts]]\nname = \"ac\"\nprovider = \"anticaptcha\"\nkey_env = \"AC_KEY\"\nweight = 0\n",
            &[("AC_KEY", "0123456789abcdef0123456789abcdef")][..],
            "accounts.ac.weight",
        ),
        ("threads = 5\n", &[][..], "--threads"),
    ] {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        // Top-level settings before the tables.
        let (top, tables) = if extra.starts_with("[[") {
            (String::new(), format!("{sim}{extra}"))
        } else {
            (extra.to_owned(), sim.to_owned())
        };
        writeln!(file, "{top}listen = \"127.0.0.1:0\"\n{tables}").unwrap();
        let path = file.path().to_str().unwrap();
        assert_config_error(&["serve", "--config", path], env, names);
        let (_, stderr) = run(&["serve", "--config", path], env);
        assert!(!stderr.contains("KeyWrittenInTheFile"), "{stderr}");
    }
}

#[tokio::test]
async fn serve_with_the_simulator_starts_and_announces_its_address() {
    let mut gateway =
        Launch::serve("provider = \"sim\"\nlisten = \"127.0.0.1:0\"\n[sim]\nthreads = 7\n")
            .stderr(Stderr::Null)
            .start()
            .await;
    let base = gateway.base.clone();
    let res = reqwest::get(format!(
        "{base}/sim/res.php?key=0123456789abcdef0123456789abcdef&action=threadsinfo"
    ))
    .await
    .unwrap();
    let body = res.text().await.unwrap();
    gateway.kill().await;
    assert!(
        body.contains("\"threads\":7"),
        "the [sim] table of the config file applies: {body}"
    );
}

#[tokio::test]
async fn serve_with_account_tables_lists_every_account_in_health() {
    let mut gateway = Launch::serve(
        "listen = \"127.0.0.1:0\"\n\
         [[accounts]]\nname = \"first\"\nprovider = \"sim\"\nthreads = 3\n\
         [[accounts]]\nname = \"second\"\nprovider = \"sim\"\nthreads = 4\nweight = 2\nkinds = [\"image\"]\n",
    )
    .stderr(Stderr::Null)
    .start()
    .await;
    let base = gateway.base.clone();
    let health: serde_json::Value = reqwest::get(format!("{base}/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    gateway.kill().await;
    let accounts = health["accounts"].as_array().expect("accounts in /health");
    let row = |name: &str| {
        accounts
            .iter()
            .find(|a| a["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {health}"))
    };
    assert_eq!(row("first")["threads"], 3);
    assert_eq!(row("second")["threads"], 4);
    assert_eq!(row("second")["provider"], "sim");
    assert_eq!(row("first")["state"], "closed");
    assert_eq!(row("first")["in_flight"], 0);
}
