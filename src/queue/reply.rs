//! Reading Redis replies without trusting their shape: RESP2 arrays of field, value pairs and
//! RESP3 maps alike, anything unexpected read as absent rather than a panic.

use redis::Value;

/// A string reply, bulk or simple.
pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// The name, value pairs of a flat array (`XINFO` in RESP2) or a map (RESP3).
pub(crate) fn pairs(v: &Value) -> Vec<(String, &Value)> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| match kv {
                [k, v] => Some((text(k)?, v)),
                _ => None,
            })
            .collect(),
        Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, v)))
            .collect(),
        _ => Vec::new(),
    }
}

/// A number field (`lag`, `pending`) of the workers' group in an `XINFO GROUPS` reply (RESP2 flat
/// arrays or RESP3 maps).
pub(crate) fn group_field(groups: &Value, field: &str) -> Option<u64> {
    let Value::Array(groups) = groups else {
        return None;
    };
    groups.iter().find_map(|group| {
        let pairs = pairs(group);
        let name = pairs.iter().find(|(k, _)| k == "name").map(|(_, v)| *v)?;
        if text(name).as_deref() != Some(super::keys::GROUP) {
            return None;
        }
        pairs
            .iter()
            .find(|(k, _)| k == field)
            .and_then(|(_, v)| match v {
                Value::Int(n) => u64::try_from(*n).ok(),
                _ => None,
            })
    })
}
