//! The in-process budget (the embedded store; also the Redis budget's fallback while Redis cannot
//! be asked).
//!
//! Owns: the count of threads taken in this process, its waiters, and what the provider was
//! seen to carry. A freed thread goes to the waiter of the most urgent class that first asked
//! earliest, if its class's limit admits it; a newcomer takes a thread at once only when it is
//! under its limit and nobody of its own or a more urgent class asked before it. Does not own:
//! fleet-wide leases (the Redis budget).
//!
//! A plain `tokio::sync::Semaphore` is FIFO by the time of each ask: a refill queued first would
//! get the next thread ahead of a caller who is waiting now, and a task asking again after a
//! refusal would go behind every caller that came since. Hence this small gate of our own: one
//! mutex-guarded state and one queue per class ordered by first arrival, with no lock held
//! across an await.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Accepted, BudgetSettings, BudgetStats, CapRule, Lease, Priority, ThreadBudget};

/// Threads of one account in this process.
pub struct MemoryBudget {
    gate: Arc<Gate>,
}

struct Gate {
    settings: BudgetSettings,
    /// The cap rule's clock starts here.
    born: Instant,
    state: Mutex<GateState>,
}

struct GateState {
    held: u32,
    cap: CapRule,
    accepted: Accepted,
    /// Waiters per class by first arrival, earliest first. A waiter whose acquire was dropped
    /// leaves a closed sender behind, skipped (and pruned) later.
    queues: [VecDeque<Waiter>; 3],
}

/// A waiter: when it first asked, and where its thread goes.
type Waiter = (Instant, oneshot::Sender<Permit>);

/// One taken thread; dropping it frees the thread for the next waiter.
struct Permit {
    /// `None` once the thread was handed on or counted free, so drop does nothing twice.
    gate: Option<Arc<Gate>>,
}

impl fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.gate.lock();
        f.debug_struct("MemoryBudget")
            .field("held", &s.held)
            .field("queued", &s.queues.iter().map(VecDeque::len).sum::<usize>())
            .finish()
    }
}

impl MemoryBudget {
    pub fn new(settings: BudgetSettings) -> MemoryBudget {
        MemoryBudget {
            gate: Arc::new(Gate {
                settings,
                born: Instant::now(),
                state: Mutex::new(GateState {
                    held: 0,
                    cap: CapRule::default(),
                    accepted: Accepted::default(),
                    queues: Default::default(),
                }),
            }),
        }
    }

    /// Threads nobody holds under the cap right now.
    pub fn available(&self) -> u32 {
        let s = self.gate.lock();
        self.gate.cap(&s).saturating_sub(s.held)
    }
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        // The state is plain counters and queues; a panic elsewhere cannot leave it in a shape
        // worse than refusing service, so keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn cap(&self, s: &GateState) -> u32 {
        s.cap
            .effective(self.settings.threads, self.now_ms(), &self.settings.cap)
    }

    fn limit(&self, s: &GateState, priority: Priority) -> u32 {
        self.settings.limit(self.cap(s), priority)
    }

    async fn acquire(self: &Arc<Self>, priority: Priority, since: Instant) -> Permit {
        let rx = {
            let mut s = self.lock();
            let class = priority.index();
            for q in &mut s.queues[..=class] {
                q.retain(|(_, tx)| !tx.is_closed());
            }
            let ahead = s.queues[..class].iter().any(|q| !q.is_empty())
                || s.queues[class]
                    .front()
                    .is_some_and(|(first, _)| *first <= since);
            if s.held < self.limit(&s, priority) && !ahead {
                s.held += 1;
                return Permit {
                    gate: Some(self.clone()),
                };
            }
            let (tx, rx) = oneshot::channel();
            let queue = &mut s.queues[class];
            // Behind everyone who asked first, ahead of everyone who came later.
            let at = queue.partition_point(|(first, _)| *first <= since);
            queue.insert(at, (since, tx));
            rx
        };
        // The sender sits in our queue until a release sends on it; the gate outlives this call
        // (we hold an `Arc` to it), so the sender is never dropped unsent. A cap growing back
        // after a cut frees no thread by itself: every step of growth, look again.
        let mut rx = rx;
        loop {
            tokio::select! {
                permit = &mut rx => {
                    return permit.expect("a queued waiter's sender is only consumed by sending");
                }
                _ = tokio::time::sleep(self.settings.cap.increase_every) => {
                    let mut s = self.lock();
                    self.dispatch(&mut s);
                }
            }
        }
    }

    /// Counts a thread free and hands threads to waiters while their limits admit them.
    fn release(self: &Arc<Self>) {
        let mut s = self.lock();
        s.held = s.held.saturating_sub(1);
        self.dispatch(&mut s);
    }

    /// Grants threads to the oldest live waiters, most urgent class first. A class whose oldest
    /// waiter is over its limit stops the round: less urgent classes have no higher limit.
    fn dispatch(self: &Arc<Self>, s: &mut GateState) {
        for priority in Priority::ALL {
            loop {
                if s.held >= self.limit(s, priority) {
                    return;
                }
                let Some((_, tx)) = s.queues[priority.index()].pop_front() else {
                    break;
                };
                s.held += 1;
                let permit = Permit {
                    gate: Some(self.clone()),
                };
                if let Err(mut back) = tx.send(permit) {
                    // That waiter gave up. Disarm before counting it back: dropping an armed
                    // permit here would re-enter the lock.
                    back.gate = None;
                    s.held -= 1;
                }
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.release();
        }
    }
}

#[async_trait]
impl ThreadBudget for MemoryBudget {
    async fn acquire_from(&self, priority: Priority, since: Instant) -> Lease {
        Lease::new(self.gate.acquire(priority, since).await)
    }

    fn in_use(&self) -> u32 {
        self.gate.lock().held
    }

    fn cap(&self) -> u32 {
        let s = self.gate.lock();
        self.gate.cap(&s)
    }

    fn queued(&self, priority: Priority) -> usize {
        let mut s = self.gate.lock();
        let q = &mut s.queues[priority.index()];
        q.retain(|(_, tx)| !tx.is_closed());
        q.len()
    }

    fn accepted(&self, _lease: &Lease) {
        let mut s = self.gate.lock();
        let (now, others) = (self.gate.now_ms(), s.held.saturating_sub(1));
        s.accepted.record(others, now, &self.gate.settings.cap);
    }

    fn refused(&self, lease: Lease) {
        {
            let mut s = self.gate.lock();
            let g = &self.gate;
            let now = g.now_ms();
            // The refused task still holds its thread: the rest are what the provider carried.
            let others = s.held.saturating_sub(1);
            let proven = s.accepted.proven(now, &g.settings.cap);
            s.cap
                .refused(g.settings.threads, now, &g.settings.cap, others, proven);
        }
        // After the lock: giving the thread back takes it again.
        drop(lease);
    }

    fn calibrate(&self, plan: u32) {
        let mut s = self.gate.lock();
        s.cap.calibrate(plan);
        // A larger plan than the cap had assumed lets waiters in now.
        self.gate.dispatch(&mut s);
    }

    fn stats(&self) -> BudgetStats {
        // One process cannot lose a lease or over-admit against itself.
        BudgetStats::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::budget::CapSettings;
    use std::time::Duration;
    use tokio::task::JoinHandle;

    /// A budget of `threads` without a refill reserve: the class order alone.
    fn budget(threads: u32) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget::new(BudgetSettings {
            refill_reserve: 0,
            ..BudgetSettings::new(threads)
        }))
    }

    fn waiter(gate: &Arc<MemoryBudget>, p: Priority) -> JoinHandle<Lease> {
        let gate = gate.clone();
        tokio::spawn(async move { gate.acquire(p).await })
    }

    /// Which of two waiters gets a slot first (the other keeps waiting).
    async fn first_served(
        a: &mut JoinHandle<Lease>,
        b: &mut JoinHandle<Lease>,
    ) -> (&'static str, Lease) {
        tokio::select! {
            p = a => ("a", p.unwrap()),
            p = b => ("b", p.unwrap()),
        }
    }

    /// Lets spawned tasks run until `gate` shows `n` waiters of class `p`.
    async fn until_queued(gate: &MemoryBudget, p: Priority, n: usize) {
        crate::eventually::eventually(Duration::from_secs(10), "waiters queued", || async {
            gate.queued(p) >= n
        })
        .await;
    }

    #[tokio::test]
    async fn a_queued_interactive_caller_goes_before_an_older_queued_refill() {
        let gate = budget(2);
        let busy_a = gate.acquire(Priority::Interactive).await;
        let busy_b = gate.acquire(Priority::Interactive).await;
        assert_eq!(gate.available(), 0);

        // The refill queues first, the interactive caller second.
        let mut refill = waiter(&gate, Priority::Refill);
        until_queued(&gate, Priority::Refill, 1).await;
        let mut caller = waiter(&gate, Priority::Interactive);
        until_queued(&gate, Priority::Interactive, 1).await;

        drop(busy_a);
        let (who, caller_permit) = first_served(&mut caller, &mut refill).await;
        assert_eq!(who, "a", "the caller gets the freed slot");
        assert_eq!(gate.queued(Priority::Refill), 1, "the refill still waits");

        drop(busy_b);
        let refill_permit = refill.await.unwrap();
        assert_eq!(gate.available(), 0);
        drop((caller_permit, refill_permit));
        assert_eq!(gate.available(), 2);
    }

    #[tokio::test]
    async fn a_refill_never_overtakes_a_queued_caller_even_when_a_slot_is_free_later() {
        let gate = budget(1);
        let busy = gate.acquire(Priority::Refill).await;
        let mut caller = waiter(&gate, Priority::Interactive);
        until_queued(&gate, Priority::Interactive, 1).await;
        // A refill arriving now must queue: a caller is ahead of it.
        let mut refill = waiter(&gate, Priority::Refill);
        until_queued(&gate, Priority::Refill, 1).await;
        drop(busy);
        let (who, permit) = first_served(&mut caller, &mut refill).await;
        assert_eq!(who, "a", "the caller gets the freed slot");
        drop(permit);
        drop(refill.await.unwrap());
        assert_eq!(gate.available(), 1);
    }

    #[tokio::test]
    async fn free_slots_are_taken_at_once_by_any_class() {
        let gate = budget(3);
        let a = gate.acquire(Priority::Refill).await;
        let b = gate.acquire(Priority::Interactive).await;
        assert_eq!(gate.available(), 1);
        drop((a, b));
        assert_eq!(gate.available(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_loses_its_place_and_wastes_no_slot() {
        let gate = budget(1);
        let busy = gate.acquire(Priority::Interactive).await;
        let impatient =
            tokio::time::timeout(Duration::from_secs(1), gate.acquire(Priority::Interactive)).await;
        assert!(impatient.is_err());
        // The abandoned interactive place must not hold the refill back.
        let refill = waiter(&gate, Priority::Refill);
        until_queued(&gate, Priority::Refill, 1).await;
        drop(busy);
        drop(refill.await.unwrap());
        assert_eq!(gate.available(), 1);
    }

    #[tokio::test]
    async fn a_slot_handed_to_a_dropped_acquire_is_passed_on() {
        let gate = budget(1);
        let busy = gate.acquire(Priority::Interactive).await;
        let first = waiter(&gate, Priority::Interactive);
        until_queued(&gate, Priority::Interactive, 1).await;
        let second = waiter(&gate, Priority::Interactive);
        until_queued(&gate, Priority::Interactive, 2).await;
        first.abort();
        drop(busy);
        drop(second.await.unwrap());
        assert_eq!(gate.available(), 1);
    }

    #[tokio::test]
    async fn a_queued_task_goes_after_callers_and_before_refills() {
        let gate = budget(1);
        let busy = gate.acquire(Priority::Interactive).await;
        let refill = waiter(&gate, Priority::Refill);
        until_queued(&gate, Priority::Refill, 1).await;
        let queued = waiter(&gate, Priority::Queued);
        until_queued(&gate, Priority::Queued, 1).await;
        let caller = waiter(&gate, Priority::Interactive);
        until_queued(&gate, Priority::Interactive, 1).await;
        drop(busy);
        let first = caller.await.unwrap();
        assert_eq!(
            gate.queued(Priority::Queued),
            1,
            "queued work waits for the caller"
        );
        drop(first);
        let second = queued.await.unwrap();
        assert_eq!(
            gate.queued(Priority::Refill),
            1,
            "the refill waits for queued work"
        );
        drop(second);
        drop(refill.await.unwrap());
        assert_eq!(gate.available(), 1);
    }

    #[tokio::test]
    async fn refills_leave_the_reserve_to_callers() {
        let gate = Arc::new(MemoryBudget::new(BudgetSettings::new(3)));
        let r1 = gate.acquire(Priority::Refill).await;
        let r2 = gate.acquire(Priority::Refill).await;
        let third = waiter(&gate, Priority::Refill);
        until_queued(&gate, Priority::Refill, 1).await;
        assert_eq!(gate.available(), 1, "the last thread stays free");
        // A caller arriving now starts at once on the reserved thread.
        let caller = gate.acquire(Priority::Interactive).await;
        assert_eq!((gate.in_use(), gate.available()), (3, 0));
        drop(caller);
        assert_eq!(
            gate.queued(Priority::Refill),
            1,
            "a freed reserve stays reserved"
        );
        drop(r1);
        drop(third.await.unwrap());
        drop(r2);
        assert_eq!(gate.in_use(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_at_the_plan_admits_what_ran_until_the_cap_grows_back() {
        let gate = budget(6);
        let mut held: Vec<Lease> =
            futures::future::join_all((0..5).map(|_| gate.acquire(Priority::Interactive))).await;
        // The fifth is refused with four others running: the plan is four.
        gate.refused(held.pop().unwrap());
        assert_eq!((gate.cap(), gate.in_use()), (4, 4));
        let next = waiter(&gate, Priority::Interactive);
        until_queued(&gate, Priority::Interactive, 1).await;
        let mut held = held.into_iter();
        assert_eq!(
            gate.queued(Priority::Interactive),
            1,
            "4 held, cap 4: still waiting"
        );
        tokio::time::advance(CapSettings::default().increase_every).await;
        assert_eq!(gate.cap(), 5);
        drop(next.await.unwrap());
        drop(held.next());
        assert_eq!(gate.stats(), BudgetStats::default());
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_below_what_the_provider_just_took_leaves_the_cap_alone() {
        let gate = budget(4);
        let held: Vec<Lease> =
            futures::future::join_all((0..4).map(|_| gate.acquire(Priority::Interactive))).await;
        // The provider took the fourth with three others running...
        gate.accepted(&held[3]);
        let mut held = held.into_iter();
        drop(held.next());
        let again = gate.acquire(Priority::Interactive).await;
        // ...so refusing one with three others running is a moment's shortage.
        gate.refused(again);
        assert_eq!(gate.cap(), 4);
        // Two minutes later that proof is stale: the same refusal is the plan's size.
        tokio::time::advance(Duration::from_secs(120)).await;
        let again = gate.acquire(Priority::Interactive).await;
        gate.refused(again);
        assert_eq!(gate.cap(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gets_a_thread_the_cap_grows_back_without_any_release() {
        let gate = budget(2);
        let a = gate.acquire(Priority::Interactive).await;
        let b = gate.acquire(Priority::Interactive).await;
        gate.refused(b);
        assert_eq!(gate.cap(), 1);
        // One held, cap 1: the next waits until the cap grows back, with nothing released.
        let next = gate.acquire(Priority::Interactive).await;
        assert_eq!((gate.cap(), gate.in_use()), (2, 2));
        drop((a, next));
    }

    #[tokio::test]
    async fn a_task_asking_again_keeps_its_first_place_ahead_of_later_callers() {
        let gate = budget(1);
        let first_asked = Instant::now();
        let busy = gate.acquire(Priority::Interactive).await;
        let newer = waiter(&gate, Priority::Interactive);
        until_queued(&gate, Priority::Interactive, 1).await;
        // A task that first asked before `newer` (it gave its thread back after a refusal)
        // asks again: it goes ahead of `newer`, not behind.
        let mut again = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.acquire_from(Priority::Interactive, first_asked).await })
        };
        until_queued(&gate, Priority::Interactive, 2).await;
        let mut newer = newer;
        drop(busy);
        let (who, lease) = first_served(&mut again, &mut newer).await;
        assert_eq!(who, "a", "the earlier arrival is served first");
        drop(lease);
        drop(newer.await.unwrap());
        // With a thread free and a later caller queued behind, it need not queue at all.
        assert_eq!(gate.available(), 1);
    }

    #[tokio::test]
    async fn calibration_to_the_plan_lowers_the_cap_and_a_larger_plan_never_raises_it() {
        let gate = budget(4);
        gate.calibrate(2);
        assert_eq!(gate.cap(), 2);
        gate.calibrate(9);
        assert_eq!(gate.cap(), 4);
    }
}
