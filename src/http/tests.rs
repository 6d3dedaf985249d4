//! "Never panics" properties over every request parser of the HTTP API (promise 7): native bodies,
//! pool import bodies, the task query string, and compatible parameters in every encoding
//! (query, urlencoded, multipart, JSON, no content type). Inputs are both random bytes and
//! well-formed requests carrying hostile values: huge, negative, non-finite and non-ASCII
//! numbers, over-long strings, user info in URLs. Whatever a parser accepts must also pass the
//! shared validation, and stated bounds must hold.

use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::input::wait_query;
use super::native::parse_native;
use super::pools::parse_import;
use crate::wire::inphp::{Params, parse_submit};

const MAX: Duration = Duration::from_secs(600);

/// Values clients send, and values hostile ones do.
fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("1e20".to_owned()),
        Just("-1".to_owned()),
        Just("NaN".to_owned()),
        Just("inf".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("0.3".to_owned()),
        Just("https://u:p@example.com/a?q=1#f".to_owned()),
        Just("https://example.com/".to_owned()),
        Just("6Le-key".to_owned()),
        Just("u:p@127.0.0.1:3128".to_owned()),
        Just("userrecaptcha".to_owned()),
        Just("base64".to_owned()),
        Just("v3".to_owned()),
        Just("١٢٣".to_owned()),
        "[0-9.eE+-]{1,30}",
        "\\PC{0,40}",
        "[a-z]{1000,5000}",
    ]
}

fn hostile_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        hostile_text().prop_map(Value::String),
        any::<f64>().prop_map(|f| json!(f)),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
        Just(json!([1, "a"])),
        Just(json!({"nested": 1e300})),
    ]
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "kind",
        "sitekey",
        "googlekey",
        "pageurl",
        "timeout_s",
        "callback_url",
        "version",
        "action",
        "min_score",
        "enterprise",
        "invisible",
        "gt",
        "challenge",
        "body",
        "text",
        "proxy",
        "proxytype",
        "user_agent",
        "cookies",
        "min_len",
        "max_len",
        "numeric",
        "language",
        "data",
        "pagedata",
        "method",
        "tokens",
    ]
}

fn kind_name() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("recaptcha_v2")),
        Just(json!("recaptcha_v3")),
        Just(json!("turnstile")),
        Just(json!("cloudflare_challenge")),
        Just(json!("geetest_v3")),
        Just(json!("image")),
        Just(json!("text")),
        hostile_json(),
    ]
}

fn native_body() -> impl Strategy<Value = Value> {
    (
        kind_name(),
        proptest::collection::vec((field_name(), hostile_json()), 0..10),
    )
        .prop_map(|(kind, fields)| {
            let mut obj = Map::new();
            obj.insert("kind".into(), kind);
            obj.extend(fields);
            Value::Object(obj)
        })
}

fn token_entry() -> impl Strategy<Value = Value> {
    prop_oneof![
        (hostile_text(), hostile_json(), hostile_json()).prop_map(
            |(token, solved_at, ua)| json!({"token": token, "solved_at": solved_at, "user_agent": ua})
        ),
        hostile_json(),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a test runtime")
}

/// `pairs` in one of the encodings clients use, with its content type.
fn encode(pairs: &[(String, String)], encoding: u8) -> (Option<String>, Bytes) {
    match encoding % 4 {
        0 => (
            Some("application/x-www-form-urlencoded".into()),
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs(pairs)
                .finish()
                .into(),
        ),
        1 => {
            let mut body = String::new();
            for (k, v) in pairs {
                body.push_str(&format!(
                    "--B0UND\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
                ));
            }
            body.push_str("--B0UND--\r\n");
            (
                Some("multipart/form-data; boundary=B0UND".into()),
                body.into(),
            )
        }
        2 => {
            let obj: Map<String, Value> = pairs
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            (
                Some("application/json".into()),
                Value::Object(obj).to_string().into(),
            )
        }
        _ => (
            None,
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs(pairs)
                .finish()
                .into(),
        ),
    }
}

fn compat_name() -> impl Strategy<Value = String> {
    prop_oneof![
        field_name(),
        Just("json".to_owned()),
        Just("key".to_owned()),
        Just("id".to_owned()),
        Just("ids".to_owned()),
        Just("pingback".to_owned()),
        Just("textcaptcha".to_owned()),
        Just("regsense".to_owned()),
        Just("data-s".to_owned()),
        "\\PC{0,10}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn native_bodies_never_panic(body in native_body(), raw in proptest::collection::vec(any::<u8>(), 0..200)) {
        let bytes = serde_json::to_vec(&body).unwrap();
        match parse_native(&bytes, MAX) {
            Ok(native) => {
                prop_assert!(native.req.validate().is_ok());
                prop_assert!(native.timeout.is_none_or(|t| !t.is_zero() && t <= MAX));
            }
            Err(e) => prop_assert!(e.status.is_client_error(), "{:?}", e),
        }
        let _ = parse_native(&raw, MAX);
    }

    #[test]
    fn a_native_body_read_in_one_pass_means_what_its_json_tree_means(body in native_body()) {
        use crate::wire::native::{parse_native, parse_native_value};
        let direct = parse_native(&serde_json::to_vec(&body).unwrap(), MAX);
        match (direct, parse_native_value(body, MAX)) {
            (Ok(a), Ok(b)) => prop_assert!(
                a.req == b.req && a.timeout == b.timeout && a.callback_url == b.callback_url
            ),
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "one reading accepts, the other refuses: {:?} / {:?}", a.err(), b.err()),
        }
    }

    #[test]
    fn pool_import_bodies_never_panic(
        body in native_body(),
        tokens in proptest::collection::vec(token_entry(), 0..5),
        raw in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut body = body;
        body.as_object_mut().unwrap().insert("tokens".into(), Value::Array(tokens));
        match parse_import(&serde_json::to_vec(&body).unwrap(), MAX) {
            Ok((native, offered)) => {
                prop_assert!(native.req.validate().is_ok());
                prop_assert!(!offered.is_empty());
            }
            Err(e) => prop_assert!(e.status.is_client_error(), "{:?}", e),
        }
        let _ = parse_import(&raw, MAX);
    }

    #[test]
    fn task_query_strings_never_panic(q in "\\PC{0,60}", wait in hostile_text()) {
        let _ = wait_query(Some(&q), MAX);
        if let Ok(d) = wait_query(Some(&format!("wait={}", urlencode(&wait))), MAX) {
            prop_assert!(d <= MAX);
        }
    }

    #[test]
    fn compatible_parameters_in_every_encoding_never_panic(
        pairs in proptest::collection::vec((compat_name(), hostile_text()), 0..10),
        query in "\\PC{0,60}",
        encoding in any::<u8>(),
        raw in proptest::collection::vec(any::<u8>(), 0..200),
        content_type in prop_oneof![
            Just(None),
            Just(Some("multipart/form-data; boundary=B0UND".to_owned())),
            Just(Some("application/json".to_owned())),
            Just(Some("multipart/form-data".to_owned())),
            "\\PC{0,30}".prop_map(Some),
        ],
    ) {
        let rt = runtime();
        let (ct, body) = encode(&pairs, encoding);
        for (query, ct, body) in [
            (Some(query.as_str()), ct.as_deref(), body),
            (None, content_type.as_deref(), Bytes::from(raw)),
        ] {
            let params = rt.block_on(Params::read(query, ct, body));
            match parse_submit(&params) {
                Ok(req) => prop_assert!(req.validate().is_ok()),
                Err(v) => prop_assert!(v.code.starts_with("ERROR_"), "{}", v.code),
            }
            let _ = params.wants_json();
        }
    }
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
