//! The engine's settings and the request limits: answers' lifetimes and the least life left at
//! a hand-out, task timeouts and retention, and the state kept per target.

use std::time::Duration;

use super::{FileConfig, kind, secs};
use crate::cli::ServeArgs;
use crate::engine::EngineSettings;
use crate::http::Limits;
use crate::model::TargetPolicy;
use crate::setting::{ConfigError, bad};

pub(super) fn engine_settings(
    args: &ServeArgs,
    file: &FileConfig,
) -> Result<(EngineSettings, Limits), ConfigError> {
    let mut engine = EngineSettings {
        store_required: args.redis_required || file.redis_required.unwrap_or(false),
        ..EngineSettings::default()
    };
    if let Some(s) = args.min_remaining_s.or(file.min_remaining_s) {
        engine.min_remaining = secs("--min-remaining-s", s)?;
    }
    engine.target_policy = TargetPolicy {
        drop_query: !(args.keep_query || file.keep_query.unwrap_or(false)),
    };
    if let Some(s) = file.task_timeout_s {
        engine.task_timeout = secs("task_timeout_s", s)?;
    }
    if let Some(s) = file.result_retention_s {
        engine.result_retention = secs("result_retention_s", s)?.max(Duration::from_secs(15 * 60));
    }
    for (name, s) in &file.lifetimes {
        let kind = kind("lifetimes", name)?;
        engine
            .lifetimes
            .insert(kind, secs(&format!("lifetimes.{name}"), *s)?);
    }
    for (kind, life) in &engine.lifetimes {
        if *life <= engine.min_remaining {
            return Err(bad(
                &format!("lifetimes.{kind}"),
                format!(
                    "{}s is not longer than min_remaining ({}s), so no answer could ever be handed out",
                    life.as_secs_f64(),
                    engine.min_remaining.as_secs_f64()
                ),
                "raise the lifetime or lower min_remaining_s",
            ));
        }
    }

    let mut limits = Limits::default();
    if let Some(n) = file.max_thread_waiters {
        if !(1..=1_000_000).contains(&n) {
            return Err(bad(
                "max_thread_waiters",
                format!("{n} is out of range"),
                "use 1 to 1000000, or leave it out to let callers wait for a thread",
            ));
        }
        limits.max_thread_waiters = usize::try_from(n).ok();
    }
    if let Some(s) = file.compat_task_timeout_s {
        limits.compat_task_timeout = secs("compat_task_timeout_s", s)?;
    }
    if let Some(s) = file.default_solve_timeout_s {
        limits.default_solve_timeout = secs("default_solve_timeout_s", s)?;
    }
    bounded_state(file, &mut engine)?;
    Ok((engine, limits))
}

/// `target_idle_s` and `metrics_top_targets`: per-target state and series stay bounded however
/// many pages a fleet visits.
fn bounded_state(file: &FileConfig, engine: &mut EngineSettings) -> Result<(), ConfigError> {
    if let Some(s) = file.target_idle_s {
        if !(1.0..1e9).contains(&s) {
            return Err(bad(
                "target_idle_s",
                format!("{s:?} is not a number of seconds of at least 1"),
                "give the seconds an unused target is kept, e.g. 900",
            ));
        }
        engine.target_idle = secs("target_idle_s", s)?;
    }
    if let Some(n) = file.metrics_top_targets {
        if n > 10_000 {
            return Err(bad(
                "metrics_top_targets",
                format!("{n} would put a series per target back into every scrape"),
                "give at most 10000 (default 50); the rest are summed under target=\"other\"",
            ));
        }
        engine.metrics_top_targets = n;
    }
    Ok(())
}
