//! The native request body (`kind` plus that kind's parameters under their compatible-API names),
//! read without any protocol around it: `POST /v1/solve`, `POST /v1/tasks` and a queued task's
//! `request` field (docs/QUEUE.md) all go through the same fields' reading (`Fields`), so the same body means
//! the same request wherever it arrives.

use std::time::Duration;

use serde_json::Value;

use super::inphp::{Params, parse_passthrough, parse_submit, submit_params};
use crate::model::{Kind, Passthrough, SolveRequest, TaskParams, Validation};

/// A parsed native body.
#[derive(Debug, Clone)]
pub struct NativeRequest {
    pub req: SolveRequest,
    /// `timeout_s`, when given.
    pub timeout: Option<Duration>,
    /// `callback_url` as sent (checked by whoever takes callbacks).
    pub callback_url: Option<String>,
}

/// Parses a native body from its bytes. `max_timeout` bounds `timeout_s`.
///
/// Read in one pass (see [`Fields`]): the pool hit is the call a fleet makes most, and building
/// a JSON tree first, then parameters from it, was most of its parsing (docs/BENCHMARKS.md).
pub fn parse_native(body: &[u8], max_timeout: Duration) -> Result<NativeRequest, Validation> {
    let fields: Fields = serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => not_an_object(),
        _ => Validation::new("bad_json", format!("the body is not JSON: {e}")),
    })?;
    fields.into_request(max_timeout)
}

/// Parses a native body already read as JSON. `max_timeout` bounds `timeout_s` (the caller hears
/// the bound, rather than having a larger value silently cut).
pub fn parse_native_value(
    value: Value,
    max_timeout: Duration,
) -> Result<NativeRequest, Validation> {
    let Value::Object(obj) = value else {
        return Err(not_an_object());
    };
    let mut fields = Fields::default();
    for (name, value) in obj {
        fields.add(name, value);
    }
    fields.into_request(max_timeout)
}

fn not_an_object() -> Validation {
    Validation::new("bad_json", "the body must be a JSON object")
}

/// A native body's fields: the three the native API reads itself, as sent, and every field as a
/// compatible-API parameter (where a field sent twice, the last wins, as in a JSON tree).
#[derive(Default)]
struct Fields {
    kind: Option<Value>,
    timeout: Option<Value>,
    callback_url: Option<Value>,
    /// A `createTask` task passed through (kind `other`), as sent.
    task: Option<Value>,
    /// An `in.php` task passed through with uploads: each file's base64 by its field's name.
    files: Option<Value>,
    params: Params,
}

impl Fields {
    fn add(&mut self, name: String, value: Value) {
        let own = match name.as_str() {
            "kind" => Some(&mut self.kind),
            "timeout_s" => Some(&mut self.timeout),
            "callback_url" => Some(&mut self.callback_url),
            "task" => Some(&mut self.task),
            "files" => Some(&mut self.files),
            _ => None,
        };
        if let Some(own) = own {
            *own = Some(value.clone());
        }
        // A field sent again replaces what came before: a later null too, as in a JSON tree.
        if value.is_null() {
            self.params.remove(&name);
        }
        self.params.insert_json(name, value);
    }

    fn into_request(self, max_timeout: Duration) -> Result<NativeRequest, Validation> {
        let kind: Kind = self
            .kind
            .as_ref()
            .and_then(Value::as_str)
            .ok_or_else(|| Validation::new("bad_kind", "`kind` is missing"))?
            .parse()
            .map_err(|e: String| Validation::new("bad_kind", e))?;
        let timeout = timeout_field(self.timeout.as_ref(), max_timeout)?;
        let callback_url = match self.callback_url {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => {
                return Err(Validation::new(
                    "bad_callback_url",
                    "`callback_url` must be a string",
                ));
            }
        };
        let mut params = self.params;
        if kind == Kind::Other {
            params.remove("files");
            add_files(&mut params, self.files)?;
            return Ok(NativeRequest {
                req: passthrough(self.task, &params)?,
                timeout,
                callback_url,
            });
        }
        let (method, version) = match kind {
            Kind::RecaptchaV2 => ("userrecaptcha", Some("v2")),
            Kind::RecaptchaV3 => ("userrecaptcha", Some("v3")),
            declared => (declared.spec().methods[0], None),
        };
        params.set("method", method);
        // The `in.php` parameter that selects the kind on its method: a flag, on; a parameter
        // of the kind's own (a question's `textcaptcha`, `text` here) under that name.
        match (kind.spec().inphp_flag, kind.spec().selecting_param()) {
            (Some(flag), None) => params.set(flag, "1"),
            (Some(flag), Some(param)) => {
                if let Some(value) = params.get(param.aliases).map(str::to_owned) {
                    params.set(flag, value);
                }
            }
            (None, _) => {}
        }
        if let Some(v) = version {
            params.set("version", v);
        }
        let req = parse_submit(&params)?;
        Ok(NativeRequest {
            req,
            timeout,
            callback_url,
        })
    }
}

/// `files` of a pass-through `in.php` task: an object of base64 strings, each added as an upload.
fn add_files(params: &mut Params, files: Option<Value>) -> Result<(), Validation> {
    use base64::Engine as _;
    let bad = || {
        Validation::new(
            "bad_kind",
            "`files` must be an object of base64 strings, one per uploaded field",
        )
    };
    match files {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(files)) => {
            for (name, data) in files {
                let data = data
                    .as_str()
                    .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                    .ok_or_else(bad)?;
                params.insert_file(&name, data.into());
            }
            Ok(())
        }
        Some(_) => Err(bad()),
    }
}

/// A pass-through task (kind `other`) in its native form: `task`, a `createTask` task object, or
/// else the `in.php` parameters beside `kind`, `method` among them.
fn passthrough(task: Option<Value>, params: &Params) -> Result<SolveRequest, Validation> {
    let req = match task {
        None | Some(Value::Null) if params.get(&["method"]).is_none() => {
            return Err(Validation::new(
                "bad_kind",
                "kind `other` needs `method` (an in.php method) or `task` (a createTask task)",
            ));
        }
        None | Some(Value::Null) => return parse_passthrough(params),
        Some(Value::Object(task)) if task.get("type").is_some_and(Value::is_string) => {
            SolveRequest::new(TaskParams::Passthrough(Passthrough::TaskApi { task }))
        }
        Some(_) => {
            return Err(Validation::new(
                "bad_kind",
                "`task` must be a createTask task object with a `type`",
            ));
        }
    };
    req.validate()?;
    Ok(req)
}

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(FieldsVisitor)
    }
}

struct FieldsVisitor;

impl<'de> serde::de::Visitor<'de> for FieldsVisitor {
    type Value = Fields;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
        let mut fields = Fields::default();
        while let Some(name) = map.next_key::<String>()? {
            let value: Value = map.next_value()?;
            fields.add(name, value);
        }
        Ok(fields)
    }
}

/// `timeout_s`: seconds greater than 0 and up to `max`.
fn timeout_field(value: Option<&Value>, max: Duration) -> Result<Option<Duration>, Validation> {
    seconds_value("timeout_s", "bad_timeout", value, max, false)
}

/// A JSON field of seconds (a number or a numeric string) within `0..=max` (`0 <` unless
/// `allow_zero`); the error names the field and the range, with `code`.
pub fn seconds_value(
    field: &str,
    code: &'static str,
    value: Option<&Value>,
    max: Duration,
    allow_zero: bool,
) -> Result<Option<Duration>, Validation> {
    let secs = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    secs.and_then(|s| checked_seconds(s, max, allow_zero))
        .map(Some)
        .ok_or_else(|| Validation::new(code, out_of_range(field, max, allow_zero)))
}

/// `s` seconds as a duration when it is finite and within `0..=max` (`0 < s` unless `allow_zero`).
pub fn checked_seconds(s: f64, max: Duration, allow_zero: bool) -> Option<Duration> {
    let low_ok = if allow_zero { s >= 0.0 } else { s > 0.0 };
    // `max` is a few minutes, so this comparison keeps `s` far from from_secs_f64's panic.
    let d =
        (s.is_finite() && low_ok && s <= max.as_secs_f64()).then(|| Duration::from_secs_f64(s))?;
    // 1e-300 is "greater than 0" but no time at all: a deadline already past.
    (allow_zero || !d.is_zero()).then_some(d)
}

/// The message of a number of seconds out of its range.
pub fn out_of_range(field: &str, max: Duration, allow_zero: bool) -> String {
    let low = if allow_zero {
        "from 0"
    } else {
        "greater than 0 and"
    };
    format!(
        "`{field}` must be a number of seconds {low} up to {}",
        max.as_secs_f64()
    )
}

/// `req` as a native API body (`POST /v1/solve`): `kind` plus the compatible parameter names,
/// which the native parser accepts. `serve --queue` writes queue entries in this form, so a
/// queued request means exactly what the same body means on `/v1/solve` (docs/QUEUE.md).
pub fn native_body(req: &SolveRequest) -> serde_json::Value {
    let mut body = serde_json::Map::new();
    body.insert("kind".into(), serde_json::json!(req.kind()));
    if let TaskParams::Passthrough(Passthrough::TaskApi { task }) = &req.params {
        body.insert("task".into(), Value::Object(task.clone()));
        return Value::Object(body);
    }
    let files = super::inphp::submit_files(req);
    if !files.is_empty() {
        use base64::Engine as _;
        let files: serde_json::Map<String, Value> = files
            .iter()
            .map(|(name, data)| {
                let text = base64::engine::general_purpose::STANDARD.encode(data);
                (name.clone(), Value::String(text))
            })
            .collect();
        body.insert("files".into(), Value::Object(files));
    }
    for (name, value) in submit_params(req) {
        // The kind says it; the native parser derives `method` and the kind's flag from it (but
        // for a pass-through task, whose method is its own). A selecting parameter of the kind's
        // own (a question's `textcaptcha`) is a value, and stays.
        let spec = req.kind().spec();
        let flag = spec.inphp_flag.filter(|_| spec.selecting_param().is_none());
        let derived = name == "method" || Some(name.as_ref()) == flag;
        if !derived || req.kind() == Kind::Other {
            body.insert(name.into(), serde_json::Value::String(value));
        }
    }
    serde_json::Value::Object(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(600);

    /// What a body means, read in one pass and through a JSON tree: the same request, or the
    /// same refusal.
    fn both(raw: &str) -> Result<(SolveRequest, Option<Duration>, Option<String>), Validation> {
        let direct = parse_native(raw.as_bytes(), MAX).map(|n| (n.req, n.timeout, n.callback_url));
        let tree = serde_json::from_str(raw)
            .map_err(|_| Validation::new("bad_json", "not JSON"))
            .and_then(|v| parse_native_value(v, MAX))
            .map(|n| (n.req, n.timeout, n.callback_url));
        match (&direct, &tree) {
            (Ok(a), Ok(b)) => assert!(a == b, "{raw}: the two readings differ"),
            (Err(a), Err(b)) => assert_eq!(a.code, b.code, "{raw}"),
            _ => panic!("{raw}: one reading accepts, the other refuses"),
        }
        direct
    }

    const PAGE: &str = r#""pageurl":"https://shop.example.com/login""#;

    fn sitekey(req: &SolveRequest) -> &str {
        assert_eq!(req.kind(), crate::model::Kind::Turnstile);
        req.params.declared("sitekey").expect("a sitekey")
    }

    #[test]
    fn a_field_sent_twice_means_its_last_value_as_in_a_json_tree() {
        let twice =
            format!(r#"{{"kind":"turnstile","sitekey":"first",{PAGE},"sitekey":"second"}}"#);
        assert_eq!(sitekey(&both(&twice).unwrap().0), "second");
        let unset = format!(r#"{{"kind":"turnstile","sitekey":"first",{PAGE},"sitekey":null}}"#);
        assert_eq!(both(&unset).unwrap_err().code, "ERROR_BAD_PARAMETERS");
        let kind_twice = format!(r#"{{"kind":"image","kind":"turnstile","sitekey":"k",{PAGE}}}"#);
        assert_eq!(sitekey(&both(&kind_twice).unwrap().0), "k");
    }

    #[test]
    fn a_body_that_is_not_an_object_or_not_json_says_which() {
        for raw in ["[1,2]", "\"text\"", "7", "null"] {
            let e = parse_native(raw.as_bytes(), MAX).unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                ("bad_json", "the body must be a JSON object"),
                "{raw}"
            );
        }
        for raw in [
            "{oops",
            "",
            "{\"kind\":",
            "{\"kind\":\"turnstile\"} trailing",
        ] {
            let e = parse_native(raw.as_bytes(), MAX).unwrap_err();
            assert_eq!(e.code, "bad_json", "{raw}");
            assert!(
                e.message.starts_with("the body is not JSON: "),
                "{raw}: {}",
                e.message
            );
        }
    }

    #[test]
    fn numbers_flags_and_objects_are_read_as_their_text() {
        let raw = format!(
            r#"{{"kind":"turnstile","sitekey":"k",{PAGE},"timeout_s":"12.5","action":7,"data":{{"a":[1,true]}},"pagedata":false}}"#
        );
        let (req, timeout, callback) = both(&raw).unwrap();
        assert_eq!(
            (timeout, callback),
            (Some(Duration::from_millis(12_500)), None)
        );
        let value = |name| req.params.declared(name);
        assert_eq!(value("action"), Some("7"));
        assert_eq!(value("data"), Some(r#"{"a":[1,true]}"#));
        assert_eq!(value("pagedata"), Some("0"));
    }
}
