//! Taking entries: a read (`XREADGROUP`, as many as asked), preceded every beat (a third of a
//! lease) by a reclaim (`XAUTOCLAIM` of entries whose worker is taken for dead); and the upkeep
//! every consumer runs (due retries moved back, consumers of dead workers forgotten once they
//! hold nothing).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use redis::Value;
use tokio_util::sync::CancellationToken;

use super::Stream;
use crate::queue::QueueError;
use crate::queue::calls::PromoteCall;
use crate::queue::entry::Entry;
use crate::queue::keys::GROUP;
use crate::queue::reply::text;
use crate::queue::steps;

/// Due retries moved per promoter run.
const PROMOTE_BATCH: u32 = 500;
/// A consumer holding nothing and silent this many leases belonged to a dead process.
const DEAD_CONSUMER_LEASES: u32 = 10;

impl Stream {
    /// Up to `most` entries: stalled ones taken over first when a reclaim is due (so a reader
    /// blocked on an idle stream never starves the reclaim), else new ones, blocking for up to
    /// the read block; none on `stop`.
    pub(super) async fn take_entries(
        &self,
        most: usize,
        stop: &CancellationToken,
    ) -> redis::RedisResult<Vec<Entry>> {
        if self.reclaim_due() {
            let reclaimed = self.reclaim(most).await;
            if !reclaimed.is_empty() {
                return Ok(reclaimed);
            }
        }
        let block_ms = self.queue.settings().read_block().as_millis() as u64;
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP")
            .arg(GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(most)
            .arg("BLOCK")
            .arg(block_ms)
            .arg("STREAMS")
            .arg(self.queue.keys().tasks())
            .arg(">");
        let mut blocking = self.blocking.clone();
        let reply = tokio::select! {
            r = read.query_async::<Value>(&mut blocking) => r,
            () = stop.cancelled() => return Ok(Vec::new()),
        };
        match reply {
            Ok(value) => Ok(stream_entries(&value)),
            Err(e) if e.code() == Some("NOGROUP") => {
                // Redis restarted empty (or the stream was removed): make the group again and
                // read on.
                tracing::warn!("the queue's consumer group is missing; creating it again");
                if let Err(e) = self.queue.ensure_group().await {
                    tracing::warn!(error = %e, "could not create the consumer group");
                }
                Ok(Vec::new())
            }
            Err(e) => Err(e),
        }
    }

    fn reclaim_due(&self) -> bool {
        let mut next = self.next_reclaim.lock().unwrap_or_else(|e| e.into_inner());
        let now = tokio::time::Instant::now();
        if now < *next {
            return false;
        }
        *next = now + self.queue.settings().beat();
        true
    }

    /// Every half lease: move due retries back, forget dead consumers. Runs until `stop`.
    pub(super) async fn upkeep_loop(self: Arc<Self>, stop: CancellationToken) {
        let every = self.queue.settings().lease / 2;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            self.promote().await;
            self.forget_dead_consumers().await;
        }
    }

    /// Takes over up to `most` entries whose worker was silent long enough to be taken for dead
    /// (`XAUTOCLAIM`, `QueueSettings::taken_for_dead`).
    async fn reclaim(&self, most: usize) -> Vec<Entry> {
        let lease_ms = self.queue.settings().taken_for_dead().as_millis() as u64;
        let mut cursor = "0-0".to_owned();
        let mut taken = Vec::new();
        while taken.len() < most {
            let claimed: redis::RedisResult<Value> = redis::cmd("XAUTOCLAIM")
                .arg(self.queue.keys().tasks())
                .arg(GROUP)
                .arg(&self.consumer)
                .arg(lease_ms)
                .arg(&cursor)
                .arg("COUNT")
                .arg(most - taken.len())
                .query_async(&mut self.queue.conn())
                .await;
            let value = match claimed {
                Ok(v) => v,
                Err(e) => {
                    if e.code() == Some("NOGROUP") {
                        let _ = self.queue.ensure_group().await;
                    } else {
                        tracing::debug!(error = %e, "reclaiming failed");
                    }
                    break;
                }
            };
            let Value::Array(parts) = value else { break };
            let next = parts.first().and_then(text).unwrap_or_else(|| "0-0".into());
            let entries = parts.get(1).map(entry_list).unwrap_or_default();
            if let Some(Value::Array(deleted)) = parts.get(2) {
                if !deleted.is_empty() {
                    // Never expected: entries are deleted only after their acknowledgement.
                    tracing::error!(
                        count = deleted.len(),
                        "pending entries were deleted before being acknowledged"
                    );
                    self.metrics
                        .deleted_seen
                        .fetch_add(deleted.len() as u64, Ordering::Relaxed);
                }
            }
            if !entries.is_empty() {
                tracing::info!(
                    count = entries.len(),
                    "took over entries idle past their lease"
                );
                self.metrics
                    .reclaimed
                    .fetch_add(entries.len() as u64, Ordering::Relaxed);
            }
            let room = most - taken.len();
            taken.extend(entries.into_iter().take(room));
            if next == "0-0" {
                break;
            }
            cursor = next;
        }
        taken
    }

    async fn promote(&self) {
        let moved = PromoteCall {
            most: PROMOTE_BATCH,
        }
        .invocation(self.queue.keys())
        .invoke_async::<redis::Value>(&mut self.queue.conn())
        .await
        .map_err(QueueError::from)
        .and_then(|r| Ok(PromoteCall::read(r)?));
        match moved {
            Ok(n) if n > 0 => {
                self.metrics.promoted.fetch_add(n, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "promoting due retries failed"),
        }
    }

    /// Deletes consumers of dead workers once they hold nothing (`steps::forget_dead_consumers`).
    async fn forget_dead_consumers(&self) {
        let silent = self.queue.settings().lease * DEAD_CONSUMER_LEASES;
        if let Err(e) = steps::forget_dead_consumers(&self.queue, &self.consumer, silent).await {
            tracing::debug!(error = %e, "forgetting dead consumers failed");
        }
    }
}

/// The entries of an `XREADGROUP` reply (nil on timeout): `[[stream, [[id, [k, v, ...]], ...]]]`.
fn stream_entries(v: &Value) -> Vec<Entry> {
    let streams: Vec<&Value> = match v {
        Value::Array(streams) => streams
            .iter()
            .filter_map(|s| match s {
                Value::Array(pair) => pair.get(1),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.iter().map(|(_, entries)| entries).collect(),
        _ => Vec::new(),
    };
    streams.into_iter().flat_map(entry_list).collect()
}

/// `[[id, [k, v, ...]], ...]`; an entry whose fields are nil (deleted) has no fields.
fn entry_list(v: &Value) -> Vec<Entry> {
    let Value::Array(entries) = v else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|e| {
            let Value::Array(parts) = e else { return None };
            let stream_id = parts.first().and_then(text)?;
            let fields = match parts.get(1) {
                Some(Value::Array(kv)) => kv
                    .chunks(2)
                    .filter_map(|p| match p {
                        [k, v] => Some((text(k)?, text(v)?)),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            Some(Entry { stream_id, fields })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn replies_are_read_without_trusting_their_shape() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("cg:q:{captcha}:tasks"),
            Value::Array(vec![
                Value::Array(vec![
                    bulk("1-0"),
                    Value::Array(vec![bulk("id"), bulk("7"), bulk("odd")]),
                ]),
                Value::Array(vec![bulk("2-0"), Value::Nil]),
                Value::Int(3),
            ]),
        ])]);
        let entries = stream_entries(&reply);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].fields, vec![("id".to_owned(), "7".to_owned())]);
        assert!(entries[1].fields.is_empty());
        assert!(stream_entries(&Value::Nil).is_empty());
        assert!(stream_entries(&Value::Int(1)).is_empty());
    }
}
