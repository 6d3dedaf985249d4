//! Imports run one way (docs/ARCHITECTURE.md "Layers"): each top-level module of `src/` imports
//! only from its own layer or below, and no modules or files import each other in a circle.
//! The crate's own `crate::` and `super::` paths are read from the source; test code (`tests.rs`,
//! `tests/` folders, `#[cfg(test)] mod tests`) may reach anywhere and is skipped. In-file tests
//! have one layout, checked here too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom to top. A module may import its own layer and every layer before it.
const LAYERS: [(&str, &[&str]); 11] = [
    (
        "vocabulary",
        &["model", "secret", "setting", "shutdown", "eventually"],
    ),
    ("wire protocols", &["wire", "lua", "redis_base"]),
    ("telemetry", &["telemetry"]),
    ("provider side", &["provider", "sim"]),
    ("engine", &["engine"]),
    (
        "around the engine",
        &["pools", "upstream", "tenants", "callback", "queue"],
    ),
    ("status", &["status"]),
    ("http", &["http"]),
    ("settings", &["cli", "config"]),
    ("wiring", &["wiring"]),
    ("commands", &["commands", "bench"]),
];

type ModPath = Vec<String>;

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn layer_of(top: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&top))
}

/// Every module file of the library (not `main.rs`, not test files), by module path.
fn module_files() -> BTreeMap<ModPath, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "tests") {
                    dirs.push(path);
                }
                continue;
            }
            let rel = path.strip_prefix(src()).expect("under src/");
            let Some(stem) = rel.to_str().and_then(|r| r.strip_suffix(".rs")) else {
                continue;
            };
            let mut parts: ModPath = stem.split('/').map(str::to_owned).collect();
            let last = parts.last().cloned().unwrap_or_default();
            if last == "main" || last == "tests" {
                continue;
            }
            if last == "mod" || last == "lib" {
                parts.pop();
            }
            out.insert(parts, path);
        }
    }
    out
}

/// The source without its in-file test module (`#[cfg(test)] mod tests { .. }`, the file's last
/// item); a test module in its own file (`#[cfg(test)] mod tests;`) is skipped as a file.
fn production_text(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("a source file is readable");
    match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// Splits a `use` tree (`a::{b, c::{d}}`, whitespace removed) into whole paths.
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let prefix = &tree[..open];
    let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| match p {
            "self" => vec![prefix.trim_end_matches(':').to_owned()],
            p => expand(&format!("{prefix}{p}")),
        })
        .collect()
}

/// Every `crate::`, `super::` and `self::` path the text names, in `use` trees or inline.
fn paths_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for stmt in text.split("use ").skip(1) {
        let Some(end) = stmt.find(';') else { continue };
        let tree: String = stmt[..end].chars().filter(|c| !c.is_whitespace()).collect();
        if ["crate::", "super::", "self::"]
            .iter()
            .any(|p| tree.starts_with(p))
        {
            out.extend(expand(&tree));
        }
    }
    let bytes = text.as_bytes();
    for start in ["crate::", "super::"] {
        for (i, _) in text.match_indices(start) {
            if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
                continue;
            }
            let path: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(path);
        }
    }
    out
}

/// The module a path from `from` lands in: the deepest module file its segments name.
fn resolve(from: &ModPath, path: &str, modules: &BTreeMap<ModPath, PathBuf>) -> Option<ModPath> {
    let mut segments = path.split("::").filter(|s| !s.is_empty());
    let mut base: ModPath = match segments.next()? {
        "crate" => Vec::new(),
        "self" => from.clone(),
        "super" => from[..from.len().saturating_sub(1)].to_vec(),
        _ => return None,
    };
    let mut rest: Vec<&str> = segments.collect();
    while rest.first() == Some(&"super") {
        base.pop();
        rest.remove(0);
    }
    base.extend(rest.iter().map(|s| (*s).to_owned()));
    (0..=base.len())
        .rev()
        .map(|k| base[..k].to_vec())
        .find(|m| modules.contains_key(m))
}

/// Edges between distinct modules, leaving out a module and its own ancestors (a parent's
/// `mod` and re-exports are how Rust nests, not a dependency).
fn file_edges(modules: &BTreeMap<ModPath, PathBuf>) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (from, path) in modules {
        for p in paths_in(&production_text(path)) {
            let Some(to) = resolve(from, &p, modules) else {
                continue;
            };
            if to.starts_with(from) || from.starts_with(&to) {
                continue;
            }
            edges.entry(from.clone()).or_default().insert(to);
        }
    }
    edges
}

/// The first circle found among `edges`, as the nodes in order.
fn find_cycle<T: Ord + Clone>(edges: &BTreeMap<T, BTreeSet<T>>) -> Option<Vec<T>> {
    fn visit<T: Ord + Clone>(
        node: &T,
        edges: &BTreeMap<T, BTreeSet<T>>,
        done: &mut BTreeSet<T>,
        stack: &mut Vec<T>,
    ) -> Option<Vec<T>> {
        if let Some(i) = stack.iter().position(|n| n == node) {
            return Some(stack[i..].to_vec());
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, done, stack) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|n| visit(n, edges, &mut done, &mut Vec::new()))
}

fn show(m: &ModPath) -> String {
    m.join("/")
}

#[test]
fn every_top_level_module_has_a_layer() {
    let modules = module_files();
    let tops: BTreeSet<&String> = modules.keys().filter_map(|m| m.first()).collect();
    assert!(tops.len() >= 20, "found only {tops:?} under src/");
    for top in tops {
        assert!(
            layer_of(top).is_some(),
            "src/{top} has no layer: add it to LAYERS here and to docs/ARCHITECTURE.md \"Layers\""
        );
    }
}

#[test]
fn imports_never_run_up_a_layer() {
    let modules = module_files();
    let edges = file_edges(&modules);
    let mut wrong = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            let (Some(a), Some(b)) = (layer_of(&from[0]), layer_of(&to[0])) else {
                continue;
            };
            if b > a {
                wrong.push(format!(
                    "{} ({}) imports {} ({})",
                    show(from),
                    LAYERS[a].0,
                    show(to),
                    LAYERS[b].0
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports up a layer:\n{}",
        wrong.join("\n")
    );
    // The reader sees real imports: the thread budget's use of the Redis connection, and the
    // HTTP layer's of the engine, are two of them.
    for (from, to) in [("provider", "redis_base"), ("http", "engine")] {
        assert!(
            edges
                .iter()
                .any(|(f, t)| f[0] == from && t.iter().any(|m| m[0] == to)),
            "the import reader found no {from} -> {to} edge"
        );
    }
}

#[test]
fn no_modules_import_each_other_in_a_circle() {
    let modules = module_files();
    let edges = file_edges(&modules);
    let mut tops: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in &edges {
        for to in tos.iter().filter(|to| to[0] != from[0]) {
            tops.entry(from[0].clone())
                .or_default()
                .insert(to[0].clone());
        }
    }
    if let Some(cycle) = find_cycle(&tops) {
        panic!("top-level modules in a circle: {}", cycle.join(" -> "));
    }
    if let Some(cycle) = find_cycle(&edges) {
        let names: Vec<String> = cycle.iter().map(show).collect();
        panic!("files in a circle: {}", names.join(" -> "));
    }
}

#[test]
fn the_reader_resolves_nested_use_trees_and_parents() {
    let paths = expand("crate::engine::{Engine,store::{self,Store}}");
    assert_eq!(
        paths,
        [
            "crate::engine::Engine",
            "crate::engine::store",
            "crate::engine::store::Store"
        ]
    );
    let modules: BTreeMap<ModPath, PathBuf> =
        [vec![], vec!["a".into()], vec!["a".into(), "b".into()]]
            .into_iter()
            .map(|m| (m, PathBuf::new()))
            .collect();
    let from: ModPath = vec!["a".into(), "c".into()];
    assert_eq!(
        resolve(&from, "super::b::Thing", &modules),
        Some(vec!["a".to_owned(), "b".to_owned()])
    );
    assert_eq!(resolve(&from, "crate::x::Y", &modules), Some(vec![]));
    let circle: BTreeMap<u8, BTreeSet<u8>> =
        [(1, [2].into()), (2, [3].into()), (3, [1].into())].into();
    assert_eq!(find_cycle(&circle), Some(vec![1, 2, 3]));
    let line: BTreeMap<u8, BTreeSet<u8>> = [(1, [2].into()), (2, [3].into())].into();
    assert_eq!(find_cycle(&line), None);
}

/// A module's unit tests are `mod tests`: inline at the end of the file, or in `tests.rs` (or a
/// `tests/` folder) beside it when long. Nothing else: no `#[path]`, no `*_tests.rs` siblings,
/// so a reader finds a module's tests in one place.
#[test]
fn unit_tests_have_one_layout() {
    let mut wrong = Vec::new();
    let mut dirs = vec![src()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.ends_with("_tests.rs") {
                wrong.push(format!(
                    "{}: tests beside a module go in tests.rs",
                    path.display()
                ));
            }
            if !name.ends_with(".rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a source file is readable");
            if text.contains("#[path") {
                wrong.push(format!(
                    "{}: #[path] hides where a module lives",
                    path.display()
                ));
            }
            let mut lines = text.lines();
            while let Some(line) = lines.next() {
                if line.trim() != "#[cfg(test)]" {
                    continue;
                }
                let Some(item) = lines.next().map(str::trim) else {
                    break;
                };
                let named = item
                    .strip_prefix("mod ")
                    .or_else(|| item.strip_prefix("pub mod "));
                if let Some(rest) = named {
                    let name = rest.trim_end_matches([';', '{', ' ']);
                    // Test support shared by several test modules is a module of its own.
                    if name != "tests" && name != "testing" {
                        wrong.push(format!("{}: test module `{name}`", path.display()));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
