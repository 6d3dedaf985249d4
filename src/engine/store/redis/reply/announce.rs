//! `announce.lua`'s reply.

use redis::Value;

use crate::engine::store::StoreError;
use crate::redis_base::Reply;

/// `announce.lua`: `1`, the announcement is on the inbox.
pub struct Announced;

impl Announced {
    pub fn read(value: Value) -> Result<Announced, StoreError> {
        let mut r = Reply::of("announce.lua", vec![value]);
        if r.int("1")? != 1 {
            return Err(r.wrong("1", "another number").into());
        }
        r.end()?;
        Ok(Announced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_reads_as_its_contract_says_or_is_an_error_naming_the_script() {
        assert!(Announced::read(Value::Int(1)).is_ok());
        for wrong in [
            Value::Int(0),
            Value::Nil,
            Value::BulkString(b"1".to_vec()),
            Value::Array(vec![Value::Int(1)]),
        ] {
            let e = Announced::read(wrong).err().unwrap();
            assert!(e.to_string().contains("announce.lua"), "{e}");
        }
    }
}
