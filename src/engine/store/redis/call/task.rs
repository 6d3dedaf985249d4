//! The task record scripts' calls (`task_*.lua`): one key, the record's, and each script's
//! arguments in its header's order.

use redis::{Script, ScriptInvocation};

use super::super::keys;
use crate::lua;

/// One task record script and its arguments, one variant per `task_*.lua`.
#[derive(Debug, Clone)]
pub enum TaskCall {
    /// Marks the record reported, once.
    Report,
    /// Writes the record's result, once.
    Finish {
        state_json: String,
        finished_at: u64,
        /// How long the finished record stays readable.
        retention_ms: u64,
        /// The record as its instance kept it, to write it again whole if Redis lost it; ''
        /// when this instance has no copy.
        record_json: String,
    },
}

impl TaskCall {
    /// The script's file in `lua/`, as errors and replies name it.
    pub fn file(&self) -> &'static str {
        match self {
            TaskCall::Report => "task_report.lua",
            TaskCall::Finish { .. } => "task_finish.lua",
        }
    }

    fn script(&self) -> &'static Script {
        match self {
            TaskCall::Report => &lua::TASK_REPORT,
            TaskCall::Finish { .. } => &lua::TASK_FINISH,
        }
    }

    fn args(&self) -> Vec<String> {
        match self {
            TaskCall::Report => Vec::new(),
            TaskCall::Finish {
                state_json,
                finished_at,
                retention_ms,
                record_json,
            } => vec![
                state_json.clone(),
                finished_at.to_string(),
                retention_ms.to_string(),
                record_json.clone(),
            ],
        }
    }

    /// The invocation of this call on the record of task `task_id`.
    pub fn invocation(&self, task_id: &str) -> ScriptInvocation<'static> {
        let mut inv = self.script().prepare_invoke();
        inv.key(keys::task(task_id));
        for a in self.args() {
            inv.arg(a);
        }
        if matches!(self, TaskCall::Finish { .. }) {
            inv.arg(keys::TASKS_FINISHED).arg(task_id);
        }
        inv
    }
}
