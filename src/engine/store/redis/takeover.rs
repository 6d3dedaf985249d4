//! Keeping a reusable target's leader and followers alive, and taking over from a dead leader
//! (so a leader's crash never strands its followers). The lock of a reusable target and each follower are leases of
//! `redis_lease_s`: the instance renews them every third of a lease while its leader's task runs
//! and its callers wait (`shared_renew.lua`). A dead instance's lock lapses within one lease;
//! each instance with callers following the target then asks, every third of a lease, whether to
//! take over (`shared_takeover.lua`), and exactly one gets a new fencing token and starts the
//! task. See docs/REDIS.md, "Reusable answers".

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use futures::{StreamExt, stream};
use redis::Value;

use super::call::SharedCall;
use super::reply::{SharedRenewed, SharedTakenOver};
use super::{Inner, ms};
use crate::engine::store::StoreError;
use crate::model::{Millis, Target, now_ms};

/// Renewal scripts in flight at once (as `live.rs` walks targets).
const PARALLEL: usize = 32;

/// The reusable targets this instance leads: one entry per fencing token, with the time after
/// which its lock is no longer renewed. That cap (`lock_ttl`, the task timeout plus slack) lets
/// a lock go whose task never finished (it panicked): it lapses a lease later and a follower
/// takes over, instead of the lock being renewed for as long as the process lives.
#[derive(Default)]
pub(super) struct Leads(Mutex<HashMap<(String, u64), (Target, Millis)>>);

impl Leads {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, u64), (Target, Millis)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn add(&self, target: &Target, token: u64, renew_until: Millis) {
        self.lock()
            .insert((target.id.clone(), token), (target.clone(), renew_until));
    }

    pub fn remove(&self, target_id: &str, token: u64) {
        self.lock().remove(&(target_id.to_owned(), token));
    }

    /// Tokens to renew now, by target id; entries past their cap are dropped.
    fn due(&self, now: Millis) -> HashMap<String, Vec<u64>> {
        let mut leads = self.lock();
        leads.retain(|(target_id, _), (_, until)| {
            let keep = now <= *until;
            if !keep {
                tracing::warn!(
                    target_id,
                    "a reusable target's task outlived its lock; letting it go"
                );
            }
            keep
        });
        let mut out: HashMap<String, Vec<u64>> = HashMap::new();
        for (target_id, token) in leads.keys() {
            out.entry(target_id.clone()).or_default().push(*token);
        }
        out
    }
}

impl Inner {
    /// Renews this instance's reusable leases: its live followers on every target, and each lock
    /// its leaders' tasks hold. A lock found lost (a newer leader holds the target) is not
    /// renewed again; the task still runs and its answer is still shared. Called by the renewer
    /// every third of a lease.
    pub(super) async fn renew_shared(&self) {
        let now = now_ms();
        let mut leads = self.leads.due(now);
        let mut followers = self.local.followers_by_target();
        for target_id in followers.keys() {
            leads.entry(target_id.clone()).or_default();
        }
        let lease = ms(self.settings.lease);
        // One script per lock, this instance's followers going with the first (or alone, with
        // no lead). Many at once on the multiplexed connection: a renewal pass must fit well
        // inside a third of a lease however many targets are followed.
        let mut runs: Vec<(String, Option<u64>, Vec<String>)> = Vec::new();
        for (target_id, tokens) in leads {
            let mine = followers.remove(&target_id).unwrap_or_default();
            for token in tokens.iter().skip(1) {
                runs.push((target_id.clone(), Some(*token), Vec::new()));
            }
            runs.push((target_id, tokens.first().copied(), mine));
        }
        stream::iter(runs)
            .map(|(target_id, lead, followers)| async move {
                let call = SharedCall::Renew {
                    lease_ms: lease,
                    lead,
                    followers,
                };
                let mut conn = self.conn();
                let r = call
                    .invocation(&target_id, self.script_clock(now))
                    .invoke_async::<Value>(&mut conn)
                    .await;
                let renewed = self.seen(r).and_then(SharedRenewed::read);
                if let (Some(token), Ok(SharedRenewed { held: false })) = (lead, renewed) {
                    tracing::info!(
                        target_id,
                        token,
                        "lost a reusable target's lock to a newer leader"
                    );
                    self.leads.remove(&target_id, token);
                }
            })
            .buffer_unordered(PARALLEL)
            .collect::<()>()
            .await;
    }

    /// Takes over `target` when its leader is gone and callers still follow it (at most one
    /// instance wins); mails a fresh cached answer to them instead when there is one. Returns the
    /// new fencing token when this instance must start the task.
    pub(super) async fn shared_takeover(
        &self,
        target: &Target,
        now: Millis,
        min_remaining_ms: u64,
    ) -> Result<Option<u64>, StoreError> {
        let mut conn = self.conn();
        let call = SharedCall::Takeover {
            min_remaining_ms,
            lease_ms: ms(self.settings.lease),
            mail_ttl_ms: self.mail_ttl(),
        };
        let r = call
            .invocation(&target.id, self.script_clock(now))
            .invoke_async::<Vec<Value>>(&mut conn)
            .await;
        match SharedTakenOver::read(self.seen(r)?)? {
            SharedTakenOver::Lead { token } => {
                self.leads
                    .add(target, token, now + ms(self.settings.lock_ttl));
                Ok(Some(token))
            }
            SharedTakenOver::Mailed { woken } => {
                self.notify(&target.id, woken).await;
                Ok(None)
            }
            SharedTakenOver::Nothing => Ok(None),
        }
    }
}
