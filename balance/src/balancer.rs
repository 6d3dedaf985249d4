//! The balancer: a changing set of instances, their outstanding calls, and the choice of one.
//!
//! Owns membership (add, remove), counting outstanding calls through [`Ticket`]s, and putting
//! [`crate::health`] and [`crate::select`] together. Does no I/O and reads no clock: every
//! method that depends on time takes `now`, so a caller (or a test) decides what time it is.
//! Not synchronised: the HTTP client that wraps it holds it under a lock for a `pick` or a
//! `finish` (tens of nanoseconds; a few hundred for least-outstanding over a hundred instances,
//! see docs/BENCHMARKS.md); tickets themselves can be dropped anywhere, on any thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::health::{EjectionPolicy, Health};
use crate::outcome::Outcome;
use crate::select::{self, Strategy};

/// Spreads calls over a set of instances (by address) and ejects the failing ones for a while.
///
/// `pick` chooses an instance and counts a call on it; `finish` (or dropping the [`Ticket`])
/// uncounts it, and `finish` also reports how the call went. `R` draws the random pairs of
/// [`Strategy::PowerOfTwoChoices`]; seed it for reproducible choices.
#[derive(Debug)]
pub struct Balancer<R = SmallRng> {
    strategy: Strategy,
    policy: EjectionPolicy,
    rng: R,
    endpoints: Vec<Endpoint>,
    /// Indices into `endpoints` of the instances not ejected, as of the last refresh. Kept so
    /// that `pick` costs no scan of the fleet's health (power-of-two-choices stays O(1)).
    available: Vec<usize>,
    /// The earliest end of a current ejection: `available` is out of date from then on.
    available_until: Option<Instant>,
    /// Membership or an ejection changed since `available` was computed.
    available_stale: bool,
    /// Where least-outstanding starts its scan, so that ties go round-robin.
    cursor: usize,
}

#[derive(Debug)]
struct Endpoint {
    shared: Arc<Shared>,
    health: Health,
}

/// What a [`Ticket`] needs after its instance may have been removed from the balancer.
#[derive(Debug)]
struct Shared {
    address: Box<str>,
    outstanding: AtomicUsize,
}

/// One call counted against one instance, from `pick` until `finish` or drop.
///
/// Dropping it without `finish` uncounts the call and reports nothing: a caller that gave up
/// (its own deadline, a cancelled future) says nothing about the instance's health, and the
/// count must not leak whatever way the call ended.
#[must_use = "a ticket counts a call until it is finished or dropped; send the call to its address"]
#[derive(Debug)]
pub struct Ticket {
    endpoint: Arc<Shared>,
    /// Where the instance was in the balancer's list when picked; checked before use, since
    /// removals move instances.
    index_hint: usize,
    sent_at: Instant,
}

impl Ticket {
    /// The instance to send the call to.
    pub fn address(&self) -> &str {
        &self.endpoint.address
    }

    /// The `now` of the `pick` that issued this ticket.
    pub fn sent_at(&self) -> Instant {
        self.sent_at
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Relaxed: the count is a load figure read by the next `pick`, not a guard of other
        // memory; the lock around the balancer orders `pick` with everything else.
        self.endpoint.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One instance as the balancer sees it at some `now`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStatus<'a> {
    /// The address it was added with.
    pub address: &'a str,
    /// Calls picked for it and not yet finished or dropped.
    pub outstanding: usize,
    /// When its current ejection ends; `None` when it is not ejected.
    pub ejected_until: Option<Instant>,
    /// Failures in a row that have not (yet) led to an ejection.
    pub consecutive_failures: u32,
}

impl Balancer<SmallRng> {
    /// An empty balancer whose random choices follow `seed`.
    pub fn new(strategy: Strategy, policy: EjectionPolicy, seed: u64) -> Self {
        Self::with_rng(strategy, policy, SmallRng::seed_from_u64(seed))
    }
}

impl<R: Rng> Balancer<R> {
    /// An empty balancer drawing its random choices from `rng`.
    pub fn with_rng(strategy: Strategy, policy: EjectionPolicy, rng: R) -> Self {
        Self {
            strategy,
            policy,
            rng,
            endpoints: Vec::new(),
            available: Vec::new(),
            available_until: None,
            available_stale: false,
            cursor: 0,
        }
    }

    /// The strategy it was made with.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The ejection policy it was made with.
    pub fn policy(&self) -> &EjectionPolicy {
        &self.policy
    }

    /// Adds an instance, healthy and idle. Returns `false` (and changes nothing) when an
    /// instance with this address is already there.
    pub fn add(&mut self, address: &str) -> bool {
        if self.index_of(address).is_some() {
            return false;
        }
        self.endpoints.push(Endpoint {
            shared: Arc::new(Shared {
                address: address.into(),
                outstanding: AtomicUsize::new(0),
            }),
            health: Health::default(),
        });
        self.available_stale = true;
        true
    }

    /// Removes an instance. Returns `false` when there is none with this address.
    ///
    /// Its outstanding tickets stay valid: finishing or dropping them later is harmless and
    /// their outcomes are ignored. An instance added again under the same address starts
    /// afresh (idle, healthy); calls still out from before are not counted against it.
    pub fn remove(&mut self, address: &str) -> bool {
        let Some(index) = self.index_of(address) else {
            return false;
        };
        self.endpoints.remove(index);
        self.available_stale = true;
        true
    }

    /// How many instances it has, ejected or not.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// Whether it has no instance at all.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// Every instance, in the order they were added.
    pub fn endpoints(&self, now: Instant) -> impl Iterator<Item = EndpointStatus<'_>> + '_ {
        self.endpoints.iter().map(move |e| e.status(now))
    }

    /// One instance, or `None` when there is none with this address.
    pub fn status(&self, address: &str, now: Instant) -> Option<EndpointStatus<'_>> {
        self.index_of(address)
            .map(|i| self.endpoints[i].status(now))
    }

    /// Chooses the instance for a call sent at `now` and counts the call on it. `None` only
    /// when the balancer has no instance at all.
    ///
    /// When every instance is ejected, it still answers: the one whose ejection ends soonest.
    /// Ejection exists to move calls from a failing instance to working ones; when none is
    /// known to work, refusing to call at all would turn a partial outage (or a burst of
    /// errors that hit every instance, or a wrong guess) into a full one, while the instance
    /// closest to being let back is the best guess of one that recovered.
    pub fn pick(&mut self, now: Instant) -> Option<Ticket> {
        self.refresh(now);
        let candidates = std::mem::take(&mut self.available);
        let ticket = self.pick_among(&candidates, now);
        self.available = candidates;
        ticket
    }

    /// [`pick`](Self::pick), but an instance for which `avoid` says true is chosen only when
    /// every instance that is not ejected is avoided (then it is a plain `pick`).
    ///
    /// For a retry: the instance that just refused or could not be reached is still idle, so
    /// least-outstanding would send the retry straight back to it before it has failed often
    /// enough to be ejected.
    pub fn pick_avoiding(&mut self, now: Instant, avoid: impl Fn(&str) -> bool) -> Option<Ticket> {
        self.refresh(now);
        let others: Vec<usize> = self
            .available
            .iter()
            .copied()
            .filter(|&index| !avoid(&self.endpoints[index].shared.address))
            .collect();
        if others.is_empty() {
            return self.pick(now);
        }
        self.pick_among(&others, now)
    }

    /// Chooses among `candidates` (indices of instances not ejected) and counts the call;
    /// the all-ejected fallback when there are none.
    fn pick_among(&mut self, candidates: &[usize], now: Instant) -> Option<Ticket> {
        let endpoints = &self.endpoints;
        let load = |index: usize| outstanding(&endpoints[index]);
        let chosen = match self.strategy {
            Strategy::LeastOutstanding => {
                let position = select::least_outstanding(candidates, load, self.cursor);
                if let Some(position) = position {
                    self.cursor = position + 1;
                }
                position
            }
            Strategy::PowerOfTwoChoices => {
                select::power_of_two_choices(candidates, load, &mut self.rng)
            }
        };
        let index = match chosen {
            Some(position) => candidates[position],
            None => self.soonest_back(now)?,
        };
        let shared = &self.endpoints[index].shared;
        shared.outstanding.fetch_add(1, Ordering::Relaxed);
        Some(Ticket {
            endpoint: Arc::clone(shared),
            index_hint: index,
            sent_at: now,
        })
    }

    /// Uncounts the call and records how it went, finished at `now`. Returns whether this
    /// ejected the instance. The outcome is ignored when the instance has been removed since
    /// the call was picked.
    pub fn finish(&mut self, ticket: Ticket, outcome: Outcome, now: Instant) -> bool {
        let ejected = match self.index_of_ticket(&ticket) {
            Some(index) => self.record_at(index, outcome, ticket.sent_at, now),
            None => false,
        };
        // Dropping the ticket uncounts the call: one path for finished and abandoned calls.
        drop(ticket);
        ejected
    }

    /// Records the outcome of a request to `address` that was not picked through the balancer
    /// (an active health probe), sent at `sent_at` and finished at `now`: it counts towards
    /// ejecting the instance, or ends its failure streak, exactly as a call's outcome would.
    /// Returns whether this ejected the instance; `false` for an unknown address.
    pub fn record(
        &mut self,
        address: &str,
        outcome: Outcome,
        sent_at: Instant,
        now: Instant,
    ) -> bool {
        match self.index_of(address) {
            Some(index) => self.record_at(index, outcome, sent_at, now),
            None => false,
        }
    }

    fn record_at(
        &mut self,
        index: usize,
        outcome: Outcome,
        sent_at: Instant,
        now: Instant,
    ) -> bool {
        let ejected = self.endpoints[index]
            .health
            .record(outcome, sent_at, now, &self.policy);
        self.available_stale |= ejected;
        ejected
    }

    /// Recomputes `available` when membership or an ejection changed, or an ejection ended.
    fn refresh(&mut self, now: Instant) {
        let expired = self.available_until.is_some_and(|until| now >= until);
        if !self.available_stale && !expired {
            return;
        }
        self.available.clear();
        self.available_until = None;
        for (index, endpoint) in self.endpoints.iter().enumerate() {
            match endpoint.health.ejected_until(now) {
                None => self.available.push(index),
                Some(end) => {
                    self.available_until = Some(self.available_until.map_or(end, |u| u.min(end)))
                }
            }
        }
        self.available_stale = false;
    }

    /// The all-ejected fallback: the instance whose ejection ends first (the least loaded of
    /// those ending together).
    fn soonest_back(&self, now: Instant) -> Option<usize> {
        self.endpoints
            .iter()
            .enumerate()
            .min_by_key(|(_, endpoint)| (endpoint.health.ejected_until(now), outstanding(endpoint)))
            .map(|(index, _)| index)
    }

    fn index_of(&self, address: &str) -> Option<usize> {
        self.endpoints
            .iter()
            .position(|e| &*e.shared.address == address)
    }

    /// Where the ticket's instance is now, if it is still there (the very same instance, not
    /// one added again under its address).
    fn index_of_ticket(&self, ticket: &Ticket) -> Option<usize> {
        let same = |e: &Endpoint| Arc::ptr_eq(&e.shared, &ticket.endpoint);
        match self.endpoints.get(ticket.index_hint) {
            Some(e) if same(e) => Some(ticket.index_hint),
            _ => self.endpoints.iter().position(same),
        }
    }
}

fn outstanding(endpoint: &Endpoint) -> usize {
    endpoint.shared.outstanding.load(Ordering::Relaxed)
}

impl Endpoint {
    fn status(&self, now: Instant) -> EndpointStatus<'_> {
        EndpointStatus {
            address: &self.shared.address,
            outstanding: outstanding(self),
            ejected_until: self.health.ejected_until(now),
            consecutive_failures: self.health.consecutive_failures(),
        }
    }
}
