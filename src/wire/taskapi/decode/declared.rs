//! The `createTask` fields of a declared kind (`model::Parameters::Declared`), read from its
//! declaration.

use serde_json::Value;

use super::Fields;
use crate::model::{Check, Kind, TaskParams, Validation};

/// A declared type's fields, each by its name in any dialect (anti-captcha's and 2captcha's,
/// or CapSolver's). A field the declaration does not name is left unread, for `decode_task` to
/// refuse by name.
pub(super) fn params(kind: Kind, t: &Fields<'_>) -> Result<TaskParams, Validation> {
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
            Check::Object => match t.get(field) {
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
    Ok(TaskParams::Declared { kind, values })
}
