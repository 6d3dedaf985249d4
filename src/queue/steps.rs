//! The worker's owner-checked scripts on delivered entries (`lua/queue_begin.lua`,
//! `queue_finish.lua`, `queue_retry.lua`), each call covering as many entries as it is given:
//! every entry is checked and changed on its own inside the script, so a batch answers exactly
//! what one call per entry would have, in one round trip.

use std::time::Duration;

use super::keys::GROUP;
use super::{Queue, QueueError, QueueResult};
use crate::lua;

/// The dead-letter stream keeps about this many entries (it is read by people, after an alert).
const DEAD_LETTERS_KEPT: u64 = 100_000;

/// Tries of a script whose reply was lost (a dropped connection, a timeout after a pause):
/// each is owner-checked, so a second run after a first that took effect finds the entry gone
/// or no longer this consumer's, and changes nothing.
const TRIES: u32 = 3;

/// What `begin` found for one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// Another consumer owns it now (or it is gone).
    Lost,
    /// Its result was already written: acknowledged and removed.
    Done,
    /// Go ahead; the entry has been delivered this many times (this one included).
    Go(u32),
}

/// What `finish` did with one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    Written,
    AlreadyThere,
    LeaseLost,
}

/// One entry about to be worked on.
#[derive(Debug, Clone)]
pub struct BeginStep {
    pub stream_id: String,
    /// The task id read from the entry, when it has a readable one.
    pub task_id: Option<String>,
}

/// One entry to end: with its result (if any), and dead-lettered with a reason (if any).
#[derive(Debug, Clone)]
pub struct FinishStep {
    pub stream_id: String,
    pub result: Option<QueueResult>,
    pub dead_reason: Option<String>,
    /// The entry's fields, copied to the dead-letter stream with a reason.
    pub fields: Vec<(String, String)>,
}

/// Checks that each entry is still `consumer`'s and whether its result exists, for the whole
/// batch in one call; answers in the order of `steps`.
pub async fn begin(
    queue: &Queue,
    consumer: &str,
    steps: &[BeginStep],
) -> Result<Vec<Begin>, QueueError> {
    if steps.is_empty() {
        return Ok(Vec::new());
    }
    let keys = queue.keys();
    let mut call = lua::QUEUE_BEGIN.key(keys.tasks());
    call.arg(GROUP).arg(consumer);
    let mut next_key = 2;
    for step in steps {
        call.arg(&step.stream_id);
        match &step.task_id {
            Some(id) => {
                call.key(keys.result(id)).arg(next_key);
                next_key += 1;
            }
            None => {
                call.arg(0);
            }
        }
    }
    let reply: Vec<i64> = invoke(queue, &call).await?;
    if reply.len() != steps.len() * 2 {
        return Err(QueueError::Corrupt(format!(
            "queue_begin answered {} numbers for {} entries",
            reply.len(),
            steps.len()
        )));
    }
    Ok(reply
        .chunks(2)
        .map(|pair| match pair {
            [1, deliveries] => Begin::Go((*deliveries).clamp(1, i64::from(u32::MAX)) as u32),
            [2, _] => Begin::Done,
            _ => Begin::Lost,
        })
        .collect())
}

/// Writes each step's result once (if any), dead-letters it (with a reason), then acknowledges
/// and removes its entry, in order, in one call; answers in the order of `steps`.
pub async fn finish(
    queue: &Queue,
    consumer: &str,
    steps: &[FinishStep],
) -> Result<Vec<Finished>, QueueError> {
    if steps.is_empty() {
        return Ok(Vec::new());
    }
    let keys = queue.keys();
    let mut call = lua::QUEUE_FINISH.key(keys.tasks());
    call.key(keys.dead())
        .arg(GROUP)
        .arg(consumer)
        .arg(queue.settings().result_ttl.as_millis() as u64)
        .arg(keys.done())
        .arg(DEAD_LETTERS_KEPT);
    let mut next_key = 3;
    for step in steps {
        call.arg(&step.stream_id);
        match &step.result {
            Some(r) => {
                call.key(keys.result(&r.id))
                    .arg(next_key)
                    .arg(&r.id)
                    .arg(r.to_json());
                next_key += 1;
            }
            None => {
                call.arg(0).arg("").arg("");
            }
        }
        match &step.dead_reason {
            Some(reason) => {
                call.arg(reason).arg(step.fields.len());
                for (k, v) in &step.fields {
                    call.arg(k).arg(v);
                }
            }
            None => {
                call.arg("").arg(0);
            }
        }
    }
    let reply: Vec<i64> = invoke(queue, &call).await?;
    if reply.len() != steps.len() {
        return Err(QueueError::Corrupt(format!(
            "queue_finish answered {} outcomes for {} entries",
            reply.len(),
            steps.len()
        )));
    }
    Ok(reply
        .into_iter()
        .map(|o| match o {
            1 => Finished::Written,
            2 => Finished::AlreadyThere,
            _ => Finished::LeaseLost,
        })
        .collect())
}

/// Hands entry `stream_id` back as `payload` (its fields for the next attempt), due after
/// `delay`; false when the lease was lost.
pub async fn retry(
    queue: &Queue,
    consumer: &str,
    stream_id: &str,
    delay: Duration,
    payload: String,
) -> Result<bool, QueueError> {
    let keys = queue.keys();
    let mut call = lua::QUEUE_RETRY.key(keys.tasks());
    call.key(keys.retry())
        .arg(GROUP)
        .arg(consumer)
        .arg(stream_id)
        .arg(delay.as_millis() as u64)
        .arg(payload);
    Ok(invoke::<i64>(queue, &call).await? == 1)
}

/// Runs an owner-checked script, again after a lost reply (at most [`TRIES`] times).
async fn invoke<T: redis::FromRedisValue>(
    queue: &Queue,
    call: &redis::ScriptInvocation<'_>,
) -> Result<T, QueueError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match call.invoke_async::<T>(&mut queue.conn()).await {
            Ok(v) => return Ok(v),
            Err(e) if tries < TRIES && is_io(&e) => {
                tokio::time::sleep(Duration::from_millis(100 * u64::from(tries))).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A failure of the connection (the script may or may not have run), not a refusal.
fn is_io(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}
