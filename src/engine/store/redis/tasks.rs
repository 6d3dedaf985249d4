//! Task records in Redis: one hash per task (`record` json, `state` json or `pending`,
//! `finished_at`, `reported`) with a TTL, readable by every instance. Records created while Redis
//! is away live in a local fallback, so `in.php` keeps working degraded on this instance.
//!
//! A reader waiting on a pending task is woken, not polling: `task_finish.lua` publishes the id
//! on [`keys::TASKS_FINISHED`] and one subscription per process wakes its readers; a finish in
//! this process wakes them directly. A slow look ([`SAFETY_NET`]) remains for a wake-up lost
//! while both sides were connected, which Redis does not promise never happens.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{AsyncCommands, Value};

use super::call::TaskCall;
use super::reply::{Reported, TaskFinished};
use super::{keys, unavailable};
use crate::engine::store::{Housekeeping, MemoryStore, StoreError, TaskRecords};
use crate::engine::{TaskRecord, TaskState};
use crate::model::Millis;
use crate::redis_base::{Conn, Wakeups};

/// How often a waiting reader looks again without a wake-up: only a safety net. A lost
/// subscription wakes every reader when it is back, so this covers a message lost while both
/// sides stayed connected.
const SAFETY_NET: Duration = Duration::from_secs(10);

pub(super) struct Tasks {
    retention: Duration,
    pending_ttl: Duration,
    fallback: MemoryStore,
    finished: Arc<Wakeups>,
    /// Records of this instance's pending tasks, so a finish can write one again whole when
    /// Redis lost it (restarted empty). Bounded by the tasks running here.
    pending: Mutex<HashMap<String, (String, Millis)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn seen<T>(healthy: &AtomicBool, r: redis::RedisResult<T>) -> Result<T, StoreError> {
    healthy.store(r.is_ok(), Ordering::Relaxed);
    r.map_err(unavailable)
}

impl Tasks {
    pub fn new(retention: Duration, pending_ttl: Duration, finished: Arc<Wakeups>) -> Self {
        Self {
            retention,
            pending_ttl,
            fallback: MemoryStore::new(),
            finished,
            pending: Mutex::default(),
        }
    }

    pub async fn create(
        &self,
        conn: &Conn,
        healthy: &AtomicBool,
        record: TaskRecord,
    ) -> Result<(), StoreError> {
        let json =
            serde_json::to_string(&record).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let redo = match &record.redo {
            Some(redo) => {
                serde_json::to_string(redo).map_err(|e| StoreError::Unavailable(e.to_string()))?
            }
            None => String::new(),
        };
        let key = keys::task(&record.id);
        let mut c = conn.clone();
        let mut fields = vec![
            ("record", json.as_str()),
            ("state", "pending"),
            ("reported", "0"),
        ];
        if !redo.is_empty() {
            // Beside the record, so that the task's end drops it (`task_finish.lua`).
            fields.push(("redo", redo.as_str()));
        }
        let r: redis::RedisResult<()> = redis::pipe()
            .atomic()
            .hset_multiple(&key, &fields)
            .ignore()
            .pexpire(&key, self.pending_ttl.as_millis() as i64)
            .ignore()
            .query_async(&mut c)
            .await;
        match seen(healthy, r) {
            Ok(()) => {
                lock(&self.pending).insert(record.id.clone(), (json, record.created_at));
                Ok(())
            }
            Err(_) => {
                tracing::warn!("redis unavailable: task record kept on this instance only");
                self.fallback.create_task(record).await
            }
        }
    }

    pub async fn finish(
        &self,
        conn: &Conn,
        healthy: &AtomicBool,
        id: &str,
        state: TaskState,
        now: Millis,
    ) -> Result<(), StoreError> {
        if self.fallback.get_task(id).await?.is_some() {
            self.fallback.finish_task(id, state, now).await?;
        } else {
            let json = serde_json::to_string(&state)
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            let record = lock(&self.pending)
                .get(id)
                .map(|(json, _)| json.clone())
                .unwrap_or_default();
            let written = self
                .write_finish(conn, healthy, id, &json, now, &record)
                .await;
            match written {
                Ok(()) => {
                    lock(&self.pending).remove(id);
                }
                Err(e) if !record.is_empty() => {
                    // Redis is away: the result is kept here, where its caller's `res.php` on this
                    // instance reads it at once, and written to Redis when it answers again
                    // (writing once is idempotent), so every instance can read it then.
                    tracing::warn!(error = %e, "task result kept locally until redis answers");
                    self.keep_locally(&record, state, now).await?;
                    self.retry_finish(conn.clone(), id.to_owned(), json, now, record);
                }
                Err(e) => return Err(e),
            }
        }
        self.finished.wake(id);
        Ok(())
    }

    pub async fn mark_reported(
        &self,
        conn: &Conn,
        healthy: &AtomicBool,
        id: &str,
    ) -> Result<bool, StoreError> {
        if self.fallback.get_task(id).await?.is_some() {
            return self.fallback.mark_reported(id).await;
        }
        let mut c = conn.clone();
        let r = TaskCall::Report
            .invocation(id)
            .invoke_async::<Value>(&mut c)
            .await;
        Ok(Reported::read(seen(healthy, r)?)?.marked)
    }

    pub async fn get(
        &self,
        conn: &Conn,
        healthy: &AtomicBool,
        id: &str,
    ) -> Result<Option<TaskRecord>, StoreError> {
        if let Some(r) = self.fallback.get_task(id).await? {
            return Ok(Some(r));
        }
        let mut c = conn.clone();
        let fields: HashMap<String, String> = match seen(healthy, c.hgetall(keys::task(id)).await) {
            Ok(fields) => fields,
            // Redis is away: a task this instance runs is known to be pending.
            Err(e) => {
                let mine = lock(&self.pending).get(id).map(|(json, _)| json.clone());
                return match mine.and_then(|j| serde_json::from_str::<TaskRecord>(&j).ok()) {
                    Some(record) => Ok(Some(record)),
                    None => Err(e),
                };
            }
        };
        let Some(mut record) = fields
            .get("record")
            .and_then(|j| serde_json::from_str::<TaskRecord>(j).ok())
        else {
            return Ok(None);
        };
        if let Some(state) = fields.get("state").filter(|s| *s != "pending") {
            record.state = serde_json::from_str(state)
                .map_err(|e| StoreError::Unavailable(format!("unreadable task state: {e}")))?;
        }
        record.redo = fields
            .get("redo")
            .and_then(|j| serde_json::from_str(j).ok());
        record.finished_at = fields.get("finished_at").and_then(|v| v.parse().ok());
        record.reported = fields.get("reported").is_some_and(|v| v == "1");
        Ok(Some(record))
    }

    pub async fn wait(
        &self,
        conn: &Conn,
        healthy: &AtomicBool,
        id: &str,
        wait: Duration,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let deadline = tokio::time::Instant::now() + wait;
        let registration = self.finished.register(id);
        loop {
            let notified = registration.notify.notified();
            tokio::pin!(notified);
            // Armed before the read: a finish between the read and the wait is kept.
            notified.as_mut().enable();
            let record = self.get(conn, healthy, id).await?;
            let done = record
                .as_ref()
                .is_none_or(|r| r.state != TaskState::Pending);
            if done || tokio::time::Instant::now() >= deadline {
                return Ok(record);
            }
            let next = (tokio::time::Instant::now() + SAFETY_NET).min(deadline);
            let _ = tokio::time::timeout_at(next, notified).await;
        }
    }

    async fn write_finish(
        &self,
        conn: &Conn,
        healthy: &AtomicBool,
        id: &str,
        state_json: &str,
        now: Millis,
        record: &str,
    ) -> Result<(), StoreError> {
        let mut c = conn.clone();
        let call = TaskCall::Finish {
            state_json: state_json.to_owned(),
            finished_at: now,
            retention_ms: self.retention.as_millis() as u64,
            record_json: record.to_owned(),
        };
        let r = call.invocation(id).invoke_async::<Value>(&mut c).await;
        if TaskFinished::read(seen(healthy, r)?)? == TaskFinished::Rewritten {
            tracing::warn!("a task record lost by redis was written again at its finish");
        }
        Ok(())
    }

    /// The finished record in the local fallback, read before Redis by `get`.
    async fn keep_locally(
        &self,
        record_json: &str,
        state: TaskState,
        now: Millis,
    ) -> Result<(), StoreError> {
        let record: TaskRecord = serde_json::from_str(record_json)
            .map_err(|e| StoreError::Unavailable(format!("unreadable task record: {e}")))?;
        let id = record.id.clone();
        self.fallback.create_task(record).await?;
        self.fallback.finish_task(&id, state, now).await
    }

    /// Writes a finished result Redis missed, until it lands or the record's retention passes.
    fn retry_finish(
        &self,
        conn: Conn,
        id: String,
        state_json: String,
        now: Millis,
        record: String,
    ) {
        let retention = self.retention;
        let call = TaskCall::Finish {
            state_json,
            finished_at: now,
            retention_ms: retention.as_millis() as u64,
            record_json: record,
        };
        tokio::spawn(async move {
            let give_up = tokio::time::Instant::now() + retention;
            let mut pause = Duration::from_millis(250);
            while tokio::time::Instant::now() < give_up {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
                let mut c = conn.clone();
                let r = call.invocation(&id).invoke_async::<Value>(&mut c).await;
                if r.map_err(unavailable).and_then(TaskFinished::read).is_ok() {
                    return;
                }
            }
        });
    }

    pub async fn sweep_fallback(
        &self,
        now: Millis,
        retention_ms: u64,
        pending_limit_ms: u64,
    ) -> usize {
        // A task that never finished (its instance's task was lost) stops being kept with it.
        lock(&self.pending)
            .retain(|_, (_, created)| now.saturating_sub(*created) <= pending_limit_ms);
        self.fallback
            .sweep(now, retention_ms, pending_limit_ms)
            .await
            .unwrap_or(0)
    }
}
