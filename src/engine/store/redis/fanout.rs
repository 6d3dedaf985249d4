//! Waking waiters fleet-wide. A script that delivers mail names the waiters it chose; each waiter
//! id starts with its instance's id. Mail for this instance's waiters is taken and handed over at
//! once; mail for another instance's waiters is announced on that instance's inbox list, which
//! one blocking reader per instance drains and fans out locally. No waiter polls Redis: a
//! periodic sweep of this instance's mailboxes only catches an announcement lost in a crash.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::engine::Delivery;
use crate::model::{Target, UpstreamRef};

/// A caller of this instance waiting on a target.
pub(super) struct LocalWaiter {
    pub target: Target,
    pub tx: oneshot::Sender<Delivery>,
    /// Whether an answer it cannot take may go to the target's pool.
    pub poolable: bool,
    /// Its place in the target's queue (Redis time of its arrival), once the arrival is known:
    /// renewal restores it there if a lapse removed it.
    pub arrived: Option<u64>,
}

/// A target's live waiters (id, arrival) and claims, for renewal.
pub(super) type Renewal = (Target, Vec<(String, u64)>, Vec<String>);

/// This instance's waiters and running tasks, by id.
#[derive(Default)]
pub(super) struct Local {
    waiters: Mutex<HashMap<String, LocalWaiter>>,
    claims: Mutex<HashMap<String, Target>>,
    /// Claims that adopted a dead instance's provider task, until their task starts and asks.
    adoptions: Mutex<HashMap<String, UpstreamRef>>,
    /// Claims whose provider task was offered for adoption (`note.lua`): another instance may
    /// be polling it, so only Redis may decide who gets its answer.
    noted: Mutex<std::collections::HashSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Local {
    pub fn add_waiter(&self, id: &str, waiter: LocalWaiter) {
        lock(&self.waiters).insert(id.to_owned(), waiter);
    }

    pub fn take_waiter(&self, id: &str) -> Option<LocalWaiter> {
        lock(&self.waiters).remove(id)
    }

    pub fn set_arrived(&self, id: &str, at: u64) {
        if let Some(w) = lock(&self.waiters).get_mut(id) {
            w.arrived = Some(at);
        }
    }

    /// When a waiter arrived, if it is still here and its arrival is known.
    pub fn arrived(&self, id: &str) -> Option<u64> {
        lock(&self.waiters).get(id).and_then(|w| w.arrived)
    }

    pub fn add_claim(&self, id: &str, target: &Target) {
        lock(&self.claims).insert(id.to_owned(), target.clone());
    }

    pub fn remove_claim(&self, id: &str) {
        lock(&self.claims).remove(id);
        lock(&self.adoptions).remove(id);
        lock(&self.noted).remove(id);
    }

    /// Marks a running claim as noted; false (and nothing kept) when it already ended, so a note
    /// that comes after its claim's end leaves nothing behind.
    pub fn set_noted(&self, claim: &str) -> bool {
        // Under the claims lock: `remove_claim` takes it first, so it either sees the mark and
        // removes it, or this sees the claim gone.
        let claims = lock(&self.claims);
        if !claims.contains_key(claim) {
            return false;
        }
        lock(&self.noted).insert(claim.to_owned());
        true
    }

    pub fn was_noted(&self, claim: &str) -> bool {
        lock(&self.noted).contains(claim)
    }

    pub fn set_adoption(&self, claim: &str, task: UpstreamRef) {
        // An adopted provider task is noted under the adopting claim too.
        lock(&self.noted).insert(claim.to_owned());
        lock(&self.adoptions).insert(claim.to_owned(), task);
    }

    pub fn take_adoption(&self, claim: &str) -> Option<UpstreamRef> {
        lock(&self.adoptions).remove(claim)
    }

    /// The oldest-registered live waiter of `target_id` (used when Redis cannot route).
    pub fn take_any_waiter(&self, target_id: &str) -> Option<LocalWaiter> {
        let mut waiters = lock(&self.waiters);
        waiters.retain(|_, w| !w.tx.is_closed());
        let id = waiters
            .iter()
            .filter(|(_, w)| w.target.id == target_id)
            .map(|(id, _)| id.clone())
            .min_by_key(|id| seq_of(id))?;
        waiters.remove(&id)
    }

    pub fn waiting_on(&self, target_id: &str) -> usize {
        lock(&self.waiters)
            .values()
            .filter(|w| w.target.id == target_id && !w.tx.is_closed())
            .count()
    }

    /// Live queue waiters (id and arrival) and claim ids, grouped by target, for lease renewal.
    /// Followers of reusable targets are not in any queue and are left out.
    pub fn by_target(&self) -> HashMap<String, Renewal> {
        let mut out: HashMap<String, Renewal> = HashMap::new();
        let mut waiters = lock(&self.waiters);
        // A waiter whose caller is gone without an abandon (a dropped future) stops being renewed
        // and its lease runs out: the queue forgets it within one lease.
        waiters.retain(|_, w| !w.tx.is_closed());
        for (id, w) in waiters.iter() {
            let Some(arrived) = w.arrived else { continue };
            if is_follower(id) {
                continue;
            }
            out.entry(w.target.id.clone())
                .or_insert_with(|| (w.target.clone(), Vec::new(), Vec::new()))
                .1
                .push((id.clone(), arrived));
        }
        drop(waiters);
        for (id, target) in lock(&self.claims).iter() {
            out.entry(target.id.clone())
                .or_insert_with(|| (target.clone(), Vec::new(), Vec::new()))
                .2
                .push(id.clone());
        }
        out
    }
}

impl Local {
    /// Live followers of reusable targets, by target, for their lease renewal.
    pub fn followers_by_target(&self) -> HashMap<String, Vec<String>> {
        let mut out: HashMap<String, Vec<String>> = HashMap::new();
        for (id, w) in lock(&self.waiters).iter() {
            if is_follower(id) && !w.tx.is_closed() {
                out.entry(w.target.id.clone()).or_default().push(id.clone());
            }
        }
        out
    }
}

/// The instance part of a waiter id (`<instance>:<seq>`).
pub(super) fn instance_of(waiter: &str) -> &str {
    waiter.split_once(':').map(|(i, _)| i).unwrap_or(waiter)
}

/// Followers of a reusable target's task have ids `<instance>:s<seq>`.
pub(super) fn is_follower(waiter: &str) -> bool {
    waiter
        .split_once(':')
        .is_some_and(|(_, seq)| seq.starts_with('s'))
}

fn seq_of(waiter: &str) -> u64 {
    waiter
        .rsplit_once(':')
        .and_then(|(_, s)| s.trim_start_matches('s').parse().ok())
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SolveRequest, TargetPolicy};

    /// A note that arrives after its claim ended must leave nothing behind (a week of quick
    /// tasks would otherwise fill the set).
    #[test]
    fn a_claim_is_marked_noted_only_while_it_runs() {
        let local = Local::default();
        let req = SolveRequest::recaptcha_v2("6Le-key", "https://example.com/");
        let target = Target::of(&req, TargetPolicy::default());
        local.add_claim("c1", &target);
        assert!(local.set_noted("c1"));
        assert!(local.was_noted("c1"));
        local.remove_claim("c1");
        assert!(!local.was_noted("c1"));
        assert!(!local.set_noted("c1"), "ended: nothing to note");
        assert!(!local.was_noted("c1"));
        assert!(lock(&local.noted).is_empty());
    }
}
