//! Every Lua script the gateway runs on Redis, loaded here and nowhere else. Each is one file in
//! `lua/` with its contract header; the preludes it relies on (`lib/clock.lua` for Redis time,
//! `lib/target.lua` for a target's keys and hand-offs, `lib/budget.lua` for the thread budget)
//! are prepended at build time, so each stays a single EVAL. The tests run these same scripts
//! (through the store's typed calls, `engine::store::redis::call`), never a copy assembled by
//! hand.

use std::sync::LazyLock;

use redis::Script;

/// A script with no prelude.
macro_rules! plain {
    ($file:literal) => {
        LazyLock::new(|| Script::new(include_str!(concat!("../lua/", $file))))
    };
}

/// A script that reads the time: the clock prelude goes first.
macro_rules! clocked {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../lua/lib/clock.lua"),
                "\n",
                include_str!(concat!("../lua/", $file))
            ))
        })
    };
}

/// A single-use target script: the clock and the target prelude go first.
macro_rules! target {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../lua/lib/clock.lua"),
                "\n",
                include_str!("../lua/lib/target.lua"),
                "\n",
                include_str!(concat!("../lua/", $file))
            ))
        })
    };
}

/// A thread budget script: the clock and the budget prelude go first.
macro_rules! budget {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../lua/lib/clock.lua"),
                "\n",
                include_str!("../lua/lib/budget.lua"),
                "\n",
                include_str!(concat!("../lua/", $file))
            ))
        })
    };
}

// Single-use targets (docs/REDIS.md "How it works").
pub static ARRIVE: LazyLock<Script> = target!("arrive.lua");
pub static FINISH: LazyLock<Script> = target!("finish.lua");
pub static ABANDON: LazyLock<Script> = target!("abandon.lua");
pub static PUT: LazyLock<Script> = target!("put.lua");
pub static RESERVE: LazyLock<Script> = target!("reserve.lua");
pub static COUNTS: LazyLock<Script> = target!("counts.lua");
pub static COVER: LazyLock<Script> = target!("cover.lua");
pub static RETIRE: LazyLock<Script> = target!("retire.lua");
pub static TAKE: LazyLock<Script> = target!("take.lua");
pub static UNTAKE: LazyLock<Script> = target!("untake.lua");
pub static RENEW: LazyLock<Script> = target!("renew.lua");
pub static NOTE: LazyLock<Script> = target!("note.lua");
pub static UNHOLD: LazyLock<Script> = target!("unhold.lua");
pub static ANNOUNCE: LazyLock<Script> = plain!("announce.lua");

// Reusable targets, task records, idempotency keys.
pub static SHARED_ARRIVE: LazyLock<Script> = clocked!("shared_arrive.lua");
pub static SHARED_FINISH: LazyLock<Script> = clocked!("shared_finish.lua");
pub static SHARED_RENEW: LazyLock<Script> = clocked!("shared_renew.lua");
pub static SHARED_TAKEOVER: LazyLock<Script> = clocked!("shared_takeover.lua");
pub static TASK_FINISH: LazyLock<Script> = plain!("task_finish.lua");
pub static TASK_REPORT: LazyLock<Script> = plain!("task_report.lua");
pub static IDEM_BIND: LazyLock<Script> = plain!("idem_bind.lua");

// The fleet-wide thread budget.
pub static BUDGET_ACQUIRE: LazyLock<Script> = budget!("budget_acquire.lua");
pub static BUDGET_RELEASE: LazyLock<Script> = budget!("budget_release.lua");
pub static BUDGET_RENEW: LazyLock<Script> = budget!("budget_renew.lua");
pub static BUDGET_CAP: LazyLock<Script> = budget!("budget_cap.lua");

// The queue on a stream (docs/QUEUE.md).
pub static QUEUE_ENQUEUE: LazyLock<Script> = plain!("queue_enqueue.lua");
pub static QUEUE_RENEW: LazyLock<Script> = plain!("queue_renew.lua");
pub static QUEUE_BEGIN: LazyLock<Script> = plain!("queue_begin.lua");
pub static QUEUE_FINISH: LazyLock<Script> = plain!("queue_finish.lua");
pub static QUEUE_RETRY: LazyLock<Script> = plain!("queue_retry.lua");
pub static QUEUE_PROMOTE: LazyLock<Script> = plain!("queue_promote.lua");
pub static QUEUE_FORGET: LazyLock<Script> = plain!("queue_forget.lua");

// Seed 003's list protocol (`worker --seed-queue`).
pub static SEED_TAKE: LazyLock<Script> = clocked!("seed_take.lua");
pub static SEED_FINISH: LazyLock<Script> = clocked!("seed_finish.lua");
pub static SEED_BEAT: LazyLock<Script> = clocked!("seed_beat.lua");
pub static SEED_RECOVER: LazyLock<Script> = clocked!("seed_recover.lua");
pub static SEED_SWEEP: LazyLock<Script> = clocked!("seed_sweep.lua");

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use redis::Script;

    use super::*;

    /// Every script by its file's name without `.lua`.
    const ALL: &[(&str, &LazyLock<Script>)] = &[
        ("arrive", &ARRIVE),
        ("finish", &FINISH),
        ("abandon", &ABANDON),
        ("put", &PUT),
        ("reserve", &RESERVE),
        ("counts", &COUNTS),
        ("cover", &COVER),
        ("retire", &RETIRE),
        ("take", &TAKE),
        ("untake", &UNTAKE),
        ("renew", &RENEW),
        ("note", &NOTE),
        ("unhold", &UNHOLD),
        ("announce", &ANNOUNCE),
        ("shared_arrive", &SHARED_ARRIVE),
        ("shared_finish", &SHARED_FINISH),
        ("shared_renew", &SHARED_RENEW),
        ("shared_takeover", &SHARED_TAKEOVER),
        ("task_finish", &TASK_FINISH),
        ("task_report", &TASK_REPORT),
        ("idem_bind", &IDEM_BIND),
        ("budget_acquire", &BUDGET_ACQUIRE),
        ("budget_release", &BUDGET_RELEASE),
        ("budget_renew", &BUDGET_RENEW),
        ("budget_cap", &BUDGET_CAP),
        ("queue_enqueue", &QUEUE_ENQUEUE),
        ("queue_renew", &QUEUE_RENEW),
        ("queue_begin", &QUEUE_BEGIN),
        ("queue_finish", &QUEUE_FINISH),
        ("queue_retry", &QUEUE_RETRY),
        ("queue_promote", &QUEUE_PROMOTE),
        ("queue_forget", &QUEUE_FORGET),
        ("seed_take", &SEED_TAKE),
        ("seed_finish", &SEED_FINISH),
        ("seed_beat", &SEED_BEAT),
        ("seed_recover", &SEED_RECOVER),
        ("seed_sweep", &SEED_SWEEP),
    ];

    #[test]
    fn every_script_in_lua_is_loaded_here() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("lua/ is readable")
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".lua").map(str::to_owned)
            })
            .collect();
        names.sort();
        assert_eq!(names.len(), 37, "{names:?}");
        assert_eq!(names.len(), ALL.len());
        for name in names {
            let loaded = ALL.iter().find(|(n, _)| *n == name);
            let (_, script) = loaded.unwrap_or_else(|| panic!("lua/{name}.lua is not loaded"));
            LazyLock::force(script);
        }
    }
}
