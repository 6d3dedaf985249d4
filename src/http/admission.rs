//! Admission: how many solves this process holds at once (`max_concurrent`, seed 002). Beyond it a
//! caller is refused at once with a reply that says "try elsewhere" (503 + `Retry-After`), which
//! a load balancer may safely move to another instance.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub struct Admission {
    active: AtomicU64,
    max: u64,
}

/// One admitted solve; leaving the scope releases it, whatever way the handler ends.
#[derive(Debug)]
pub struct Permit(Arc<Admission>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Admission {
    pub fn new(max: u64) -> Arc<Self> {
        Arc::new(Self {
            active: AtomicU64::new(0),
            max: max.max(1),
        })
    }

    pub fn try_admit(self: &Arc<Self>) -> Option<Permit> {
        self.active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Permit(self.clone()))
    }

    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Acquire)
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// Load as seed 002's `/health` reports it: active / max.
    pub fn load(&self) -> f64 {
        self.active() as f64 / self.max as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_max_and_releases_on_drop() {
        let a = Admission::new(2);
        let p1 = a.try_admit().unwrap();
        let _p2 = a.try_admit().unwrap();
        assert!(a.try_admit().is_none());
        drop(p1);
        assert!(a.try_admit().is_some());
    }
}
