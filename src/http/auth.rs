//! Gateway keys: which tenant a request belongs to. Keys are compared by digest and never stored,
//! logged or echoed in clear (promise 8).

use std::collections::HashMap;
use std::convert::Infallible;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

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
        let value = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let key = value.and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        });
        Ok(Self(key.map(str::to_owned)))
    }
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
            AuthError::WrongKey => crate::compat::codes::WRONG_USER_KEY,
            AuthError::UnknownKey => crate::compat::codes::KEY_DOES_NOT_EXIST,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Auth {
    /// digest -> tenant; empty means open mode (loopback only, enforced at startup).
    keys: HashMap<String, Tenant>,
}

fn digest(key: &str) -> String {
    hex::encode(&Sha256::digest(key.as_bytes())[..8])
}

impl Auth {
    pub fn new<'a>(keys: impl IntoIterator<Item = &'a str>) -> Self {
        let keys = keys
            .into_iter()
            .map(|k| (digest(k), Tenant(format!("tenant-{}", digest(k)))))
            .collect();
        Self { keys }
    }

    pub fn is_open(&self) -> bool {
        self.keys.is_empty()
    }

    /// The tenant of `key`. In open mode any key is accepted and keeps its own tasks; a request
    /// without a key is the anonymous tenant (seed 002's `/solve` sends none).
    pub fn tenant(&self, key: Option<&str>) -> Result<Tenant, AuthError> {
        let key = key.map(str::trim).filter(|k| !k.is_empty());
        if self.is_open() {
            return Ok(Tenant(key.map_or_else(
                || "anonymous".to_owned(),
                |k| format!("tenant-{}", digest(k)),
            )));
        }
        let key = key.ok_or(AuthError::WrongKey)?;
        if key.chars().count() != KEY_LEN {
            return Err(AuthError::WrongKey);
        }
        self.keys
            .get(&digest(key))
            .cloned()
            .ok_or(AuthError::UnknownKey)
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
    fn open_mode_separates_tenants_by_key() {
        let auth = Auth::new([]);
        let a = auth.tenant(Some("a")).unwrap();
        assert_ne!(a, auth.tenant(Some("b")).unwrap());
        assert_eq!(auth.tenant(None).unwrap().0, "anonymous");
    }
}
