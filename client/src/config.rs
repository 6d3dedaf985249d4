//! What a [`crate::Client`] is made with, and the checks that turn a bad setting into one
//! sentence naming it and the fix, before any call is made.

use std::fmt;
use std::time::Duration;

use captcha_gateway_balance::{EjectionPolicy, Strategy};

/// A setting that cannot work: which one, and what to do instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {problem}")]
pub struct ConfigError {
    /// The builder method (or Python keyword) that was given the value.
    pub setting: &'static str,
    /// What is wrong and the fix.
    pub problem: String,
}

fn bad(setting: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        setting,
        problem: problem.into(),
    }
}

/// Every setting of a client. Built with [`crate::Client::builder`].
#[derive(Clone)]
pub(crate) struct Config {
    /// Base URLs (`http://host:port`, no trailing slash), in the order given.
    pub backends: Vec<String>,
    /// The gateway key, sent as `Authorization: Bearer`. Never printed.
    pub key: Option<String>,
    pub strategy: Strategy,
    pub ejection: EjectionPolicy,
    /// Attempts of one call, the first included.
    pub max_attempts: u32,
    /// Retry `n` waits a random time below `min(retry_cap, retry_base * 2^(n-1))`.
    pub retry_base: Duration,
    pub retry_cap: Duration,
    /// `None`: no active probes, passive ejection only.
    pub probe_interval: Option<Duration>,
    pub probe_timeout: Duration,
    pub connect_timeout: Duration,
    /// Added to a call's own wait (`timeout_s`, `wait`) for the whole HTTP exchange.
    pub response_margin: Duration,
    /// Seeds power-of-two-choices draws and retry jitter.
    pub seed: u64,
    /// Solves and submits without the caller's own key get a generated one, so a call whose
    /// gateway died after it was sent can be sent to another (docs/CLIENTS.md).
    pub generated_keys: bool,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("backends", &self.backends)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("strategy", &self.strategy)
            .field("ejection", &self.ejection)
            .field("max_attempts", &self.max_attempts)
            .field("probe_interval", &self.probe_interval)
            .field("generated_keys", &self.generated_keys)
            .finish_non_exhaustive()
    }
}

impl Default for Config {
    /// Least-outstanding (the choice for one client and a small fleet), NGINX-like ejection
    /// (three failures, ten seconds), three attempts, a probe every five seconds, a generated
    /// idempotency key on every solve that has none.
    fn default() -> Self {
        Self {
            backends: Vec::new(),
            key: None,
            strategy: Strategy::LeastOutstanding,
            ejection: EjectionPolicy::default(),
            max_attempts: 3,
            retry_base: Duration::from_millis(50),
            retry_cap: Duration::from_secs(1),
            probe_interval: Some(Duration::from_secs(5)),
            probe_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            response_margin: Duration::from_secs(10),
            seed: 0x6761_7465,
            generated_keys: true,
        }
    }
}

/// The longest any duration setting may be: an hour. A longer probe interval or retry wait is
/// a unit mistake (milliseconds given as seconds), not a wish.
const LONGEST: Duration = Duration::from_secs(3600);

impl Config {
    /// Checks every setting; the first bad one is the error.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.backends.is_empty() {
            return Err(bad(
                "backends",
                "no gateway URL given; pass at least one, e.g. http://10.0.0.11:8080",
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for url in &self.backends {
            if !seen.insert(url) {
                return Err(bad(
                    "backends",
                    format!("{url} is listed twice; list each gateway once"),
                ));
            }
        }
        if !(1..=10).contains(&self.max_attempts) {
            return Err(bad(
                "max_attempts",
                format!("{} is out of range; use 1 to 10", self.max_attempts),
            ));
        }
        let durations = [
            ("retry_base", self.retry_base),
            ("retry_cap", self.retry_cap),
            ("probe_timeout", self.probe_timeout),
            ("connect_timeout", self.connect_timeout),
            ("response_margin", self.response_margin),
            ("base_ejection", self.ejection.base_ejection),
            ("max_ejection", self.ejection.max_ejection),
        ];
        for (setting, value) in durations {
            if value > LONGEST {
                return Err(bad(
                    setting,
                    format!("{value:?} is longer than an hour; use at most 3600 s"),
                ));
            }
        }
        for (setting, value) in [
            ("probe_timeout", self.probe_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if value.is_zero() {
                return Err(bad(setting, "0 would fail every request; use more than 0"));
            }
        }
        if let Some(interval) = self.probe_interval {
            if interval < Duration::from_millis(10) || interval > LONGEST {
                return Err(bad(
                    "probe_interval",
                    format!("{interval:?} is out of range; use 10 ms to 3600 s, or no probes"),
                ));
            }
        }
        if self.ejection.base_ejection.is_zero() {
            return Err(bad(
                "base_ejection",
                "0 would never eject a failing gateway; use more than 0",
            ));
        }
        if self.ejection.max_ejection < self.ejection.base_ejection {
            return Err(bad(
                "max_ejection",
                "is shorter than base_ejection; make it at least as long",
            ));
        }
        Ok(())
    }
}

/// `url` as a backend base URL: http or https, a host, no credentials, no query; the trailing
/// slash removed so paths can be appended.
pub(crate) fn backend_url(url: &str) -> Result<String, ConfigError> {
    let parsed = reqwest::Url::parse(url.trim()).map_err(|e| {
        bad(
            "backends",
            format!("{url:?} is not a URL ({e}); use http://host:port"),
        )
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(bad(
            "backends",
            format!("{url:?} is not an http(s) URL with a host; use http://host:port"),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        // Only the scheme and host are shown: the rest may be a password.
        return Err(bad(
            "backends",
            format!(
                "the URL for {} carries credentials; pass the gateway key with key() instead",
                parsed.host_str().unwrap_or_default()
            ),
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad(
            "backends",
            format!("{url:?} has a query or fragment; give the base URL only"),
        ));
    }
    Ok(parsed.as_str().trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(change: impl FnOnce(&mut Config)) -> Result<(), ConfigError> {
        let mut config = Config {
            backends: vec!["http://127.0.0.1:8080".into()],
            ..Config::default()
        };
        change(&mut config);
        config.check()
    }

    #[test]
    fn the_defaults_with_one_backend_are_valid() {
        assert_eq!(with(|_| {}), Ok(()));
    }

    type Change = Box<dyn FnOnce(&mut Config)>;

    #[test]
    fn each_bad_setting_is_named() {
        let cases: [(&str, Change); 7] = [
            ("backends", Box::new(|c| c.backends.clear())),
            (
                "backends",
                Box::new(|c| c.backends.push(c.backends[0].clone())),
            ),
            ("max_attempts", Box::new(|c| c.max_attempts = 0)),
            ("max_attempts", Box::new(|c| c.max_attempts = 11)),
            (
                "probe_interval",
                Box::new(|c| c.probe_interval = Some(Duration::ZERO)),
            ),
            (
                "retry_cap",
                Box::new(|c| c.retry_cap = Duration::from_secs(86_400)),
            ),
            (
                "max_ejection",
                Box::new(|c| c.ejection.max_ejection = Duration::from_millis(1)),
            ),
        ];
        for (setting, change) in cases {
            let err = with(change).expect_err(setting);
            assert_eq!(err.setting, setting, "{err}");
        }
    }

    #[test]
    fn backend_urls_are_normalised_and_credentials_refused_without_echoing_them() {
        assert_eq!(
            backend_url("http://10.0.0.1:8080/").unwrap(),
            "http://10.0.0.1:8080"
        );
        assert_eq!(
            backend_url("https://gw.example/base/").unwrap(),
            "https://gw.example/base"
        );
        for url in ["10.0.0.1:8080", "ftp://x", "http://x/?a=1", "not a url"] {
            assert!(backend_url(url).is_err(), "{url}");
        }
        let err = backend_url("http://user:hunter2@gw.example:8080").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}
