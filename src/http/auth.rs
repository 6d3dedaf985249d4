//! Gateway keys: which tenant a request belongs to. Keys are compared by digest, in constant time,
//! and never stored, logged or echoed in clear (promise 8). A `--gateway-key` key is a tenant of
//! its own, named by a short digest of the key; a `[[tenants]]` key belongs to its named tenant.

use std::convert::Infallible;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};

use crate::tenants::{KeyDigest, TenantSpec};

/// Length of a gateway key: the captchaai SDK refuses any other length before sending (item 11).
pub const KEY_LEN: usize = 32;

/// A tenant: the owner of tasks. Its name is a short digest of its key, safe to log.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenant(pub String);

/// The key of `Authorization: Bearer <key>`, copied out of the request. Handlers take this
/// rather than the request's `HeaderMap`: header values share hyper's read buffer, so a handler
/// holding them while it waits for a solve would keep that buffer alive and make hyper allocate
/// another for the connection (see `listen.rs`).
#[derive(Debug, Clone, Default)]
pub struct BearerKey(pub Option<String>);

impl BearerKey {
    pub fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for BearerKey {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(bearer(&parts.headers).map(str::to_owned)))
    }
}

/// The key of an `Authorization: Bearer <key>` header, the scheme in any case: RFC 7235 makes it
/// case-insensitive, and one or more spaces may follow it.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())?;
    bearer_key(value)
}

fn bearer_key(value: &str) -> Option<&str> {
    let (scheme, key) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| key.trim_start_matches(' '))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// Missing, or not 32 characters.
    WrongKey,
    /// Well-formed but not configured.
    UnknownKey,
}

impl AuthError {
    pub fn code(self) -> &'static str {
        match self {
            AuthError::WrongKey => crate::wire::inphp::codes::WRONG_USER_KEY,
            AuthError::UnknownKey => crate::wire::inphp::codes::KEY_DOES_NOT_EXIST,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Auth {
    /// Every accepted key's digest and its tenant; empty means open mode (loopback only,
    /// enforced at startup).
    keys: Vec<(KeyDigest, Tenant)>,
}

fn digest(key: &str) -> String {
    hex::encode(&Sha256::digest(key.as_bytes())[..8])
}

/// The tenant name of a `--gateway-key` key (and of any key in open mode).
pub fn key_tenant(key: &str) -> Tenant {
    Tenant(format!("tenant-{}", digest(key)))
}

impl Auth {
    pub fn new<'a>(keys: impl IntoIterator<Item = &'a str>) -> Self {
        Self::with_tenants(keys, &[])
    }

    /// `--gateway-key` keys, each its own tenant, plus the keys of configured tenants.
    pub fn with_tenants<'a>(
        keys: impl IntoIterator<Item = &'a str>,
        tenants: &[TenantSpec],
    ) -> Self {
        let mut entries: Vec<(KeyDigest, Tenant)> = keys
            .into_iter()
            .map(|k| (KeyDigest::of(k), key_tenant(k)))
            .collect();
        for spec in tenants {
            for key in &spec.keys {
                entries.push((*key, Tenant(spec.name.clone())));
            }
        }
        Self { keys: entries }
    }

    pub fn is_open(&self) -> bool {
        self.keys.is_empty()
    }

    /// The tenant of `key`. In open mode any key is accepted and keeps its own tasks; a request
    /// without a key is the anonymous tenant (seed 002's `/solve` sends none).
    pub fn tenant(&self, key: Option<&str>) -> Result<Tenant, AuthError> {
        let key = key.map(str::trim).filter(|k| !k.is_empty());
        if self.is_open() {
            return Ok(key.map_or_else(|| Tenant("anonymous".to_owned()), key_tenant));
        }
        let key = key.ok_or(AuthError::WrongKey)?;
        if key.chars().count() != KEY_LEN {
            return Err(AuthError::WrongKey);
        }
        let presented = KeyDigest::of(key);
        // Every entry is compared (no early exit), each in constant time.
        let mut found = None;
        for (digest, tenant) in &self.keys {
            if digest.matches(&presented) {
                found = Some(tenant);
            }
        }
        found.cloned().ok_or(AuthError::UnknownKey)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_mode_distinguishes_wrong_and_unknown_keys() {
        let good = "0123456789abcdef0123456789abcdef";
        let auth = Auth::new([good]);
        assert!(auth.tenant(Some(good)).is_ok());
        assert_eq!(auth.tenant(None), Err(AuthError::WrongKey));
        assert_eq!(auth.tenant(Some("short")), Err(AuthError::WrongKey));
        assert_eq!(
            auth.tenant(Some("ffffffffffffffffffffffffffffffff")),
            Err(AuthError::UnknownKey)
        );
        assert!(!auth.tenant(Some(good)).unwrap().0.contains(good));
    }

    #[test]
    fn configured_tenants_are_found_by_clear_or_digest_keys() {
        let clear = "0123456789abcdef0123456789abcdef";
        let other = "ffffffffffffffffffffffffffffffff";
        let by_digest = format!("sha256:{}", hex::encode(Sha256::digest(other)));
        let table = |name: &str, key: &str| crate::tenants::TenantTable {
            name: Some(name.into()),
            keys: vec![key.into()],
            ..Default::default()
        };
        let specs = crate::tenants::specs(&[table("alpha", clear), table("beta", &by_digest)], &[])
            .unwrap();
        let gateway = "g123456789abcdef0123456789abcdef";
        let auth = Auth::with_tenants([gateway], &specs);
        assert_eq!(auth.tenant(Some(clear)).unwrap().0, "alpha");
        assert_eq!(auth.tenant(Some(other)).unwrap().0, "beta");
        assert_eq!(auth.tenant(Some(gateway)).unwrap(), key_tenant(gateway));
        assert_eq!(
            auth.tenant(Some("eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee")),
            Err(AuthError::UnknownKey)
        );
    }

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        let key = "0123456789abcdef0123456789abcdef";
        for value in [
            format!("Bearer {key}"),
            format!("bearer {key}"),
            format!("BEARER {key}"),
            format!("bEaReR  {key}"),
        ] {
            assert_eq!(bearer_key(&value), Some(key), "{value}");
        }
        for value in [
            format!("Basic {key}"),
            format!("Bearer{key}"),
            format!("Bearers {key}"),
            key.to_owned(),
            String::new(),
        ] {
            assert_eq!(bearer_key(&value), None, "{value}");
        }
    }

    #[test]
    fn open_mode_separates_tenants_by_key() {
        let auth = Auth::new([]);
        let a = auth.tenant(Some("a")).unwrap();
        assert_ne!(a, auth.tenant(Some("b")).unwrap());
        assert_eq!(auth.tenant(None).unwrap().0, "anonymous");
    }
}
