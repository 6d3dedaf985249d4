//! One entry of seed 003's list, as its producer `RPUSH`es it: `{"id", "method", "params"}`,
//! where `method` + `params` are exactly what the seed's worker posted to `in.php`. They are read
//! by the compatible API's own parser, so an entry means what the same `in.php` call means here.

use serde_json::Value;

use crate::model::SolveRequest;
use crate::wire::inphp::{Params, codes, parse_submit};

/// The longest task id taken: the seed's are 8 characters (a UUID's first group).
pub const MAX_ID_LEN: usize = 128;

/// What an entry turned out to be.
#[derive(Debug)]
pub enum Entry {
    /// A task to solve.
    Task {
        id: String,
        request: Box<SolveRequest>,
    },
    /// A task that cannot be solved as sent: it gets an error result with `code`.
    Refused {
        id: String,
        code: &'static str,
        message: String,
    },
    /// Not a task at all (not JSON, or no usable id): nobody can be told, so it is dropped.
    Unreadable(String),
}

/// Reads one entry. Never panics, whatever the producer wrote.
pub fn parse(raw: &str) -> Entry {
    let mut object = match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Entry::Unreadable("the entry is not a JSON object".into()),
        Err(e) => return Entry::Unreadable(format!("the entry is not JSON: {e}")),
    };
    let id = match task_id(object.get("id")) {
        Ok(id) => id,
        Err(why) => return Entry::Unreadable(why),
    };
    let refused = |message: String| Entry::Refused {
        id: id.clone(),
        code: codes::BAD_PARAMETERS,
        message,
    };
    let mut params = match object.remove("params") {
        None | Some(Value::Null) => Params::default(),
        Some(Value::Object(p)) => Params::from_json_object(p),
        Some(_) => return refused("`params` must be a JSON object".into()),
    };
    match object.remove("method") {
        Some(Value::String(m)) => params.set("method", m),
        None | Some(Value::Null) => {}
        Some(_) => return refused("`method` must be a string".into()),
    }
    match parse_submit(&params) {
        Ok(request) => Entry::Task {
            id,
            request: Box::new(request),
        },
        Err(v) => Entry::Refused {
            id,
            code: v.code,
            message: v.message,
        },
    }
}

/// The task id: a string (the seed's) or an integer, 1 to [`MAX_ID_LEN`] bytes, no control
/// characters (it is logged and is a hash field the producer reads back).
fn task_id(id: Option<&Value>) -> Result<String, String> {
    let id = match id {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => n.to_string(),
        Some(_) => return Err("`id` must be a string or an integer".into()),
        None => return Err("the entry has no `id`".into()),
    };
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(format!("`id` must be 1 to {MAX_ID_LEN} bytes long"));
    }
    if id.chars().any(char::is_control) {
        return Err("`id` contains control characters".into());
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_text_is_read_without_a_panic(s in "\\PC{0,80}") {
            let _ = parse(&s);
        }

        #[test]
        fn any_entry_shaped_json_is_read_without_a_panic(
            id in prop_oneof![Just(serde_json::json!(null)), "\\PC{0,140}".prop_map(serde_json::Value::from),
                any::<i64>().prop_map(serde_json::Value::from), any::<f64>().prop_map(serde_json::Value::from)],
            method in "[a-z_]{0,16}",
            params in proptest::collection::hash_map("[a-z_]{1,12}", "\\PC{0,40}", 0..6),
        ) {
            let raw = serde_json::json!({"id": id, "method": method, "params": params}).to_string();
            if let Entry::Task { id, .. } | Entry::Refused { id, .. } = parse(&raw) {
                prop_assert!(!id.is_empty() && id.len() <= MAX_ID_LEN);
            }
        }
    }

    #[test]
    fn the_seeds_recaptcha_entry_is_a_recaptcha_task() {
        let raw = r#"{"id":"1a2b3c4d","method":"userrecaptcha","params":{"googlekey":"6Le-k","pageurl":"https://example.com/login"}}"#;
        match parse(raw) {
            Entry::Task { id, request } => {
                assert_eq!(id, "1a2b3c4d");
                assert_eq!(request.kind(), Kind::RecaptchaV2);
            }
            other => panic!("expected a task, got {other:?}"),
        }
    }

    #[test]
    fn an_entry_in_pieces_the_parser_refuses_gets_its_code() {
        let cases = [
            (
                // A method no declaration names passes through, but not one that is no name.
                r#"{"id":"a","method":"no such","params":{}}"#,
                codes::BAD_PARAMETERS,
            ),
            (
                r#"{"id":"a","params":{"pageurl":"x"}}"#,
                codes::BAD_PARAMETERS,
            ),
            (
                r#"{"id":"a","method":"userrecaptcha","params":{"googlekey":"k"}}"#,
                codes::PAGEURL,
            ),
            (
                r#"{"id":"a","method":"userrecaptcha","params":[1]}"#,
                codes::BAD_PARAMETERS,
            ),
            (
                r#"{"id":"a","method":7,"params":{}}"#,
                codes::BAD_PARAMETERS,
            ),
        ];
        for (raw, want) in cases {
            match parse(raw) {
                Entry::Refused { id, code, .. } => {
                    assert_eq!((id.as_str(), code), ("a", want), "{raw}");
                }
                other => panic!("{raw}: expected a refusal, got {other:?}"),
            }
        }
    }

    #[test]
    fn an_entry_without_a_usable_id_is_unreadable() {
        let long = format!(r#"{{"id":"{}","method":"userrecaptcha"}}"#, "x".repeat(129));
        for raw in [
            "not json",
            "[1,2]",
            r#"{"method":"userrecaptcha"}"#,
            r#"{"id":"","method":"userrecaptcha"}"#,
            r#"{"id":{"a":1}}"#,
            r#"{"id":1.5}"#,
            "{\"id\":\"a\\u0000b\"}",
            &long,
        ] {
            assert!(matches!(parse(raw), Entry::Unreadable(_)), "{raw}");
        }
    }

    #[test]
    fn an_integer_id_is_read_as_its_digits() {
        let raw = r#"{"id":42,"method":"userrecaptcha","params":{"googlekey":"k","pageurl":"https://a.example"}}"#;
        assert!(matches!(parse(raw), Entry::Task { id, .. } if id == "42"));
    }
}
