//! The last line of defence for secrets in logs (docs/SECURITY.md "Logs"). Our own events never
//! carry a key or a password (keys are `Secret`s, URLs go through `redact_url`, provider errors
//! drop their URL), but dependencies log at debug and trace level in their own words. Every
//! formatted line passes through here before it reaches stderr: the configured secrets are
//! replaced wherever they appear, and so is anything shaped like a secret that we cannot know
//! in advance (a caller's key in a query string, a proxy's password, a bearer token).

use std::io::{self, Write};
use std::sync::Arc;

use regex::{Regex, RegexBuilder};
use tracing_subscriber::fmt::MakeWriter;

/// What a scrubbed value becomes.
const REDACTED: &str = "<redacted>";

/// Configured secrets shorter than this are not scrubbed as literals: a two-letter password
/// would blank every word it occurs in. Their shape-based rules still apply.
const MIN_LITERAL: usize = 6;

/// Scrubs secrets out of formatted log lines.
pub struct Redactor {
    /// The configured secrets, as one alternation; `None` when there are none.
    literals: Option<Regex>,
    /// Secret-shaped text.
    shapes: Vec<Shape>,
}

/// One rule for secret-shaped text: keeps its first group, replaces the rest.
struct Shape {
    /// A rule runs only on lines holding this byte: most lines hold no `=` or `@`, and a scan
    /// for one byte is far cheaper than a regex's.
    needs: Option<u8>,
    rule: Regex,
    replacement: String,
}

impl Redactor {
    pub fn new(secrets: &[&str]) -> Self {
        let mut known: Vec<&str> = secrets
            .iter()
            .map(|s| s.trim())
            .filter(|s| s.len() >= MIN_LITERAL)
            .collect();
        // Longest first, so a secret that contains another is replaced whole.
        known.sort_by_key(|s| std::cmp::Reverse(s.len()));
        known.dedup();
        let literals = (!known.is_empty()).then(|| {
            let alternation: Vec<String> = known.iter().map(|s| regex::escape(s)).collect();
            RegexBuilder::new(&alternation.join("|"))
                // Thousands of tenant keys make a large automaton; still far below this.
                .size_limit(64 << 20)
                .build()
                .expect("escaped literals always compile")
        });
        let names = r"(?:client_?key|api_?key|key|pass|password|passwd|proxy_?password|proxypass|secret|access_token)";
        // (the byte a line must hold for the rule to apply, the rule, what it keeps after `$1`)
        let shapes = [
            // A query string or form field (`in.php?key=...`, `&password=...`), or a text log
            // line's field (`password="..."`).
            (
                Some(b'='),
                format!(r"(?i)((?:^|[^A-Za-z0-9_]){names}=\\?\x22?)[^&\s\x22\\]+"),
                "",
            ),
            // A JSON field, bare or escaped inside a JSON log line: `"clientKey":"..."`.
            (
                Some(b'"'),
                format!(r#"(?i)(\\?"{names}\\?"\s*:\s*\\?")[^"\\]*"#),
                "",
            ),
            // `Authorization: Bearer ...`.
            (None, r"(?i)(bearer\s+)[^\s\x22\\,;]+".to_owned(), ""),
            // User info with a password: `redis://:pw@host`, a proxy's `user:pw@host:port`.
            (
                Some(b'@'),
                r"((?:^|://|[\s\x22'=(,\[])[^\s:@/\x22'\\]*:)[^\s@/\x22'\\]+@".to_owned(),
                "@",
            ),
        ];
        Self {
            literals,
            shapes: shapes
                .into_iter()
                .map(|(needs, rule, keep)| Shape {
                    needs,
                    rule: Regex::new(&rule).expect("the rules compile"),
                    replacement: format!("${{1}}{REDACTED}{keep}"),
                })
                .collect(),
        }
    }

    /// `line` with every secret replaced.
    pub fn scrub(&self, line: &str) -> String {
        let mut out = match &self.literals {
            Some(re) => re.replace_all(line, REDACTED).into_owned(),
            None => line.to_owned(),
        };
        for shape in &self.shapes {
            if shape.needs.is_some_and(|b| !out.as_bytes().contains(&b)) {
                continue;
            }
            if shape.rule.is_match(&out) {
                out = shape
                    .rule
                    .replace_all(&out, shape.replacement.as_str())
                    .into_owned();
            }
        }
        out
    }

    /// A writer for the log subscriber: each event is scrubbed whole, then written to stderr.
    pub fn into_stderr_writer(self) -> ScrubbedStderr {
        ScrubbedStderr(Arc::new(self))
    }
}

/// Makes one [`EventWriter`] per log event.
#[derive(Clone)]
pub struct ScrubbedStderr(Arc<Redactor>);

impl<'a> MakeWriter<'a> for ScrubbedStderr {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> EventWriter {
        EventWriter {
            redactor: self.0.clone(),
            buffer: Vec::new(),
        }
    }
}

/// Collects one formatted event; scrubs and writes it when dropped, so a secret split across
/// two writes is still seen whole.
pub struct EventWriter {
    redactor: Arc<Redactor>,
    buffer: Vec<u8>,
}

impl Write for EventWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let line = String::from_utf8_lossy(&self.buffer);
        let clean = self.redactor.scrub(&line);
        // Nowhere to report a failed write to stderr.
        let _ = io::stderr().lock().write_all(clean.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_secrets_are_replaced_wherever_they_appear() {
        let r = Redactor::new(&["ProviderKey0123", "GwKeyAbcdef", "ab"]);
        let out = r.scrub("sent ProviderKey0123 and xGwKeyAbcdefx; ab stays");
        assert!(
            !out.contains("ProviderKey0123") && !out.contains("GwKeyAbcdef"),
            "{out}"
        );
        assert!(
            out.contains("ab stays"),
            "short secrets are not literals: {out}"
        );
    }

    #[test]
    fn secret_shaped_values_are_replaced() {
        let r = Redactor::new(&[]);
        let cases = [
            ("GET /in.php?key=k3y&method=post", "k3y"),
            ("body clientKey=abc123&x=1", "abc123"),
            (r#"INFO request: sent proxy_password="pw1" next"#, "pw1"),
            (r#"{"fields":{"message":"api_key=\"ak2\""}}"#, "ak2"),
            (r#"{"clientKey":"cK999","task":{}}"#, "cK999"),
            (r#"{"message":"{\"key\":\"kX1\"}"}"#, "kX1"),
            ("authorization: Bearer tok3n, next", "tok3n"),
            ("proxy=leak:PxPw1@10.0.0.1:3128", "PxPw1"),
            (r#"{"proxy":"leak:PxPw2@10.0.0.1:3128"}"#, "PxPw2"),
            ("redis://:RdPw@127.0.0.1:6379/0", "RdPw"),
            ("rediss://user:RdPw2@redis:6380", "RdPw2"),
        ];
        for (line, secret) in cases {
            let out = r.scrub(line);
            assert!(!out.contains(secret), "{line} -> {out}");
            assert!(out.contains(REDACTED), "{line} -> {out}");
        }
    }

    #[test]
    fn ordinary_lines_are_left_alone() {
        let r = Redactor::new(&["SecretValue1"]);
        for line in [
            r#"{"timestamp":"2026-12-01T17:10:03.1Z","level":"INFO","fields":{"message":"gateway listening","addr":"127.0.0.1:8080"}}"#,
            "2026-12-01T17:10:03Z  INFO request{request_id=abc method=GET path=/res.php}: done sitekey=6Le-x",
            "upstream task for recaptcha_v2 https://shop.example.com/cart",
        ] {
            assert_eq!(r.scrub(line), line);
        }
    }

    #[test]
    fn a_scrubbed_json_line_is_still_json() {
        let r = Redactor::new(&["GwKey0123456"]);
        let line = r#"{"fields":{"message":"x GwKey0123456 y","url":"/in.php?key=abc&json=1","proxy":"u:p4ss@h:1"}}"#;
        let out = r.scrub(line);
        let parsed: serde_json::Value = serde_json::from_str(&out).expect(&out);
        assert!(
            !out.contains("GwKey0123456") && !out.contains("p4ss"),
            "{parsed}"
        );
    }
}
