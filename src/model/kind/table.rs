//! The declarations as the Markdown table docs/API.md ("Task types") shows, so the page is the
//! catalog's own words (a test compares them).

use std::fmt::Write as _;

use super::spec::{AnswerShape, Check, Dialect, Dialects, Parameters, ProxyName};
use super::{Kind, Reuse};

fn reuse_name(r: Reuse) -> &'static str {
    match r {
        Reuse::SingleUse { poolable: true } => "single-use, pooled",
        Reuse::SingleUse { poolable: false } => "single-use, never pooled",
        Reuse::Reusable => "reusable",
    }
}

/// One row per kind: its names per dialect, who solves it, reuse, lifetime and first poll.
pub fn markdown() -> String {
    let mut out = String::from(
        "| kind | `in.php` `method` | `createTask` types | solved by | reuse | lifetime | first poll |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for kind in Kind::ALL {
        let spec = kind.spec();
        let flag = match (spec.inphp_flag, spec.selecting_param()) {
            (Some(f), None) => format!(" with `{f}=1`"),
            (Some(f), Some(_)) => format!(" with `{f}`"),
            (None, _) => String::new(),
        };
        let methods: Vec<String> = spec
            .methods
            .iter()
            .map(|m| format!("`{m}`{flag}"))
            .collect();
        let names: Vec<String> = spec
            .task_names
            .iter()
            .map(|n| {
                let by: Vec<&str> = Dialect::ALL
                    .into_iter()
                    .filter(|d| n.dialects.contains(*d))
                    .map(Dialect::name)
                    .collect();
                let by = if by.is_empty() {
                    "read only".to_owned()
                } else {
                    by.join(", ")
                };
                let proxy = match n.proxy {
                    ProxyName::Proxied => ", caller's proxy",
                    ProxyName::Proxyless | ProxyName::Either => "",
                };
                let enterprise = if n.enterprise == Some(true) {
                    ", Enterprise"
                } else {
                    ""
                };
                let marker = n
                    .marker
                    .map(|(field, value)| format!(", with `{field}: {value}`"))
                    .unwrap_or_default();
                format!("`{}` ({by}{proxy}{enterprise}{marker})", n.name)
            })
            .collect();
        let mut solvers: Vec<&str> = Dialect::ALL
            .into_iter()
            .filter(|d| kind.solved_in(*d))
            .map(Dialect::name)
            .collect();
        let (mut methods, mut names) = (methods, names);
        if matches!(spec.params, Parameters::Passthrough) {
            // Whatever the caller's protocol names and no declaration does.
            methods = vec!["any other".to_owned()];
            names = vec!["any other".to_owned()];
            solvers = vec!["an account of the caller's protocol, as sent"];
        }
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} s ({}) | {} s |",
            spec.name,
            methods.join(", "),
            names.join("<br>"),
            solvers.join(", "),
            reuse_name(spec.reuse),
            spec.lifetime.value.as_secs(),
            spec.lifetime.source,
            spec.first_poll.value.as_secs(),
        );
    }
    out
}

/// One row per declared kind: its parameters under each protocol's name, what the gateway
/// checks of each, what a task needs besides, and the answer's shape.
pub fn parameters_markdown() -> String {
    let mut out = String::from(
        "| kind | parameters: `in.php` and native name / `createTask` field (a dialect's own spelling) | needs | answer |\n\
         |---|---|---|---|\n",
    );
    for kind in Kind::ALL {
        let spec = kind.spec();
        let params = spec.declared_params();
        if params.is_empty() {
            continue;
        }
        let names: Vec<String> = params
            .iter()
            .map(|p| {
                let own: Vec<String> =
                    [("2captcha v2", p.twocaptcha_v2), ("CapSolver", p.capsolver)]
                        .into_iter()
                        .filter(|(_, field)| *field != p.task)
                        .map(|(dialect, field)| format!("{dialect} `{field}`"))
                        .collect();
                let capsolver = if own.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", own.join(", "))
                };
                let aliases: String = p.aliases.iter().map(|a| format!(" or `{a}`")).collect();
                let form = match p.check {
                    Check::Text => "",
                    Check::Page => ", URL",
                    Check::Key => ", key",
                    Check::Flag => ", flag",
                    Check::Object => ", object: `name[key]` in `in.php`",
                    Check::Image => ", image: base64, or an upload in `in.php`",
                    Check::Count(max) => &match (p.above, p.not_above) {
                        (Some((most, only)), _) => format!(
                            ", whole number 0-{max}, 0 none; above {most}: {} accounts only",
                            only.names().join(", ")
                        ),
                        (None, Some(other)) => {
                            format!(", whole number 0-{max}, 0 none; at most `{other}`")
                        }
                        (None, None) => format!(", whole number 0-{max}, 0 none"),
                    },
                    Check::OneOf(words) => &format!(", one of {}", words.join(", ")),
                };
                let required = if p.required { "required" } else { "optional" };
                let task = if p.in_task_api() && p.only == Dialects::ALL {
                    format!("`{}`", p.task)
                } else if p.in_task_api() {
                    format!("`{}` ({} accounts only)", p.task, p.only.names().join(", "))
                } else {
                    format!("none: {} accounts only", p.only.names().join(", "))
                };
                format!(
                    "`{}`{aliases} / {task}{capsolver} ({required}{form})",
                    p.name
                )
            })
            .collect();
        let mut needs = Vec::new();
        if spec.needs_proxy {
            needs.push("proxy");
        }
        if spec.needs_user_agent {
            needs.push("`userAgent`");
        }
        let answer = match spec.answer {
            AnswerShape::Token { fields, extras } => {
                let (inside, written): (Vec<&str>, Vec<&str>) =
                    fields.iter().partition(|f| f.contains('.'));
                let written: Vec<String> = written.iter().map(|f| format!("`{f}`")).collect();
                let inside: String = inside
                    .iter()
                    .map(|f| format!(" (read from `{f}` too)"))
                    .collect();
                let extras: String = extras
                    .iter()
                    .map(|k| format!(", with `{k}` where the provider gives it"))
                    .collect();
                // Words a person typed are no token, whatever field carries them.
                let what = if spec.typical.token { "token" } else { "words" };
                format!("{what}; `solution` {}{inside}{extras}", written.join(", "))
            }
            AnswerShape::Object { keys, also } => {
                let keys: Vec<String> = keys
                    .iter()
                    .map(|k| match also.iter().find(|(_, key)| key == k) {
                        Some((spelling, _)) => format!("`{k}` (also as `{spelling}`)"),
                        None => format!("`{k}`"),
                    })
                    .collect();
                format!("object {}", keys.join(", "))
            }
            AnswerShape::Points { field } => {
                format!("points: `coordinates:x=..,y=..;..` in `in.php`; `solution` `{field}`")
            }
            AnswerShape::AsGiven => "as the provider gave it".to_owned(),
        };
        let with_agent = if spec.answer_user_agent {
            ", with its user agent"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {answer}{with_agent} |",
            spec.name,
            names.join("<br>"),
            if needs.is_empty() {
                "-".to_owned()
            } else {
                needs.join(", ")
            },
        );
    }
    out
}
