//! The repository stands alone: no file cites notes that live outside it, and every promise,
//! numbered protocol item and section a comment or page cites exists in the page it names
//! (docs/ARCHITECTURE.md promises, docs/PROTOCOL.md items, headings of any `.md` file).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Names of notes a clone of the repository does not have. Spelled in pieces so this file does
/// not cite them itself.
const OUTSIDE: [&str; 4] = [
    concat!("DESIGN", ".md"),
    concat!("CONVENTIONS", ".md"),
    concat!("..", "/shared"),
    concat!("research", "/"),
];

/// Extensions of the files whose text is searched for citations.
const TEXT: [&str; 11] = [
    "rs", "md", "lua", "py", "toml", "txt", "sh", "yml", "yaml", "json", "conf",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file of the repository (tracked, or new and not ignored), so `target/` is left out.
fn repo_files() -> Vec<PathBuf> {
    let out = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root())
        .output()
        .expect("git runs (the test lists the repository's files with it)");
    assert!(out.status.success(), "git ls-files failed: {out:?}");
    let files: Vec<PathBuf> = out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
        .filter(|p| root().join(p).is_file())
        .collect();
    assert!(
        files.iter().any(|p| p == Path::new("src/main.rs")),
        "the listing misses src/main.rs: {} files",
        files.len()
    );
    files
}

fn is_text(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| TEXT.contains(&e))
}

#[test]
fn no_file_cites_notes_outside_the_repository() {
    let mut found = Vec::new();
    for path in repo_files() {
        let Ok(bytes) = std::fs::read(root().join(&path)) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        for (n, line) in text.lines().enumerate() {
            for name in OUTSIDE.iter().filter(|name| line.contains(*name)) {
                found.push(format!("{}:{}: cites {name}", path.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite docs/ instead (docs/ARCHITECTURE.md, docs/PROTOCOL.md, ...):\n{}",
        found.join("\n")
    );
}

/// A file's text as one line, comment markers dropped, so a citation broken over two comment
/// lines reads as one.
fn flatten(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let line = line.trim_start();
        let line = ["//!", "///", "//", "--", "#"]
            .iter()
            .find_map(|marker| line.strip_prefix(marker))
            .unwrap_or(line);
        out.push_str(line.trim());
        out.push(' ');
    }
    out
}

/// The numbers at the start of `s`: `3`, `1-15`, `4 and 12`, `1, 2`. Empty if none.
fn numbers(s: &str) -> Vec<u32> {
    fn number(s: &str) -> Option<(u32, &str)> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        Some((s[..end].parse().ok()?, &s[end..]))
    }
    let mut out = Vec::new();
    let Some((mut last, mut rest)) = number(s) else {
        return out;
    };
    out.push(last);
    loop {
        if let Some((to, r)) = rest.strip_prefix('-').and_then(number) {
            out.extend(last + 1..=to);
            (last, rest) = (to, r);
        } else if let Some((n, r)) = [", ", " and "]
            .iter()
            .find_map(|sep| rest.strip_prefix(sep).and_then(number))
        {
            out.push(n);
            (last, rest) = (n, r);
        } else {
            return out;
        }
    }
}

/// The numbers cited after each `word` (`promise`, `item`) in `text`, matched as a whole word,
/// singular or plural, any case; only where `keep` accepts the text before the word.
fn cited_after(text: &str, word: &str, keep: impl Fn(&str) -> bool) -> Vec<u32> {
    let lower = text.to_ascii_lowercase();
    let mut out = Vec::new();
    for (at, _) in lower.match_indices(word) {
        let before = &text[..at];
        if before.ends_with(|c: char| c.is_ascii_alphanumeric()) || !keep(before) {
            continue;
        }
        let rest = &text[at + word.len()..];
        let rest = rest.strip_prefix('s').unwrap_or(rest);
        if let Some(rest) = rest.strip_prefix(' ') {
            out.extend(numbers(rest));
        }
    }
    out
}

/// The numbers of the list items (`N. ...`) of `page`, from the line starting with `from` up to
/// the next heading.
fn numbered_items(page: &str, from: &str) -> BTreeSet<u32> {
    let mut inside = false;
    let mut out = BTreeSet::new();
    for line in page.lines() {
        if line.starts_with('#') {
            inside = line.starts_with(from);
            continue;
        }
        if inside && let Some((n, _)) = line.split_once(". ") {
            if let Ok(n) = n.parse() {
                out.insert(n);
            }
        }
    }
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(root().join(path))
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn every_cited_promise_and_protocol_item_exists() {
    let promises = numbered_items(&read(Path::new("docs/ARCHITECTURE.md")), "## The promises");
    let items = numbered_items(&read(Path::new("docs/PROTOCOL.md")), "## Downstream");
    assert!(
        promises.contains(&1) && promises.contains(&8),
        "{promises:?}"
    );
    assert!(items.contains(&1) && items.contains(&15), "{items:?}");

    let mut missing = Vec::new();
    let mut checked = 0;
    for path in repo_files().into_iter().filter(|p| is_text(p)) {
        let text = flatten(&read(&path));
        for n in cited_after(&text, "promise", |_| true) {
            checked += 1;
            if !promises.contains(&n) {
                missing.push(format!("{}: promise {n}", path.display()));
            }
        }
        let after_protocol =
            |before: &str| before.trim_end_matches([' ', ',']).ends_with("PROTOCOL.md");
        for n in cited_after(&text, "item", after_protocol) {
            checked += 1;
            if !items.contains(&n) {
                missing.push(format!("{}: PROTOCOL.md item {n}", path.display()));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} citations found: is the parsing broken?"
    );
    assert!(
        missing.is_empty(),
        "cited but not in docs/ARCHITECTURE.md's promises or docs/PROTOCOL.md's items:\n{}",
        missing.join("\n")
    );
}

/// `page` has `section` as a heading (or the start of one), or as a bold term of a list.
fn has_section(page: &str, section: &str) -> bool {
    let heading = page.lines().any(|line| {
        let title = line.trim_start_matches('#');
        line.starts_with('#')
            && title
                .trim()
                .strip_prefix(section)
                .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_alphanumeric()))
    });
    heading || page.contains(&format!("**{section}**")) || page.contains(&format!("**{section}.**"))
}

/// Every `path.md` followed by a quoted section starting with a capital (`docs/REDIS.md, "Thread budget"`, `PROTOCOL.md
/// "Retry classes"`), as (page path as written, section).
fn cited_sections(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices(".md") {
        let start = text[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
            .map_or(0, |i| i + 1);
        let page = &text[start..at + 3];
        let after = &text[at + 3..];
        let rest = after.trim_start_matches([',', ' ', '(']);
        // A page name inside a string literal (`"docs/API.md"`) is code, not a citation.
        let in_string = text[..start].ends_with('"');
        if !in_string
            && rest.len() < after.len()
            && let Some(quoted) = rest.strip_prefix('"')
            && quoted.starts_with(|c: char| c.is_ascii_uppercase())
            && let Some((section, _)) = quoted.split_once('"')
            && section.len() < 60
        {
            out.push((page.to_owned(), section.to_owned()));
        }
    }
    out
}

/// Where a cited page is: as written from the repository root or the citing file's folder, or
/// by its name in docs/.
fn resolve(page: &str, citing: &Path) -> Option<PathBuf> {
    let here = citing.parent().unwrap_or(Path::new(""));
    [
        root().join(page),
        root().join(here).join(page),
        root().join("docs").join(page),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

#[test]
fn every_cited_section_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for path in repo_files().into_iter().filter(|p| is_text(p)) {
        for (page, section) in cited_sections(&flatten(&read(&path))) {
            checked += 1;
            match resolve(&page, &path) {
                None => missing.push(format!("{}: {page} does not exist", path.display())),
                Some(file) => {
                    let text = std::fs::read_to_string(&file).unwrap_or_default();
                    if !has_section(&text, &section) {
                        missing.push(format!(
                            "{}: {page} has no section \"{section}\"",
                            path.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        checked > 10,
        "only {checked} section citations found: is the parsing broken?"
    );
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_citation_reader_understands_the_forms_in_use() {
    assert_eq!(numbers("1-3 hold"), vec![1, 2, 3]);
    assert_eq!(numbers("4 and 12; the"), vec![4, 12]);
    assert_eq!(numbers("5, \"Capped\""), vec![5]);
    assert_eq!(numbers("x"), Vec::<u32>::new());
    let text =
        flatten("//! see docs/PROTOCOL.md items 7-8 and promise 2's default\n// Promises 1-3 a");
    assert_eq!(cited_after(&text, "promise", |_| true), vec![2, 1, 2, 3]);
    let protocol = |b: &str| b.trim_end_matches([' ', ',']).ends_with("PROTOCOL.md");
    assert_eq!(cited_after(&text, "item", protocol), vec![7, 8]);
    assert_eq!(
        cited_after("the item 4", "item", protocol),
        Vec::<u32>::new()
    );
    let text = flatten("/// (docs/PROTOCOL.md \"Retry\n/// classes\") and [A](A.md)");
    assert_eq!(
        cited_sections(&text),
        vec![("docs/PROTOCOL.md".to_owned(), "Retry classes".to_owned())]
    );
    assert!(has_section(
        "# X\n## Ejection (passive health)\n",
        "Ejection"
    ));
    assert!(!has_section("## Ejections\n", "Ejection"));
    assert!(has_section(
        "- **Reusable answers**: one leader",
        "Reusable answers"
    ));
}

/// docs/API.md's table of task types is the kinds' declarations as rendered from them: a type
/// declared, renamed or given to another provider shows there, or this fails with the table.
#[test]
fn the_task_types_table_is_the_declarations() {
    let page = read(Path::new("docs/API.md"));
    for table in [
        captcha_gateway::model::task_types_table(),
        captcha_gateway::model::task_parameters_table(),
    ] {
        assert!(
            page.contains(&table),
            "docs/API.md \"Task types\" must hold the declarations' tables:\n{table}"
        );
    }
}
