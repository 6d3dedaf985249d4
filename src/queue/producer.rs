//! The producer side: enqueue a task, read or wait for its result, read the lag KEDA scales on.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::calls::{Added, EnqueueCall};
use super::entry::new_task_id;
use super::keys::{GROUP, QueueKeys};
use super::reply;
use super::{Enqueued, NewTask, QueueError, QueueResult, QueueSettings};
use crate::model::now_ms;
use crate::redis_base::Wakeups;
use crate::redis_base::{Conn, RedisTarget};

/// A handle on one queue. Cheap to clone; clones share the connection and the wake-up
/// subscription (which stops when the last clone is dropped).
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    keys: QueueKeys,
    settings: QueueSettings,
    wakeups: Arc<Wakeups>,
    _stop: DropGuard,
}

impl Queue {
    /// Connects (lazily for a single server: the handle works once Redis answers) and makes the
    /// consumer group if Redis is there to make it.
    pub async fn open(target: &RedisTarget, settings: QueueSettings) -> Result<Queue, QueueError> {
        settings
            .check()
            .map_err(|e| QueueError::invalid("bad_setting", e.to_string()))?;
        let conn = Conn::open(target, target.response_timeout).await?;
        let keys = QueueKeys::new(&settings.name);
        let stop = CancellationToken::new();
        let wakeups = Arc::new(Wakeups::new(
            target.pubsub_client()?,
            keys.done(),
            stop.clone(),
        ));
        let queue = Queue {
            inner: Arc::new(Inner {
                conn,
                keys,
                settings,
                wakeups,
                _stop: stop.drop_guard(),
            }),
        };
        if let Err(e) = queue.ensure_group().await {
            tracing::warn!(error = %e, "could not create the queue's consumer group yet");
        }
        Ok(queue)
    }

    pub fn settings(&self) -> &QueueSettings {
        &self.inner.settings
    }

    pub fn keys(&self) -> &QueueKeys {
        &self.inner.keys
    }

    pub(crate) fn conn(&self) -> Conn {
        self.inner.conn.clone()
    }

    /// Creates the stream and its consumer group reading from the start; an existing group is
    /// fine. Called at start and again whenever Redis says the group is missing (restarted empty).
    pub async fn ensure_group(&self) -> Result<(), QueueError> {
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(self.inner.keys.tasks())
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut self.conn())
            .await;
        match created {
            Err(e) if e.code() != Some("BUSYGROUP") => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Adds a task. With an idempotency key used before (within the result TTL), nothing is
    /// added and the first task's id comes back with `duplicate: true`. Not retried after an
    /// I/O error (the entry may have been added): retry with an idempotency key to be safe.
    pub async fn enqueue(&self, task: NewTask) -> Result<Enqueued, QueueError> {
        let id = task.id.clone().unwrap_or_else(new_task_id);
        let fields = task.fields(&id, now_ms())?;
        let call = EnqueueCall {
            idem: task.idem.as_deref(),
            idem_ttl_ms: u64::try_from(self.inner.settings.result_ttl.as_millis())
                .unwrap_or(u64::MAX),
            id: &id,
            fields: &fields,
        };
        let reply: redis::Value = call
            .invocation(&self.inner.keys)
            .invoke_async(&mut self.conn())
            .await?;
        let Added { id, duplicate } = EnqueueCall::read(reply)?;
        Ok(Enqueued { id, duplicate })
    }

    /// The result of task `id`, if written (and not expired). A read, so it is tried again
    /// once after a dropped connection (the handle reconnects by itself).
    pub async fn result(&self, id: &str) -> Result<Option<QueueResult>, QueueError> {
        let get = || async {
            redis::cmd("GET")
                .arg(self.inner.keys.result(id))
                .query_async::<Option<String>>(&mut self.conn())
                .await
        };
        let raw = match get().await {
            Err(e) if e.is_io_error() || e.is_connection_dropped() => get().await?,
            other => other?,
        };
        raw.map(|text| {
            serde_json::from_str(&text)
                .map_err(|e| QueueError::Corrupt(format!("result {id}: {e}")))
        })
        .transpose()
    }

    /// The result of task `id`, waiting up to `timeout` for it to be written. Woken by the
    /// result's publication (no polling); every waiter of this handle shares one subscription.
    pub async fn wait_result(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<Option<QueueResult>, QueueError> {
        let deadline = Instant::now() + timeout;
        let registration = self.inner.wakeups.register(id);
        loop {
            let notified = registration.notify.notified();
            tokio::pin!(notified);
            // Armed before the read: a wake-up between the read and the wait is kept.
            notified.as_mut().enable();
            if let Some(result) = self.result(id).await? {
                return Ok(Some(result));
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(deadline) => return Ok(None),
            }
        }
    }

    /// Task ids this handle's waiters wait for now.
    pub fn waiting(&self) -> usize {
        self.inner.wakeups.waited_ids()
    }

    /// The consumer group's lag (`XINFO GROUPS`), as KEDA's `redis-streams` trigger reads it:
    /// entries not yet delivered to any worker. `Some(0)` when the stream does not exist;
    /// `None` when Redis cannot say (no group, or a lag it cannot compute).
    pub async fn lag(&self) -> Result<Option<u64>, QueueError> {
        let groups: redis::RedisResult<Value> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(self.inner.keys.tasks())
            .query_async(&mut self.conn())
            .await;
        let groups = match groups {
            Ok(v) => v,
            Err(e) if e.to_string().contains("no such key") => return Ok(Some(0)),
            Err(e) => return Err(e.into()),
        };
        Ok(reply::group_field(&groups, "lag"))
    }
}
