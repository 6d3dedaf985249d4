//! The `createTask` fields of a declared kind (`model::Parameters::Declared`), read from its
//! declaration.

use serde_json::{Map, Value};

use super::{Fields, bad, is_empty};
use crate::model::{Check, Kind, Param, TaskParams, Validation};

/// A declared type's fields, each by its name in any dialect (anti-captcha's, 2captcha v2's or
/// CapSolver's; the first set wins). A field the declaration does not name is left unread, for
/// `decode_task` to refuse by name; so is a key of an object field that no declaration carries
/// inside it. A field carried beside the task (`languagePool`) is read from `beside`, the
/// request's other fields, or from the task where a caller put it there.
pub(super) fn params(
    kind: Kind,
    t: &Fields<'_>,
    beside: Option<&Fields<'_>>,
) -> Result<TaskParams, Validation> {
    let params = kind.spec().declared_params();
    let mut values = Vec::new();
    for param in params.iter().filter(|p| p.in_task_api()) {
        let mut value = None;
        let outer = beside.filter(|_| param.beside_task);
        for fields in std::iter::once(t).chain(outer) {
            for field in param.task_fields() {
                // Each spelling sent is read (so none is refused as unread); the first set wins.
                if fields.0.contains_key(Param::split_field(field).0) {
                    value = value.or(read(kind, fields, param, field)?);
                }
            }
        }
        if let Some(value) = value {
            values.push((param.name, value));
        }
    }
    Ok(TaskParams::Declared { kind, values })
}

/// One declared parameter's value under one of its fields.
fn read(
    kind: Kind,
    t: &Fields<'_>,
    param: &Param,
    field: &'static str,
) -> Result<Option<String>, Validation> {
    Ok(match (Param::split_field(field), param.check) {
        ((outer, Some(inner)), _) => member(kind, t, outer, inner)?,
        (_, Check::Flag) => t.flag(field)?.then(|| "1".to_owned()),
        (_, Check::Object) => match t.get(field) {
            Some(Value::Object(map)) if map.is_empty() => None,
            Some(Value::Object(map)) => Some(Value::Object(map.clone()).to_string()),
            _ => t.string(field)?,
        },
        (_, Check::Text | Check::Page | Check::Key | Check::OneOf(_)) => t.string(field)?,
        (_, Check::Count(max)) => t.whole(field, max)?.map(|n| n.to_string()),
        (_, Check::Image) => match t.string(field)? {
            None => None,
            Some(raw) => Some(crate::model::image_base64(&raw).ok_or_else(|| {
                Validation::new("ERROR_UPLOAD", format!("`{field}` is not valid base64"))
            })?),
        },
    })
}

/// The text under `inner` in the object field `outer`. Any other key set there that no
/// declaration of the kind carries is refused by name (`enterprisePayload.sentry`).
fn member(
    kind: Kind,
    t: &Fields<'_>,
    outer: &'static str,
    inner: &str,
) -> Result<Option<String>, Validation> {
    let map: &Map<String, Value> = match t.get(outer) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(bad(format!("`{outer}` must be an object"))),
    };
    let carried = |key: &str| {
        kind.spec().declared_params().iter().any(|p| {
            p.task_fields()
                .any(|f| Param::split_field(f) == (outer, Some(key)))
        })
    };
    if let Some((key, _)) = map.iter().find(|(k, v)| !carried(k) && !is_empty(v)) {
        let shown: String = key.chars().take(40).collect();
        return Err(bad(format!(
            "`{outer}.{shown}` is not supported for {kind}: this gateway does not pass it on"
        )));
    }
    match map.get(inner) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(_) => Err(bad(format!("`{outer}.{inner}` must be a string"))),
    }
}
