//! Tasks under a request-scoped key (`Idempotency-Scope: request`, docs/API.md "Idempotency
//! keys"): the name a balancer gives a solve so it can move it to another instance, not a task a
//! caller means to come back to. Such a task, run in this process, ends as soon as no caller here
//! waits on it any more, so a caller that leaves takes its demand with it, as a call without a
//! key does, instead of leaving a task that holds an admission slot and keeps an upstream answer
//! from the next caller until its deadline.
//!
//! Owns: the count of callers waiting on each such task and the token that ends it. An entry
//! lives exactly as long as its task runs, so the map holds only running tasks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub struct RequestScoped {
    tasks: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    callers: usize,
    left: CancellationToken,
}

impl RequestScoped {
    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A task this process starts under a request-scoped key. Returns the token that fires when
    /// its last waiting caller leaves, and a guard the task holds until it ends, which forgets it.
    pub fn track(self: &Arc<Self>, task_id: &str) -> (CancellationToken, Forget) {
        let left = CancellationToken::new();
        self.tasks().insert(
            task_id.to_owned(),
            Entry {
                callers: 0,
                left: left.clone(),
            },
        );
        let forget = Forget {
            scoped: self.clone(),
            task_id: task_id.to_owned(),
        };
        (left, forget)
    }

    /// A caller waits on `task_id`, counted while the guard lives. `None` when this process does
    /// not run the task under a request-scoped key: it then runs regardless of its callers.
    pub fn wait_on(self: &Arc<Self>, task_id: &str) -> Option<Waiting> {
        self.tasks().get_mut(task_id)?.callers += 1;
        Some(Waiting {
            scoped: self.clone(),
            task_id: task_id.to_owned(),
        })
    }

    /// Tasks running now (for tests of the map's size).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.tasks().len()
    }
}

/// Forgets its task when the task ends.
pub struct Forget {
    scoped: Arc<RequestScoped>,
    task_id: String,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.scoped.tasks().remove(&self.task_id);
    }
}

/// One caller waiting; the last to leave ends the task.
pub struct Waiting {
    scoped: Arc<RequestScoped>,
    task_id: String,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut tasks = self.scoped.tasks();
        if let Some(entry) = tasks.get_mut(&self.task_id) {
            entry.callers = entry.callers.saturating_sub(1);
            if entry.callers == 0 {
                entry.left.cancel();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_caller_to_leave_ends_the_task_and_an_ended_task_is_forgotten() {
        let scoped = Arc::new(RequestScoped::default());
        let (left, forget) = scoped.track("1");
        let first = scoped.wait_on("1").expect("tracked");
        let second = scoped.wait_on("1").expect("tracked");
        drop(first);
        assert!(!left.is_cancelled(), "one caller still waits");
        drop(second);
        assert!(left.is_cancelled());
        drop(forget);
        assert_eq!(scoped.len(), 0);
        assert!(
            scoped.wait_on("1").is_none(),
            "an ended task is not waited on here"
        );
    }

    #[test]
    fn a_task_nobody_tracked_has_no_callers_to_count() {
        let scoped = Arc::new(RequestScoped::default());
        assert!(scoped.wait_on("other").is_none());
        let (left, forget) = scoped.track("2");
        drop(forget);
        assert!(!left.is_cancelled(), "a task that ended is not ended again");
    }
}
