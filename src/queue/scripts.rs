//! The queue's Lua scripts (`lua/queue_*.lua`, contract header on top), loaded once each.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| Script::new(include_str!(concat!("../../lua/", $file))))
    };
}

pub static ENQUEUE: LazyLock<Script> = script!("queue_enqueue.lua");
pub static RENEW: LazyLock<Script> = script!("queue_renew.lua");
pub static BEGIN: LazyLock<Script> = script!("queue_begin.lua");
pub static FINISH: LazyLock<Script> = script!("queue_finish.lua");
pub static RETRY: LazyLock<Script> = script!("queue_retry.lua");
pub static PROMOTE: LazyLock<Script> = script!("queue_promote.lua");
