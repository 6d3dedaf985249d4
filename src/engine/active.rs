//! The targets this process has callers waiting on, each with a request that can start a task
//! for it. Used to re-cover demand whose tasks died with another instance.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::model::{SolveRequest, Target};

#[derive(Default)]
pub(super) struct Active {
    targets: Mutex<HashMap<String, (Target, SolveRequest, usize)>>,
}

/// Counts one waiting caller until dropped.
pub(super) struct Entered {
    active: Arc<Active>,
    target_id: String,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Active {
    pub fn enter(self: &Arc<Self>, target: &Target, req: &SolveRequest) -> Entered {
        lock(&self.targets)
            .entry(target.id.clone())
            .or_insert_with(|| (target.clone(), req.clone(), 0))
            .2 += 1;
        Entered {
            active: self.clone(),
            target_id: target.id.clone(),
        }
    }

    pub fn snapshot(&self) -> Vec<(Target, SolveRequest)> {
        lock(&self.targets)
            .values()
            .map(|(t, r, _)| (t.clone(), r.clone()))
            .collect()
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let mut targets = lock(&self.active.targets);
        if let Some(entry) = targets.get_mut(&self.target_id) {
            entry.2 -= 1;
            if entry.2 == 0 {
                targets.remove(&self.target_id);
            }
        }
    }
}
