//! The config loader: TOML text -> validated `serve` settings, through the same path as
//! `--config FILE` (the text is written to a scratch file per process).
//!
//! Inputs naming `provider_key_file` are skipped: the loader reads whatever file the operator
//! names, and a fuzzer naming `/dev/zero` would only measure the disk.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use captcha_gateway::cli::ServeArgs;
use captcha_gateway::config::load_serve;
use libfuzzer_sys::fuzz_target;

fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("captcha-gateway-fuzz-{}.toml", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.contains("provider_key_file") {
        return;
    }
    std::fs::write(scratch(), text).expect("scratch file");
    let args = ServeArgs {
        config: Some(scratch().clone()),
        ..ServeArgs::default()
    };
    if let Err(e) = load_serve(&args, &|_| None) {
        let line = e.to_string();
        assert!(!line.contains('\n'), "a config error spans lines: {line}");
        assert!(!e.setting.is_empty() && !e.fix.is_empty());
    }
});
