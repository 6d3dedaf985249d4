use std::sync::Mutex;

use super::*;

/// A source of numbered entries held in memory, recording what the worker does with it.
#[derive(Default)]
struct Recorded {
    queue: Mutex<Vec<u32>>,
    /// Entries being processed now, and the most at once.
    busy: AtomicU64,
    most_busy: AtomicU64,
    done: Mutex<Vec<u32>>,
    /// Each process waits for this before it ends.
    release: tokio::sync::Notify,
    events: Mutex<Vec<&'static str>>,
    failures_left: AtomicU64,
}

impl Source for Recorded {
    type Entry = u32;

    async fn take(&self, most: usize, _stop: &CancellationToken) -> redis::RedisResult<Vec<u32>> {
        if self.failures_left.load(Ordering::Relaxed) > 0 {
            self.failures_left.fetch_sub(1, Ordering::Relaxed);
            return Err(redis::RedisError::from(std::io::Error::other("down")));
        }
        let taken: Vec<u32> = {
            let mut queue = self.queue.lock().unwrap();
            let n = most.min(queue.len());
            queue.drain(..n).collect()
        };
        if taken.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(taken)
    }

    async fn process(self: Arc<Self>, entry: u32) {
        let now = self.busy.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_busy.fetch_max(now, Ordering::SeqCst);
        self.release.notified().await;
        self.busy.fetch_sub(1, Ordering::SeqCst);
        self.done.lock().unwrap().push(entry);
    }

    async fn keep_alive(self: Arc<Self>, life: CancellationToken) {
        life.cancelled().await;
        self.events.lock().unwrap().push("keep-alive ended");
    }

    async fn hand_back(&self) {
        self.events.lock().unwrap().push("handed back");
    }
}

fn source(entries: u32, failures: u64) -> Arc<Recorded> {
    let source = Recorded {
        queue: Mutex::new((0..entries).collect()),
        failures_left: AtomicU64::new(failures),
        ..Recorded::default()
    };
    Arc::new(source)
}

#[tokio::test]
async fn never_more_than_the_concurrency_in_flight_and_every_entry_processed_once() {
    let source = source(20, 2);
    let figures = Arc::new(WorkerFigures::default());
    let stop = CancellationToken::new();
    let mut running = Running::start(
        source.clone(),
        3,
        figures.clone(),
        TaskTracker::new(),
        stop.clone(),
    );
    crate::eventually::eventually(Duration::from_secs(10), "every entry done", || {
        source.release.notify_waiters();
        let done = source.done.lock().unwrap().len();
        async move { done == 20 }
    })
    .await;
    stop.cancel();
    running.in_flight_done().await;
    running.close().await;
    let mut done = source.done.lock().unwrap().clone();
    done.sort_unstable();
    assert_eq!(done, (0..20).collect::<Vec<_>>());
    assert_eq!(source.most_busy.load(Ordering::SeqCst), 3);
    assert_eq!(WorkerFigures::get(&figures.taken), 20);
    assert_eq!(WorkerFigures::get(&figures.take_errors), 2);
    assert_eq!(WorkerFigures::get(&figures.in_flight), 0);
}

#[tokio::test]
async fn a_stop_lets_in_flight_entries_end_then_ends_the_keep_alive_then_hands_back() {
    let source = source(5, 0);
    let figures = Arc::new(WorkerFigures::default());
    let stop = CancellationToken::new();
    let mut running = Running::start(
        source.clone(),
        2,
        figures.clone(),
        TaskTracker::new(),
        stop.clone(),
    );
    crate::eventually::eventually(Duration::from_secs(10), "two entries in flight", || {
        let busy = source.busy.load(Ordering::SeqCst);
        async move { busy == 2 }
    })
    .await;
    stop.cancel();
    let ended = {
        let done = running.in_flight_done();
        tokio::pin!(done);
        loop {
            tokio::select! {
                () = &mut done => break,
                () = tokio::task::yield_now() => source.release.notify_waiters(),
            }
        }
        source.done.lock().unwrap().len()
    };
    assert_eq!(
        ended, 2,
        "the two taken before the stop end; no more are taken"
    );
    assert!(source.events.lock().unwrap().is_empty());
    running.close().await;
    assert_eq!(
        *source.events.lock().unwrap(),
        vec!["keep-alive ended", "handed back"]
    );
    assert_eq!(source.queue.lock().unwrap().len(), 3);
}
