//! The `[[pools]]` tables of the config file and their validation into [`PoolSpec`]s.
//!
//! Owns: which kinds and parameters a pool may have, its size setting, and building the pool's
//! request through the compatible parser (`wire::inphp::parse_submit`), so a pool's target is exactly
//! the target a caller asking for the same sitekey and page hits. Does not own: reading the file
//! (config) or running the pool (the refiller).

use std::collections::HashSet;

use serde::Deserialize;

use crate::model::{Kind, Reuse, SolveRequest, Target, TargetPolicy};
use crate::setting::ConfigError;
use crate::wire::inphp::{Params, parse_submit};

/// The most answers one pool may hold: far above any plan's threads, low enough that a typo
/// (`size = 100000`) is caught rather than bought.
pub const MAX_POOL_SIZE: u32 = 10_000;

/// How big a pool is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolSize {
    /// Always this many ready or in flight.
    Fixed(u32),
    /// Sized from measured demand and solve time, within `min..=max`; with `predict`, also
    /// from the daily and weekly shape of demand it learns (`pools/shape.rs`).
    Auto { min: u32, max: u32, predict: bool },
}

impl PoolSize {
    /// `fixed` or `auto`, as `/v1/pools` reports it.
    pub fn mode(self) -> &'static str {
        match self {
            PoolSize::Fixed(_) => "fixed",
            PoolSize::Auto { .. } => "auto",
        }
    }
}

/// A validated pool: the request its refills solve, and its size setting.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSpec {
    pub req: SolveRequest,
    pub size: PoolSize,
}

/// One `[[pools]]` table as written. Only target parameters that stay the same across page loads
/// are allowed: per-load values (reCAPTCHA `data-s`, Turnstile `pagedata`) make answers that
/// no other caller could use.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolTable {
    kind: String,
    sitekey: Option<String>,
    pageurl: Option<String>,
    action: Option<String>,
    /// A number or a string; kept as written, like callers' `min_score`.
    min_score: Option<toml::Value>,
    enterprise: Option<bool>,
    invisible: Option<bool>,
    domain: Option<String>,
    /// Turnstile `cData`.
    data: Option<String>,
    /// A count, or `"auto"`.
    size: Option<toml::Value>,
    min: Option<u32>,
    max: Option<u32>,
    /// `auto` only: learn the daily and weekly shape of demand and fill ahead of it.
    predict: Option<bool>,
}

/// Default `min` of an auto pool: an idle target keeps no answers, so it wastes none.
const AUTO_MIN: u32 = 0;
/// Default `max` of an auto pool: about what one caller a second asks for at reCAPTCHA's solve
/// time (24 at 15 s); busier targets raise it.
const AUTO_MAX: u32 = 20;

/// Validates every table; a second table for a target already pooled is an error too.
pub fn specs(tables: &[PoolTable], policy: TargetPolicy) -> Result<Vec<PoolSpec>, ConfigError> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(tables.len());
    for (i, table) in tables.iter().enumerate() {
        let spec = table.spec(i)?;
        if !seen.insert(Target::of(&spec.req, policy).id) {
            return Err(bad(
                i,
                "sitekey",
                "is the same target as an earlier [[pools]] table",
                "merge the two tables into one",
            ));
        }
        out.push(spec);
    }
    Ok(out)
}

fn bad(i: usize, field: &str, problem: impl Into<String>, fix: impl Into<String>) -> ConfigError {
    ConfigError {
        setting: format!("pools[{i}].{field}"),
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// The table's target fields besides `kind`, `sitekey` and `pageurl`, as the `in.php`
/// parameters of the same names.
const TARGET_FIELDS: [&str; 6] = [
    "action",
    "min_score",
    "enterprise",
    "invisible",
    "domain",
    "data",
];

/// Whether a `[[pools]]` table can describe a kind's target: a pooled kind whose required
/// parameters are a sitekey and a page (a declared kind needing more is solved on demand).
fn file_poolable(kind: Kind) -> bool {
    kind.reuse() == (Reuse::SingleUse { poolable: true })
        && kind
            .spec()
            .declared_params()
            .iter()
            .all(|p| !p.required || ["sitekey", "pageurl"].contains(&p.name))
}

/// The kinds a `[[pools]]` table may have, for messages.
fn file_poolable_kinds() -> String {
    let names: Vec<&str> = Kind::ALL
        .into_iter()
        .filter(|k| file_poolable(*k))
        .map(Kind::as_str)
        .collect();
    names.join(", ")
}

impl PoolTable {
    /// This table as a pool; `i` is its place in the file, for error messages.
    pub fn spec(&self, i: usize) -> Result<PoolSpec, ConfigError> {
        let kind: Kind = self.kind.parse().map_err(|e: String| {
            bad(
                i,
                "kind",
                e,
                format!("use one of {}", file_poolable_kinds()),
            )
        })?;
        if !file_poolable(kind) {
            let problem = if kind.reuse() == (Reuse::SingleUse { poolable: true }) {
                format!(
                    "{kind} pools cannot be set in the file: its targets need more than a sitekey and a page"
                )
            } else {
                format!("{kind} answers cannot be pooled")
            };
            return Err(bad(
                i,
                "kind",
                problem,
                format!(
                    "a [[pools]] table may have {}; other kinds are solved on demand",
                    file_poolable_kinds()
                ),
            ));
        }
        // reCAPTCHA's by hand (its parameters are typed); a declared kind's, those it declares.
        let allowed: Vec<&str> = match kind {
            Kind::RecaptchaV2 => vec!["action", "enterprise", "invisible", "domain"],
            Kind::RecaptchaV3 => vec!["action", "min_score", "enterprise", "domain"],
            declared => TARGET_FIELDS
                .into_iter()
                .filter(|f| {
                    declared
                        .spec()
                        .declared_params()
                        .iter()
                        .any(|p| p.name == *f && !p.per_load)
                })
                .collect(),
        };
        let given = [
            ("action", self.action.is_some()),
            ("min_score", self.min_score.is_some()),
            ("enterprise", self.enterprise.is_some()),
            ("invisible", self.invisible.is_some()),
            ("domain", self.domain.is_some()),
            ("data", self.data.is_some()),
        ];
        if let Some((field, _)) = given.iter().find(|(f, set)| *set && !allowed.contains(f)) {
            let per_load = kind
                .spec()
                .declared_params()
                .iter()
                .any(|p| p.name == *field && p.per_load);
            let problem = if per_load {
                format!(
                    "changes with every load of a {kind} page: answers solved ahead could never carry it"
                )
            } else {
                format!("is not a {kind} parameter")
            };
            return Err(bad(
                i,
                field,
                problem,
                format!("remove it; {kind} pools take {}", allowed.join(", ")),
            ));
        }
        let req = self.request(i, kind)?;
        Ok(PoolSpec {
            req,
            size: self.size(i)?,
        })
    }

    /// The pool's request, through the same parser and validation as `in.php`.
    fn request(&self, i: usize, kind: Kind) -> Result<SolveRequest, ConfigError> {
        let mut p = Params::default();
        let key_name = match kind {
            Kind::RecaptchaV2 | Kind::RecaptchaV3 => "googlekey",
            _ => "sitekey",
        };
        p.set("method", kind.spec().methods[0]);
        if kind == Kind::RecaptchaV3 {
            p.set("version", "v3");
        }
        let text = [
            (key_name, &self.sitekey),
            ("pageurl", &self.pageurl),
            ("action", &self.action),
            ("domain", &self.domain),
            ("data", &self.data),
        ];
        for (name, value) in text {
            if let Some(v) = value {
                p.set(name, v.as_str());
            }
        }
        for (name, flag) in [
            ("enterprise", self.enterprise),
            ("invisible", self.invisible),
        ] {
            if let Some(on) = flag {
                p.set(name, if on { "1" } else { "0" });
            }
        }
        match &self.min_score {
            None => {}
            Some(toml::Value::String(s)) => p.set("min_score", s.as_str()),
            Some(toml::Value::Float(f)) => p.set("min_score", f.to_string()),
            Some(toml::Value::Integer(n)) => p.set("min_score", n.to_string()),
            Some(_) => {
                return Err(bad(
                    i,
                    "min_score",
                    "must be a number",
                    "e.g. min_score = 0.3",
                ));
            }
        }
        parse_submit(&p).map_err(|v| {
            // Name the field the parser complained about, so the line points at the fix.
            let field = ["sitekey", "pageurl", "action"]
                .into_iter()
                .find(|f| v.message.contains(f))
                .unwrap_or(match v.code {
                    "ERROR_GOOGLEKEY" => "sitekey",
                    "ERROR_PAGEURL" => "pageurl",
                    _ => "kind",
                });
            bad(
                i,
                field,
                v.message,
                "give the values a caller of this target sends, e.g. sitekey = \"6Le...\", pageurl = \"https://example.com/login\"",
            )
        })
    }

    fn size(&self, i: usize) -> Result<PoolSize, ConfigError> {
        let auto = match &self.size {
            Some(toml::Value::String(s)) if s == "auto" => true,
            Some(toml::Value::Integer(_)) => false,
            _ => {
                return Err(bad(
                    i,
                    "size",
                    "must be a count or \"auto\"",
                    "write size = 20, or size = \"auto\" with min and max",
                ));
            }
        };
        if !auto {
            let n = self.size.as_ref().and_then(toml::Value::as_integer);
            if self.min.is_some() || self.max.is_some() || self.predict.is_some() {
                return Err(bad(
                    i,
                    "size",
                    "min, max and predict only apply to size = \"auto\"",
                    "remove them, or write size = \"auto\"",
                ));
            }
            return match n.and_then(|n| u32::try_from(n).ok()) {
                Some(n) if (1..=MAX_POOL_SIZE).contains(&n) => Ok(PoolSize::Fixed(n)),
                _ => Err(bad(
                    i,
                    "size",
                    format!("must be between 1 and {MAX_POOL_SIZE}"),
                    "remove the table to have no pool, or give a count such as 20",
                )),
            };
        }
        let (min, max) = (self.min.unwrap_or(AUTO_MIN), self.max.unwrap_or(AUTO_MAX));
        if max == 0 || max > MAX_POOL_SIZE || min > max {
            return Err(bad(
                i,
                "max",
                format!("min {min} and max {max} do not make a range of sizes"),
                format!("use 0 <= min <= max, 1 <= max <= {MAX_POOL_SIZE}"),
            ));
        }
        Ok(PoolSize::Auto {
            min,
            max,
            predict: self.predict.unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests;
