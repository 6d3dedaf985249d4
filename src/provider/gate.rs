//! The account's thread slots with priorities (DESIGN.md promise 5: "interactive callers go
//! before ... pool refills").
//!
//! Owns: how many upstream tasks of one account may run at once, and who gets a slot when one
//! frees. A freed slot goes to the oldest waiter of the most urgent class; a refill takes a slot
//! only while no more urgent caller is queued for one, so refills use spare threads only.
//! Does not own: how long a slot stays taken after its caller left (the account's `Slot` holds
//! the permit), or fleet-wide leases (the store).
//!
//! A plain `tokio::sync::Semaphore` is FIFO: a refill queued first would get the next slot ahead
//! of a caller who is waiting now. Hence this small gate of our own: one mutex-guarded count and
//! one FIFO per class, with no lock held across an await.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Who a slot is for, most urgent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Priority {
    /// A caller is waiting for this task now.
    Interactive,
    /// A pool refill: nobody waits for it yet, so it only runs on spare threads.
    Refill,
}

impl Priority {
    const COUNT: usize = 2;

    fn index(self) -> usize {
        match self {
            Priority::Interactive => 0,
            Priority::Refill => 1,
        }
    }
}

/// Slots of one account. Cheap to share (`Arc`); permits give their slot back on drop.
pub struct SlotGate {
    state: Mutex<GateState>,
}

struct GateState {
    free: usize,
    /// Waiters per class, oldest first. A waiter whose acquire was dropped leaves a closed
    /// sender behind, skipped (and pruned) later.
    queues: [VecDeque<oneshot::Sender<SlotPermit>>; Priority::COUNT],
}

impl fmt::Debug for SlotGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("SlotGate")
            .field("free", &s.free)
            .field("queued", &s.queues.iter().map(VecDeque::len).sum::<usize>())
            .finish()
    }
}

/// One taken slot; dropping it frees the slot for the next waiter.
pub struct SlotPermit {
    /// `None` once the slot was handed on or counted free, so drop does nothing twice.
    gate: Option<Arc<SlotGate>>,
}

impl fmt::Debug for SlotPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SlotPermit")
    }
}

impl SlotGate {
    pub fn new(slots: usize) -> Arc<SlotGate> {
        Arc::new(SlotGate {
            state: Mutex::new(GateState {
                free: slots,
                queues: Default::default(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        // The state is two counters' worth of plain data; a panic elsewhere cannot leave it in a
        // shape worse than refusing service, so keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Slots nobody holds right now.
    pub fn available(&self) -> usize {
        self.lock().free
    }

    /// Callers of `priority` queued for a slot (live ones only).
    pub fn queued(&self, priority: Priority) -> usize {
        let mut s = self.lock();
        let q = &mut s.queues[priority.index()];
        q.retain(|tx| !tx.is_closed());
        q.len()
    }

    /// Waits for a slot. A slot is taken at once only when one is free and nobody of the same or
    /// a more urgent class is queued (FIFO within a class, urgent classes first). Dropping the
    /// future gives up the place in the queue; a slot already handed to it is passed on.
    pub async fn acquire(self: &Arc<Self>, priority: Priority) -> SlotPermit {
        let rx = {
            let mut s = self.lock();
            let ahead = s.queues[..=priority.index()].iter_mut().any(|q| {
                q.retain(|tx| !tx.is_closed());
                !q.is_empty()
            });
            if s.free > 0 && !ahead {
                s.free -= 1;
                return SlotPermit {
                    gate: Some(self.clone()),
                };
            }
            let (tx, rx) = oneshot::channel();
            s.queues[priority.index()].push_back(tx);
            rx
        };
        // The sender sits in our queue until a release sends on it; the gate outlives this call
        // (we hold an `Arc` to it), so the sender is never dropped unsent.
        rx.await
            .expect("a queued waiter's sender is only consumed by sending")
    }

    /// Hands a freed slot to the oldest live waiter of the most urgent class, or counts it free.
    fn release(self: &Arc<Self>) {
        let mut permit = SlotPermit {
            gate: Some(self.clone()),
        };
        let mut s = self.lock();
        for queue in s.queues.iter_mut() {
            while let Some(tx) = queue.pop_front() {
                match tx.send(permit) {
                    Ok(()) => return,
                    // That waiter gave up: try the next one.
                    Err(back) => permit = back,
                }
            }
        }
        // Disarm before the lock guard goes: dropping an armed permit here would re-enter.
        permit.gate = None;
        s.free += 1;
    }
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::task::JoinHandle;

    fn waiter(gate: &Arc<SlotGate>, p: Priority) -> JoinHandle<SlotPermit> {
        let gate = gate.clone();
        tokio::spawn(async move { gate.acquire(p).await })
    }

    /// Which of two waiters gets a slot first (the other keeps waiting).
    async fn first_served(
        a: &mut JoinHandle<SlotPermit>,
        b: &mut JoinHandle<SlotPermit>,
    ) -> (&'static str, SlotPermit) {
        tokio::select! {
            p = a => ("a", p.unwrap()),
            p = b => ("b", p.unwrap()),
        }
    }

    /// Lets spawned tasks run until `gate` shows `n` waiters of class `p`.
    async fn until_queued(gate: &SlotGate, p: Priority, n: usize) {
        while gate.queued(p) < n {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_queued_interactive_caller_goes_before_an_older_queued_refill() {
        let gate = SlotGate::new(2);
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
        let gate = SlotGate::new(1);
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
        let gate = SlotGate::new(3);
        let a = gate.acquire(Priority::Refill).await;
        let b = gate.acquire(Priority::Interactive).await;
        assert_eq!(gate.available(), 1);
        drop((a, b));
        assert_eq!(gate.available(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_loses_its_place_and_wastes_no_slot() {
        let gate = SlotGate::new(1);
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
        let gate = SlotGate::new(1);
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
}
