//! Who may read the operations endpoints that show the business (`/metrics`, `/v1/status` and
//! the dashboard at `/`: tenants and their counts, the hosts of the sites being solved, the
//! accounts' threads) and where they are served (docs/SECURITY.md "Endpoints"): the operations
//! key, the operations listener, and the startup rule that keeps them off a public port
//! unprotected. Liveness and readiness stay open everywhere: a kubelet probe sends no header.
//!
//! Owns: [`OpsSettings`], reading them from what the flags, file and environment gave, and the
//! key check with its refusal. Does not own the handlers (`ops.rs`) or the listeners (`serve`).

use std::net::SocketAddr;
use std::path::Path;

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::secret::Secret;
use crate::setting::{ConfigError, bad};
use crate::tenants::KeyDigest;

/// The variable that holds the operations key in clear (a Kubernetes Secret reaches it so).
pub const OPS_KEY_ENV: &str = "CAPTCHA_GATEWAY_OPS_KEY";

/// Shortest operations key in clear: it guards every tenant's figures, so no short password.
const MIN_KEY_LEN: usize = 16;

/// Where the operations endpoints are served and what they ask for.
#[derive(Debug, Clone, Default)]
pub struct OpsSettings {
    /// `--ops-listen`: a listener of their own. The API port then stops serving `/metrics`,
    /// `/v1/status` and `/` (404) unless `on_api_port`.
    pub listen: Option<SocketAddr>,
    /// The operations key's digest, required as `Authorization: Bearer`; `None`: open.
    pub key: Option<KeyDigest>,
    /// `ops_on_api_port`: serve them on the API port too although `listen` is set (a migration:
    /// old scrapes keep working while new ones move to the operations port).
    pub on_api_port: bool,
}

impl OpsSettings {
    /// Whether the API port serves `/metrics`, `/v1/status` and `/`.
    pub fn on_api_port(&self) -> bool {
        self.listen.is_none() || self.on_api_port
    }

    /// Whether `bearer` opens the operations endpoints: always without a key, else only the
    /// key itself (compared by digest, in constant time). A gateway key does not: a tenant must
    /// not see the other tenants' figures.
    pub fn allows(&self, bearer: Option<&str>) -> bool {
        let Some(key) = &self.key else {
            return true;
        };
        bearer
            .map(str::trim)
            .is_some_and(|b| key.matches(&KeyDigest::of(b)))
    }
}

/// `401` with the header a client reads to learn what is wanted (no browser prompt: Bearer).
pub fn refusal() -> Response {
    let body = json!({"error": {
        "code": "ops_key_required",
        "message": "send the operations key (ops_key) as `Authorization: Bearer <key>`",
    }});
    (StatusCode::UNAUTHORIZED, [challenge()], Json(body)).into_response()
}

/// The `WWW-Authenticate` header of every operations refusal.
pub fn challenge() -> (header::HeaderName, &'static str) {
    (
        header::WWW_AUTHENTICATE,
        "Bearer realm=\"captcha-gateway operations\"",
    )
}

/// The operations settings as given, before they are checked.
#[derive(Debug, Default)]
pub struct OpsInput<'a> {
    /// `--ops-listen` / `CAPTCHA_GATEWAY_OPS_LISTEN` / `ops_listen`.
    pub listen: Option<SocketAddr>,
    /// [`OPS_KEY_ENV`].
    pub key_env: Option<Secret>,
    /// `--ops-key-file` / `ops_key_file`: a file holding the key (the same file a Prometheus
    /// `credentials_file` can read).
    pub key_file: Option<&'a Path>,
    /// `ops_key` in the TOML file: the key, or `sha256:<hex>` of it.
    pub key: Option<&'a str>,
    /// `ops_on_api_port`.
    pub on_api_port: bool,
}

/// Checks the operations settings of a gateway listening on `api_listen`. Returns them and the
/// key in clear when one was given so (for the log scrubber). The variable wins over the key
/// file, which wins over `ops_key`.
///
/// A gateway listening beyond loopback must protect them, by their own listener or by the key:
/// it refuses to start otherwise, as it refuses to listen there without gateway keys.
pub fn settings(
    input: OpsInput<'_>,
    api_listen: SocketAddr,
) -> Result<(OpsSettings, Option<Secret>), ConfigError> {
    let (key, clear) = if let Some(Secret(value)) = &input.key_env {
        let clear = clear_key(OPS_KEY_ENV, value)?;
        (Some(KeyDigest::of(&clear)), Some(Secret(clear)))
    } else if let Some(path) = input.key_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            bad(
                "--ops-key-file",
                format!("cannot read {}: {e}", path.display()),
                "point it at a readable file holding the operations key",
            )
        })?;
        let clear = clear_key("--ops-key-file", &text)?;
        (Some(KeyDigest::of(&clear)), Some(Secret(clear)))
    } else if let Some(written) = input.key {
        if written.starts_with("sha256:") {
            let digest = KeyDigest::parse(written).ok_or_else(|| {
                bad(
                    "ops_key",
                    "is not `sha256:` followed by 64 hex digits",
                    "write the digest as printed by `printf %s \"$KEY\" | sha256sum`, prefixed with sha256:",
                )
            })?;
            (Some(digest), None)
        } else {
            let clear = clear_key("ops_key", written)?;
            (Some(KeyDigest::of(&clear)), Some(Secret(clear)))
        }
    } else {
        (None, None)
    };
    if input
        .listen
        .is_some_and(|l| l == api_listen && l.port() != 0)
    {
        return Err(bad(
            "--ops-listen",
            format!("is the API's own address {api_listen}"),
            "give the operations endpoints another port, e.g. --ops-listen 0.0.0.0:9090",
        ));
    }
    let ops = OpsSettings {
        listen: input.listen,
        key,
        on_api_port: input.on_api_port,
    };
    if ops.on_api_port() && ops.key.is_none() && !api_listen.ip().is_loopback() {
        return Err(bad(
            "--ops-listen",
            format!(
                "/metrics, /v1/status and the dashboard (tenants, sites, threads) would answer \
                 anyone who reaches {api_listen}, which is not loopback"
            ),
            format!(
                "serve them on their own port (--ops-listen 0.0.0.0:9090, kept private) or \
                 require a key ({OPS_KEY_ENV} or --ops-key-file)"
            ),
        ));
    }
    Ok((ops, clear))
}

/// A key given in clear: trimmed (a file ends in a newline), long enough, and only visible
/// ASCII so that it travels in a header as it was written.
fn clear_key(setting: &str, value: &str) -> Result<String, ConfigError> {
    let key = value.trim();
    let fix = "use at least 16 visible ASCII characters, e.g. `openssl rand -hex 16`";
    if key.len() < MIN_KEY_LEN {
        return Err(bad(
            setting,
            format!("the operations key has {} characters", key.chars().count()),
            fix,
        ));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(
            setting,
            "the operations key has spaces or characters a header cannot carry",
            fix,
        ));
    }
    Ok(key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ops-key-0123456789abcdef";

    fn loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 8080))
    }

    fn public() -> SocketAddr {
        SocketAddr::from(([0, 0, 0, 0], 8080))
    }

    #[test]
    fn only_the_key_itself_opens_them_and_no_key_leaves_them_open() {
        let input = OpsInput {
            key_env: Some(Secret(format!("{KEY}\n"))),
            ..OpsInput::default()
        };
        let (ops, clear) = settings(input, loopback()).unwrap();
        assert_eq!(clear.unwrap().0, KEY, "trimmed, kept for the log scrubber");
        assert!(ops.allows(Some(KEY)));
        assert!(!ops.allows(None));
        assert!(!ops.allows(Some("0123456789abcdef0123456789abcdef")));
        assert!(OpsSettings::default().allows(None));
    }

    #[test]
    fn a_digest_in_the_file_opens_them_with_the_clear_key() {
        use sha2::Digest;
        let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(KEY)));
        let input = OpsInput {
            key: Some(&digest),
            ..OpsInput::default()
        };
        let (ops, clear) = settings(input, loopback()).unwrap();
        assert!(clear.is_none());
        assert!(ops.allows(Some(KEY)));
    }

    #[test]
    fn beyond_loopback_they_need_their_own_port_or_a_key() {
        let line = settings(OpsInput::default(), public())
            .unwrap_err()
            .to_string();
        assert!(line.starts_with("--ops-listen: "), "{line}");
        let own_port = OpsInput {
            listen: Some(SocketAddr::from(([0, 0, 0, 0], 9090))),
            ..OpsInput::default()
        };
        let (ops, _) = settings(own_port, public()).unwrap();
        assert!(!ops.on_api_port());
        let keyed = OpsInput {
            key: Some(KEY),
            ..OpsInput::default()
        };
        assert!(settings(keyed, public()).unwrap().0.on_api_port());
        let both_ports_open = OpsInput {
            listen: Some(SocketAddr::from(([0, 0, 0, 0], 9090))),
            on_api_port: true,
            ..OpsInput::default()
        };
        assert!(settings(both_ports_open, public()).is_err());
    }

    #[test]
    fn a_short_or_unprintable_key_is_refused_by_name() {
        for (written, setting) in [("short", "ops_key"), ("has a space in it....", "ops_key")] {
            let input = OpsInput {
                key: Some(written),
                ..OpsInput::default()
            };
            let line = settings(input, loopback()).unwrap_err().to_string();
            assert!(line.starts_with(&format!("{setting}: ")), "{line}");
            assert!(!line.contains(written), "the key is not echoed: {line}");
        }
    }
}
