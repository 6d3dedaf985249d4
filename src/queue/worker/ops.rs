//! The worker's Redis calls on one delivered entry, each one owner-checked script
//! (`lua/queue_begin.lua`, `queue_finish.lua`, `queue_retry.lua`).

use std::time::Duration;

use super::Worker;
use crate::queue::entry::Entry;
use crate::queue::keys::GROUP;
use crate::queue::{QueueError, QueueResult, scripts};

/// The dead-letter stream keeps about this many entries (it is read by people, after an alert).
const DEAD_LETTERS_KEPT: u64 = 100_000;

/// Tries of a script whose reply was lost (a dropped connection, a timeout after a pause):
/// each is owner-checked, so a second run after a first that took effect finds the entry gone
/// or no longer this consumer's, and changes nothing.
const TRIES: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// Another consumer owns it now.
    Lost,
    /// Its result was already written: acknowledged and removed.
    Done,
    /// Go ahead; the entry has been delivered this many times (this one included).
    Go(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    Written,
    AlreadyThere,
    LeaseLost,
}

impl Worker {
    pub(super) async fn begin(
        &self,
        entry: &Entry,
        task_id: Option<&str>,
    ) -> Result<Begin, QueueError> {
        let keys = self.queue.keys();
        let mut call = scripts::BEGIN.key(keys.tasks());
        if let Some(id) = task_id {
            call.key(keys.result(id));
        }
        call.arg(GROUP).arg(&self.consumer).arg(&entry.stream_id);
        let reply: Vec<i64> = self.invoke(&call).await?;
        Ok(match reply.as_slice() {
            [1, deliveries, ..] => Begin::Go((*deliveries).clamp(1, u32::MAX as i64) as u32),
            [2, ..] => Begin::Done,
            _ => Begin::Lost,
        })
    }

    /// Writes `result` (if any) once and, with a `dead_reason`, copies the entry to the
    /// dead-letter stream; then acknowledges and removes the entry.
    pub(super) async fn finish(
        &self,
        entry: &Entry,
        result: Option<&QueueResult>,
        dead_reason: Option<&str>,
    ) -> Result<Finished, QueueError> {
        let keys = self.queue.keys();
        let settings = self.queue.settings();
        let mut call = scripts::FINISH.key(keys.tasks());
        call.key(keys.dead());
        if let Some(r) = result {
            call.key(keys.result(&r.id));
        }
        call.arg(GROUP)
            .arg(&self.consumer)
            .arg(&entry.stream_id)
            .arg(dead_reason.unwrap_or(""))
            .arg(result.map(QueueResult::to_json).unwrap_or_default())
            .arg(settings.result_ttl.as_millis() as u64)
            .arg(keys.done())
            .arg(result.map(|r| r.id.as_str()).unwrap_or(""))
            .arg(DEAD_LETTERS_KEPT);
        if dead_reason.is_some() {
            for (k, v) in &entry.fields {
                call.arg(k).arg(v);
            }
        }
        Ok(match self.invoke::<i64>(&call).await? {
            1 => Finished::Written,
            2 => Finished::AlreadyThere,
            _ => Finished::LeaseLost,
        })
    }

    /// Hands the entry back for attempt `attempt` after `delay`; false when the lease was lost.
    pub(super) async fn retry(
        &self,
        entry: &Entry,
        attempt: u32,
        delay: Duration,
    ) -> Result<bool, QueueError> {
        let keys = self.queue.keys();
        let mut call = scripts::RETRY.key(keys.tasks());
        call.key(keys.retry())
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(&entry.stream_id)
            .arg(delay.as_millis() as u64)
            .arg(entry.retry_payload(attempt));
        Ok(self.invoke::<i64>(&call).await? == 1)
    }

    /// Runs an owner-checked script, again after a lost reply (at most [`TRIES`] times).
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        call: &redis::ScriptInvocation<'_>,
    ) -> Result<T, QueueError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match call.invoke_async::<T>(&mut self.queue.conn()).await {
                Ok(v) => return Ok(v),
                Err(e) if tries < TRIES && is_io(&e) => {
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(tries))).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// A failure of the connection (the script may or may not have run), not a refusal.
pub fn is_io(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}
