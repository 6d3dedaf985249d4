//! Importing answers obtained elsewhere (human harvesters, another gateway) into a target's pool.
//!
//! Owns the rules an outside answer must pass before the engine takes it: a poolable kind, a
//! plausible ready time, at least `min_remaining` of life left (lifetime counted from the ready
//! time, as for our own answers), and no second import of the same token while it lives. Past
//! that it is an answer like any other: `Engine::import` gives it to the oldest waiter or the
//! pool, where the same freshness and once rules hold.

use sha2::{Digest, Sha256};

use super::Pools;
use crate::engine::Engine;
use crate::model::{Answer, Kind, Millis, Reuse, SolveRequest, now_ms};

/// The most answers one import request may carry: a harvester's batch, not a bulk load.
pub const MAX_IMPORT: usize = 1000;
/// The longest token taken. reCAPTCHA and Turnstile tokens are a few kB at most.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;
/// How far in the future a `solved_at` may lie: the harvester's clock may run a little ahead.
const MAX_CLOCK_SKEW_MS: Millis = 60_000;

/// One answer offered for import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportToken {
    pub token: String,
    /// When it was solved (ms since the epoch): its lifetime counts from here.
    pub solved_at: Millis,
    pub user_agent: Option<String>,
}

/// What became of an import: how many answers were taken, and why each other one was not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportOutcome {
    pub accepted: usize,
    /// `(index in the request, reason)`.
    pub rejected: Vec<(usize, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("{0} answers cannot be pooled: they are for one caller or shared whole")]
    NotPoolable(Kind),
    #[error("the store is unavailable")]
    Unavailable,
}

/// Imports `offered` answers for `req`'s target. An entry that could not even be read comes as
/// `Err(reason)` and is reported back under its index like any other rejection.
pub async fn import(
    engine: &Engine,
    pools: &Pools,
    req: &SolveRequest,
    offered: Vec<Result<ImportToken, String>>,
) -> Result<ImportOutcome, ImportError> {
    let kind = req.kind();
    if kind.reuse() != (Reuse::SingleUse { poolable: true }) {
        return Err(ImportError::NotPoolable(kind));
    }
    let target = engine.target(req);
    let lifetime = u64::try_from(engine.lifetime(kind).as_millis()).unwrap_or(u64::MAX);
    let min_remaining_ms =
        u64::try_from(engine.settings().min_remaining.as_millis()).unwrap_or(u64::MAX);
    pools.prune_imports(now_ms());
    let mut outcome = ImportOutcome::default();
    for (index, entry) in offered.into_iter().enumerate() {
        let now = now_ms();
        let checked = entry.and_then(|t| {
            let answer = Answer {
                expires_at: t.solved_at.saturating_add(lifetime),
                text: t.token,
                user_agent: t.user_agent,
                solved_at: t.solved_at,
                upstream: None,
            };
            check(&answer, now, min_remaining_ms).map(|()| answer)
        });
        let answer = match checked {
            Ok(answer) => answer,
            Err(reason) => {
                outcome.rejected.push((index, reason));
                continue;
            }
        };
        let digest = digest(&answer.text);
        if !pools.first_import(digest, answer.expires_at) {
            outcome
                .rejected
                .push((index, "this token was already imported".to_owned()));
            continue;
        }
        if engine.import(&target, answer).await.is_err() {
            // Not stored: let a retry of the same batch import it.
            pools.forget_import(&digest);
            return Err(ImportError::Unavailable);
        }
        outcome.accepted += 1;
        pools.count_imported(&target.id, 1);
    }
    Ok(outcome)
}

fn check(answer: &Answer, now: Millis, min_remaining_ms: u64) -> Result<(), String> {
    if answer.text.trim().is_empty() {
        return Err("token is empty".to_owned());
    }
    if answer.text.len() > MAX_TOKEN_LEN {
        return Err(format!("token is longer than {MAX_TOKEN_LEN} bytes"));
    }
    if answer.solved_at > now.saturating_add(MAX_CLOCK_SKEW_MS) {
        return Err("solved_at is in the future".to_owned());
    }
    if !answer.fresh_at(now, min_remaining_ms) {
        return Err(format!(
            "too old: less than min_remaining ({} s) of its lifetime is left",
            min_remaining_ms / 1000
        ));
    }
    Ok(())
}

fn digest(token: &str) -> [u8; 16] {
    let full = Sha256::digest(token.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}
