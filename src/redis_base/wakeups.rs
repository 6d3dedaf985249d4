//! Waking whoever waits for something another process finishes (a queue's results, the store's
//! task records): the finishing script publishes the id on a channel, and one Pub/Sub
//! subscription per channel and process, started at the first wait, wakes that id's waiters.
//!
//! No message may be missed: a waiter registers first, then reads what it waits for, then waits
//! for its id on the channel. What was written before the registration is found by the read;
//! what is written after is published after it, so either the subscription hears it, or the
//! subscription was down and every waiter is woken to read again once it is back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long to wait before subscribing again after the connection failed.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

pub struct Wakeups {
    client: redis::Client,
    channel: String,
    /// Task id -> (waiters registered, their wake-up).
    waiting: Mutex<HashMap<String, (usize, Arc<Notify>)>>,
    started: Once,
    stop: CancellationToken,
}

/// One waiter's place; leaving it (drop) forgets the id once its last waiter left.
pub struct Registration {
    wakeups: Arc<Wakeups>,
    id: String,
    pub notify: Arc<Notify>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut waiting = self.wakeups.waiting();
        if let Some((count, _)) = waiting.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                waiting.remove(&self.id);
            }
        }
    }
}

impl Wakeups {
    pub fn new(client: redis::Client, channel: String, stop: CancellationToken) -> Self {
        Self {
            client,
            channel,
            waiting: Mutex::default(),
            started: Once::new(),
            stop,
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, (usize, Arc<Notify>)>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a waiter for `id` (starting the subscription if this is the first).
    pub fn register(self: &Arc<Self>, id: &str) -> Registration {
        self.started.call_once(|| {
            tokio::spawn(listen(self.clone()));
        });
        let notify = {
            let mut waiting = self.waiting();
            let slot = waiting
                .entry(id.to_owned())
                .or_insert_with(|| (0, Arc::new(Notify::new())));
            slot.0 += 1;
            slot.1.clone()
        };
        Registration {
            wakeups: self.clone(),
            id: id.to_owned(),
            notify,
        }
    }

    /// Ids being waited for now (tests and metrics).
    pub fn waited_ids(&self) -> usize {
        self.waiting().len()
    }

    /// Wakes `id`'s waiters in this process (what this process finished itself).
    pub fn wake(&self, id: &str) {
        if let Some((_, notify)) = self.waiting().get(id) {
            notify.notify_waiters();
        }
    }

    fn wake_all(&self) {
        for (_, notify) in self.waiting().values() {
            notify.notify_waiters();
        }
    }
}

/// Keeps one subscription to the wake-up channel until the queue handle is dropped.
async fn listen(wakeups: Arc<Wakeups>) {
    loop {
        if let Ok(mut pubsub) = wakeups.client.get_async_pubsub().await {
            if pubsub.subscribe(&wakeups.channel).await.is_ok() {
                // Anything published while nobody listened is found by reading again.
                wakeups.wake_all();
                let mut messages = pubsub.on_message();
                loop {
                    tokio::select! {
                        m = messages.next() => match m {
                            Some(msg) => {
                                if let Ok(id) = msg.get_payload::<String>() {
                                    wakeups.wake(&id);
                                }
                            }
                            None => break,
                        },
                        _ = wakeups.stop.cancelled() => return,
                    }
                }
                tracing::debug!("queue wake-up subscription lost; subscribing again");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RESUBSCRIBE_AFTER) => {}
            _ = wakeups.stop.cancelled() => return,
        }
    }
}
