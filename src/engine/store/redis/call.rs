//! The store scripts' calls, typed: which `.lua` runs, its keys, the prelude its family reads
//! first (`lua/lib/target.lua` for the target scripts and `retire.lua`) and its own arguments,
//! in the order its contract header gives: the target scripts here ([`TargetCall`]), the
//! reusable-answer, task record, idempotency, retire and inbox scripts in `call/`. The store and
//! the script tests build their invocations here and nowhere else, so an argument changes in
//! one place and the compiler finds every caller.

mod announce;
mod idem;
mod retire;
mod shared;
mod task;

pub use announce::AnnounceCall;
pub use idem::IdemBindCall;
pub use retire::RetireCall;
pub use shared::{SharedCall, SharedOutcome};
pub use task::TaskCall;

use redis::{Script, ScriptInvocation};

use super::keys;
use crate::lua;

/// The arguments every target script reads before its own (ARGV[1..7]).
#[derive(Debug, Clone)]
pub struct Prelude {
    /// How long the operation's reply is kept for a replay.
    pub op_ttl_ms: u64,
    /// The least life an answer handed out must have left.
    pub min_remaining_ms: u64,
    pub mail_ttl_ms: u64,
    pub lease_ms: u64,
    /// Whether the target's answers may be pooled; `None`: as recorded in its stats.
    pub poolable: Option<bool>,
    /// `None` in production (Redis `TIME`); a time only on an explicit clock.
    pub clock: Option<u64>,
    /// When the operation was issued (Redis time); `None`: not known, never refused as too old.
    pub issued: Option<u64>,
}

impl Prelude {
    /// Appends the prelude's arguments (ARGV[1..7]) to a target-family invocation.
    fn push(&self, inv: &mut ScriptInvocation<'static>) {
        let flag = |b: Option<bool>| match b {
            Some(true) => "1",
            Some(false) => "0",
            None => "",
        };
        let time = |t: Option<u64>| t.map(|t| t.to_string()).unwrap_or_default();
        inv.arg(self.op_ttl_ms)
            .arg(self.min_remaining_ms)
            .arg(self.mail_ttl_ms)
            .arg(self.lease_ms)
            .arg(flag(self.poolable))
            .arg(time(self.clock))
            .arg(time(self.issued));
    }
}

/// What a finished upstream task delivers (`finish.lua`'s ARGV[8..10]).
#[derive(Debug, Clone)]
pub enum FinishOutcome {
    Answer {
        remaining_ms: i64,
        json: String,
    },
    Failed {
        json: String,
    },
    /// An answer already expired: nobody gets it.
    Stale,
    /// The task was cut off (shutdown): its waiters need another.
    Requeue,
    /// Never submitted, its caller gone: a waiter left uncovered gets a new task.
    Withdrawn,
}

/// One target script and its own arguments, one variant per `.lua`.
#[derive(Debug, Clone)]
pub enum TargetCall {
    Arrive {
        waiter: String,
        /// The claim to start a task under if one must start.
        claim: String,
        /// A local claim batch this instance ends first (`held.rs`).
        release: Option<Release>,
        /// A new batch to take on a pool hit, if any.
        hold: Option<Hold>,
    },
    Finish {
        claim: String,
        outcome: FinishOutcome,
        /// The claim to restart under if waiters are still uncovered.
        restart: String,
    },
    Abandon {
        waiter: String,
        /// The answer the caller had already taken (its remaining ms and JSON), passed on.
        passed_on: Option<(i64, String)>,
    },
    Put {
        remaining_ms: i64,
        answer_json: String,
    },
    Reserve {
        size: u32,
        candidates: Vec<String>,
    },
    Cover {
        candidates: Vec<String>,
    },
    Note {
        claim: String,
        keep_ms: u64,
        account: String,
        task_id: String,
    },
    Counts,
    Take {
        waiter: String,
        /// Its arrival (ms); `None` for a follower of a reusable target.
        arrived: Option<u64>,
    },
    Untake {
        waiter: String,
        mail: String,
    },
    Renew {
        label: String,
        /// Waiter ids with their arrival (ms).
        waiters: Vec<(String, u64)>,
        claims: Vec<String>,
    },
    Unhold(Release),
}

/// The end of a local claim batch: its id and how many of its answers were handed out (the
/// first ones, in order); the rest go back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub batch: String,
    pub served: usize,
}

/// A local claim batch to take: up to `size` answers, under `batch`, held for `lease_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub batch: String,
    pub size: u32,
    pub lease_ms: u64,
}

impl Hold {
    /// The release of this batch with nothing handed out: all of it goes back.
    pub fn whole(&self) -> Release {
        Release {
            batch: self.batch.clone(),
            served: 0,
        }
    }
}

impl TargetCall {
    /// The script's file in `lua/`, as errors and replies name it.
    pub fn file(&self) -> &'static str {
        match self {
            TargetCall::Arrive { .. } => "arrive.lua",
            TargetCall::Finish { .. } => "finish.lua",
            TargetCall::Abandon { .. } => "abandon.lua",
            TargetCall::Put { .. } => "put.lua",
            TargetCall::Reserve { .. } => "reserve.lua",
            TargetCall::Cover { .. } => "cover.lua",
            TargetCall::Note { .. } => "note.lua",
            TargetCall::Counts => "counts.lua",
            TargetCall::Take { .. } => "take.lua",
            TargetCall::Untake { .. } => "untake.lua",
            TargetCall::Renew { .. } => "renew.lua",
            TargetCall::Unhold(_) => "unhold.lua",
        }
    }

    fn script(&self) -> &'static Script {
        match self {
            TargetCall::Arrive { .. } => &lua::ARRIVE,
            TargetCall::Finish { .. } => &lua::FINISH,
            TargetCall::Abandon { .. } => &lua::ABANDON,
            TargetCall::Put { .. } => &lua::PUT,
            TargetCall::Reserve { .. } => &lua::RESERVE,
            TargetCall::Cover { .. } => &lua::COVER,
            TargetCall::Note { .. } => &lua::NOTE,
            TargetCall::Counts => &lua::COUNTS,
            TargetCall::Take { .. } => &lua::TAKE,
            TargetCall::Untake { .. } => &lua::UNTAKE,
            TargetCall::Renew { .. } => &lua::RENEW,
            TargetCall::Unhold(_) => &lua::UNHOLD,
        }
    }

    /// The script's own arguments (ARGV[7..] as its header numbers them).
    fn args(&self) -> Vec<String> {
        match self {
            TargetCall::Arrive {
                waiter,
                claim,
                release,
                hold,
            } => {
                let (batch, served) = match release {
                    Some(r) => (r.batch.clone(), r.served),
                    None => (String::new(), 0),
                };
                let (size, lease_ms, new_batch) = match hold {
                    Some(h) => (h.size, h.lease_ms, h.batch.clone()),
                    None => (0, 0, String::new()),
                };
                vec![
                    waiter.clone(),
                    claim.clone(),
                    batch,
                    served.to_string(),
                    size.to_string(),
                    lease_ms.to_string(),
                    new_batch,
                ]
            }
            TargetCall::Finish {
                claim,
                outcome,
                restart,
            } => {
                let (code, left, payload) = match outcome {
                    FinishOutcome::Answer { remaining_ms, json } => {
                        ("A", remaining_ms.to_string(), json.clone())
                    }
                    FinishOutcome::Failed { json } => ("F", String::new(), json.clone()),
                    FinishOutcome::Stale => ("S", String::new(), String::new()),
                    FinishOutcome::Requeue => ("R", String::new(), String::new()),
                    FinishOutcome::Withdrawn => ("W", String::new(), String::new()),
                };
                vec![claim.clone(), code.into(), left, payload, restart.clone()]
            }
            TargetCall::Abandon { waiter, passed_on } => {
                let (left, json) = match passed_on {
                    Some((left, json)) => (left.to_string(), json.clone()),
                    None => (String::new(), String::new()),
                };
                vec![waiter.clone(), left, json]
            }
            TargetCall::Put {
                remaining_ms,
                answer_json,
            } => vec![remaining_ms.to_string(), answer_json.clone()],
            TargetCall::Reserve { size, candidates } => std::iter::once(size.to_string())
                .chain(candidates.iter().cloned())
                .collect(),
            TargetCall::Cover { candidates } => candidates.clone(),
            TargetCall::Note {
                claim,
                keep_ms,
                account,
                task_id,
            } => vec![
                claim.clone(),
                keep_ms.to_string(),
                account.clone(),
                task_id.clone(),
            ],
            TargetCall::Counts => Vec::new(),
            TargetCall::Take { waiter, arrived } => vec![
                waiter.clone(),
                arrived.map(|a| a.to_string()).unwrap_or_default(),
            ],
            TargetCall::Untake { waiter, mail } => vec![waiter.clone(), mail.clone()],
            TargetCall::Renew {
                label,
                waiters,
                claims,
            } => {
                let mut args = vec![label.clone(), waiters.len().to_string()];
                for (id, arrived) in waiters {
                    args.push(id.clone());
                    args.push(arrived.to_string());
                }
                args.extend(claims.iter().cloned());
                args
            }
            TargetCall::Unhold(Release { batch, served }) => {
                vec![batch.clone(), served.to_string()]
            }
        }
    }

    /// The invocation of this call on `target_id`, its reply recorded under `op_id`.
    pub fn invocation(
        &self,
        target_id: &str,
        op_id: &str,
        prelude: &Prelude,
    ) -> ScriptInvocation<'static> {
        let mut inv = self.script().prepare_invoke();
        for key in keys::target_keys(target_id, op_id) {
            inv.key(key);
        }
        prelude.push(&mut inv);
        for a in self.args() {
            inv.arg(a);
        }
        inv
    }
}
