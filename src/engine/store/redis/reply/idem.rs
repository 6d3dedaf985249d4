//! `idem_bind.lua`'s reply.

use redis::Value;

use crate::engine::store::StoreError;
use crate::redis_base::Reply;

/// `idem_bind.lua`: `1` when bound, `0` when the binding was something else.
pub struct Bound {
    pub bound: bool,
}

impl Bound {
    pub fn read(value: Value) -> Result<Bound, StoreError> {
        let mut r = Reply::of("idem_bind.lua", vec![value]);
        let bound = r.flag("whether it bound the key")?;
        r.end()?;
        Ok(Bound { bound })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_reads_as_its_contract_says_or_is_an_error_naming_the_script() {
        assert!(Bound::read(Value::Int(1)).unwrap().bound);
        assert!(!Bound::read(Value::Int(0)).unwrap().bound);
        for wrong in [
            Value::Int(2),
            Value::Nil,
            Value::Okay,
            Value::Array(vec![Value::Int(1)]),
        ] {
            let e = Bound::read(wrong).err().unwrap();
            assert!(e.to_string().contains("idem_bind.lua"), "{e}");
        }
    }
}
