//! `retire.lua`'s call: forgetting a target nobody needs any more. It reads the target prelude
//! like the target scripts, over the target's keys and its reusable ones.

use redis::ScriptInvocation;

use super::super::keys;
use super::Prelude;
use crate::lua;

/// Retires a target whose last use is at least `idle_ms` old, if nothing else keeps it.
#[derive(Debug, Clone)]
pub struct RetireCall {
    pub idle_ms: u64,
}

impl RetireCall {
    pub const FILE: &'static str = "retire.lua";

    /// The invocation on `target_id`. Retiring twice is harmless, so it keeps no record: the
    /// prelude's op id is a fixed one and its issue time should be `None`.
    pub fn invocation(&self, target_id: &str, prelude: &Prelude) -> ScriptInvocation<'static> {
        let mut inv = lua::RETIRE.prepare_invoke();
        for key in keys::retire_keys(target_id) {
            inv.key(key);
        }
        prelude.push(&mut inv);
        inv.arg(self.idle_ms);
        inv
    }
}
