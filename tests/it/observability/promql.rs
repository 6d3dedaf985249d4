//! Reads what a PromQL expression queries: the metric names, the label names it matches or
//! groups by, and its equality matchers. Enough of the grammar for the shipped rules and
//! dashboard (selectors, functions, aggregations with `by`/`without`, binary operators with
//! `on`/`ignoring`/`group_*`, ranges, offsets, Grafana's `$variables`); not a full parser.

use std::collections::BTreeSet;

/// What one expression queries.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Query {
    pub metrics: BTreeSet<String>,
    /// Label names in matchers and in `by`/`without`/`on`/`ignoring`/`group_*` lists.
    pub labels: BTreeSet<String>,
    /// `metric{label="value"}` equality matchers: (metric, label, value).
    pub equals: BTreeSet<(String, String, String)>,
}

/// Aggregation operators: a name followed by `by (...)` rather than `(`, so not a metric.
const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Clauses whose parenthesised list holds label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: [&str; 7] = ["and", "or", "unless", "bool", "offset", "inf", "nan"];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

struct Scanner<'a> {
    chars: Vec<char>,
    at: usize,
    out: &'a mut Query,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn next_non_space(&self) -> Option<char> {
        self.chars[self.at..]
            .iter()
            .copied()
            .find(|c| !c.is_whitespace())
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> String {
        let start = self.at;
        while self.peek().is_some_and(&keep) {
            self.at += 1;
        }
        self.chars[start..self.at].iter().collect()
    }

    fn skip_space(&mut self) {
        self.take_while(char::is_whitespace);
    }

    /// A quoted string starting at the current quote; returns its content (escapes kept).
    fn string(&mut self) -> String {
        let quote = self.chars[self.at];
        self.at += 1;
        let mut s = String::new();
        while let Some(c) = self.peek() {
            self.at += 1;
            if c == '\\' {
                if let Some(escaped) = self.peek() {
                    s.push(escaped);
                    self.at += 1;
                }
            } else if c == quote {
                break;
            } else {
                s.push(c);
            }
        }
        s
    }

    /// `{label op "value", ...}` after `metric` (None for a bare `{...}` selector).
    fn matchers(&mut self, metric: Option<&str>) {
        self.at += 1;
        loop {
            self.skip_space();
            match self.peek() {
                None => return,
                Some('}') => {
                    self.at += 1;
                    return;
                }
                Some(',') => self.at += 1,
                Some(_) => {
                    let label = self.take_while(is_ident);
                    self.skip_space();
                    let op = self.take_while(|c| "=!~".contains(c));
                    self.skip_space();
                    let value = match self.peek() {
                        Some('"' | '\'' | '`') => self.string(),
                        _ => self.take_while(|c| c != ',' && c != '}'),
                    };
                    assert!(!label.is_empty() && !op.is_empty(), "bad matcher");
                    if let (Some(m), "=") = (metric, op.as_str()) {
                        self.out.equals.insert((m.to_owned(), label.clone(), value));
                    }
                    self.out.labels.insert(label);
                }
            }
        }
    }

    /// `( label, label )` after `by`, `on`...
    fn label_list(&mut self) {
        self.skip_space();
        self.at += 1;
        loop {
            self.skip_space();
            match self.peek() {
                None => return,
                Some(')') => {
                    self.at += 1;
                    return;
                }
                Some(',') => self.at += 1,
                Some(_) => {
                    let label = self.take_while(is_ident);
                    assert!(!label.is_empty(), "bad label list");
                    self.out.labels.insert(label);
                }
            }
        }
    }

    fn run(&mut self) {
        while let Some(c) = self.peek() {
            match c {
                '"' | '\'' | '`' => {
                    self.string();
                }
                '{' => self.matchers(None),
                '[' => {
                    self.take_while(|c| c != ']');
                    self.at += 1;
                }
                '$' => {
                    self.at += 1;
                    self.take_while(is_ident);
                }
                c if c.is_ascii_digit() || c == '.' => {
                    self.take_while(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_');
                }
                c if is_ident_start(c) => {
                    let word = self.take_while(is_ident);
                    let next = self.next_non_space();
                    if LABEL_LISTS.contains(&word.as_str()) && next == Some('(') {
                        self.label_list();
                    } else if next == Some('(')
                        || LABEL_LISTS.contains(&word.as_str())
                        || AGGREGATIONS.contains(&word.as_str())
                        || KEYWORDS.contains(&word.to_ascii_lowercase().as_str())
                    {
                        // A function or an operator.
                    } else {
                        self.skip_space();
                        if self.peek() == Some('{') {
                            self.matchers(Some(&word));
                        }
                        self.out.metrics.insert(word);
                    }
                }
                _ => self.at += 1,
            }
        }
    }
}

/// The metrics, labels and equality matchers of `expr`.
pub fn read(expr: &str) -> Query {
    let mut out = Query::default();
    Scanner {
        chars: expr.chars().collect(),
        at: 0,
        out: &mut out,
    }
    .run();
    out
}

/// A Grafana variable query: `label_values(selector, label)` or `label_values(label)`, else
/// plain PromQL (`query_result(...)`'s argument reads the same).
pub fn read_variable(query: &str) -> Query {
    let Some(inner) = query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
    else {
        return read(query);
    };
    match inner.rsplit_once(',') {
        Some((selector, label)) => {
            let mut q = read(selector);
            q.labels.insert(label.trim().to_owned());
            q
        }
        None => Query {
            labels: BTreeSet::from([inner.trim().to_owned()]),
            ..Query::default()
        },
    }
}

#[test]
fn the_reader_finds_metrics_labels_and_matchers() {
    let q = read(
        r#"histogram_quantile(0.9, sum by (kind, le) (rate(captcha_gateway_handout_seconds_bucket{job=~"$job",kind="turnstile"}[$__rate_interval]))) > 60
           or count by (version) (captcha_gateway_build_info offset 5m) / on (instance) group_left up
           unless max without (account) (captcha_gateway_upstream_usable {store = 'a,b}'}) == bool 0"#,
    );
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        q.metrics,
        set(&[
            "captcha_gateway_handout_seconds_bucket",
            "captcha_gateway_build_info",
            "up",
            "captcha_gateway_upstream_usable",
        ])
    );
    assert_eq!(
        q.labels,
        set(&[
            "kind", "le", "job", "version", "instance", "account", "store"
        ])
    );
    assert_eq!(
        q.equals,
        BTreeSet::from([
            (
                "captcha_gateway_handout_seconds_bucket".to_owned(),
                "kind".to_owned(),
                "turnstile".to_owned()
            ),
            (
                "captcha_gateway_upstream_usable".to_owned(),
                "store".to_owned(),
                "a,b}".to_owned()
            ),
        ])
    );
    let v = read_variable(r#"label_values(captcha_gateway_build_info{job=~"$job"}, instance)"#);
    assert_eq!(v.metrics, set(&["captcha_gateway_build_info"]));
    assert_eq!(v.labels, set(&["job", "instance"]));
}
