//! The Lua scripts, loaded once each. Target scripts get the shared prelude prepended at build
//! time, so each stays a single EVAL with its own contract header.

use std::sync::LazyLock;

use redis::Script;

macro_rules! target_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../../../lua/lib/clock.lua"),
                "\n",
                include_str!("../../../../lua/lib/target.lua"),
                "\n",
                include_str!(concat!("../../../../lua/", $file))
            ))
        })
    };
}

/// A script that reads the time: the clock prelude goes first.
macro_rules! clock_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../../../lua/lib/clock.lua"),
                "\n",
                include_str!(concat!("../../../../lua/", $file))
            ))
        })
    };
}

macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| Script::new(include_str!(concat!("../../../../lua/", $file))))
    };
}

pub static ARRIVE: LazyLock<Script> = target_script!("arrive.lua");
pub static FINISH: LazyLock<Script> = target_script!("finish.lua");
pub static ABANDON: LazyLock<Script> = target_script!("abandon.lua");
pub static PUT: LazyLock<Script> = target_script!("put.lua");
pub static RESERVE: LazyLock<Script> = target_script!("reserve.lua");
pub static COUNTS: LazyLock<Script> = target_script!("counts.lua");
pub static COVER: LazyLock<Script> = target_script!("cover.lua");
pub static RETIRE: LazyLock<Script> = target_script!("retire.lua");
pub static TAKE: LazyLock<Script> = target_script!("take.lua");
pub static UNTAKE: LazyLock<Script> = target_script!("untake.lua");
pub static RENEW: LazyLock<Script> = target_script!("renew.lua");
pub static NOTE: LazyLock<Script> = target_script!("note.lua");
pub static ANNOUNCE: LazyLock<Script> = script!("announce.lua");
pub static SHARED_ARRIVE: LazyLock<Script> = clock_script!("shared_arrive.lua");
pub static SHARED_FINISH: LazyLock<Script> = clock_script!("shared_finish.lua");
pub static SHARED_RENEW: LazyLock<Script> = clock_script!("shared_renew.lua");
pub static SHARED_TAKEOVER: LazyLock<Script> = clock_script!("shared_takeover.lua");
pub static TASK_FINISH: LazyLock<Script> = script!("task_finish.lua");
pub static TASK_REPORT: LazyLock<Script> = script!("task_report.lua");
pub static IDEM_BIND: LazyLock<Script> = script!("idem_bind.lua");

/// A thread budget script: the clock and the budget prelude go first.
macro_rules! budget_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../../../lua/lib/clock.lua"),
                "\n",
                include_str!("../../../../lua/lib/budget.lua"),
                "\n",
                include_str!(concat!("../../../../lua/", $file))
            ))
        })
    };
}

pub static BUDGET_ACQUIRE: LazyLock<Script> = budget_script!("budget_acquire.lua");
pub static BUDGET_RELEASE: LazyLock<Script> = budget_script!("budget_release.lua");
pub static BUDGET_RENEW: LazyLock<Script> = budget_script!("budget_renew.lua");
pub static BUDGET_CAP: LazyLock<Script> = budget_script!("budget_cap.lua");
