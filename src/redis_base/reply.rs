//! Reading a script's reply as its contract header in `lua/` says it is: each position there
//! with its type, or an error naming the script and the position. Never a default: a missing or
//! mistyped value read as 0 or skipped would shift every later position, and a decision made on
//! a misread reply (a hand-out, a thread grant) could go to the wrong caller.

use redis::Value;

/// A reply that is not what its script's contract says. It names what was found by kind only,
/// never by content: a reply can carry an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{script} replied {got} where its contract has {expected} (position {position})")]
pub struct ReplyError {
    pub script: &'static str,
    /// 1-based position in the reply.
    pub position: usize,
    pub expected: String,
    pub got: String,
}

/// A reply being read front to back.
pub struct Reply {
    script: &'static str,
    values: std::vec::IntoIter<Value>,
    at: usize,
}

impl Reply {
    /// A script's whole reply as Redis sent it: an array is read item by item, anything else
    /// (a script returning one number) as a reply of one value.
    pub fn of_value(script: &'static str, value: Value) -> Reply {
        match value {
            Value::Array(values) => Reply::of(script, values),
            one => Reply::of(script, vec![one]),
        }
    }

    /// `script` names the file, for the error.
    pub fn of(script: &'static str, values: Vec<Value>) -> Reply {
        Reply {
            script,
            values: values.into_iter(),
            at: 0,
        }
    }

    fn next(&mut self, what: &str) -> Result<Value, ReplyError> {
        self.at += 1;
        self.values
            .next()
            .ok_or_else(|| self.wrong(what, "nothing"))
    }

    /// The error for a value found at the current position that is not `what`.
    pub fn wrong(&self, what: &str, got: &str) -> ReplyError {
        ReplyError {
            script: self.script,
            position: self.at,
            expected: what.to_owned(),
            got: got.to_owned(),
        }
    }

    /// An integer (Lua numbers arrive as integers).
    pub fn int(&mut self, what: &str) -> Result<i64, ReplyError> {
        match self.next(what)? {
            Value::Int(n) => Ok(n),
            other => Err(self.wrong(what, kind(&other))),
        }
    }

    /// A count: an integer that is not negative.
    pub fn count(&mut self, what: &str) -> Result<u64, ReplyError> {
        let n = self.int(what)?;
        u64::try_from(n).map_err(|_| self.wrong(what, "a negative number"))
    }

    /// 1 or 0.
    pub fn flag(&mut self, what: &str) -> Result<bool, ReplyError> {
        match self.int(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.wrong(what, "a number other than 0 or 1")),
        }
    }

    /// A string (`''` included).
    pub fn text(&mut self, what: &str) -> Result<String, ReplyError> {
        match self.next(what)? {
            v @ (Value::BulkString(_) | Value::SimpleString(_) | Value::VerbatimString { .. }) => {
                redis::from_redis_value::<String>(v).map_err(|_| self.wrong(what, "bytes"))
            }
            other => Err(self.wrong(what, kind(&other))),
        }
    }

    /// `n` strings.
    pub fn texts(&mut self, n: usize, what: &str) -> Result<Vec<String>, ReplyError> {
        (0..n).map(|_| self.text(what)).collect()
    }

    /// A nested array of strings (a list inside the reply).
    pub fn list(&mut self, what: &str) -> Result<Vec<String>, ReplyError> {
        match self.next(what)? {
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        v @ (Value::BulkString(_) | Value::SimpleString(_)) => out.push(
                            redis::from_redis_value::<String>(v)
                                .map_err(|_| self.wrong(what, "bytes"))?,
                        ),
                        other => return Err(self.wrong(what, kind(&other))),
                    }
                }
                Ok(out)
            }
            other => Err(self.wrong(what, kind(&other))),
        }
    }

    /// Every remaining value, each a bulk string kept as bytes (queue entries, which need not be
    /// UTF-8).
    pub fn rest_bytes(mut self, what: &str) -> Result<Vec<Vec<u8>>, ReplyError> {
        let mut out = Vec::with_capacity(self.values.len());
        while self.values.len() > 0 {
            match self.next(what)? {
                Value::BulkString(bytes) => out.push(bytes),
                other => return Err(self.wrong(what, kind(&other))),
            }
        }
        Ok(out)
    }

    /// Every remaining value, each a string (a list of waiter ids).
    pub fn rest(mut self, what: &str) -> Result<Vec<String>, ReplyError> {
        let mut out = Vec::with_capacity(self.values.len());
        while self.values.len() > 0 {
            out.push(self.text(what)?);
        }
        Ok(out)
    }

    /// The reply ends here.
    pub fn end(mut self) -> Result<(), ReplyError> {
        match self.values.next() {
            None => Ok(()),
            Some(extra) => {
                self.at += 1;
                Err(self.wrong("the end", kind(&extra)))
            }
        }
    }
}

/// For callers whose errors are Redis's own (the thread budget, the seed lists): a reply that
/// breaks its contract is an unexpected return type, its text naming the script.
impl From<ReplyError> for redis::RedisError {
    fn from(e: ReplyError) -> Self {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "script reply",
            e.to_string(),
        ))
    }
}

/// What a value is, without what it holds (a reply can carry an answer).
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Int(_) => "an integer",
        Value::BulkString(_) | Value::SimpleString(_) | Value::VerbatimString { .. } => "a string",
        Value::Array(_) | Value::Set(_) | Value::Map(_) => "a collection",
        Value::Okay => "OK",
        _ => "another type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::BulkString(v.as_bytes().to_vec())
    }

    #[test]
    fn each_position_is_read_with_its_type_and_the_end_is_checked() {
        let mut r = Reply::of(
            "x.lua",
            vec![Value::Int(1), Value::Int(7), s("a"), s("b"), s("c")],
        );
        assert!(r.flag("flag").unwrap());
        assert_eq!(r.count("count").unwrap(), 7);
        assert_eq!(r.texts(1, "one").unwrap(), ["a"]);
        assert_eq!(r.rest("rest").unwrap(), ["b", "c"]);
        let mut done = Reply::of_value("x.lua", Value::Int(-3));
        assert_eq!(done.int("int").unwrap(), -3);
        done.end().unwrap();
    }

    #[test]
    fn a_wrong_value_names_the_script_the_position_and_the_kind_never_the_content() {
        let mut r = Reply::of("x.lua", vec![Value::Int(0), s("secret-token")]);
        r.int("code").unwrap();
        let e = r.count("count").unwrap_err();
        assert_eq!((e.script, e.position), ("x.lua", 2));
        assert!(e.to_string().contains("a string"), "{e}");
        assert!(!e.to_string().contains("secret-token"), "{e}");
        let short = Reply::of("x.lua", vec![]).int("code").unwrap_err();
        assert_eq!(short.got, "nothing");
        let negative = Reply::of("x.lua", vec![Value::Int(-1)])
            .count("n")
            .unwrap_err();
        assert_eq!(negative.got, "a negative number");
        assert!(Reply::of("x.lua", vec![Value::Int(2)]).flag("f").is_err());
        let mut nested = Reply::of(
            "x.lua",
            vec![
                Value::Array(vec![s("a")]),
                Value::Array(vec![Value::Int(1)]),
            ],
        );
        assert_eq!(nested.list("names").unwrap(), ["a"]);
        assert_eq!(nested.list("names").unwrap_err().got, "an integer");
        let extra = Reply::of("x.lua", vec![Value::Nil]).end().unwrap_err();
        assert_eq!((extra.position, extra.got.as_str()), (1, "nil"));
    }
}
