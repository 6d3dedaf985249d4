//! The declarations as the Markdown table docs/API.md ("Task types") shows, so the page is the
//! catalog's own words (a test compares them).

use std::fmt::Write as _;

use super::spec::{Dialect, ProxyName};
use super::{Kind, Reuse};

fn dialect_name(d: Dialect) -> &'static str {
    match d {
        Dialect::CaptchaAi => "CaptchaAI",
        Dialect::TwoCaptcha => "2captcha",
        Dialect::AntiCaptcha => "anti-captcha",
        Dialect::CapSolver => "CapSolver",
        Dialect::TwoCaptchaV2 => "2captcha v2",
    }
}

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
        let methods: Vec<String> = spec.methods.iter().map(|m| format!("`{m}`")).collect();
        let names: Vec<String> = spec
            .task_names
            .iter()
            .map(|n| {
                let by: Vec<&str> = Dialect::ALL
                    .into_iter()
                    .filter(|d| n.dialects.contains(*d))
                    .map(dialect_name)
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
                format!("`{}` ({by}{proxy}{enterprise})", n.name)
            })
            .collect();
        let solvers: Vec<&str> = Dialect::ALL
            .into_iter()
            .filter(|d| kind.solved_in(*d))
            .map(dialect_name)
            .collect();
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
