//! The thread budget's scripts (`lua/budget_*.lua`), typed: the six keys of an account, the
//! prelude every one of them reads first (`lua/lib/budget.lua`) and each script's own arguments,
//! in the order its contract header gives. The budget and the script tests build their
//! invocations here and nowhere else.

use redis::{Script, ScriptInvocation};

use crate::lua;

/// The six keys of one account's thread budget, in the order `lua/lib/budget.lua` expects:
/// leases, fencing counter, fences, waiters, waiter expiry, cap. The account name is the tag
/// (braces in it would split the tag, so they are replaced).
pub fn budget_keys(account: &str) -> [String; 6] {
    let tag = budget_tag(account);
    ["leases", "fence", "fences", "waiters", "wexp", "cap"].map(|k| format!("cg:{{{tag}}}:{k}"))
}

/// The channel told when one of the account's threads frees.
pub fn budget_channel(account: &str) -> String {
    format!("cg:{{{}}}:freed", budget_tag(account))
}

fn budget_tag(account: &str) -> String {
    format!("b:{}", account.replace(['{', '}'], "_"))
}

/// The arguments every budget script reads before its own (`lua/lib/budget.lua`, ARGV[1..5]).
#[derive(Debug, Clone)]
pub struct BudgetPrelude {
    /// `None` in production (Redis `TIME`); a time only on an explicit clock.
    pub clock: Option<u64>,
    pub lease_ms: u64,
    /// The account's configured threads.
    pub threads: u32,
    /// The cap grows back one thread per this.
    pub increase_every_ms: u64,
    /// The channel told when threads free.
    pub channel: String,
}

/// How the cap changes (`budget_cap.lua`).
#[derive(Debug, Clone)]
pub enum CapChange {
    /// The provider refused the task holding `lease` for want of capacity, having lately
    /// accepted one with `proven` others in flight: the cap drops to the other leases if that is
    /// the plan's size, unless it was cut less than `gap_ms` ago.
    Refused {
        gap_ms: u64,
        lease: String,
        proven: u32,
    },
    /// `threadsinfo` reported the plan's threads.
    Plan { threads: u64 },
}

/// A caller queued behind the one whose turn it is, asked for in the same call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Follower {
    pub id: String,
    /// How long ago it first asked for a thread.
    pub age_ms: u64,
}

/// One thread-budget script and its own arguments, one variant per `budget_*.lua`.
#[derive(Debug, Clone)]
pub enum BudgetCall {
    Acquire {
        id: String,
        /// 0 interactive, 1 queued, 2 refill (`Priority::index`).
        class: usize,
        /// Threads kept for refills.
        reserve: u32,
        /// How long a waiter keeps its place without asking again.
        waiter_ttl_ms: u64,
        /// How long ago this caller first asked for a thread (its place among waiters).
        age_ms: u64,
        /// In order of first arrival, earliest first.
        followers: Vec<Follower>,
    },
    Release {
        ids: Vec<String>,
    },
    Renew {
        ids: Vec<String>,
    },
    Cap {
        change: CapChange,
        /// How long the cap's state outlives its last change.
        memory_ms: u64,
    },
}

impl BudgetCall {
    fn script(&self) -> &'static Script {
        match self {
            BudgetCall::Acquire { .. } => &lua::BUDGET_ACQUIRE,
            BudgetCall::Release { .. } => &lua::BUDGET_RELEASE,
            BudgetCall::Renew { .. } => &lua::BUDGET_RENEW,
            BudgetCall::Cap { .. } => &lua::BUDGET_CAP,
        }
    }

    /// The script's own arguments (ARGV[6..]).
    fn args(&self) -> Vec<String> {
        match self {
            BudgetCall::Acquire {
                id,
                class,
                reserve,
                waiter_ttl_ms,
                age_ms,
                followers,
            } => {
                let before = followers.iter().filter(|f| f.age_ms > *age_ms).count();
                [
                    id.clone(),
                    class.to_string(),
                    reserve.to_string(),
                    waiter_ttl_ms.to_string(),
                    age_ms.to_string(),
                    before.to_string(),
                ]
                .into_iter()
                .chain(
                    followers
                        .iter()
                        .flat_map(|f| [f.id.clone(), f.age_ms.to_string()]),
                )
                .collect()
            }
            BudgetCall::Release { ids } | BudgetCall::Renew { ids } => ids.clone(),
            BudgetCall::Cap { change, memory_ms } => match change {
                CapChange::Refused {
                    gap_ms,
                    lease,
                    proven,
                } => vec![
                    "refused".into(),
                    gap_ms.to_string(),
                    memory_ms.to_string(),
                    lease.clone(),
                    proven.to_string(),
                ],
                CapChange::Plan { threads } => {
                    vec!["plan".into(), threads.to_string(), memory_ms.to_string()]
                }
            },
        }
    }

    /// The invocation of this call on the account whose keys are `keys` ([`budget_keys`]).
    pub fn invocation(
        &self,
        keys: &[String; 6],
        prelude: &BudgetPrelude,
    ) -> ScriptInvocation<'static> {
        let mut inv = self.script().prepare_invoke();
        for key in keys {
            inv.key(key);
        }
        inv.arg(prelude.clock.map(|t| t.to_string()).unwrap_or_default())
            .arg(prelude.lease_ms)
            .arg(prelude.threads)
            .arg(prelude.increase_every_ms)
            .arg(&prelude.channel);
        for a in self.args() {
            inv.arg(a);
        }
        inv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accounts_keys_and_channel_share_one_slot_whatever_its_name() {
        // Redis Cluster hashes the text between the first `{` and the next `}`.
        let tag = |key: &str| {
            let open = key.find('{').unwrap();
            let close = key[open..].find('}').unwrap() + open;
            key[open + 1..close].to_owned()
        };
        for key in budget_keys("acc{1}") {
            assert_eq!(tag(&key), "b:acc_1_", "{key}");
        }
        assert_eq!(tag(&budget_channel("acc")), "b:acc");
    }
}
