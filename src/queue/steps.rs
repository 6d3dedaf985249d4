//! The worker's owner-checked scripts on delivered entries (`lua/queue_begin.lua`,
//! `queue_finish.lua`, `queue_retry.lua`), each call covering as many entries as it is given:
//! every entry is checked and changed on its own inside the script, so a batch answers exactly
//! what one call per entry would have, in one round trip. The calls and their replies are typed
//! in `calls.rs`; here they are run, again after a lost reply.

use std::time::Duration;

use super::calls::{
    Begin, BeginCall, BeginStep, FinishCall, FinishStep, Finished, ForgetCall, RetryCall,
};
use super::{Queue, QueueError};

/// The dead-letter stream keeps about this many entries (it is read by people, after an alert).
const DEAD_LETTERS_KEPT: u64 = 100_000;

/// Tries of a script whose reply was lost (a dropped connection, a timeout after a pause):
/// each is owner-checked, so a second run after a first that took effect finds the entry gone
/// or no longer this consumer's, and changes nothing.
const TRIES: u32 = 3;

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
    let call = BeginCall { consumer, steps };
    let reply = invoke(queue, &call.invocation(queue.keys())).await?;
    Ok(call.read(reply)?)
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
    let call = FinishCall {
        consumer,
        result_ttl_ms: u64::try_from(queue.settings().result_ttl.as_millis()).unwrap_or(u64::MAX),
        dead_kept: DEAD_LETTERS_KEPT,
        steps,
    };
    let reply = invoke(queue, &call.invocation(queue.keys())).await?;
    Ok(call.read(reply)?)
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
    let call = RetryCall {
        consumer,
        stream_id,
        delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        payload: &payload,
    };
    let reply = invoke(queue, &call.invocation(queue.keys())).await?;
    Ok(RetryCall::read(reply)?)
}

/// Deletes the consumers, all but `consumer`, that hold no entry and were silent at least
/// `silent` (a crashed worker's name is never reused, so without this the group's consumer list
/// only grows); returns how many. The look and the deletion are one script: a consumer that
/// reads entries in between is never deleted with them.
pub async fn forget_dead_consumers(
    queue: &Queue,
    consumer: &str,
    silent: Duration,
) -> Result<u64, QueueError> {
    let call = ForgetCall {
        consumer,
        silent_ms: u64::try_from(silent.as_millis()).unwrap_or(u64::MAX),
    };
    let reply = invoke(queue, &call.invocation(queue.keys())).await?;
    Ok(ForgetCall::read(reply)?)
}

/// Runs an owner-checked script, again after a lost reply (at most [`TRIES`] times).
async fn invoke(
    queue: &Queue,
    call: &redis::ScriptInvocation<'_>,
) -> Result<redis::Value, QueueError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match call.invoke_async::<redis::Value>(&mut queue.conn()).await {
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
