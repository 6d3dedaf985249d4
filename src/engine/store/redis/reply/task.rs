//! The replies of the task record scripts (`task_*.lua`), each a single integer.

use redis::Value;

use crate::engine::store::StoreError;
use crate::redis_base::Reply;

/// `task_report.lua`: `1` when this call marked the record reported, `0` when it already was
/// (or is gone).
pub struct Reported {
    pub marked: bool,
}

impl Reported {
    pub fn read(value: Value) -> Result<Reported, StoreError> {
        let mut r = Reply::of("task_report.lua", vec![value]);
        let marked = r.flag("whether this call marked it")?;
        r.end()?;
        Ok(Reported { marked })
    }
}

/// `task_finish.lua`: `1` written | `2` written again whole | `0` already finished (or gone
/// with no copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskFinished {
    Written,
    /// Redis had lost the record; it was written again from this instance's copy.
    Rewritten,
    Already,
}

impl TaskFinished {
    pub fn read(value: Value) -> Result<TaskFinished, StoreError> {
        let mut r = Reply::of("task_finish.lua", vec![value]);
        let finished = match r.int("the code")? {
            0 => TaskFinished::Already,
            1 => TaskFinished::Written,
            2 => TaskFinished::Rewritten,
            _ => return Err(r.wrong("the code 0, 1 or 2", "another number").into()),
        };
        r.end()?;
        Ok(finished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_as_its_contract_says_reads_whole() {
        assert!(Reported::read(Value::Int(1)).unwrap().marked);
        assert!(!Reported::read(Value::Int(0)).unwrap().marked);
        let codes = [0, 1, 2].map(|c| TaskFinished::read(Value::Int(c)).unwrap());
        assert_eq!(
            codes,
            [
                TaskFinished::Already,
                TaskFinished::Written,
                TaskFinished::Rewritten
            ]
        );
    }

    #[test]
    fn a_short_mistyped_or_overlong_reply_is_an_error_naming_the_script() {
        let named = |e: StoreError, script: &str| {
            let e = e.to_string();
            assert!(e.contains(script), "{e}");
        };
        named(
            Reported::read(Value::Int(2)).err().unwrap(),
            "task_report.lua",
        );
        named(Reported::read(Value::Nil).err().unwrap(), "task_report.lua");
        named(
            TaskFinished::read(Value::Int(3)).unwrap_err(),
            "task_finish.lua",
        );
        named(
            TaskFinished::read(Value::BulkString(b"1".to_vec())).unwrap_err(),
            "task_finish.lua",
        );
        // A list where one integer belongs is neither read whole nor cut short.
        named(
            TaskFinished::read(Value::Array(vec![Value::Int(1), Value::Int(1)])).unwrap_err(),
            "task_finish.lua",
        );
    }
}
