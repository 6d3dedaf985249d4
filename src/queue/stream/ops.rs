//! The worker's Redis calls on delivered entries (`queue::steps`), group-committed: an entry's
//! begin or finish joins the batch being gathered and is sent with the others in one script
//! call as soon as the previous call of its kind returned. A lone entry goes at once; under load
//! hundreds share a round trip, and each is still checked on its own inside the script.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::Stream;
use crate::queue::calls::{BeginStep, FinishStep};
use crate::queue::entry::Entry;
use crate::queue::steps;
use crate::queue::{QueueError, QueueResult};

pub use crate::queue::calls::{Begin, Finished};

/// Entries per script call at most: keeps one call (and the Redis time it blocks others) short.
const MAX_BATCH: usize = 256;

type Reply<Out> = oneshot::Sender<Result<Out, QueueError>>;

/// Steps of one kind waiting for the next call, and whether a call is under way.
pub(super) struct Lane<Step, Out> {
    state: Mutex<LaneState<Step, Out>>,
}

struct LaneState<Step, Out> {
    waiting: Vec<(Step, Reply<Out>)>,
    sending: bool,
}

impl<Step, Out> Default for Lane<Step, Out> {
    fn default() -> Self {
        Self {
            state: Mutex::new(LaneState {
                waiting: Vec::new(),
                sending: false,
            }),
        }
    }
}

impl<Step, Out> Lane<Step, Out> {
    fn lock(&self) -> std::sync::MutexGuard<'_, LaneState<Step, Out>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a step; true when no call is under way, so the caller must start the sender.
    fn push(&self, step: Step, reply: Reply<Out>) -> bool {
        let mut state = self.lock();
        state.waiting.push((step, reply));
        !std::mem::replace(&mut state.sending, true)
    }

    /// The next batch; empty (and the sender ends) when nothing waits.
    fn next_batch(&self) -> Vec<(Step, Reply<Out>)> {
        let mut state = self.lock();
        if state.waiting.is_empty() {
            state.sending = false;
            return Vec::new();
        }
        let n = state.waiting.len().min(MAX_BATCH);
        state.waiting.drain(..n).collect()
    }
}

/// Both lanes of one worker.
#[derive(Default)]
pub(super) struct Lanes {
    begins: Lane<BeginStep, Begin>,
    finishes: Lane<FinishStep, Finished>,
}

impl Stream {
    pub(super) async fn begin(
        self: &Arc<Self>,
        entry: &Entry,
        task_id: Option<&str>,
        keep: bool,
    ) -> Result<Begin, QueueError> {
        let step = BeginStep {
            stream_id: entry.stream_id.clone(),
            task_id: task_id.map(str::to_owned),
            keep,
        };
        let (reply, answer) = oneshot::channel();
        if self.lanes.begins.push(step, reply) {
            tokio::spawn(self.clone().send_begins());
        }
        answer.await.unwrap_or_else(|_| Err(dropped()))
    }

    /// Writes `result` (if any) once and, with a `dead_reason`, copies the entry to the
    /// dead-letter stream; then acknowledges and removes the entry, unless `keep`
    /// (`FinishStep::keep`).
    pub(super) async fn finish(
        self: &Arc<Self>,
        entry: &Entry,
        result: Option<QueueResult>,
        dead_reason: Option<&str>,
        keep: bool,
    ) -> Result<Finished, QueueError> {
        let step = FinishStep {
            stream_id: entry.stream_id.clone(),
            result,
            dead_reason: dead_reason.map(str::to_owned),
            fields: if dead_reason.is_some() {
                entry.fields.clone()
            } else {
                Vec::new()
            },
            keep,
        };
        let (reply, answer) = oneshot::channel();
        if self.lanes.finishes.push(step, reply) {
            tokio::spawn(self.clone().send_finishes());
        }
        answer.await.unwrap_or_else(|_| Err(dropped()))
    }

    /// Hands the entry back for attempt `attempt` after `delay`; false when the lease was lost.
    /// Not batched: retries are the exception.
    pub(super) async fn retry(
        &self,
        entry: &Entry,
        attempt: u32,
        delay: Duration,
    ) -> Result<bool, QueueError> {
        steps::retry(
            &self.queue,
            &self.consumer,
            &entry.stream_id,
            delay,
            entry.retry_payload(attempt),
        )
        .await
    }

    async fn send_begins(self: Arc<Self>) {
        loop {
            let batch = self.lanes.begins.next_batch();
            if batch.is_empty() {
                return;
            }
            let (batch, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            answer(
                replies,
                steps::begin(&self.queue, &self.consumer, &batch).await,
            );
        }
    }

    async fn send_finishes(self: Arc<Self>) {
        loop {
            let batch = self.lanes.finishes.next_batch();
            if batch.is_empty() {
                return;
            }
            let (batch, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            answer(
                replies,
                steps::finish(&self.queue, &self.consumer, &batch).await,
            );
        }
    }
}

/// Hands each waiting step its own outcome, or the call's failure.
fn answer<Out>(replies: Vec<Reply<Out>>, outcome: Result<Vec<Out>, QueueError>) {
    match outcome {
        Ok(outs) => {
            for (reply, out) in replies.into_iter().zip(outs) {
                let _ = reply.send(Ok(out));
            }
        }
        Err(e) => {
            for reply in replies {
                let copy = match &e {
                    QueueError::Redis(text) => QueueError::Redis(text.clone()),
                    other => QueueError::Corrupt(other.to_string()),
                };
                let _ = reply.send(Err(copy));
            }
        }
    }
}

fn dropped() -> QueueError {
    QueueError::Redis("the batched call was dropped".into())
}
