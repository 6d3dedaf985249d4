//! The answers of image-click types: the points of the declared coordinates kind, and the cells
//! of a grid or the points on an image of the types the gateway passes through, in each
//! provider's shape; each drawn from a hash of everything the task sent, so the same task gets
//! the same answer, as from a real worker. Client libraries parse these shapes (CaptchaAI's SDK
//! reads a grid's answer as JSON, anticaptchaofficial reads `solution.coordinates`), so a token
//! would not do.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// Most cells a grid may have: a 10x10 grid, well beyond reCAPTCHA's 4x4.
const MAX_CELLS: u32 = 100;
/// Points fall inside this square: the size of a typical challenge image, in pixels.
const IMAGE_SIDE: u16 = 300;

/// CaptchaAI's grid (an image with `grid_size=RxC`) and BLS (`method=bls`, nine images): a JSON
/// array of the cells to click, numbered from 1 at the top left. `None` for any other type.
pub(super) fn inphp_cells(
    fields: &[(String, String)],
    files: &[(String, bytes::Bytes)],
) -> Option<String> {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let cells = match field("method") {
        Some("bls") => 9,
        _ => {
            let (rows, cols) = field("grid_size")?.split_once(['x', 'X'])?;
            grid_cells(rows.trim().parse().ok()?, cols.trim().parse().ok()?)?
        }
    };
    let mut h = Sha256::new();
    for (name, value) in fields {
        h.update(name.as_bytes());
        h.update(value.as_bytes());
    }
    for (name, body) in files {
        h.update(name.as_bytes());
        h.update(body);
    }
    Some(json!(pick_cells(&h.finalize(), cells)).to_string())
}

/// The points of a declared points kind's task (`AnswerShape::Points`), in the form the
/// gateway stores: `[[x, y], ...]`, or `[[x1, y1, x2, y2]]` when the task asks for anti-captcha's
/// `mode: rectangles`. The gateway's writers put them in each protocol's form.
pub(super) fn declared_points(values: &[(&'static str, String)]) -> String {
    let mut h = Sha256::new();
    for (name, value) in values {
        h.update(name.as_bytes());
        h.update(value.as_bytes());
    }
    let rectangles = values
        .iter()
        .any(|(name, value)| *name == "mode" && value == "rectangles");
    json!(shapes(&h.finalize(), rectangles)).to_string()
}

/// The `solution` of a `createTask` image-click type passed through: anti-captcha's older
/// `ImageCoordinatesTask` as `coordinates: [[x, y], ...]`, or `[[x1, y1, x2, y2]]` with `mode:
/// rectangles`; 2captcha's `GridTask` as `click: [cells]` (from 0, `rows` x `columns`, 3x3
/// unless given). `None` for any other type.
pub(super) fn task_solution(task: &Map<String, Value>) -> Option<Value> {
    let kind = task
        .get("type")
        .and_then(Value::as_str)?
        .to_ascii_lowercase();
    let digest = || Sha256::digest(Value::Object(task.clone()).to_string().as_bytes());
    match kind.as_str() {
        "imagecoordinatestask" => {
            let rectangles = task.get("mode").and_then(Value::as_str) == Some("rectangles");
            Some(json!({ "coordinates": shapes(&digest(), rectangles) }))
        }
        "gridtask" => {
            let side = |name: &str| task.get(name).and_then(Value::as_u64).unwrap_or(3);
            let rows = u32::try_from(side("rows")).ok()?;
            let cells = grid_cells(rows, u32::try_from(side("columns")).ok()?)?;
            // 2captcha's GridTask docs: "an array of tile indices, where 0 corresponds to the
            // top-left tile" (its `in.php` grid and CaptchaAI's count from 1).
            let from_zero: Vec<u32> = pick_cells(&digest(), cells)
                .into_iter()
                .map(|c| c - 1)
                .collect();
            Some(json!({ "click": from_zero }))
        }
        _ => None,
    }
}

/// Two to four points, or one or two rectangles (top left, then bottom right), inside the image.
fn shapes(digest: &[u8], rectangles: bool) -> Vec<Vec<u16>> {
    let points = points(digest);
    match rectangles {
        true => points
            .chunks_exact(2)
            .map(|p| {
                let (a, b) = (p[0], p[1]);
                vec![a.0.min(b.0), a.1.min(b.1), a.0.max(b.0), a.1.max(b.1)]
            })
            .collect(),
        false => points.iter().map(|(x, y)| vec![*x, *y]).collect(),
    }
}

/// A grid's number of cells, if it is a grid this simulator answers.
fn grid_cells(rows: u32, cols: u32) -> Option<u32> {
    rows.checked_mul(cols)
        .filter(|n| (1..=MAX_CELLS).contains(n))
}

/// About a third of `cells`, in order, never none.
fn pick_cells(digest: &[u8], cells: u32) -> Vec<u32> {
    let mut chosen: Vec<u32> = (1..=cells)
        .filter(|c| digest[(*c as usize) % digest.len()].wrapping_add(*c as u8) % 3 == 0)
        .collect();
    if chosen.is_empty() {
        chosen.push(1 + u32::from(digest[0]) % cells);
    }
    chosen
}

/// Two to four points inside the image.
fn points(digest: &[u8]) -> Vec<(u16, u16)> {
    let n = 2 + usize::from(digest[0] % 3);
    (0..n)
        .map(|i| {
            let at = |j: usize| u16::from_be_bytes([digest[j], digest[j + 1]]) % IMAGE_SIDE + 1;
            (at(1 + 4 * i), at(3 + 4 * i))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn cells(answer: &Value) -> Vec<u32> {
        serde_json::from_value(answer.clone()).expect("an array of cells")
    }

    #[test]
    fn grid_and_bls_answers_are_cells_inside_the_grid_the_same_for_the_same_task() {
        let grid = |size: &str, body: &str| {
            let fields = pairs(&[("method", "base64"), ("grid_size", size), ("body", body)]);
            serde_json::from_str::<Value>(&inphp_cells(&fields, &[]).unwrap()).unwrap()
        };
        for (size, n) in [("3x3", 9), ("4x4", 16), ("2X5", 10)] {
            for body in ["aW1hZ2Ux", "aW1hZ2Uy", "aW1hZ2Uz"] {
                let got = cells(&grid(size, body));
                assert!(!got.is_empty(), "{size}");
                assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
                assert!(got.iter().all(|c| (1..=n).contains(c)), "{size}: {got:?}");
                assert_eq!(
                    got,
                    cells(&grid(size, body)),
                    "the same task, the same cells"
                );
            }
        }
        let bls = pairs(&[("method", "bls"), ("instructions", "123")]);
        let got: Vec<u32> = serde_json::from_str(&inphp_cells(&bls, &[]).unwrap()).unwrap();
        assert!(got.iter().all(|c| (1..=9).contains(c)), "{got:?}");
        // Any other type, and a grid size that is no grid, keep the token.
        for fields in [
            pairs(&[("method", "keycaptcha")]),
            pairs(&[("method", "base64"), ("grid_size", "0x3")]),
            pairs(&[("method", "base64"), ("grid_size", "99x99")]),
            pairs(&[("method", "base64"), ("grid_size", "big")]),
        ] {
            assert_eq!(inphp_cells(&fields, &[]), None, "{fields:?}");
        }
    }

    fn task(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!("a task object"),
        }
    }

    fn inside(v: &Value) -> bool {
        v.as_u64().is_some_and(|n| (1..=300).contains(&n))
    }

    /// Two to four points of two numbers each, or rectangles with their top left first.
    fn assert_shapes(list: &Value, rectangles: bool) {
        let shapes = list.as_array().expect("a list");
        assert!((1..=4).contains(&shapes.len()), "{list}");
        for shape in shapes {
            let n: Vec<u64> = serde_json::from_value(shape.clone()).unwrap();
            assert!(shape.as_array().unwrap().iter().all(inside), "{list}");
            match rectangles {
                true => assert!(n.len() == 4 && n[0] <= n[2] && n[1] <= n[3], "{list}"),
                false => assert_eq!(n.len(), 2, "{list}"),
            }
        }
    }

    #[test]
    fn a_declared_points_task_gets_points_inside_the_image_the_same_for_the_same_task() {
        let task = |body: &str, mode: &str| {
            let mut values = vec![("body", body.to_owned())];
            if !mode.is_empty() {
                values.push(("mode", mode.to_owned()));
            }
            serde_json::from_str::<Value>(&declared_points(&values)).unwrap()
        };
        let got = task("aW1n", "");
        assert_shapes(&got, false);
        assert!(got.as_array().unwrap().len() >= 2, "{got}");
        assert_eq!(got, task("aW1n", ""), "the same task, the same points");
        assert_ne!(got, task("aW1nMg", ""), "another image, other points");
        assert_shapes(&task("aW1n", "points"), false);
        assert_shapes(&task("aW1n", "rectangles"), true);
    }

    #[test]
    fn each_passed_through_click_solution_has_its_shape_inside_the_image() {
        let legacy = json!({"type": "ImageCoordinatesTask", "body": "aW1n", "mode": "points"});
        let got = task_solution(&task(legacy.clone())).unwrap();
        assert_shapes(&got["coordinates"], false);
        assert_eq!(
            got,
            task_solution(&task(legacy)).unwrap(),
            "the same task, the same points"
        );
        let rect = json!({"type": "ImageCoordinatesTask", "body": "aW1n", "mode": "rectangles"});
        assert_shapes(&task_solution(&task(rect)).unwrap()["coordinates"], true);

        let grid = json!({"type": "GridTask", "body": "aW1n", "rows": 4, "columns": 4});
        let got = cells(&task_solution(&task(grid)).unwrap()["click"]);
        assert!(
            !got.is_empty() && got.iter().all(|c| (0..16).contains(c)),
            "{got:?}"
        );

        for other in [
            json!({"type": "AmazonTaskProxyless"}),
            json!({"type": "GridTask", "rows": 50, "columns": 50}),
        ] {
            assert_eq!(task_solution(&task(other.clone())), None, "{other}");
        }
    }
}
