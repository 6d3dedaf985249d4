//! Log lines (docs/CONFIGURATION.md "Logs"): `tracing` events to stderr, chosen by `RUST_LOG`,
//! written as text for people or as one JSON object per line for machines, and scrubbed of
//! secrets on the way out (docs/SECURITY.md "Logs").
//!
//! Owns: the log settings (format and filter, each checked like any other setting; `config`
//! chooses between flags, file and environment) and the subscriber. Does not own what is logged: each component logs its own events; the request
//! span that carries a request id is `request_id`'s.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::setting::{ConfigError, bad};

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

impl LogFormat {
    /// Reads a format's name, reporting a bad one as `setting`.
    pub fn parse(setting: &str, value: &str) -> Result<Self, ConfigError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(bad(
                setting,
                format!("{value:?} is not a log format"),
                "use `text` (human-readable) or `json` (one object per line)",
            )),
        }
    }
}

/// The filter `RUST_LOG` gives, or [`DEFAULT_FILTER`] when it is unset or blank; checked here so
/// a bad one is a configuration error, not a silent default.
pub fn filter(rust_log: Option<String>) -> Result<String, ConfigError> {
    let filter = match rust_log {
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
    Ok(filter)
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
