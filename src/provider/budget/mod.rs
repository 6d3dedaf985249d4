//! An account's thread budget: how many of its upstream tasks may run at once, across this
//! process (embedded store) or across the whole fleet (Redis), and who gets a thread when one
//! frees (docs/ARCHITECTURE.md promise 5; docs/REDIS.md "Thread budget").
//!
//! Owns: the [`Budget`] seam with its two implementations ([`MemoryBudget`] for one process,
//! [`RedisBudget`] for a fleet, with its scripts' calls, replies and keys in `redis/`), the
//! [`Priority`] classes, the refill reserve, and the effective cap that capacity refusals lower
//! and time grows back ([`CapRule`], and its twin in `lua/lib/budget.lua`, which must run where
//! the fleet's state is; a property test keeps the two equal).
//! Does not own: how long a thread stays taken after its caller left (the account's `Slot`), or
//! retrying the provider (the account).
//!
//! The rules both implementations keep:
//! - at most `cap` leases at once, where `cap` is the configured threads, lowered to the plan's
//!   threads once `threadsinfo` told them, and lowered further for a while after a capacity
//!   refusal that shows the plan smaller ([`CapRule::refused`]);
//! - a thread goes to the waiter of the most urgent class that first asked earliest; a newcomer
//!   never overtakes a waiter of its own or a more urgent class, and a task that gave its thread
//!   back to wait out a refusal asks again from its first arrival, so it keeps its place;
//! - refills never take the last `reserve` threads (a plan of one thread still lets refills use
//!   it, or its pools would never fill).

mod cap;
mod memory;
pub mod redis;

pub use cap::{Accepted, CapRule, CapSettings, refusal_is_plan};
pub use memory::MemoryBudget;
pub use redis::RedisBudget;

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

/// Who a thread is for, most urgent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Priority {
    /// A caller is waiting for this task now.
    Interactive,
    /// Work a caller queued for later (the queue): before refills, after waiting callers.
    Queued,
    /// A pool refill: nobody waits for it yet, so it only runs on spare threads.
    Refill,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Interactive, Priority::Queued, Priority::Refill];

    /// Its position in [`Priority::ALL`]; also the class number the Redis scripts use.
    pub fn index(self) -> usize {
        match self {
            Priority::Interactive => 0,
            Priority::Queued => 1,
            Priority::Refill => 2,
        }
    }
}

/// Counters of one budget since start, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetStats {
    /// Leases found gone while their task still ran (a pause or partition longer than a lease,
    /// or Redis restarted empty): the fleet may have handed that thread out again.
    pub leases_lost: u64,
    /// Threads used without the fleet's agreement: lost leases whose task went on, and threads
    /// granted locally while Redis could not be asked.
    pub over_admissions: u64,
}

/// The one place a thread's lease lives. Dropping it gives the thread back (for Redis, by a
/// release script run in the background).
pub struct Lease {
    held: Box<dyn Any + Send + Sync>,
}

impl Lease {
    pub fn new(held: impl Send + Sync + 'static) -> Lease {
        Lease {
            held: Box::new(held),
        }
    }

    /// What the budget that granted it holds, if it is of type `T` (a fleet budget's fallback
    /// grants leases of another kind).
    pub(crate) fn held<T: 'static>(&self) -> Option<&T> {
        self.held.downcast_ref()
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Lease")
    }
}

/// One account's thread budget. Cheap to share.
#[async_trait]
pub trait ThreadBudget: Send + Sync + 'static {
    /// Waits for a thread under the rules above, in the place of a waiter that first asked at
    /// `since`. Dropping the future gives up the place.
    async fn acquire_from(&self, priority: Priority, since: Instant) -> Lease;
    /// Waits for a thread as a newcomer ([`acquire_from`](Self::acquire_from) now).
    async fn acquire(&self, priority: Priority) -> Lease {
        self.acquire_from(priority, Instant::now()).await
    }
    /// Threads taken, fleet-wide where the budget is (as of the last answer from Redis).
    fn in_use(&self) -> u32;
    /// The effective cap now.
    fn cap(&self) -> u32;
    /// Callers of `priority` in this process waiting for a thread.
    fn queued(&self, priority: Priority) -> usize;
    /// The provider accepted the task `lease` is held for: what was in flight beside it is
    /// proof of what the provider carries ([`Accepted`]).
    fn accepted(&self, lease: &Lease);
    /// The provider refused the task `lease` is held for with a capacity error: the thread is
    /// given back, and the cap lowered to what else was in flight if that is the plan's size
    /// ([`CapRule::refused`]).
    fn refused(&self, lease: Lease);
    /// `threadsinfo` said the plan has `plan` threads.
    fn calibrate(&self, plan: u32);
    fn stats(&self) -> BudgetStats;
}

pub type Budget = Arc<dyn ThreadBudget>;

/// Threads refills leave free by default. One is enough for a caller arriving while refills run
/// to start at once; more would idle threads that a pool could fill.
pub const DEFAULT_REFILL_RESERVE: u32 = 1;

/// How a budget is sized: the configured threads, the refill reserve and the cap's rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetSettings {
    pub threads: u32,
    /// Threads refills leave to callers (see the module doc).
    pub refill_reserve: u32,
    pub cap: CapSettings,
}

impl BudgetSettings {
    pub fn new(threads: u32) -> Self {
        Self {
            threads,
            refill_reserve: DEFAULT_REFILL_RESERVE,
            cap: CapSettings::default(),
        }
    }

    /// How many leases a class may bring the total to, under a cap of `cap`.
    pub fn limit(&self, cap: u32, priority: Priority) -> u32 {
        match priority {
            Priority::Refill => cap.saturating_sub(self.refill_reserve).max(cap.min(1)),
            Priority::Interactive | Priority::Queued => cap,
        }
    }
}

/// The in-process budget (embedded store): `threads` shared by this process alone.
pub fn in_process(settings: BudgetSettings) -> Budget {
    Arc::new(MemoryBudget::new(settings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refills_leave_the_reserve_but_a_one_thread_plan_still_refills() {
        let s = BudgetSettings::new(5);
        assert_eq!(s.limit(5, Priority::Interactive), 5);
        assert_eq!(s.limit(5, Priority::Queued), 5);
        assert_eq!(s.limit(5, Priority::Refill), 4);
        assert_eq!(s.limit(1, Priority::Refill), 1);
        assert_eq!(s.limit(0, Priority::Refill), 0);
        let none = BudgetSettings {
            refill_reserve: 0,
            ..s
        };
        assert_eq!(none.limit(5, Priority::Refill), 5);
    }
}
