//! The registry of live targets (`cg:targets`) and everything that walks it: registering a target
//! on use, retiring idle ones with `retire.lua`, sweeping and reading figures. Walks touch only
//! registered (live) targets and issue their per-target reads concurrently on the multiplexed
//! connection, so they are pipelined on the wire instead of one round trip after another.
//!
//! Registration and retirement race safely (a target retired while a caller registers it must
//! not lose that caller):
//! - a registration writes the target's `last` use, then adds it to the set; an instance
//!   remembers it registered a target only for half of `target_idle`, and only after both
//!   writes succeeded, so any instance that skips registering has used the target within half
//!   an idle period and `retire.lua` keeps it;
//! - retirement takes the id out of the set first, runs the script, and puts the id back when
//!   the script keeps the target (or its reply is lost). A caller arriving in between either
//!   marks it used before the script runs (kept, re-added) or registers it again after.

use std::collections::{HashMap, HashSet};

use futures::{StreamExt, stream};
use redis::{AsyncCommands, Value};

use super::call::{Prelude, RetireCall, TargetCall};
use super::ops::Pk;
use super::reply::{Counted, Retired};
use super::{Inner, keys, ms};
use crate::engine::store::{StoreError, TargetFigures};
use crate::model::{Millis, Reuse, Target};

/// Per-target requests in flight at once during a walk: enough to fill the pipe, few enough to
/// leave room for callers' scripts between them.
const PARALLEL: usize = 32;

impl Inner {
    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, Millis>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long this instance trusts that a target it registered is still registered.
    fn refresh_ms(&self) -> u64 {
        ms(self.settings.target_idle) / 2
    }

    /// Registers `target` as live (its label and last use, then its id in `cg:targets`), unless
    /// this instance did so less than half an idle period ago. When that fails the caller's
    /// operation fails too (the engine solves without the store): a target must never be used
    /// without being listed, or no sweep would ever see it again.
    pub(super) async fn note_target(&self, target: &Target, now: Millis) -> Result<(), StoreError> {
        if let Some(&at) = self.known().get(&target.id) {
            if now.saturating_sub(at) < self.refresh_ms() {
                return Ok(());
            }
        }
        let mut conn = self.conn();
        // `last` before the set: a retirement between the two sees the use and keeps it.
        let added: redis::RedisResult<()> = async {
            redis::cmd("HSET")
                .arg(keys::stats(&target.id))
                .arg("label")
                .arg(&target.label)
                .arg("last")
                .arg(now)
                .arg("reusable")
                .arg(u8::from(target.kind.reuse() == Reuse::Reusable))
                .query_async::<()>(&mut conn)
                .await?;
            conn.sadd::<_, _, ()>(keys::targets(), &target.id).await
        }
        .await;
        self.seen(added)?;
        self.known().insert(target.id.clone(), now);
        Ok(())
    }

    async fn live_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn();
        let r = conn.smembers::<_, Vec<String>>(keys::targets()).await;
        self.seen(r)
    }

    /// Reaps every live target (dead instances' waiters and claims, mail nobody took).
    pub(super) async fn sweep_targets(&self, now: Millis) -> Result<(), StoreError> {
        let _ = now; // Redis time decides what expired.
        let ids = self.live_ids().await?;
        let mut replies = stream::iter(ids)
            .map(|id| async move {
                // This instance may not know the target's kind: the script pools passed-on mail
                // only as the target's recorded kind allows.
                let op = self.op(TargetCall::Counts, &id, Pk::AsRecorded);
                let r = self.run_once(&op).await;
                (id, r)
            })
            .buffer_unordered(PARALLEL);
        let mut first_error = None;
        while let Some((id, r)) = replies.next().await {
            match r {
                Ok(values) => match Counted::read(values) {
                    Ok(counted) => self.notify(&id, counted.woken).await,
                    Err(e) => first_error = first_error.or(Some(e)),
                },
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Retires every live target unused since `now - target_idle` that `retire.lua` finds
    /// empty, except `keep`. Returns how many went.
    pub(super) async fn retire_idle(
        &self,
        now: Millis,
        keep: &HashSet<String>,
    ) -> Result<usize, StoreError> {
        let refresh = self.refresh_ms();
        // Entries this instance would not trust any more are only memory: forget them.
        self.known()
            .retain(|_, at| now.saturating_sub(*at) < refresh);
        let idle_before = now.saturating_sub(ms(self.settings.target_idle));
        let ids: Vec<String> = self
            .live_ids()
            .await?
            .into_iter()
            .filter(|id| !keep.contains(id))
            .collect();
        // Last uses first (one cheap read per target, pipelined): most live targets are busy.
        let idle: Vec<String> = stream::iter(ids)
            .map(|id| async move {
                let mut conn = self.conn();
                let last = conn
                    .hget::<_, _, Option<u64>>(keys::stats(&id), "last")
                    .await;
                (id, last)
            })
            .buffer_unordered(PARALLEL)
            .filter_map(|(id, last)| async move {
                match last {
                    Ok(last) if last.unwrap_or(0) <= idle_before => Some(id),
                    _ => None,
                }
            })
            .collect()
            .await;
        let retired = stream::iter(idle)
            .map(|id| async move { self.retire_one(&id, now).await })
            .buffer_unordered(PARALLEL)
            .filter(|gone| std::future::ready(*gone))
            .count()
            .await;
        Ok(retired)
    }

    /// Out of the set, then the script; back into the set unless the script retired it.
    async fn retire_one(&self, id: &str, now: Millis) -> bool {
        let mut conn = self.conn();
        if self
            .seen(conn.srem::<_, _, ()>(keys::targets(), id).await)
            .is_err()
        {
            return false;
        }
        // The script judges idleness by Redis time (by `now` only on an explicit clock); the
        // filter above by this instance's clock only saves script runs.
        let s = &self.settings;
        let prelude = Prelude {
            op_ttl_ms: ms(s.op_ttl),
            min_remaining_ms: ms(s.min_remaining),
            mail_ttl_ms: ms(s.mail_ttl),
            lease_ms: ms(s.lease),
            poolable: None,
            clock: self.script_clock(now),
            // No issue time: retiring twice is harmless, so it keeps no record.
            issued: None,
        };
        let call = RetireCall {
            idle_ms: ms(s.target_idle),
        };
        let reply = call
            .invocation(id, &prelude)
            .invoke_async::<Vec<Value>>(&mut conn)
            .await;
        match self.seen(reply).and_then(Retired::read) {
            Ok(Retired::Gone) => {
                self.known().remove(id);
                true
            }
            kept => {
                // Kept, or the reply was lost (the script may or may not have run): registered
                // again either way. A retired target registered again costs one more check on
                // the next sweep; an unregistered live one would be invisible to sweeps.
                let back = conn.sadd::<_, _, ()>(keys::targets(), id).await;
                if let Err(e) = back {
                    tracing::warn!(error = %e, "could not re-register a target kept at retirement");
                }
                if let Ok(Retired::Kept { woken }) = kept {
                    self.notify(id, woken).await;
                }
                false
            }
        }
    }

    /// Figures of every live target: one pipelined round trip per target, many at once.
    pub(super) async fn live_figures(&self) -> Result<Vec<TargetFigures>, StoreError> {
        let ids = self.live_ids().await?;
        let mut out: Vec<TargetFigures> = stream::iter(ids)
            .map(|id| async move {
                let mut conn = self.conn();
                let r = redis::pipe()
                    .hgetall(keys::stats(&id))
                    .zcard(keys::pool(&id))
                    .zcard(keys::inflight(&id))
                    .zcard(keys::waiters(&id))
                    .query_async::<(HashMap<String, String>, u64, u64, u64)>(&mut conn)
                    .await;
                (id, r)
            })
            .buffer_unordered(PARALLEL)
            .filter_map(|(id, r)| async move {
                // A target retired between the listing and the read has no stats: skip it.
                let (stats, pooled, in_flight, waiting) = r.ok()?;
                // Figures are about single-use targets (pools, demand); the embedded store never
                // lists reusable ones either.
                if stats.is_empty() || stats.get("reusable").is_some_and(|r| r == "1") {
                    return None;
                }
                let num = |f: &str| stats.get(f).and_then(|v| v.parse().ok()).unwrap_or(0);
                Some(TargetFigures {
                    label: stats.get("label").cloned().unwrap_or_default(),
                    pooled,
                    in_flight,
                    waiting,
                    pool_hits: num("pool_hits"),
                    waits_served: num("waits_served"),
                    new_tasks: num("new_tasks"),
                    refills: num("refills"),
                    expired_unused: num("expired_unused"),
                    id,
                })
            })
            .collect()
            .await;
        out.sort_by(|a, b| a.label.cmp(&b.label).then(a.id.cmp(&b.id)));
        Ok(out)
    }
}
