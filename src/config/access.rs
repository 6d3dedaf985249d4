//! Who may call `serve`: the gateway keys, the tenants, and the operations endpoints' listener
//! and key. A gateway reachable beyond loopback must have keys.

use std::net::SocketAddr;

use super::{FileConfig, Secret};
use crate::cli::ServeArgs;
use crate::setting::{ConfigError, bad};
use crate::tenants::TenantSpec;

pub(super) struct Access {
    /// Trimmed, each of the length clients send.
    pub keys: Vec<String>,
    pub tenants: Vec<TenantSpec>,
    pub ops: crate::http::OpsSettings,
    pub ops_key: Option<Secret>,
}

pub(super) fn access(
    args: &ServeArgs,
    file: &FileConfig,
    listen: SocketAddr,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Access, ConfigError> {
    let keys: Vec<String> = if args.gateway_keys.is_empty() {
        file.gateway_keys.clone()
    } else {
        args.gateway_keys.iter().map(|k| k.0.clone()).collect()
    };
    let keys: Vec<String> = keys
        .into_iter()
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
        .collect();
    if let Some(k) = keys
        .iter()
        .find(|k| k.chars().count() != crate::http::KEY_LEN)
    {
        return Err(bad(
            "--gateway-key",
            format!(
                "a key of {} characters was given; clients such as the captchaai SDK only send 32",
                k.chars().count()
            ),
            "use 32-character keys, e.g. `openssl rand -hex 16`",
        ));
    }
    let tenants = crate::tenants::specs(&file.tenants, &keys)?;
    if keys.is_empty() && tenants.is_empty() && !listen.ip().is_loopback() {
        return Err(bad(
            "--gateway-key",
            format!("no gateway key is set while listening on {listen}, which is not loopback"),
            "set --gateway-key / CAPTCHA_GATEWAY_KEYS, or listen on 127.0.0.1",
        ));
    }

    let (ops, ops_key) = crate::http::ops_settings(
        crate::http::OpsInput {
            listen: args.ops_listen.or(file.ops_listen),
            key_env: env(crate::http::OPS_KEY_ENV)
                .filter(|k| !k.trim().is_empty())
                .map(Secret),
            key_file: args
                .ops_key_file
                .as_deref()
                .or(file.ops_key_file.as_deref()),
            key: file.ops_key.as_deref(),
            on_api_port: file.ops_on_api_port.unwrap_or(false),
        },
        listen,
    )?;
    Ok(Access {
        keys,
        tenants,
        ops,
        ops_key,
    })
}
