//! Log lines (docs/CONFIGURATION.md "Logs"): `tracing` events to stderr, chosen by `RUST_LOG`,
//! written as text for people or as one JSON object per line for machines, and scrubbed of
//! secrets on the way out (docs/SECURITY.md "Logs").
//!
//! Owns: the log settings (format and filter, each checked like any other setting) and the
//! subscriber. Does not own what is logged: each component logs its own events; the request
//! span that carries a request id is `http::request_id`'s.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::LogArgs;
use crate::config::ConfigError;

mod redact;

pub use redact::Redactor;

/// What `RUST_LOG` is when unset: our events and every dependency's at `info` and above.
pub const DEFAULT_FILTER: &str = "info";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines, the default.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The checked log settings of one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub format: LogFormat,
    /// An `EnvFilter` directive string that parses.
    pub filter: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            filter: DEFAULT_FILTER.to_owned(),
        }
    }
}

fn bad(setting: &str, problem: String, fix: &str) -> ConfigError {
    ConfigError {
        setting: setting.to_owned(),
        problem,
        fix: fix.to_owned(),
    }
}

fn parse_format(setting: &str, value: &str) -> Result<LogFormat, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err(bad(
            setting,
            format!("{value:?} is not a log format"),
            "use `text` (human-readable) or `json` (one object per line)",
        )),
    }
}

/// The format from the flags (`--log-format`, its variable, `--log-json`) over the file's
/// `log_format` / `log_json`, and the filter from `RUST_LOG`.
pub fn settings(
    args: &LogArgs,
    file_format: Option<&str>,
    file_json: Option<bool>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<LogSettings, ConfigError> {
    let flag = args
        .log_format
        .as_deref()
        .map(|v| parse_format("--log-format (CAPTCHA_GATEWAY_LOG_FORMAT)", v))
        .transpose()?;
    if flag == Some(LogFormat::Text) && args.log_json {
        return Err(bad(
            "--log-json",
            "asks for JSON while --log-format says text".into(),
            "keep one of them",
        ));
    }
    let file = file_format
        .map(|v| parse_format("log_format", v))
        .transpose()?;
    if file == Some(LogFormat::Text) && file_json == Some(true) {
        return Err(bad(
            "log_json",
            "asks for JSON while log_format says text".into(),
            "keep one of them in the config file",
        ));
    }
    let format = flag
        .or(args.log_json.then_some(LogFormat::Json))
        .or(file)
        .or(file_json.map(|j| if j { LogFormat::Json } else { LogFormat::Text }))
        .unwrap_or_default();
    let filter = match env("RUST_LOG") {
        Some(v) if !v.trim().is_empty() => v,
        _ => DEFAULT_FILTER.to_owned(),
    };
    if let Err(e) = EnvFilter::builder().parse(&filter) {
        return Err(bad(
            "RUST_LOG",
            format!("{filter:?} is not a log filter ({e})"),
            "use a level such as `info` or `debug`, or directives such as `info,captcha_gateway=debug`",
        ));
    }
    Ok(LogSettings { format, filter })
}

/// Starts logging to stderr as `settings` say, with `secrets` (configured keys and passwords)
/// and every secret-shaped value scrubbed from each line before it is written.
pub fn init_logs(settings: &LogSettings, secrets: &[&str]) {
    // The filter was checked when the settings were loaded.
    let filter = EnvFilter::builder()
        .parse(&settings.filter)
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let writer = Redactor::new(secrets).into_stderr_writer();
    // Colours only for a person at a terminal: escape codes in a file or a log shipper are noise
    // (and would split `name=value` pairs the scrubber looks for).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer);
    // A second init (tests calling serve twice in one process) is harmless: keep the first.
    let _ = match settings.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(
        args: LogArgs,
        file: (Option<&str>, Option<bool>),
        rust_log: Option<&str>,
    ) -> Result<LogSettings, ConfigError> {
        let env = |name: &str| {
            (name == "RUST_LOG")
                .then(|| rust_log.map(str::to_owned))
                .flatten()
        };
        settings(&args, file.0, file.1, &env)
    }

    #[test]
    fn text_at_info_unless_told_otherwise() {
        assert_eq!(
            load(LogArgs::default(), (None, None), None).unwrap(),
            LogSettings::default()
        );
    }

    #[test]
    fn the_flag_wins_over_the_file() {
        let args = LogArgs {
            log_format: Some("JSON".into()),
            log_json: false,
        };
        let s = load(args, (Some("text"), None), Some("debug")).unwrap();
        assert_eq!((s.format, s.filter.as_str()), (LogFormat::Json, "debug"));
        let old_flag = LogArgs {
            log_format: None,
            log_json: true,
        };
        assert_eq!(
            load(old_flag, (None, None), None).unwrap().format,
            LogFormat::Json
        );
        assert_eq!(
            load(LogArgs::default(), (None, Some(true)), None)
                .unwrap()
                .format,
            LogFormat::Json
        );
    }

    #[test]
    fn bad_values_name_their_setting() {
        let args = LogArgs {
            log_format: Some("xml".into()),
            log_json: false,
        };
        let e = load(args, (None, None), None).unwrap_err();
        assert!(e.setting.starts_with("--log-format"), "{e}");
        let e = load(LogArgs::default(), (Some("yaml"), None), None).unwrap_err();
        assert_eq!(e.setting, "log_format");
        let e = load(
            LogArgs::default(),
            (None, None),
            Some("info,captcha_gateway=loud"),
        )
        .unwrap_err();
        assert_eq!(e.setting, "RUST_LOG");
        assert!(!e.to_string().contains('\n'), "one line: {e}");
        let both = LogArgs {
            log_format: Some("text".into()),
            log_json: true,
        };
        assert_eq!(
            load(both, (None, None), None).unwrap_err().setting,
            "--log-json"
        );
    }
}
