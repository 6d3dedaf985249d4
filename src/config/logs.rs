//! The log settings of a command: its flags over the config file's, and `RUST_LOG`.

use crate::cli::LogArgs;
use crate::setting::{ConfigError, bad};
use crate::telemetry::logs::{self, LogFormat, LogSettings};

/// The format from the flags (`--log-format`, its variable, `--log-json`) over the file's
/// `log_format` / `log_json`, and the filter from `RUST_LOG`.
pub fn log_settings(
    args: &LogArgs,
    file_format: Option<&str>,
    file_json: Option<bool>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<LogSettings, ConfigError> {
    let flag = args
        .log_format
        .as_deref()
        .map(|v| LogFormat::parse("--log-format (CAPTCHA_GATEWAY_LOG_FORMAT)", v))
        .transpose()?;
    if flag == Some(LogFormat::Text) && args.log_json {
        return Err(bad(
            "--log-json",
            "asks for JSON while --log-format says text",
            "keep one of them",
        ));
    }
    let file = file_format
        .map(|v| LogFormat::parse("log_format", v))
        .transpose()?;
    if file == Some(LogFormat::Text) && file_json == Some(true) {
        return Err(bad(
            "log_json",
            "asks for JSON while log_format says text",
            "keep one of them in the config file",
        ));
    }
    let format = flag
        .or(args.log_json.then_some(LogFormat::Json))
        .or(file)
        .or(file_json.map(|j| if j { LogFormat::Json } else { LogFormat::Text }))
        .unwrap_or_default();
    let filter = logs::filter(env("RUST_LOG"))?;
    Ok(LogSettings { format, filter })
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
        log_settings(&args, file.0, file.1, &env)
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
