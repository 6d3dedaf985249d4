//! The targets this process has callers waiting on, each with a request that can start a task
//! for it and how urgent its most urgent caller is. Used to re-cover demand whose tasks died with
//! another instance: the task started for it ranks as its callers do, so a queued worker's
//! adopted task never jumps ahead of interactive callers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::types::Priority;
use crate::model::{SolveRequest, Target};

/// Waiting callers of one target, by priority (most urgent first, as [`rank`] orders them).
struct Waiting {
    target: Target,
    req: SolveRequest,
    by_priority: [usize; 3],
}

#[derive(Default)]
pub(super) struct Active {
    targets: Mutex<HashMap<String, Waiting>>,
}

/// Counts one waiting caller until dropped.
pub(super) struct Entered {
    active: Arc<Active>,
    target_id: String,
    priority: Priority,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

const BY_URGENCY: [Priority; 3] = [Priority::Interactive, Priority::Queued, Priority::Refill];

fn rank(p: Priority) -> usize {
    match p {
        Priority::Interactive => 0,
        Priority::Queued => 1,
        Priority::Refill => 2,
    }
}

impl Active {
    pub fn enter(self: &Arc<Self>, target: &Target, req: &SolveRequest, p: Priority) -> Entered {
        lock(&self.targets)
            .entry(target.id.clone())
            .or_insert_with(|| Waiting {
                target: target.clone(),
                req: req.clone(),
                by_priority: [0; 3],
            })
            .by_priority[rank(p)] += 1;
        Entered {
            active: self.clone(),
            target_id: target.id.clone(),
            priority: p,
        }
    }

    /// Each target with a request for it and the priority of its most urgent waiting caller.
    pub fn snapshot(&self) -> Vec<(Target, SolveRequest, Priority)> {
        lock(&self.targets)
            .values()
            .filter_map(|w| {
                let most_urgent = w.by_priority.iter().position(|n| *n > 0)?;
                Some((w.target.clone(), w.req.clone(), BY_URGENCY[most_urgent]))
            })
            .collect()
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let mut targets = lock(&self.active.targets);
        if let Some(w) = targets.get_mut(&self.target_id) {
            w.by_priority[rank(self.priority)] -= 1;
            if w.by_priority.iter().all(|n| *n == 0) {
                targets.remove(&self.target_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_ranks_as_its_most_urgent_waiting_caller_and_goes_with_the_last() {
        let active = Arc::new(Active::default());
        let req = SolveRequest::recaptcha_v2("6Le-test", "https://example.com/");
        let target = Target::of(&req, Default::default());
        let queued = active.enter(&target, &req, Priority::Queued);
        assert_eq!(active.snapshot()[0].2, Priority::Queued);
        let interactive = active.enter(&target, &req, Priority::Interactive);
        assert_eq!(active.snapshot()[0].2, Priority::Interactive);
        drop(interactive);
        assert_eq!(active.snapshot()[0].2, Priority::Queued);
        drop(queued);
        assert!(active.snapshot().is_empty());
    }
}
