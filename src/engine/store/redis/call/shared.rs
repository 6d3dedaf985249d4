//! The reusable-answer scripts' calls (`shared_*.lua`): their keys and arguments in the order
//! each contract header gives. Unlike the target scripts they read no prelude and keep no
//! operation record: only the clock comes first.

use redis::{Script, ScriptInvocation};

use super::super::keys;
use crate::lua;

/// What a reusable target's task ended with, as `shared_finish.lua` takes it (ARGV[3]).
#[derive(Debug, Clone)]
pub enum SharedOutcome {
    /// The script stamps its expiry in Redis time from the life it has left.
    Answer {
        remaining_ms: i64,
        json: String,
    },
    Failed {
        json: String,
    },
}

/// One reusable-answer script and its own arguments, one variant per `shared_*.lua`.
#[derive(Debug, Clone)]
pub enum SharedCall {
    Arrive {
        min_remaining_ms: u64,
        waiter: String,
        lease_ms: u64,
    },
    Finish {
        /// The fencing token the leader finishing holds (or held).
        token: u64,
        outcome: SharedOutcome,
        mail_ttl_ms: u64,
    },
    Renew {
        lease_ms: u64,
        /// The token this instance leads the target with, if it leads it.
        lead: Option<u64>,
        /// This instance's live followers of the target.
        followers: Vec<String>,
    },
    Takeover {
        min_remaining_ms: u64,
        lease_ms: u64,
        mail_ttl_ms: u64,
    },
}

impl SharedCall {
    /// The script's file in `lua/`, as errors and replies name it.
    pub fn file(&self) -> &'static str {
        match self {
            SharedCall::Arrive { .. } => "shared_arrive.lua",
            SharedCall::Finish { .. } => "shared_finish.lua",
            SharedCall::Renew { .. } => "shared_renew.lua",
            SharedCall::Takeover { .. } => "shared_takeover.lua",
        }
    }

    fn script(&self) -> &'static Script {
        match self {
            SharedCall::Arrive { .. } => &lua::SHARED_ARRIVE,
            SharedCall::Finish { .. } => &lua::SHARED_FINISH,
            SharedCall::Renew { .. } => &lua::SHARED_RENEW,
            SharedCall::Takeover { .. } => &lua::SHARED_TAKEOVER,
        }
    }

    /// KEYS[1..] as the header lists them.
    fn keys(&self, target_id: &str) -> Vec<String> {
        match self {
            SharedCall::Arrive { .. } => vec![
                keys::shared(target_id),
                keys::lead(target_id),
                keys::fence(target_id),
                keys::followers(target_id),
            ],
            SharedCall::Finish { .. } => vec![
                keys::shared(target_id),
                keys::lead(target_id),
                keys::followers(target_id),
                keys::mbox(target_id),
                keys::mlease(target_id),
                keys::fence(target_id),
            ],
            SharedCall::Renew { .. } => vec![
                keys::lead(target_id),
                keys::fence(target_id),
                keys::followers(target_id),
                keys::mbox(target_id),
            ],
            SharedCall::Takeover { .. } => vec![
                keys::shared(target_id),
                keys::lead(target_id),
                keys::fence(target_id),
                keys::followers(target_id),
                keys::mbox(target_id),
                keys::mlease(target_id),
            ],
        }
    }

    /// ARGV[2..]: everything after the clock.
    fn args(&self) -> Vec<String> {
        match self {
            SharedCall::Arrive {
                min_remaining_ms,
                waiter,
                lease_ms,
            } => vec![
                min_remaining_ms.to_string(),
                waiter.clone(),
                lease_ms.to_string(),
            ],
            SharedCall::Finish {
                token,
                outcome,
                mail_ttl_ms,
            } => {
                let mail = match outcome {
                    SharedOutcome::Answer { remaining_ms, json } => {
                        format!("A|{remaining_ms}|{json}")
                    }
                    SharedOutcome::Failed { json } => format!("F|{json}"),
                };
                vec![token.to_string(), mail, mail_ttl_ms.to_string()]
            }
            SharedCall::Renew {
                lease_ms,
                lead,
                followers,
            } => [lease_ms.to_string(), lead.unwrap_or(0).to_string()]
                .into_iter()
                .chain(followers.iter().cloned())
                .collect(),
            SharedCall::Takeover {
                min_remaining_ms,
                lease_ms,
                mail_ttl_ms,
            } => vec![
                min_remaining_ms.to_string(),
                lease_ms.to_string(),
                mail_ttl_ms.to_string(),
            ],
        }
    }

    /// The invocation of this call on `target_id`; `clock` is `None` in production (Redis
    /// `TIME`), a time only on an explicit clock.
    pub fn invocation(&self, target_id: &str, clock: Option<u64>) -> ScriptInvocation<'static> {
        let mut inv = self.script().prepare_invoke();
        for key in self.keys(target_id) {
            inv.key(key);
        }
        inv.arg(clock.map(|t| t.to_string()).unwrap_or_default());
        for a in self.args() {
            inv.arg(a);
        }
        inv
    }
}
