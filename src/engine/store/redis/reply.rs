//! The store scripts' replies, one type per script, each read with the strict
//! [`Reply`](crate::redis_base::Reply) reader: as the script's contract header in `lua/` says,
//! or an error naming the script and the position, never a default.

mod announce;
mod idem;
mod shared;
mod target;
mod task;

pub(super) use announce::Announced;
pub(super) use idem::Bound;
pub(super) use shared::{SharedRenewed, SharedTakenOver};
pub(super) use target::{Delivered, Restored, Retired, Woken};
pub(super) use task::{Reported, TaskFinished};

use redis::Value;

use crate::engine::store::StoreError;
use crate::redis_base::Reply;

/// `arrive.lua`: `{code, now, answer json, remaining ms, woken...}`.
pub(super) struct Arrived {
    pub(super) code: ArriveCode,
    /// The waiter's place in the queue (Redis ms).
    pub(super) arrived: u64,
    /// Code 1: the pooled answer's JSON; code 3: the note of the provider task adopted, or ''.
    pub(super) answer: String,
    pub(super) remaining_ms: i64,
    /// Code 1 with a batch taken: its answers' mails, in pool order.
    pub(super) held: Vec<String>,
    pub(super) woken: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ArriveCode {
    Pooled,
    Wait,
    Start,
}

impl Arrived {
    pub(super) fn read(values: Vec<Value>) -> Result<Arrived, StoreError> {
        let mut r = Reply::of("arrive.lua", values);
        let code = match r.int("the code")? {
            1 => ArriveCode::Pooled,
            2 => ArriveCode::Wait,
            3 => ArriveCode::Start,
            _ => return Err(r.wrong("the code 1, 2 or 3", "another number").into()),
        };
        let arrived = r.count("the arrival time")?;
        let answer = r.text("the answer")?;
        let remaining_ms = r.int("the remaining life")?;
        let n = r.count("the answers held")?;
        let n = usize::try_from(n)
            .ok()
            .filter(|n| *n <= super::held::MAX_BATCH as usize)
            .ok_or_else(|| r.wrong("at most the largest batch", "more"))?;
        Ok(Arrived {
            code,
            arrived,
            answer,
            remaining_ms,
            held: r.texts(n, "a held answer's mail")?,
            woken: r.rest("woken waiters")?,
        })
    }
}

/// `reserve.lua` and `cover.lua`: `{n, adopted 1..n, woken...}`.
pub(super) struct Claimed {
    /// One note per claim started (the provider task it adopts, or '').
    pub(super) adopted: Vec<String>,
    pub(super) woken: Vec<String>,
}

impl Claimed {
    /// At most `asked` claims can have started.
    pub(super) fn read(
        script: &'static str,
        values: Vec<Value>,
        asked: usize,
    ) -> Result<Claimed, StoreError> {
        let mut r = Reply::of(script, values);
        let n = r.count("the claims started")?;
        let n = usize::try_from(n)
            .ok()
            .filter(|n| *n <= asked)
            .ok_or_else(|| r.wrong("at most the candidates given", "more"))?;
        Ok(Claimed {
            adopted: r.texts(n, "an adopted task's note")?,
            woken: r.rest("woken waiters")?,
        })
    }
}

/// `counts.lua`: `{pooled, in_flight, waiting, woken...}`.
pub(super) struct Counted {
    pub(super) pooled: u64,
    pub(super) in_flight: u64,
    pub(super) waiting: u64,
    pub(super) woken: Vec<String>,
}

impl Counted {
    pub(super) fn read(values: Vec<Value>) -> Result<Counted, StoreError> {
        let mut r = Reply::of("counts.lua", values);
        Ok(Counted {
            pooled: r.count("pooled")?,
            in_flight: r.count("in flight")?,
            waiting: r.count("waiting")?,
            woken: r.rest("woken waiters")?,
        })
    }
}

/// `take.lua`: `{0}` | `{1, mail, remaining}` | `{2}`.
pub(super) enum Taken {
    /// Mail for the waiter, with the answer's remaining life (0 for a failure).
    Mail { mail: String, remaining_ms: i64 },
    /// No mail, or requeued: nothing to hand out.
    Nothing,
}

impl Taken {
    pub(super) fn read(values: Vec<Value>) -> Result<Taken, StoreError> {
        let mut r = Reply::of("take.lua", values);
        match r.int("the code")? {
            1 => {
                let mail = r.text("the mail")?;
                let remaining_ms = r.int("the remaining life")?;
                r.end()?;
                Ok(Taken::Mail { mail, remaining_ms })
            }
            0 | 2 => {
                r.end()?;
                Ok(Taken::Nothing)
            }
            _ => Err(r.wrong("the code 0, 1 or 2", "another number").into()),
        }
    }
}

/// `shared_arrive.lua`: `{1, answer json, remaining ms}` | `{2}` | `{3, token}`.
pub(super) enum SharedArrived {
    Cached { answer: String, remaining_ms: i64 },
    Follow,
    Lead { token: u64 },
}

impl SharedArrived {
    pub(super) fn read(values: Vec<Value>) -> Result<SharedArrived, StoreError> {
        let mut r = Reply::of("shared_arrive.lua", values);
        let arrived = match r.int("the code")? {
            1 => SharedArrived::Cached {
                answer: r.text("the cached answer")?,
                remaining_ms: r.int("the remaining life")?,
            },
            2 => SharedArrived::Follow,
            3 => SharedArrived::Lead {
                token: r.count("the lock's token")?,
            },
            _ => return Err(r.wrong("the code 1, 2 or 3", "another number").into()),
        };
        r.end()?;
        Ok(arrived)
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
        let a = Arrived::read(vec![
            Value::Int(1),
            Value::Int(1_000),
            s("{}"),
            Value::Int(50),
            Value::Int(1),
            s("A|9|{}"),
            s("w1"),
            s("w2"),
        ])
        .unwrap();
        assert_eq!(a.code, ArriveCode::Pooled);
        assert_eq!(
            (a.arrived, a.answer.as_str(), a.remaining_ms),
            (1_000, "{}", 50)
        );
        assert_eq!(a.held, ["A|9|{}"]);
        assert_eq!(a.woken, ["w1", "w2"]);
        // More held answers than any batch may take is a broken reply, not a long batch.
        let too_many = Arrived::read(vec![
            Value::Int(1),
            Value::Int(1_000),
            s("{}"),
            Value::Int(50),
            Value::Int(i64::from(crate::engine::store::redis::held::MAX_BATCH) + 1),
        ]);
        assert!(too_many.is_err());
        let c = Claimed::read("cover.lua", vec![Value::Int(1), s(""), s("w")], 2).unwrap();
        assert_eq!(
            (c.adopted, c.woken),
            (vec![String::new()], vec!["w".to_owned()])
        );
        let n = Counted::read(vec![Value::Int(2), Value::Int(1), Value::Int(0)]).unwrap();
        assert_eq!(
            (n.pooled, n.in_flight, n.waiting, n.woken.len()),
            (2, 1, 0, 0)
        );
    }

    #[test]
    fn a_missing_or_mistyped_value_is_an_error_naming_the_script_never_a_default() {
        let short = Arrived::read(vec![Value::Int(2), Value::Int(5)])
            .err()
            .unwrap();
        assert!(short.to_string().contains("arrive.lua"), "{short}");
        assert!(short.to_string().contains("position 3"), "{short}");
        let code = Arrived::read(vec![Value::Int(7)]).err().unwrap();
        assert!(code.to_string().contains("code"), "{code}");
        let typed = Counted::read(vec![s("2"), Value::Int(1), Value::Int(0)])
            .err()
            .unwrap();
        assert!(typed.to_string().contains("a string"), "{typed}");
        let woken = Counted::read(vec![
            Value::Int(0),
            Value::Int(0),
            Value::Int(0),
            Value::Int(9),
        ]);
        assert!(woken.is_err(), "a waiter id must be a string");
        let too_many = Claimed::read("reserve.lua", vec![Value::Int(3), s(""), s(""), s("")], 2);
        assert!(too_many.is_err(), "more claims than candidates");
        let negative = Counted::read(vec![Value::Int(-1), Value::Int(0), Value::Int(0)]);
        assert!(negative.is_err());
        let extra = Taken::read(vec![Value::Int(0), s("x")]);
        assert!(extra.is_err(), "take's {{0}} has nothing after it");
        let lead = SharedArrived::read(vec![Value::Int(3)]);
        assert!(
            lead.is_err(),
            "a lead without its token is no lead (never token 0)"
        );
        assert!(matches!(
            SharedArrived::read(vec![Value::Int(3), Value::Int(7)]),
            Ok(SharedArrived::Lead { token: 7 })
        ));
    }

    #[test]
    fn an_answer_in_a_bad_reply_is_not_repeated_in_the_error() {
        let e = Taken::read(vec![Value::Int(1), s("A|1|{\"text\":\"secret-token\"}")])
            .err()
            .unwrap();
        assert!(!e.to_string().contains("secret-token"), "{e}");
    }
}
