//! The replies of the target scripts that hand answers on (`finish`, `abandon`, `put`,
//! `renew`) and of `retire.lua`, which runs on the same keys.

use redis::Value;

use crate::engine::store::StoreError;
use crate::redis_base::Reply;

/// `finish.lua`: `{restart (0/1), woken...}`.
pub struct Delivered {
    /// Whether to start a task under the restart claim the call named.
    pub restart: bool,
    pub woken: Vec<String>,
}

impl Delivered {
    pub fn read(values: Vec<Value>) -> Result<Delivered, StoreError> {
        let mut r = Reply::of("finish.lua", values);
        Ok(Delivered {
            restart: r.flag("the restart flag")?,
            woken: r.rest("woken waiters")?,
        })
    }
}

/// `abandon.lua`, `put.lua` and `shared_finish.lua` all answer `{woken...}`: the waiters (or
/// followers) that got mail.
pub struct Woken {
    pub woken: Vec<String>,
}

impl Woken {
    /// `script` names the file, for the error.
    pub fn read(script: &'static str, values: Vec<Value>) -> Result<Woken, StoreError> {
        Ok(Woken {
            woken: Reply::of(script, values).rest("woken waiters")?,
        })
    }
}

/// `renew.lua`: `{waiters restored, claims restored, n, ended 1..n, woken...}`.
pub struct Restored {
    pub waiters: u64,
    pub claims: u64,
    /// Waiters renewed that Redis had served or let go: nothing will reach them.
    pub ended: Vec<String>,
    pub woken: Vec<String>,
}

impl Restored {
    pub fn read(values: Vec<Value>) -> Result<Restored, StoreError> {
        let mut r = Reply::of("renew.lua", values);
        Ok(Restored {
            waiters: r.count("waiters restored")?,
            claims: r.count("claims restored")?,
            ended: {
                let n = r.count("ended waiters")?;
                r.texts(n as usize, "an ended waiter")?
            },
            woken: r.rest("woken waiters")?,
        })
    }
}

/// `retire.lua`: `{1}` | `{0, woken...}`.
pub enum Retired {
    /// Its keys are gone.
    Gone,
    /// Something keeps it; `woken` got passed-on mail while the script reaped.
    Kept { woken: Vec<String> },
}

impl Retired {
    pub fn read(values: Vec<Value>) -> Result<Retired, StoreError> {
        let mut r = Reply::of("retire.lua", values);
        if r.flag("the retired flag")? {
            r.end()?;
            return Ok(Retired::Gone);
        }
        Ok(Retired::Kept {
            woken: r.rest("woken waiters")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::BulkString(v.as_bytes().to_vec())
    }

    #[test]
    fn a_reply_as_its_contract_says_reads_whole() {
        let d = Delivered::read(vec![Value::Int(1), s("w1"), s("w2")]).unwrap();
        assert_eq!((d.restart, d.woken), (true, vec!["w1".into(), "w2".into()]));
        let d = Delivered::read(vec![Value::Int(0)]).unwrap();
        assert_eq!((d.restart, d.woken.len()), (false, 0));
        assert_eq!(
            Woken::read("abandon.lua", vec![s("w")]).unwrap().woken,
            ["w"]
        );
        assert!(Woken::read("abandon.lua", vec![]).unwrap().woken.is_empty());
        assert_eq!(
            Woken::read("put.lua", vec![s("a"), s("b")]).unwrap().woken,
            ["a", "b"]
        );
        let n = Restored::read(vec![
            Value::Int(2),
            Value::Int(1),
            Value::Int(1),
            s("e"),
            s("w"),
        ])
        .unwrap();
        assert_eq!(
            (n.waiters, n.claims, n.ended, n.woken),
            (2, 1, vec!["e".into()], vec!["w".into()])
        );
        assert!(matches!(
            Retired::read(vec![Value::Int(1)]),
            Ok(Retired::Gone)
        ));
        assert!(matches!(
            Retired::read(vec![Value::Int(0), s("w")]),
            Ok(Retired::Kept { woken }) if woken == ["w"]
        ));
    }

    #[test]
    fn a_short_mistyped_or_overlong_reply_is_an_error_naming_the_script() {
        let named = |e: StoreError, script: &str| {
            let e = e.to_string();
            assert!(e.contains(script), "{e}");
        };
        // Short: nothing where the restart flag must be.
        named(Delivered::read(vec![]).err().unwrap(), "finish.lua");
        // A restart flag other than 0 or 1 is not read as "no restart".
        named(
            Delivered::read(vec![Value::Int(2)]).err().unwrap(),
            "finish.lua",
        );
        named(
            Delivered::read(vec![Value::Int(0), Value::Int(3)])
                .err()
                .unwrap(),
            "finish.lua",
        );
        named(
            Woken::read("abandon.lua", vec![Value::Int(1)])
                .err()
                .unwrap(),
            "abandon.lua",
        );
        named(
            Woken::read("put.lua", vec![Value::Nil]).err().unwrap(),
            "put.lua",
        );
        named(
            Restored::read(vec![Value::Int(1)]).err().unwrap(),
            "renew.lua",
        );
        named(
            Restored::read(vec![Value::Int(-1), Value::Int(0)])
                .err()
                .unwrap(),
            "renew.lua",
        );
        named(
            Restored::read(vec![s("1"), Value::Int(0)]).err().unwrap(),
            "renew.lua",
        );
        // `{1}` has nothing after it.
        named(
            Retired::read(vec![Value::Int(1), s("w")]).err().unwrap(),
            "retire.lua",
        );
        named(Retired::read(vec![]).err().unwrap(), "retire.lua");
        named(
            Retired::read(vec![Value::Int(5)]).err().unwrap(),
            "retire.lua",
        );
    }
}
