//! `announce.lua`'s call: telling an instance that mail waits for one of its waiters.

use redis::ScriptInvocation;

use super::super::keys;
use crate::lua;

/// Announces mail for `waiter` of `target_id` on its instance's inbox.
#[derive(Debug, Clone)]
pub struct AnnounceCall {
    pub target_id: String,
    pub waiter: String,
    /// How long the inbox outlives its last announcement.
    pub inbox_ttl_ms: u64,
}

impl AnnounceCall {
    pub const FILE: &'static str = "announce.lua";

    /// The invocation on the inbox of `instance` (the waiter's).
    pub fn invocation(&self, instance: &str) -> ScriptInvocation<'static> {
        let mut inv = lua::ANNOUNCE.prepare_invoke();
        inv.key(keys::inbox(instance))
            .arg(format!("{} {}", self.target_id, self.waiter))
            .arg(self.inbox_ttl_ms);
        inv
    }
}
