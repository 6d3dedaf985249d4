//! `[connections]`: how long a client may take over each part of an exchange, and how many
//! connections one process holds (docs/CONFIGURATION.md "Connections"). The defaults and the
//! reason for each are in `impl Default`.

use std::time::Duration;

use serde::Deserialize;

use crate::setting::{ConfigError, bad};

/// Checked connection limits, handed to the listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnSettings {
    /// Connections served at once; the next ones are answered `503` or closed (see `listen.rs`).
    pub max_connections: usize,
    /// From accept to a complete request head (the TLS handshake included).
    pub header_timeout: Duration,
    /// On a kept-alive connection, from the end of a response to the next complete head (or,
    /// when that head starts late, `header_timeout` after its first byte).
    pub idle_timeout: Duration,
    /// Longest silence while a request body is being read, and the grace before
    /// `min_body_rate` counts.
    pub body_timeout: Duration,
    /// Bytes per second a body must average from its head on, after `body_timeout`; 0: no rate.
    pub min_body_rate: u64,
}

impl Default for ConnSettings {
    fn default() -> Self {
        Self {
            // The 10,000 waiting callers a process is sized for (`max_concurrent`, the `capacity`
            // benchmark) plus a fifth for idle pooled connections, probes and scrapes. At the
            // measured ~18 KB a connection (docs/BENCHMARKS.md) that is about 230 MB, under the
            // 256 Mi memory limit of deploy/k8s/gateway.yaml.
            max_connections: 12_000,
            // Apache's mod_reqtimeout default (`header=20`); nginx allows 60 s for people on slow
            // links. Our callers are scripts and proxies that write a head in one go.
            header_timeout: Duration::from_secs(20),
            // nginx's `keepalive_timeout`. Longer than the 60 s nginx (`keepalive_timeout` of an
            // upstream block) and cloud load balancers keep an idle upstream connection, so the
            // proxy closes first: a server that closes first can race a request the proxy is
            // sending on that connection, which the proxy answers 502.
            idle_timeout: Duration::from_secs(75),
            // Apache's mod_reqtimeout default (`body=20,MinRate=500`): 20 s of grace and of
            // silence, then at least 500 bytes/s. A 1 MiB image at that rate takes 35 minutes:
            // only a stalled or deliberately slow client is cut.
            body_timeout: Duration::from_secs(20),
            min_body_rate: 500,
        }
    }
}

/// The `[connections]` table as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsFile {
    max: Option<i64>,
    header_timeout_s: Option<f64>,
    idle_timeout_s: Option<f64>,
    body_timeout_s: Option<f64>,
    min_body_rate: Option<i64>,
}

/// Most connections one process may be told to hold: far past what its memory allows.
const MAX_CONNECTIONS: i64 = 1_000_000;
/// Longest timeout accepted: an hour is past any honest client's pause.
const MAX_TIMEOUT_S: f64 = 3600.0;

impl ConnectionsFile {
    /// Checks the table; every problem names its setting.
    pub fn settings(&self) -> Result<ConnSettings, ConfigError> {
        let mut s = ConnSettings::default();
        if let Some(n) = self.max {
            if !(1..=MAX_CONNECTIONS).contains(&n) {
                return Err(bad(
                    "connections.max",
                    format!("{n} is out of range"),
                    "use 1 to 1000000 (default 12000)",
                ));
            }
            s.max_connections = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(v) = self.header_timeout_s {
            s.header_timeout = timeout("connections.header_timeout_s", v, "20")?;
        }
        if let Some(v) = self.idle_timeout_s {
            s.idle_timeout = timeout("connections.idle_timeout_s", v, "75")?;
        }
        if let Some(v) = self.body_timeout_s {
            s.body_timeout = timeout("connections.body_timeout_s", v, "20")?;
        }
        if let Some(n) = self.min_body_rate {
            s.min_body_rate = u64::try_from(n).map_err(|_| {
                bad(
                    "connections.min_body_rate",
                    format!("{n} is negative"),
                    "use bytes per second, e.g. 500, or 0 for no rate",
                )
            })?;
        }
        Ok(s)
    }
}

fn timeout(setting: &str, v: f64, default: &str) -> Result<Duration, ConfigError> {
    if v.is_finite() && v > 0.0 && v <= MAX_TIMEOUT_S {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(bad(
            setting,
            format!("{v} is not a number of seconds above 0 and at most 3600"),
            format!("e.g. {default} (the default)"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<ConnSettings, ConfigError> {
        toml::from_str::<ConnectionsFile>(toml_text)
            .expect("the table parses")
            .settings()
    }

    #[test]
    fn an_empty_table_is_the_defaults_and_each_value_is_read() {
        assert_eq!(parse("").unwrap(), ConnSettings::default());
        let s = parse(
            "max = 50\nheader_timeout_s = 0.5\nidle_timeout_s = 2\nbody_timeout_s = 1.5\nmin_body_rate = 0",
        )
        .unwrap();
        assert_eq!(s.max_connections, 50);
        assert_eq!(s.header_timeout, Duration::from_millis(500));
        assert_eq!(s.idle_timeout, Duration::from_secs(2));
        assert_eq!(s.body_timeout, Duration::from_millis(1500));
        assert_eq!(s.min_body_rate, 0);
    }

    #[test]
    fn bad_values_name_their_setting() {
        for (text, setting) in [
            ("max = 0", "connections.max"),
            ("max = -3", "connections.max"),
            ("max = 1000001", "connections.max"),
            ("header_timeout_s = 0", "connections.header_timeout_s"),
            ("header_timeout_s = -1", "connections.header_timeout_s"),
            ("idle_timeout_s = 3601", "connections.idle_timeout_s"),
            ("idle_timeout_s = nan", "connections.idle_timeout_s"),
            ("body_timeout_s = inf", "connections.body_timeout_s"),
            ("min_body_rate = -1", "connections.min_body_rate"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.setting, setting, "{text}: {e}");
        }
    }
}
