//! The `[[tenants]]` tables of the TOML file, checked into [`TenantSpec`]s, and the key digests
//! tenants are recognised by.
//!
//! A key is written either in clear (32 characters, as clients send it) or as `sha256:<64 hex>`,
//! the SHA-256 of the clear key, so the file need not hold the key itself. Either way only the
//! digest is kept, and comparisons run in constant time over digests.

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::model::Kind;
use crate::setting::ConfigError;

/// Length of a gateway key in clear (the captchaai SDK refuses any other length).
const KEY_LEN: usize = 32;
/// Prefix of a key written as its digest.
const DIGEST_PREFIX: &str = "sha256:";
/// Longest tenant name: it is a metric label and appears in `GET /v1/usage`.
const MAX_NAME_LEN: usize = 64;

/// The SHA-256 of a gateway key. `Debug` shows nothing of it.
#[derive(Clone, Copy)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    pub fn of(key: &str) -> Self {
        Self(Sha256::digest(key.as_bytes()).into())
    }

    /// `sha256:<64 hex digits>`.
    pub fn parse(written: &str) -> Option<Self> {
        let hex_part = written.strip_prefix(DIGEST_PREFIX)?;
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut bytes).ok()?;
        Some(Self(bytes))
    }

    /// Constant-time equality: how long it takes says nothing about where two digests differ.
    pub fn matches(&self, other: &KeyDigest) -> bool {
        bool::from(self.0.ct_eq(&other.0))
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyDigest(<redacted>)")
    }
}

/// Whether a tenant shares targets (and so pools and coalesced answers) with other tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolMode {
    /// One pool per target for every shared tenant: the most reuse.
    #[default]
    Shared,
    /// The tenant's name is part of its targets' identity: its pools, in-flight tasks and
    /// answers are never handed to another tenant, nor another's to it.
    Isolated,
}

impl PoolMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PoolMode::Shared => "shared",
            PoolMode::Isolated => "isolated",
        }
    }
}

/// One `[[tenants]]` table as written. `Debug` never shows the keys.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantTable {
    pub name: Option<String>,
    #[serde(default)]
    pub keys: Vec<String>,
    pub max_concurrent: Option<u64>,
    pub max_solves_per_hour: Option<u64>,
    pub kinds: Option<Vec<String>>,
    /// `shared` (default) or `isolated`; checked in [`specs`] so a mistake names the tenant.
    pub pools: Option<String>,
}

impl fmt::Debug for TenantTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TenantTable")
            .field("name", &self.name)
            .field("keys", &format_args!("<{} redacted>", self.keys.len()))
            .field("max_concurrent", &self.max_concurrent)
            .field("max_solves_per_hour", &self.max_solves_per_hour)
            .field("kinds", &self.kinds)
            .field("pools", &self.pools)
            .finish()
    }
}

/// A checked tenant: who it is, how it is recognised, what it may do.
#[derive(Debug, Clone)]
pub struct TenantSpec {
    pub name: String,
    pub keys: Vec<KeyDigest>,
    /// Solves and tasks it may hold at once in one gateway process; `None`: no limit.
    pub max_concurrent: Option<u64>,
    /// Solves it may start per rolling hour in one gateway process; `None`: no limit.
    pub max_solves_per_hour: Option<u64>,
    /// The kinds it may ask for; `None`: every kind.
    pub kinds: Option<BTreeSet<Kind>>,
    pub pools: PoolMode,
}

fn bad(setting: String, problem: impl Into<String>, fix: impl Into<String>) -> ConfigError {
    ConfigError {
        setting,
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// Checks the `[[tenants]]` tables. `gateway_keys` are the `--gateway-key` keys, which no tenant
/// may reuse (a key belongs to exactly one tenant).
pub fn specs(
    tables: &[TenantTable],
    gateway_keys: &[String],
) -> Result<Vec<TenantSpec>, ConfigError> {
    let mut names = HashSet::new();
    let mut seen: Vec<(KeyDigest, String)> = gateway_keys
        .iter()
        .map(|k| (KeyDigest::of(k), "--gateway-key".to_owned()))
        .collect();
    let mut specs = Vec::with_capacity(tables.len());
    for (i, table) in tables.iter().enumerate() {
        let name = checked_name(i, table.name.as_deref())?;
        let at = format!("tenants[{i}] ({name})");
        if !names.insert(name.clone()) {
            return Err(bad(
                format!("{at}.name"),
                format!("the name `{name}` is used by another tenant"),
                "give every [[tenants]] table its own name",
            ));
        }
        if table.keys.is_empty() {
            return Err(bad(
                format!("{at}.keys"),
                "the tenant has no key, so nobody could use it",
                "add keys = [\"<32 characters>\"] or keys = [\"sha256:<hex of the key's SHA-256>\"]",
            ));
        }
        let mut keys = Vec::with_capacity(table.keys.len());
        for (k, written) in table.keys.iter().enumerate() {
            let digest = key_digest(&format!("{at}.keys[{k}]"), written.trim())?;
            // The key itself is never echoed; its position is enough to find it.
            if let Some((_, owner)) = seen.iter().find(|(d, _)| d.matches(&digest)) {
                return Err(bad(
                    format!("{at}.keys[{k}]"),
                    format!("this key is already a key of {owner}"),
                    "give each key to exactly one tenant (and not also to --gateway-key)",
                ));
            }
            seen.push((digest, at.clone()));
            keys.push(digest);
        }
        let max_concurrent = positive(&at, "max_concurrent", table.max_concurrent)?;
        let max_solves_per_hour = positive(&at, "max_solves_per_hour", table.max_solves_per_hour)?;
        let kinds = match &table.kinds {
            None => None,
            Some(list) if list.is_empty() => {
                return Err(bad(
                    format!("{at}.kinds"),
                    "is empty, so the tenant could ask for nothing",
                    "list the kinds it may use, or drop `kinds` to allow every kind",
                ));
            }
            Some(list) => Some(
                list.iter()
                    .map(|k| {
                        k.parse::<Kind>().map_err(|e| {
                            bad(
                                format!("{at}.kinds"),
                                e,
                                "use the kind names of docs/API.md",
                            )
                        })
                    })
                    .collect::<Result<BTreeSet<_>, _>>()?,
            ),
        };
        let pools = match table.pools.as_deref().map(str::trim) {
            None | Some("shared") => PoolMode::Shared,
            Some("isolated") => PoolMode::Isolated,
            Some(other) => {
                return Err(bad(
                    format!("{at}.pools"),
                    format!("`{other}` is not a pool mode"),
                    "write pools = \"shared\" (the default) or pools = \"isolated\"",
                ));
            }
        };
        specs.push(TenantSpec {
            name,
            keys,
            max_concurrent,
            max_solves_per_hour,
            kinds,
            pools,
        });
    }
    Ok(specs)
}

/// Names are metric labels and task owners: short, plain, and never one of the names the gateway
/// gives keyless or `--gateway-key` callers.
fn checked_name(i: usize, name: Option<&str>) -> Result<String, ConfigError> {
    let fix = "name it with 1-64 letters, digits, `.`, `_` or `-`, e.g. name = \"team-a\"";
    let Some(name) = name.map(str::trim) else {
        return Err(bad(format!("tenants[{i}].name"), "is missing", fix));
    };
    let plain = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !plain {
        return Err(bad(
            format!("tenants[{i}].name"),
            "is empty, too long, or has characters other than letters, digits, `.`, `_`, `-`",
            fix,
        ));
    }
    if name.starts_with("tenant-") || name == "anonymous" || name == super::OPEN_TENANT {
        return Err(bad(
            format!("tenants[{i}].name"),
            format!("`{name}` is reserved for callers that are not configured tenants"),
            "pick another name",
        ));
    }
    Ok(name.to_owned())
}

fn key_digest(setting: &str, written: &str) -> Result<KeyDigest, ConfigError> {
    if written.starts_with(DIGEST_PREFIX) {
        return KeyDigest::parse(written).ok_or_else(|| {
            bad(
                setting.to_owned(),
                "is not `sha256:` followed by 64 hex digits",
                "write the digest as printed by `printf %s \"$KEY\" | sha256sum`, prefixed with sha256:",
            )
        });
    }
    let len = written.chars().count();
    if len != KEY_LEN {
        return Err(bad(
            setting.to_owned(),
            format!("a key of {len} characters; clients such as the captchaai SDK only send 32"),
            "use 32-character keys (e.g. `openssl rand -hex 16`), or sha256:<hex> of one",
        ));
    }
    Ok(KeyDigest::of(written))
}

fn positive(at: &str, field: &str, value: Option<u64>) -> Result<Option<u64>, ConfigError> {
    match value {
        Some(0) => Err(bad(
            format!("{at}.{field}"),
            "is 0, so the tenant could never solve",
            format!("set {field} to at least 1, or drop it for no limit"),
        )),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const KEY_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn table(name: &str, keys: &[&str]) -> TenantTable {
        TenantTable {
            name: Some(name.into()),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            ..TenantTable::default()
        }
    }

    #[test]
    fn a_digest_and_its_clear_key_are_the_same_key() {
        let written = format!("sha256:{}", hex::encode(Sha256::digest(KEY_A)));
        let specs = specs(&[table("a", &[&written])], &[]).unwrap();
        assert!(specs[0].keys[0].matches(&KeyDigest::of(KEY_A)));
        assert!(!specs[0].keys[0].matches(&KeyDigest::of(KEY_B)));
        // Written both ways in two tenants: one key, two owners.
        let e = specs_err(&[table("a", &[&written]), table("b", &[KEY_A])]);
        assert_eq!(e.setting, "tenants[1] (b).keys[0]");
        assert!(e.problem.contains("tenants[0] (a)"), "{e}");
    }

    fn specs_err(tables: &[TenantTable]) -> ConfigError {
        specs(tables, &[]).unwrap_err()
    }

    #[test]
    fn every_mistake_names_its_setting_and_never_the_key() {
        let e = specs(&[table("a", &[KEY_A])], &[KEY_A.to_owned()]).unwrap_err();
        assert_eq!(e.setting, "tenants[0] (a).keys[0]");
        assert!(e.problem.contains("--gateway-key"));
        let e = specs_err(&[table("a", &["short"])]);
        assert_eq!(e.setting, "tenants[0] (a).keys[0]");
        let e = specs_err(&[table("a", &["sha256:xyz"])]);
        assert_eq!(e.setting, "tenants[0] (a).keys[0]");
        let e = specs_err(&[table("a", &[])]);
        assert_eq!(e.setting, "tenants[0] (a).keys");
        let e = specs_err(&[table("a", &[KEY_A]), table("a", &[KEY_B])]);
        assert_eq!(e.setting, "tenants[1] (a).name");
        for name in ["", "has space", "tenant-x", "anonymous"] {
            let e = specs_err(&[table(name, &[KEY_A])]);
            assert_eq!(e.setting, "tenants[0].name", "{name}");
        }
        let mut t = table("a", &[KEY_A]);
        t.kinds = Some(vec!["recaptcha_v9".into()]);
        assert_eq!(specs_err(&[t]).setting, "tenants[0] (a).kinds");
        let mut t = table("a", &[KEY_A]);
        t.kinds = Some(vec![]);
        assert_eq!(specs_err(&[t]).setting, "tenants[0] (a).kinds");
        let mut t = table("a", &[KEY_A]);
        t.max_concurrent = Some(0);
        assert_eq!(specs_err(&[t]).setting, "tenants[0] (a).max_concurrent");
        let mut t = table("a", &[KEY_A]);
        t.max_solves_per_hour = Some(0);
        assert_eq!(
            specs_err(&[t]).setting,
            "tenants[0] (a).max_solves_per_hour"
        );
    }

    #[test]
    fn debug_output_never_shows_a_key() {
        let t = table("a", &[KEY_A]);
        let spec = specs(&[table("a", &[KEY_A])], &[]).unwrap();
        let shown = format!("{t:?}{spec:?}");
        assert!(!shown.contains(KEY_A), "{shown}");
        assert!(!shown.contains(&hex::encode(Sha256::digest(KEY_A))[..16]));
    }
}
