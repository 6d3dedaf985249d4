//! `captcha-gateway submit`: enqueue tasks, then print each result as one JSON line as it
//! arrives (woken by the queue, no polling), with a progress bar on a terminal and a one-line
//! summary on stderr. Exit code 0 when every task ended ready, 1 otherwise.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use indicatif::{ProgressBar, ProgressStyle};
use tokio::time::Instant;

use crate::config::{SubmitSettings, SubmitTask};
use crate::queue::{NewTask, Queue, QueueError, QueueResult, QueueSettings, ResultStatus};
use crate::shutdown::Shutdown;

/// Enqueues in flight at once: enough to hide Redis round trips, few enough to stay polite.
const ENQUEUE_CONCURRENCY: usize = 64;
/// Results waited on at once. Later ones wait their turn; a result that landed meanwhile is
/// read at once (results are kept for the queue's retention).
const WAIT_CONCURRENCY: usize = 4096;

/// How the run went, for the summary and the exit code.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub ready: usize,
    pub failed: usize,
    /// No result before the timeout (or the run was interrupted).
    pub missing: usize,
    /// Idempotency keys that named a task enqueued before.
    pub duplicates: usize,
}

impl Tally {
    pub fn all_ready(&self) -> bool {
        self.failed == 0 && self.missing == 0
    }
}

pub async fn run(settings: SubmitSettings, shutdown: Shutdown) -> ExitCode {
    let queue = match Queue::open(
        &settings.redis,
        QueueSettings {
            name: settings.queue.clone(),
            ..QueueSettings::default()
        },
    )
    .await
    {
        Ok(q) => Arc::new(q),
        Err(e) => {
            eprintln!("error: the queue could not be opened: {e}");
            return ExitCode::from(1);
        }
    };
    let started = Instant::now();
    let total = settings.tasks.len();
    let ids = match enqueue_all(&queue, settings.tasks).await {
        Ok(ids) => ids,
        Err(e) => {
            eprintln!("error: enqueueing failed: {e}");
            return ExitCode::from(1);
        }
    };
    let duplicates = ids.iter().filter(|(_, dup)| *dup).count();
    if !settings.wait {
        for (id, _) in &ids {
            println!("{}", serde_json::json!({"id": id, "status": "queued"}));
        }
        eprintln!("submit: {total} tasks enqueued ({duplicates} already there)");
        return ExitCode::SUCCESS;
    }
    let deadline = started + settings.timeout;
    let bar = progress(total);
    let mut tally = tokio::select! {
        t = collect(&queue, ids.iter().map(|(id, _)| id.clone()).collect(), deadline, &bar) => t,
        () = shutdown.token.cancelled() => {
            bar.abandon();
            eprintln!("submit: interrupted; the tasks stay queued and their results are kept");
            return ExitCode::from(130);
        }
    };
    bar.finish_and_clear();
    tally.duplicates = duplicates;
    eprintln!(
        "submit: {total} tasks, {} ready, {} failed, {} without a result in {:.1} s",
        tally.ready,
        tally.failed,
        tally.missing,
        started.elapsed().as_secs_f64()
    );
    if tally.all_ready() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Enqueues every task; returns each task's id and whether it was already there.
async fn enqueue_all(
    queue: &Queue,
    tasks: Vec<SubmitTask>,
) -> Result<Vec<(String, bool)>, QueueError> {
    stream::iter(tasks)
        .map(|t| async move {
            let new = NewTask {
                id: t.id,
                request: t.request,
                idem: t.idempotency_key,
                ..NewTask::default()
            };
            queue.enqueue(new).await.map(|e| (e.id, e.duplicate))
        })
        .buffered(ENQUEUE_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Waits for every result until `deadline`, printing each as it lands.
async fn collect(queue: &Queue, ids: Vec<String>, deadline: Instant, bar: &ProgressBar) -> Tally {
    let mut tally = Tally::default();
    let mut waits = stream::iter(ids)
        .map(|id| async move {
            let left = deadline.saturating_duration_since(Instant::now());
            let result = queue.wait_result(&id, left).await;
            (id, result)
        })
        .buffer_unordered(WAIT_CONCURRENCY);
    while let Some((id, result)) = waits.next().await {
        match result {
            Ok(Some(r)) => {
                if r.status == ResultStatus::Ready {
                    tally.ready += 1;
                } else {
                    tally.failed += 1;
                }
                print_result(&r);
            }
            Ok(None) => {
                tally.missing += 1;
                println!("{}", serde_json::json!({"id": id, "status": "timeout"}));
            }
            Err(e) => {
                tally.missing += 1;
                println!(
                    "{}",
                    serde_json::json!({"id": id, "status": "unknown", "error": e.to_string()})
                );
            }
        }
        bar.inc(1);
    }
    tally
}

fn print_result(r: &QueueResult) {
    match serde_json::to_string(r) {
        Ok(line) => println!("{line}"),
        Err(e) => eprintln!("error: a result could not be printed: {e}"),
    }
}

/// A bar on a terminal; hidden (and free) when stderr is a file or a pipe.
fn progress(total: usize) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {pos}/{len} results [{bar:30}] {per_sec} ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
