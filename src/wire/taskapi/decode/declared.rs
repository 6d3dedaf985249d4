//! The `createTask` fields of a declared kind (`model::Parameters::Declared`), read from its
//! declaration.

use serde_json::Value;

use super::super::names::ProxyUse;
use super::{Fields, bad};
use crate::model::{Check, Kind, TaskParams, Validation};

/// Fields every task type may carry besides its own: the proxy's (read only for a type that
/// takes the caller's proxy) and the browser's.
const PROXY_FIELDS: [&str; 6] = [
    "proxyType",
    "proxyAddress",
    "proxyPort",
    "proxyLogin",
    "proxyPassword",
    "proxy",
];
const BROWSER_FIELDS: [&str; 2] = ["userAgent", "cookies"];

/// A declared type's fields, each by its name in any dialect (anti-captcha's and 2captcha's,
/// or CapSolver's). A field the declaration does not name is refused by name, unless it is
/// empty (`null`, `""`, `false`, `0`, `{}`: how clients leave a field unset), so nothing a
/// caller sends is dropped unseen.
pub(super) fn params(
    kind: Kind,
    t: &Fields<'_>,
    proxy_use: ProxyUse,
) -> Result<TaskParams, Validation> {
    let params = kind.spec().declared_params();
    let mut values = Vec::new();
    for param in params {
        let field = if t.0.contains_key(param.task) {
            param.task
        } else {
            param.capsolver
        };
        let value = match param.check {
            Check::Flag => t.flag(field)?.then(|| "1".to_owned()),
            Check::Object => match t.0.get(field) {
                Some(Value::Object(map)) if map.is_empty() => None,
                Some(Value::Object(map)) => Some(Value::Object(map.clone()).to_string()),
                _ => t.string(field)?,
            },
            Check::Text | Check::Page | Check::Key => t.string(field)?,
        };
        if let Some(value) = value {
            values.push((param.name, value));
        }
    }
    let known = |name: &str| {
        name == "type"
            || (name == "version" && kind.spec().task_version.is_some())
            || BROWSER_FIELDS.contains(&name)
            || (proxy_use == ProxyUse::Proxied && PROXY_FIELDS.contains(&name))
            || params.iter().any(|p| p.task == name || p.capsolver == name)
    };
    let empty = |v: &Value| match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.trim().is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Bool(true) => false,
    };
    if let Some((name, _)) = t.0.iter().find(|(name, v)| !known(name) && !empty(v)) {
        let shown: String = name.chars().take(40).collect();
        let why = if PROXY_FIELDS.contains(&name.as_str()) {
            "a proxyless type does not carry the caller's proxy; send the type without `Proxyless`"
        } else {
            "this gateway does not pass it on"
        };
        return Err(bad(format!("`{shown}` is not supported for {kind}: {why}")));
    }
    Ok(TaskParams::Declared { kind, values })
}
