//! Verifiable single-use tokens: what the simulator hands out for reCAPTCHA, Turnstile, GeeTest
//! and Cloudflare challenges, and what `/verify` checks, the way a site's backend checks a real
//! token with Google or Cloudflare.
//!
//! Format: `SIM-<kind code>-<solved ms>-<nonce>-<mac>`, where the MAC is HMAC-SHA256 over the
//! first four parts with a secret drawn once per process. Only digits, lowercase hex, `-` and
//! `SIM`: URL-safe, no `|` and never `ERROR` (docs/PROTOCOL.md item 5).
//!
//! Owns minting, checking, and the memory of used tokens (kept only until a token would have
//! expired anyway, so it stays bounded). Does not own lifetimes: the caller passes them in.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::model::{Kind, Millis};

type HmacSha256 = Hmac<Sha256>;

const PREFIX: &str = "SIM";

/// The outcome of checking one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Ok { kind: Kind, solved_at: Millis },
    Duplicate { kind: Kind, solved_at: Millis },
    Expired { kind: Kind, solved_at: Millis },
    Invalid,
}

/// Mints tokens and remembers which ones were used. Callers wrap the used set in a mutex via
/// [`UsedTokens`]; minting needs no lock.
#[derive(Clone)]
pub(crate) struct TokenMint {
    secret: [u8; 32],
}

impl std::fmt::Debug for TokenMint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret is what makes tokens unforgeable: never print it.
        f.write_str("TokenMint { secret: <hidden> }")
    }
}

impl TokenMint {
    pub fn new(secret: [u8; 32]) -> Self {
        Self { secret }
    }

    /// A token for an answer of `kind` that became ready at `solved_at`. `None` for kinds whose
    /// answers are not tokens (image, text).
    pub fn mint(&self, kind: Kind, solved_at: Millis, nonce: u64) -> Option<String> {
        let code = kind_code(kind)?;
        let body = format!("{PREFIX}-{code}-{solved_at}-{nonce:016x}");
        let mac = hex::encode(self.mac(&body).finalize().into_bytes());
        Some(format!("{body}-{mac}"))
    }

    /// Reads a token back if it is well-formed and its MAC is ours.
    pub fn check(&self, token: &str) -> Option<(Kind, Millis)> {
        let (body, mac) = token.rsplit_once('-')?;
        let mut parts = body.split('-');
        let (prefix, code, solved, nonce) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || prefix != PREFIX || nonce.len() != 16 {
            return None;
        }
        let kind = kind_from_code(code)?;
        // Digits only: `u64::from_str` would also take a leading `+`, a second spelling of one token.
        if solved.is_empty() || !solved.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let solved_at: Millis = solved.parse().ok()?;
        if !nonce
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return None;
        }
        if mac.len() != 64 || mac.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        let mac = hex::decode(mac).ok()?;
        // `verify_slice` compares in constant time, so timing does not leak the expected MAC.
        self.mac(body).verify_slice(&mac).ok()?;
        Some((kind, solved_at))
    }

    fn mac(&self, body: &str) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(&self.secret).expect("HMAC accepts keys of any length");
        mac.update(body.as_bytes());
        mac
    }
}

/// Tokens already accepted by `/verify`, each kept until the moment it would expire.
#[derive(Debug, Default)]
pub(crate) struct UsedTokens {
    used: HashSet<String>,
    by_expiry: BinaryHeap<Reverse<(Millis, String)>>,
}

impl UsedTokens {
    /// Checks `token` at `now` and marks it used if it is good. `lifetime` gives each kind's
    /// answer lifetime.
    pub fn verify(
        &mut self,
        mint: &TokenMint,
        token: &str,
        now: Millis,
        lifetime: impl Fn(Kind) -> Duration,
    ) -> Verdict {
        self.prune(now);
        let Some((kind, solved_at)) = mint.check(token) else {
            return Verdict::Invalid;
        };
        let expires_at = solved_at.saturating_add(lifetime(kind).as_millis() as Millis);
        if now >= expires_at {
            return Verdict::Expired { kind, solved_at };
        }
        if !self.used.insert(token.to_owned()) {
            return Verdict::Duplicate { kind, solved_at };
        }
        self.by_expiry.push(Reverse((expires_at, token.to_owned())));
        Verdict::Ok { kind, solved_at }
    }

    /// How many tokens are remembered (tests check that memory stays bounded).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.used.len()
    }

    /// Forgets tokens that have expired: presented again, they are refused as expired anyway.
    fn prune(&mut self, now: Millis) {
        while let Some(Reverse((expires_at, _))) = self.by_expiry.peek() {
            if *expires_at > now {
                break;
            }
            if let Some(Reverse((_, token))) = self.by_expiry.pop() {
                self.used.remove(&token);
            }
        }
    }
}

fn kind_code(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::RecaptchaV2 => Some("rc2"),
        Kind::RecaptchaV3 => Some("rc3"),
        // Words a person typed carry no token.
        words if !words.spec().typical.token => None,
        // The declared types: their names have no `-`, so they parse back.
        other => Some(other.as_str()),
    }
}

fn kind_from_code(code: &str) -> Option<Kind> {
    Kind::ALL.into_iter().find(|k| kind_code(*k) == Some(code))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn arbitrary_tokens_are_rejected_without_panicking(
            t in "(SIM-)?(rc2|ts|gt3|x)?-?[0-9]{0,14}-?[0-9a-fA-F]{0,20}-?[0-9a-f]{0,70}|.{0,80}"
        ) {
            let mint = TokenMint::new([3; 32]);
            prop_assert_eq!(mint.check(&t), None);
        }
    }

    const LIFE: Duration = Duration::from_millis(1_000);

    #[test]
    fn tokens_round_trip_and_are_safe_on_the_wire() {
        let mint = TokenMint::new([7; 32]);
        for kind in [Kind::RecaptchaV2, Kind::Turnstile, Kind::GeetestV3] {
            let token = mint.mint(kind, 1_700_000_000_123, 42).unwrap();
            assert!(!token.contains('|') && !token.contains("ERROR"), "{token}");
            assert!(
                token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            );
            assert_eq!(mint.check(&token), Some((kind, 1_700_000_000_123)));
        }
        assert_eq!(mint.mint(Kind::Image, 0, 0), None);
    }

    #[test]
    fn forged_or_foreign_tokens_fail() {
        let mint = TokenMint::new([7; 32]);
        let token = mint.mint(Kind::RecaptchaV2, 5_000, 1).unwrap();
        let other = TokenMint::new([8; 32]);
        assert_eq!(other.check(&token), None, "another process's secret");
        let later = token.replacen("-5000-", "-9000-", 1);
        assert_eq!(mint.check(&later), None, "a moved solve time");
        let kind = token.replacen("-rc2-", "-ts-", 1);
        assert_eq!(mint.check(&kind), None, "a changed kind");
        for junk in [
            "",
            "SIM",
            "SIM-rc2-1-2-3",
            "SIM-rc2-+5000-0000000000000001-00",
            "é-|",
        ] {
            assert_eq!(mint.check(junk), None, "{junk}");
        }
    }

    #[test]
    fn once_only_before_expiry_and_memory_is_pruned() {
        let mint = TokenMint::new([1; 32]);
        let mut used = UsedTokens::default();
        let token = mint.mint(Kind::Turnstile, 100, 9).unwrap();
        let life = |_| LIFE;
        let ok = Verdict::Ok {
            kind: Kind::Turnstile,
            solved_at: 100,
        };
        assert_eq!(used.verify(&mint, &token, 100, life), ok);
        assert!(matches!(
            used.verify(&mint, &token, 500, life),
            Verdict::Duplicate { .. }
        ));
        assert!(matches!(
            used.verify(&mint, &token, 1_100, life),
            Verdict::Expired { .. }
        ));
        assert_eq!(used.len(), 0, "an expired token is no longer remembered");
        assert_eq!(used.verify(&mint, "SIM-x", 0, life), Verdict::Invalid);
    }
}
