//! Task records of the asynchronous APIs at the `Store` seam: created pending, finished once
//! (promise 6), reported once, readable and long-polled from any instance, swept after their
//! retention (or their pending limit).

use std::time::Duration;

use captcha_gateway::engine::store::Store;
use captcha_gateway::engine::{Handout, Redo, SolveFailure, TaskRecord, TaskState};
use captcha_gateway::model::{Kind, Source, now_ms};

use super::backend::*;
use crate::support::eventually::eventually;

fn record(id: &str, now: u64) -> TaskRecord {
    TaskRecord {
        id: id.to_owned(),
        tenant: "alice".into(),
        kind: Kind::RecaptchaV2,
        target_id: "conformance-target".into(),
        created_at: now,
        state: TaskState::Pending,
        finished_at: None,
        reported: false,
        redo: None,
    }
}

fn ready(text: &str, now: u64) -> TaskState {
    TaskState::Ready(Handout {
        kind: Kind::RecaptchaV2,
        answer: answer(text, now, 60_000),
        source: Source::Solved,
    })
}

async fn get(store: &dyn Store, id: &str) -> Option<TaskRecord> {
    store.get_task(id).await.unwrap()
}

/// The request kept for a take-over (it may hold an image) is readable while the task is
/// pending and gone once it ended: a finished record costs only its result.
pub async fn a_pending_records_request_is_kept_until_it_ends<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let now = now_ms();
    let id = task_id();
    let redo = Redo {
        request: serde_json::json!({"kind": "image", "body": "aGVsbG8="}),
        deadline_at: now + 60_000,
    };
    let mut pending = record(&id, now);
    pending.redo = Some(redo.clone());
    s.create_task(pending).await.unwrap();
    assert_eq!(get(s, &id).await.unwrap().redo, Some(redo));
    s.finish_task(&id, ready("done", now), now + 5)
        .await
        .unwrap();
    let done = get(s, &id).await.expect("still readable");
    assert_eq!(done.state, ready("done", now));
    assert_eq!(done.redo, None);
}

pub async fn a_record_is_finished_once_and_reported_once<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let store = backend.instance().await;
    let s = &*store;
    let now = now_ms();
    let id = task_id();
    s.create_task(record(&id, now)).await.unwrap();
    assert_eq!(get(s, &id).await, Some(record(&id, now)));

    s.finish_task(&id, ready("first", now), now + 5)
        .await
        .unwrap();
    let failure = TaskState::Failed(SolveFailure::new("ERROR_CAPTCHA_UNSOLVABLE", "late"));
    s.finish_task(&id, failure, now + 9).await.unwrap();
    let done = get(s, &id).await.expect("still readable");
    assert_eq!(done.state, ready("first", now), "the first finish stays");
    assert_eq!(done.finished_at, Some(now + 5));
    assert!(!done.reported);

    assert!(
        s.mark_reported(&id).await.unwrap(),
        "the first report counts"
    );
    assert!(
        !s.mark_reported(&id).await.unwrap(),
        "a second report is refused"
    );
    assert!(get(s, &id).await.unwrap().reported);

    // An id nobody created: nothing to read, finish, report or wait for.
    let unknown = task_id();
    assert_eq!(get(s, &unknown).await, None);
    s.finish_task(&unknown, ready("ghost", now), now)
        .await
        .unwrap();
    assert_eq!(get(s, &unknown).await, None, "finishing does not create");
    assert!(!s.mark_reported(&unknown).await.unwrap());
    assert_eq!(
        s.wait_task(&unknown, Duration::from_secs(30))
            .await
            .unwrap(),
        None
    );
}

/// A long-poll on one instance ends when another finishes the task; one that runs out returns
/// the record as it is.
pub async fn a_long_poll_ends_when_any_instance_finishes_the_task<B: Backend>() {
    let backend = B::start(Tuning::default()).await;
    let (a, b) = (backend.instance().await, backend.instance().await);
    let now = now_ms();
    let id = task_id();
    a.create_task(record(&id, now)).await.unwrap();
    let pending = b.wait_task(&id, Duration::from_millis(50)).await.unwrap();
    assert_eq!(pending.map(|r| r.state), Some(TaskState::Pending));

    let poll = {
        let (b, id) = (b.clone(), id.clone());
        tokio::spawn(async move { b.wait_task(&id, Duration::from_secs(60)).await })
    };
    a.finish_task(&id, ready("done", now), now).await.unwrap();
    let got = poll.await.unwrap().unwrap().expect("the record");
    assert_eq!(got.state, ready("done", now));
}

/// Within their retention, records and fresh pooled answers survive a sweep; pooled answers
/// that expired go, counted as waste.
pub async fn a_sweep_keeps_live_records_and_drops_expired_pooled_answers<B: Backend>() {
    let tuning = Tuning::default();
    let backend = B::start(tuning).await;
    let store = backend.instance().await;
    let s = &*store;
    let now = now_ms();
    let (pending, finished) = (task_id(), task_id());
    s.create_task(record(&pending, now)).await.unwrap();
    s.create_task(record(&finished, now)).await.unwrap();
    s.finish_task(&finished, ready("kept", now), now)
        .await
        .unwrap();
    let t = target();
    s.put(&t, answer("expiring", now, 20_000), now)
        .await
        .unwrap();
    s.put(&t, answer("lasting", now, 120_000), now)
        .await
        .unwrap();

    let later = now + 30_000;
    let retention = tuning.retention.as_millis() as u64;
    let limit = tuning.pending_limit.as_millis() as u64;
    assert_eq!(s.sweep(later, retention, limit).await.unwrap(), 0);
    assert!(
        get(s, &pending).await.is_some(),
        "a pending record within its limit"
    );
    assert!(
        get(s, &finished).await.is_some(),
        "a finished record within its retention"
    );
    assert_eq!(s.counts(&t, later, 0).await.unwrap().pooled, 1);
    assert_eq!(figures(s, &t).await.expired_unused, 1);
}

/// Past their retention (finished) or pending limit (never finished), records go. The embedded
/// store drops them when swept; Redis lets their key lifetimes run out: either way they go. (So
/// `sweep`'s count is not compared: Redis cannot count what its key lifetimes removed.)
pub async fn a_sweep_drops_records_past_their_retention_or_pending_limit<B: Backend>() {
    let tuning = Tuning {
        retention: Duration::from_millis(200),
        pending_limit: Duration::from_millis(400),
        ..Tuning::default()
    };
    let backend = B::start(tuning).await;
    let store = backend.instance().await;
    let s = &*store;
    let now = now_ms();
    let (pending, finished) = (task_id(), task_id());
    s.create_task(record(&pending, now)).await.unwrap();
    s.create_task(record(&finished, now)).await.unwrap();
    s.finish_task(&finished, ready("old", now), now)
        .await
        .unwrap();
    for (id, what) in [
        (&finished, "the finished record to be swept"),
        (&pending, "the pending record to be swept"),
    ] {
        eventually(Duration::from_secs(10), what, || async {
            let retention = tuning.retention.as_millis() as u64;
            let limit = tuning.pending_limit.as_millis() as u64;
            s.sweep(now_ms(), retention, limit).await.unwrap();
            get(s, id).await.is_none()
        })
        .await;
    }
}
