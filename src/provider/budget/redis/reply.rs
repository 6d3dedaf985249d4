//! The thread budget's script replies, one type per script, read with the strict
//! [`Reply`] reader: as the contract header in `lua/` says, or an error naming the script and
//! the position, never a default.

use redis::Value;

use crate::redis_base::{Reply, ReplyError};

/// `budget_acquire.lua`: `{granted, fence, leases, cap, followers granted}`.
pub(super) struct Acquired {
    pub(super) granted: bool,
    pub(super) in_use: u64,
    pub(super) cap: u64,
    /// How many of the followers asked for were granted too, in order.
    pub(super) also: u64,
}

impl Acquired {
    pub(super) fn read(values: Vec<Value>) -> Result<Acquired, ReplyError> {
        let mut r = Reply::of("budget_acquire.lua", values);
        let granted = r.flag("granted")?;
        r.int("fence")?;
        let read = Acquired {
            granted,
            in_use: r.count("leases")?,
            cap: r.count("cap")?,
            also: r.count("followers granted")?,
        };
        r.end()?;
        Ok(read)
    }
}

/// `budget_release.lua`: `{removed, leases, removed...}`, one flag per id given back, in order.
pub(super) struct Released {
    pub(super) in_use: u64,
    pub(super) removed: Vec<bool>,
}

impl Released {
    pub(super) fn read(values: Vec<Value>, ids: usize) -> Result<Released, ReplyError> {
        let mut r = Reply::of("budget_release.lua", values);
        let first = r.flag("removed")?;
        let in_use = r.count("leases")?;
        let mut removed = Vec::with_capacity(ids);
        removed.push(first);
        for _ in 1..ids {
            removed.push(r.flag("removed")?);
        }
        r.end()?;
        Ok(Released { in_use, removed })
    }
}

/// `budget_renew.lua`: `{leases, cap, lost id...}`.
pub(super) struct Renewed {
    pub(super) in_use: u64,
    pub(super) cap: u64,
    pub(super) lost: Vec<String>,
}

impl Renewed {
    pub(super) fn read(values: Vec<Value>) -> Result<Renewed, ReplyError> {
        let mut r = Reply::of("budget_renew.lua", values);
        Ok(Renewed {
            in_use: r.count("leases")?,
            cap: r.count("cap")?,
            lost: r.rest("lost leases")?,
        })
    }
}

/// `budget_cap.lua`: `{cap}`.
pub(super) fn capped(values: Vec<Value>) -> Result<u64, ReplyError> {
    let mut r = Reply::of("budget_cap.lua", values);
    let cap = r.count("cap")?;
    r.end()?;
    Ok(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::BulkString(v.as_bytes().to_vec())
    }

    #[test]
    fn budget_replies_are_read_against_their_contracts() {
        let i = Value::Int;
        let granted = Acquired::read(vec![i(1), i(4), i(3), i(10), i(2)]).unwrap();
        assert_eq!(
            (granted.granted, granted.in_use, granted.cap, granted.also),
            (true, 3, 10, 2)
        );
        let flag = Acquired::read(vec![i(2), i(4), i(3), i(10), i(2)])
            .err()
            .unwrap();
        assert!(flag.to_string().contains("budget_acquire.lua"), "{flag}");
        let released = Released::read(vec![i(1), i(5), i(0), i(1)], 3).unwrap();
        assert_eq!(
            (released.in_use, released.removed),
            (5, vec![true, false, true])
        );
        let short = Released::read(vec![i(1), i(5)], 2);
        assert!(short.is_err(), "one flag per id given back, never a guess");
        let renewed = Renewed::read(vec![i(2), i(8), s("a:1")]).unwrap();
        assert_eq!(
            (renewed.in_use, renewed.cap, renewed.lost),
            (2, 8, vec!["a:1".to_owned()])
        );
        assert!(capped(vec![i(-1)]).is_err(), "a cap is never negative");
        assert!(
            capped(vec![i(7), i(7)]).is_err(),
            "{{cap}} has nothing after it"
        );
    }
}
