//! Points on an image (`AnswerShape::Points`): read from any provider's form into the one the
//! engine stores, a JSON array of `[x, y]` pairs (or `[x1, y1, x2, y2]` rectangles), and
//! written back in each protocol's form.
//!
//! The forms, as the providers document them: 2captcha's `in.php` answers
//! `coordinates:x=39,y=59;x=252,y=72` (in JSON mode an array of `{"x": "39", "y": "59"}`),
//! anti-captcha's `ImageToCoordinatesTask` `coordinates: [[39, 59]]` (rectangles `[[x1, y1, x2,
//! y2]]`), 2captcha's `CoordinatesTask` `coordinates: [{"x": 39, "y": 59}]`.

use serde_json::{Number, Value, json};

/// Most points an answer may hold: far more clicks than any challenge asks for, and it bounds
/// what one answer can cost to store.
const MAX_POINTS: usize = 256;

/// The points in a provider's answer: its JSON (a list, or a `createTask` solution with the
/// list under `field`) or 2captcha's plain text. `None` when the text holds no such list, so the
/// caller keeps the text as it came.
pub fn read(text: &str, field: &str) -> Option<Value> {
    let list = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => items,
        Ok(Value::Object(mut solution)) => match solution.remove(field)? {
            Value::Array(items) => items,
            _ => return None,
        },
        Ok(_) => return None,
        Err(_) => return plain(text),
    };
    if list.len() > MAX_POINTS {
        return None;
    }
    list.iter()
        .map(point)
        .collect::<Option<Vec<_>>>()
        .map(Value::Array)
}

/// One point: `[x, y]` or `[x1, y1, x2, y2]`, or `{"x", "y"}` or `{"x1", "y1", "x2", "y2"}`
/// (how `in.php`'s JSON mode writes them), each number or numeric text.
fn point(item: &Value) -> Option<Value> {
    let numbers: Vec<&Value> = match item {
        Value::Array(values) if matches!(values.len(), 2 | 4) => values.iter().collect(),
        Value::Object(o) if o.contains_key("x1") => {
            vec![o.get("x1")?, o.get("y1")?, o.get("x2")?, o.get("y2")?]
        }
        Value::Object(o) => vec![o.get("x")?, o.get("y")?],
        _ => return None,
    };
    numbers
        .into_iter()
        .map(|v| match v {
            Value::Number(n) => Some(n.clone()),
            Value::String(s) => number(s),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .map(|ns| Value::Array(ns.into_iter().map(Value::Number).collect()))
}

/// `coordinates:x=39,y=59;x=252,y=72` (the prefix optional).
fn plain(text: &str) -> Option<Value> {
    let text = text.trim();
    let list = text.strip_prefix("coordinates:").unwrap_or(text);
    let points = list
        .split(';')
        .filter(|p| !p.trim().is_empty())
        .take(MAX_POINTS + 1)
        .map(|p| {
            let (x, y) = p.split_once(',')?;
            let x = number(x.trim().strip_prefix("x=")?)?;
            let y = number(y.trim().strip_prefix("y=")?)?;
            Some(json!([x, y]))
        })
        .collect::<Option<Vec<_>>>()?;
    (!points.is_empty() && points.len() <= MAX_POINTS).then_some(Value::Array(points))
}

/// A coordinate: a whole number where it is one (the usual case), else a decimal.
fn number(text: &str) -> Option<Number> {
    let text = text.trim();
    if let Ok(n) = text.parse::<i64>() {
        return Some(n.into());
    }
    text.parse::<f64>().ok().and_then(Number::from_f64)
}

/// The stored points, or `None` when the stored text is not a list of them.
fn stored(text: &str) -> Option<Vec<Vec<Value>>> {
    let Ok(Value::Array(items)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    items
        .into_iter()
        .map(|p| match p {
            Value::Array(ns) if matches!(ns.len(), 2 | 4) => Some(ns),
            _ => None,
        })
        .collect()
}

/// `in.php`'s plain answer: `coordinates:x=39,y=59;x=252,y=72`. Rectangles, which `in.php` has
/// no form for, and anything else as the stored text.
pub fn inphp_plain(text: &str) -> String {
    match stored(text) {
        Some(points) if points.iter().all(|p| p.len() == 2) => {
            let parts: Vec<String> = points
                .iter()
                .map(|p| format!("x={},y={}", p[0], p[1]))
                .collect();
            format!("coordinates:{}", parts.join(";"))
        }
        _ => text.to_owned(),
    }
}

/// `in.php`'s JSON-mode answer: an array of `{"x": "39", "y": "59"}` (2captcha writes the
/// numbers as text); rectangles as `{"x1", "y1", "x2", "y2"}`.
pub fn inphp_json(text: &str) -> Value {
    let Some(points) = stored(text) else {
        return Value::String(text.to_owned());
    };
    let names: [&[&str]; 2] = [&["x", "y"], &["x1", "y1", "x2", "y2"]];
    points
        .iter()
        .map(|p| {
            let keys = names[usize::from(p.len() == 4)];
            let object: serde_json::Map<String, Value> = keys
                .iter()
                .zip(p)
                .map(|(k, v)| ((*k).to_owned(), Value::String(v.to_string())))
                .collect();
            Value::Object(object)
        })
        .collect()
}

/// A `createTask` solution's list: anti-captcha's `[[x, y]]` as stored, or with `objects`
/// 2captcha's `[{"x": 39, "y": 59}]` (points only; rectangles stay arrays).
pub fn task_list(text: &str, objects: bool) -> Value {
    let Some(points) = stored(text) else {
        return Value::String(text.to_owned());
    };
    points
        .into_iter()
        .map(|p| match (objects, p.len()) {
            (true, 2) => json!({"x": p[0], "y": p[1]}),
            _ => Value::Array(p),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_providers_form_reads_as_the_same_points() {
        let want = json!([[39, 59], [252, 72]]);
        for given in [
            "coordinates:x=39,y=59;x=252,y=72",
            "x=39,y=59;x=252,y=72;",
            r#"[{"x":"39","y":"59"},{"x":"252","y":"72"}]"#,
            r#"[[39,59],[252,72]]"#,
            r#"{"coordinates":[{"x":39,"y":59},{"x":252,"y":72}]}"#,
            r#"{"coordinates":[[39,59],[252,72]],"other":1}"#,
        ] {
            assert_eq!(read(given, "coordinates"), Some(want.clone()), "{given}");
        }
        for rectangles in [
            r#"{"coordinates":[[1,2,30,40]]}"#,
            r#"[{"x1":"1","y1":"2","x2":"30","y2":"40"}]"#,
        ] {
            assert_eq!(
                read(rectangles, "coordinates"),
                Some(json!([[1, 2, 30, 40]])),
                "{rectangles}"
            );
        }
        assert_eq!(read("[[1.5,2]]", "coordinates"), Some(json!([[1.5, 2]])));
    }

    #[test]
    fn what_is_not_a_list_of_points_is_not_read() {
        for given in [
            "a-token",
            "coordinates:x=1",
            "x=a,y=2",
            r#"{"token":"t"}"#,
            r#"[[1,2,3]]"#,
            r#"[{"x":1}]"#,
            r#"[["a","b"]]"#,
            "",
        ] {
            assert_eq!(read(given, "coordinates"), None, "{given}");
        }
        let many = vec!["x=1,y=2"; MAX_POINTS + 1].join(";");
        assert_eq!(read(&many, "coordinates"), None);
        let many = json!(vec![[1, 2]; MAX_POINTS + 1]).to_string();
        assert_eq!(read(&many, "coordinates"), None);
    }

    #[test]
    fn stored_points_are_written_in_each_protocols_form() {
        let stored = "[[39,59],[252,72]]";
        assert_eq!(inphp_plain(stored), "coordinates:x=39,y=59;x=252,y=72");
        assert_eq!(
            inphp_json(stored),
            json!([{"x": "39", "y": "59"}, {"x": "252", "y": "72"}])
        );
        assert_eq!(task_list(stored, false), json!([[39, 59], [252, 72]]));
        assert_eq!(
            task_list(stored, true),
            json!([{"x": 39, "y": 59}, {"x": 252, "y": 72}])
        );
        let rectangles = "[[1,2,30,40]]";
        assert_eq!(inphp_plain(rectangles), rectangles);
        assert_eq!(
            inphp_json(rectangles),
            json!([{"x1": "1", "y1": "2", "x2": "30", "y2": "40"}])
        );
        assert_eq!(task_list(rectangles, true), json!([[1, 2, 30, 40]]));
        // Whatever was stored unread goes back as it came.
        assert_eq!(inphp_plain("odd"), "odd");
        assert_eq!(task_list("odd", false), json!("odd"));
    }
}
