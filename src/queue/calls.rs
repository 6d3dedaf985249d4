//! The stream queue's scripts (`lua/queue_*.lua`), typed: one call per script, which builds its
//! invocation (keys and arguments in the order of the script's contract header) and reads its
//! reply strictly, as that header says it is or an error naming the script and the position,
//! never a default (an unknown outcome read as "lease lost" would drop a finished task
//! silently). Nothing here talks to Redis: the producer, the steps and the stream's lease and
//! take loops run these calls and decide what a failure means.

use redis::{ScriptInvocation, Value};

use super::QueueResult;
use super::keys::{GROUP, QueueKeys};
use crate::lua;
use crate::redis_base::{Reply, ReplyError};

/// `queue_enqueue.lua`: adds one task, at most once per idempotency key.
pub struct EnqueueCall<'a> {
    pub idem: Option<&'a str>,
    /// How long the idempotency key is kept (the result TTL).
    pub idem_ttl_ms: u64,
    pub id: &'a str,
    pub fields: &'a [(String, String)],
}

/// What `queue_enqueue.lua` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    /// The task's id: this one, or the first task's under the same idempotency key.
    pub id: String,
    pub duplicate: bool,
}

impl EnqueueCall<'_> {
    pub const FILE: &'static str = "queue_enqueue.lua";

    pub fn invocation(&self, keys: &QueueKeys) -> ScriptInvocation<'static> {
        let mut inv = lua::QUEUE_ENQUEUE.prepare_invoke();
        inv.key(keys.tasks());
        if let Some(idem) = self.idem {
            inv.key(keys.idem(idem));
        }
        inv.arg(GROUP).arg(self.idem_ttl_ms).arg(self.id);
        for (k, v) in self.fields {
            inv.arg(k).arg(v);
        }
        inv
    }

    /// `{task id, 0 added | 1 duplicate}`.
    pub fn read(reply: Value) -> Result<Added, ReplyError> {
        let mut r = Reply::of_value(Self::FILE, reply);
        let added = Added {
            id: r.text("the task id")?,
            duplicate: r.flag("duplicate")?,
        };
        r.end()?;
        Ok(added)
    }
}

/// What `begin` found for one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// Another consumer owns it now (or it is gone).
    Lost,
    /// Its result was already written: acknowledged and removed, unless the step keeps it.
    Done,
    /// Go ahead; the entry has been delivered this many times (this one included).
    Go(u32),
}

/// What `finish` did with one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    Written,
    AlreadyThere,
    LeaseLost,
}

/// One entry about to be worked on.
#[derive(Debug, Clone)]
pub struct BeginStep {
    pub stream_id: String,
    /// The task id read from the entry, when it has a readable one.
    pub task_id: Option<String>,
    /// Leave the entry pending if its result is already there: its gateway task record is
    /// finished from that result first (`FinishStep::keep`).
    pub keep: bool,
}

/// One entry to end: with its result (if any), and dead-lettered with a reason (if any).
#[derive(Debug, Clone)]
pub struct FinishStep {
    pub stream_id: String,
    pub result: Option<QueueResult>,
    pub dead_reason: Option<String>,
    /// The entry's fields, copied to the dead-letter stream with a reason.
    pub fields: Vec<(String, String)>,
    /// Leave the entry pending after writing the result: the task's gateway task record is
    /// finished next, from this result, and a step without a result then acknowledges the
    /// entry. A worker that dies in between leaves the entry to be delivered again, and that
    /// delivery finishes the record (the result is kept, so the task is not solved again).
    pub keep: bool,
}

/// `queue_begin.lua`: checks a batch of delivered entries before work starts on them.
pub struct BeginCall<'a> {
    pub consumer: &'a str,
    pub steps: &'a [BeginStep],
}

impl BeginCall<'_> {
    pub const FILE: &'static str = "queue_begin.lua";

    pub fn invocation(&self, keys: &QueueKeys) -> ScriptInvocation<'static> {
        let mut inv = lua::QUEUE_BEGIN.prepare_invoke();
        inv.key(keys.tasks()).arg(GROUP).arg(self.consumer);
        // Each entry names the KEYS index of its result key, or 0 without a readable task id.
        let mut next_key = 2;
        for step in self.steps {
            inv.arg(&step.stream_id);
            match &step.task_id {
                Some(id) => {
                    inv.key(keys.result(id)).arg(next_key);
                    next_key += 1;
                }
                None => {
                    inv.arg(0);
                }
            }
            inv.arg(if step.keep { "1" } else { "0" });
        }
        inv
    }

    /// Per entry, in order: `0, 0` lease lost | `2, 0` result already there | `1, deliveries`.
    pub fn read(&self, reply: Value) -> Result<Vec<Begin>, ReplyError> {
        let mut r = Reply::of_value(Self::FILE, reply);
        let mut out = Vec::with_capacity(self.steps.len());
        for _ in self.steps {
            let code = r.int("the outcome 0, 1 or 2")?;
            let second = r.count("the deliveries")?;
            out.push(match (code, second) {
                (0, 0) => Begin::Lost,
                (2, 0) => Begin::Done,
                (1, d) if d >= 1 => Begin::Go(u32::try_from(d).unwrap_or(u32::MAX)),
                _ => return Err(r.wrong("0, 0 or 2, 0 or 1 and a delivery count", "another pair")),
            });
        }
        r.end()?;
        Ok(out)
    }
}

/// `queue_finish.lua`: ends a batch of delivered entries (result, dead letter, acknowledge).
pub struct FinishCall<'a> {
    pub consumer: &'a str,
    pub result_ttl_ms: u64,
    /// About how many entries the dead-letter stream keeps.
    pub dead_kept: u64,
    pub steps: &'a [FinishStep],
}

impl FinishCall<'_> {
    pub const FILE: &'static str = "queue_finish.lua";

    pub fn invocation(&self, keys: &QueueKeys) -> ScriptInvocation<'static> {
        let mut inv = lua::QUEUE_FINISH.prepare_invoke();
        inv.key(keys.tasks())
            .key(keys.dead())
            .arg(GROUP)
            .arg(self.consumer)
            .arg(self.result_ttl_ms)
            .arg(keys.done())
            .arg(self.dead_kept);
        let mut next_key = 3;
        for step in self.steps {
            inv.arg(&step.stream_id);
            match &step.result {
                Some(r) => {
                    inv.key(keys.result(&r.id))
                        .arg(next_key)
                        .arg(&r.id)
                        .arg(r.to_json());
                    next_key += 1;
                }
                None => {
                    inv.arg(0).arg("").arg("");
                }
            }
            let keep = if step.keep { "1" } else { "0" };
            match &step.dead_reason {
                Some(reason) => {
                    inv.arg(reason).arg(keep).arg(step.fields.len());
                    for (k, v) in &step.fields {
                        inv.arg(k).arg(v);
                    }
                }
                None => {
                    inv.arg("").arg(keep).arg(0);
                }
            }
        }
        inv
    }

    /// Per entry, in order: 1 written, 2 a result was already there, 0 lease lost.
    pub fn read(&self, reply: Value) -> Result<Vec<Finished>, ReplyError> {
        let mut r = Reply::of_value(Self::FILE, reply);
        let mut out = Vec::with_capacity(self.steps.len());
        for _ in self.steps {
            out.push(match r.int("the outcome 0, 1 or 2")? {
                1 => Finished::Written,
                2 => Finished::AlreadyThere,
                0 => Finished::LeaseLost,
                _ => return Err(r.wrong("the outcome 0, 1 or 2", "another number")),
            });
        }
        r.end()?;
        Ok(out)
    }
}

/// `queue_retry.lua`: hands a delivered entry back for a later attempt.
pub struct RetryCall<'a> {
    pub consumer: &'a str,
    pub stream_id: &'a str,
    pub delay_ms: u64,
    /// The entry's fields for the next attempt.
    pub payload: &'a str,
}

impl RetryCall<'_> {
    pub const FILE: &'static str = "queue_retry.lua";

    pub fn invocation(&self, keys: &QueueKeys) -> ScriptInvocation<'static> {
        let mut inv = lua::QUEUE_RETRY.prepare_invoke();
        inv.key(keys.tasks())
            .key(keys.retry())
            .arg(GROUP)
            .arg(self.consumer)
            .arg(self.stream_id)
            .arg(self.delay_ms)
            .arg(self.payload);
        inv
    }

    /// 1 scheduled, 0 lease lost.
    pub fn read(reply: Value) -> Result<bool, ReplyError> {
        let mut r = Reply::of_value(Self::FILE, reply);
        let scheduled = r.flag("1 scheduled or 0 lease lost")?;
        r.end()?;
        Ok(scheduled)
    }
}

/// `queue_renew.lua`: renews this consumer's leases on the entries it holds.
pub struct RenewCall<'a> {
    pub consumer: &'a str,
    pub stream_ids: &'a [String],
}

impl RenewCall<'_> {
    pub const FILE: &'static str = "queue_renew.lua";

    pub fn invocation(&self, keys: &QueueKeys) -> ScriptInvocation<'static> {
        let mut inv = lua::QUEUE_RENEW.prepare_invoke();
        inv.key(keys.tasks())
            .arg(GROUP)
            .arg(self.consumer)
            .arg(self.stream_ids);
        inv
    }

    /// The ids whose lease is lost (an empty Lua table arrives as an empty array).
    pub fn read(reply: Value) -> Result<Vec<String>, ReplyError> {
        Reply::of_value(Self::FILE, reply).rest("a lost stream id")
    }
}

/// `queue_promote.lua`: moves retries that are due back into the stream.
pub struct PromoteCall {
    /// The most to move in one call.
    pub most: u32,
}

impl PromoteCall {
    pub const FILE: &'static str = "queue_promote.lua";

    pub fn invocation(&self, keys: &QueueKeys) -> ScriptInvocation<'static> {
        let mut inv = lua::QUEUE_PROMOTE.prepare_invoke();
        inv.key(keys.tasks())
            .key(keys.retry())
            .arg(GROUP)
            .arg(self.most);
        inv
    }

    /// How many moved.
    pub fn read(reply: Value) -> Result<u64, ReplyError> {
        let mut r = Reply::of_value(Self::FILE, reply);
        let moved = r.count("how many moved")?;
        r.end()?;
        Ok(moved)
    }
}

/// `queue_forget.lua`: deletes consumers that hold nothing and were silent long enough, in one
/// step with the look that chose them.
pub struct ForgetCall<'a> {
    /// The caller's own consumer, never deleted.
    pub consumer: &'a str,
    pub silent_ms: u64,
}

impl ForgetCall<'_> {
    pub const FILE: &'static str = "queue_forget.lua";

    pub fn invocation(&self, keys: &QueueKeys) -> ScriptInvocation<'static> {
        let mut inv = lua::QUEUE_FORGET.prepare_invoke();
        inv.key(keys.tasks())
            .arg(GROUP)
            .arg(self.consumer)
            .arg(self.silent_ms);
        inv
    }

    /// How many were deleted.
    pub fn read(reply: Value) -> Result<u64, ReplyError> {
        let mut r = Reply::of_value(Self::FILE, reply);
        let deleted = r.count("how many were deleted")?;
        r.end()?;
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::BulkString(v.as_bytes().to_vec())
    }

    fn ints(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|n| Value::Int(*n)).collect())
    }

    fn begins(n: usize) -> Vec<BeginStep> {
        (0..n)
            .map(|i| BeginStep {
                stream_id: format!("{i}-0"),
                task_id: None,
                keep: false,
            })
            .collect()
    }

    fn finishes(n: usize) -> Vec<FinishStep> {
        (0..n)
            .map(|i| FinishStep {
                stream_id: format!("{i}-0"),
                result: None,
                dead_reason: None,
                fields: Vec::new(),
                keep: false,
            })
            .collect()
    }

    #[test]
    fn replies_as_their_contracts_say_read_whole() {
        let added = EnqueueCall::read(Value::Array(vec![s("t1"), Value::Int(1)])).unwrap();
        assert_eq!((added.id.as_str(), added.duplicate), ("t1", true));
        let steps = begins(3);
        let begin = BeginCall {
            consumer: "c",
            steps: &steps,
        };
        assert_eq!(
            begin.read(ints(&[1, 2, 2, 0, 0, 0])).unwrap(),
            [Begin::Go(2), Begin::Done, Begin::Lost]
        );
        let steps = finishes(3);
        let finish = FinishCall {
            consumer: "c",
            result_ttl_ms: 1,
            dead_kept: 1,
            steps: &steps,
        };
        assert_eq!(
            finish.read(ints(&[1, 2, 0])).unwrap(),
            [
                Finished::Written,
                Finished::AlreadyThere,
                Finished::LeaseLost
            ]
        );
        assert!(RetryCall::read(Value::Int(1)).unwrap());
        assert!(!RetryCall::read(Value::Int(0)).unwrap());
        assert_eq!(
            RenewCall::read(Value::Array(vec![s("1-0")])).unwrap(),
            ["1-0"]
        );
        assert!(RenewCall::read(Value::Array(vec![])).unwrap().is_empty());
        assert_eq!(PromoteCall::read(Value::Int(4)).unwrap(), 4);
        assert_eq!(ForgetCall::read(Value::Int(2)).unwrap(), 2);
    }

    #[test]
    fn an_unknown_outcome_is_an_error_naming_the_script_never_a_lost_lease() {
        let steps = finishes(2);
        let finish = FinishCall {
            consumer: "c",
            result_ttl_ms: 1,
            dead_kept: 1,
            steps: &steps,
        };
        let e = finish.read(ints(&[1, 7])).unwrap_err();
        assert_eq!((e.script, e.position), ("queue_finish.lua", 2));
        assert!(finish.read(ints(&[1])).is_err(), "one outcome per entry");
        assert!(finish.read(ints(&[1, 1, 1])).is_err(), "no more than asked");
        let steps = begins(1);
        let begin = BeginCall {
            consumer: "c",
            steps: &steps,
        };
        for bad in [[3, 0], [1, 0], [0, 4], [2, 9]] {
            let e = begin.read(ints(&bad)).unwrap_err();
            assert_eq!(e.script, "queue_begin.lua", "{bad:?}");
        }
        assert!(
            begin.read(ints(&[1, -1])).is_err(),
            "deliveries are a count"
        );
        assert!(RetryCall::read(Value::Int(2)).is_err());
        assert!(RetryCall::read(s("1")).is_err());
        assert!(EnqueueCall::read(Value::Array(vec![s("t1")])).is_err());
        assert!(EnqueueCall::read(Value::Array(vec![Value::Int(5), Value::Int(0)])).is_err());
        assert!(RenewCall::read(Value::Array(vec![Value::Int(1)])).is_err());
        assert!(PromoteCall::read(Value::Int(-1)).is_err());
    }
}
