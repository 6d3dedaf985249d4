//! `idem_bind.lua`'s call: binding an idempotency key to a task, compare-and-set.

use redis::ScriptInvocation;

use super::super::keys;
use crate::lua;

/// Binds the key whose tenant-scoped digest is the invocation's `scoped` to `value`, only if it
/// is still bound as `expected` says.
#[derive(Debug, Clone)]
pub struct IdemBindCall {
    /// What the binding must be now; `None`: unbound.
    pub expected: Option<String>,
    pub value: String,
    pub ttl_ms: u64,
}

impl IdemBindCall {
    pub const FILE: &'static str = "idem_bind.lua";

    pub fn invocation(&self, scoped: &str) -> ScriptInvocation<'static> {
        let mut inv = lua::IDEM_BIND.prepare_invoke();
        inv.key(keys::idempotency(scoped))
            .arg(self.expected.as_deref().unwrap_or(""))
            .arg(&self.value)
            .arg(self.ttl_ms);
        inv
    }
}
