//! The replies of the reusable-answer scripts beside `shared_arrive.lua`'s: `shared_renew` and
//! `shared_takeover` (`shared_finish` answers `{woken...}`, read as [`super::Woken`]).

use redis::Value;

use crate::engine::store::StoreError;
use crate::redis_base::Reply;

/// `shared_renew.lua`: `1` while the lock is this leader's, `0` when it is lost (or it led
/// nothing).
pub struct SharedRenewed {
    pub held: bool,
}

impl SharedRenewed {
    /// The script answers a single integer, not a list.
    pub fn read(value: Value) -> Result<SharedRenewed, StoreError> {
        let mut r = Reply::of("shared_renew.lua", vec![value]);
        let held = r.flag("whether the lock is held")?;
        r.end()?;
        Ok(SharedRenewed { held })
    }
}

/// `shared_takeover.lua`: `{0}` | `{1, woken...}` | `{2, token}`.
pub enum SharedTakenOver {
    /// The lock is held, or nobody follows.
    Nothing,
    /// A fresh cached answer was mailed to these followers.
    Mailed { woken: Vec<String> },
    /// This instance leads now, under this token.
    Lead { token: u64 },
}

impl SharedTakenOver {
    pub fn read(values: Vec<Value>) -> Result<SharedTakenOver, StoreError> {
        let mut r = Reply::of("shared_takeover.lua", values);
        match r.int("the code")? {
            0 => {
                r.end()?;
                Ok(SharedTakenOver::Nothing)
            }
            1 => Ok(SharedTakenOver::Mailed {
                woken: r.rest("woken waiters")?,
            }),
            2 => {
                let token = r.count("the lock's token")?;
                r.end()?;
                Ok(SharedTakenOver::Lead { token })
            }
            _ => Err(r.wrong("the code 0, 1 or 2", "another number").into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Woken;
    use super::*;

    fn s(v: &str) -> Value {
        Value::BulkString(v.as_bytes().to_vec())
    }

    #[test]
    fn a_reply_as_its_contract_says_reads_whole() {
        let f = Woken::read("shared_finish.lua", vec![s("a:s1"), s("b:s2")]).unwrap();
        assert_eq!(f.woken, ["a:s1", "b:s2"]);
        assert!(
            Woken::read("shared_finish.lua", vec![])
                .unwrap()
                .woken
                .is_empty()
        );
        assert!(SharedRenewed::read(Value::Int(1)).unwrap().held);
        assert!(!SharedRenewed::read(Value::Int(0)).unwrap().held);
        assert!(matches!(
            SharedTakenOver::read(vec![Value::Int(0)]),
            Ok(SharedTakenOver::Nothing)
        ));
        assert!(matches!(
            SharedTakenOver::read(vec![Value::Int(1), s("w")]),
            Ok(SharedTakenOver::Mailed { woken }) if woken == ["w"]
        ));
        assert!(matches!(
            SharedTakenOver::read(vec![Value::Int(2), Value::Int(9)]),
            Ok(SharedTakenOver::Lead { token: 9 })
        ));
    }

    #[test]
    fn a_short_mistyped_or_overlong_reply_is_an_error_naming_the_script() {
        let named = |e: StoreError, script: &str| {
            let e = e.to_string();
            assert!(e.contains(script), "{e}");
        };
        named(
            Woken::read("shared_finish.lua", vec![Value::Int(1)])
                .err()
                .unwrap(),
            "shared_finish.lua",
        );
        named(
            SharedRenewed::read(Value::Int(2)).err().unwrap(),
            "shared_renew.lua",
        );
        named(
            SharedRenewed::read(s("1")).err().unwrap(),
            "shared_renew.lua",
        );
        named(
            SharedRenewed::read(Value::Array(vec![Value::Int(1)]))
                .err()
                .unwrap(),
            "shared_renew.lua",
        );
        // A lead without its token is no lead (never token 0).
        let short = SharedTakenOver::read(vec![Value::Int(2)]).err().unwrap();
        assert!(short.to_string().contains("position 2"), "{short}");
        named(short, "shared_takeover.lua");
        named(
            SharedTakenOver::read(vec![Value::Int(2), Value::Int(-1)])
                .err()
                .unwrap(),
            "shared_takeover.lua",
        );
        named(
            SharedTakenOver::read(vec![Value::Int(2), Value::Int(3), s("x")])
                .err()
                .unwrap(),
            "shared_takeover.lua",
        );
        named(
            SharedTakenOver::read(vec![Value::Int(0), s("w")])
                .err()
                .unwrap(),
            "shared_takeover.lua",
        );
        let code = SharedTakenOver::read(vec![Value::Int(3)]).err().unwrap();
        assert!(code.to_string().contains("position 1"), "{code}");
        named(code, "shared_takeover.lua");
        named(
            SharedTakenOver::read(vec![]).err().unwrap(),
            "shared_takeover.lua",
        );
    }
}
