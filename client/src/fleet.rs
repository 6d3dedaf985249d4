//! The client's view of its gateways: the balancer, plus what a caller wants to see of it
//! (calls per gateway, ejections, re-admissions, the last load a probe read).
//!
//! One lock over both, held only for a pick or a record (no `.await` under it), so the counts
//! and the balancer's state always agree. Every ejection and re-admission bumps a watch
//! channel, so a program (or a test) can wait for one instead of polling.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use captcha_gateway_balance::{Balancer, EjectionPolicy, Outcome, Strategy, Ticket};
use tokio::sync::watch;

/// One gateway as the client sees it now.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct BackendState {
    /// The base URL it was given as.
    pub address: String,
    /// Calls sent to it and not finished.
    pub outstanding: usize,
    /// Whether it is ejected now (calls go elsewhere while any other is not).
    pub ejected: bool,
    /// Attempts sent to it that it answered (any HTTP answer that is not its own failure).
    pub served: u64,
    /// Attempts and probes that were its own failures (refused, full, unreachable, 5xx).
    pub failures: u64,
    /// Times it was ejected.
    pub ejections: u64,
    /// Times it was let back after an ejection and then answered a call or probe.
    pub readmissions: u64,
    /// `load_pct` from its last successful `/health` probe.
    pub load_pct: Option<f64>,
}

#[derive(Default)]
struct Counters {
    served: u64,
    failures: u64,
    ejections: u64,
    readmissions: u64,
    load_pct: Option<f64>,
    /// End of the latest ejection, until a success sent after it proves the instance is back.
    awaiting_return: Option<Instant>,
}

struct State {
    balancer: Balancer,
    counters: HashMap<String, Counters>,
}

pub(crate) struct Fleet {
    state: Mutex<State>,
    changes: watch::Sender<u64>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.snapshot()).finish()
    }
}

impl Fleet {
    pub fn new(backends: &[String], strategy: Strategy, policy: EjectionPolicy, seed: u64) -> Self {
        let mut balancer = Balancer::new(strategy, policy, seed);
        let mut counters = HashMap::new();
        for address in backends {
            balancer.add(address);
            counters.insert(address.clone(), Counters::default());
        }
        Self {
            state: Mutex::new(State { balancer, counters }),
            changes: watch::channel(0).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic under the lock leaves counts that are still counts: carry on with them.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An instance for the next attempt, not one in `tried` unless every available one was.
    pub fn pick(&self, tried: &[String]) -> Option<Ticket> {
        let now = Instant::now();
        let mut state = self.lock();
        if tried.is_empty() {
            state.balancer.pick(now)
        } else {
            state
                .balancer
                .pick_avoiding(now, |a| tried.iter().any(|t| t == a))
        }
    }

    /// `prefer` for the next attempt when it is not ejected, else whichever the balancer picks.
    pub fn pick_preferring(&self, prefer: &str) -> Option<Ticket> {
        let now = Instant::now();
        self.lock().balancer.pick_avoiding(now, |a| a != prefer)
    }

    /// Records how a call ended and uncounts it.
    pub fn finish(&self, ticket: Ticket, outcome: Outcome) {
        let now = Instant::now();
        let address = ticket.address().to_owned();
        let sent_at = ticket.sent_at();
        let mut state = self.lock();
        let ejected = state.balancer.finish(ticket, outcome, now);
        if !outcome.is_instance_failure() {
            if let Some(c) = state.counters.get_mut(&address) {
                c.served += 1;
            }
        }
        self.count(&mut state, &address, outcome, sent_at, ejected, now);
    }

    /// Records a probe's outcome (and the load it read, if it got one).
    pub fn probed(&self, address: &str, outcome: Outcome, sent_at: Instant, load_pct: Option<f64>) {
        let now = Instant::now();
        let mut state = self.lock();
        let ejected = state.balancer.record(address, outcome, sent_at, now);
        if let Some(c) = state.counters.get_mut(address) {
            if load_pct.is_some() {
                c.load_pct = load_pct;
            }
        }
        self.count(&mut state, address, outcome, sent_at, ejected, now);
    }

    fn count(
        &self,
        state: &mut State,
        address: &str,
        outcome: Outcome,
        sent_at: Instant,
        ejected: bool,
        now: Instant,
    ) {
        let ejected_until = state
            .balancer
            .status(address, now)
            .and_then(|s| s.ejected_until);
        let Some(c) = state.counters.get_mut(address) else {
            return;
        };
        let mut changed = false;
        if outcome.is_instance_failure() {
            c.failures += 1;
        }
        if ejected {
            c.ejections += 1;
            c.awaiting_return = ejected_until;
            changed = true;
        } else if outcome.is_instance_success()
            && c.awaiting_return.is_some_and(|end| sent_at >= end)
        {
            // Sent after the cool-down ended and answered: back in service.
            c.readmissions += 1;
            c.awaiting_return = None;
            changed = true;
        }
        if changed {
            self.changes.send_modify(|n| *n += 1);
        }
    }

    /// Every gateway, in the order given.
    pub fn snapshot(&self) -> Vec<BackendState> {
        let now = Instant::now();
        let state = self.lock();
        state
            .balancer
            .endpoints(now)
            .map(|e| {
                let c = state.counters.get(e.address);
                BackendState {
                    address: e.address.to_owned(),
                    outstanding: e.outstanding,
                    ejected: e.ejected_until.is_some(),
                    served: c.map_or(0, |c| c.served),
                    failures: c.map_or(0, |c| c.failures),
                    ejections: c.map_or(0, |c| c.ejections),
                    readmissions: c.map_or(0, |c| c.readmissions),
                    load_pct: c.and_then(|c| c.load_pct),
                }
            })
            .collect()
    }

    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub fn addresses(&self) -> Vec<String> {
        self.snapshot().into_iter().map(|b| b.address).collect()
    }
}
