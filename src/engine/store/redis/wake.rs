//! Waking waiters: telling instances that mail arrived, taking this instance's mail, the inbox
//! reader and the lease renewer (see `fanout.rs` for the local registry they serve).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::{AsyncCommands, Value};
use tokio_util::sync::CancellationToken;

use super::call::{AnnounceCall, TargetCall};
use super::fanout::{self, instance_of};
use super::ops::Pk;
use super::reply::{Announced, Restored, Taken, Woken};
use super::{Inner, keys, mail, ms, poolable, unavailable};
use crate::engine::store::StoreError;
use crate::model::{Answer, now_ms};
use crate::redis_base::Conn;

impl Inner {
    /// Tells the instances of `woken` waiters that mail is waiting; takes this instance's own.
    pub(super) async fn notify(&self, target_id: &str, woken: Vec<String>) {
        let mut queue: Vec<(String, String)> = woken
            .into_iter()
            .map(|w| (target_id.to_owned(), w))
            .collect();
        while let Some((target_id, waiter)) = queue.pop() {
            let instance = instance_of(&waiter);
            if instance == self.instance {
                queue.extend(self.deliver_local(&target_id, &waiter).await);
                continue;
            }
            let mut conn = self.conn();
            let call = AnnounceCall {
                target_id: target_id.clone(),
                waiter: waiter.clone(),
                inbox_ttl_ms: ms(self.settings.mail_ttl) * 2,
            };
            let pushed = call
                .invocation(instance)
                .invoke_async::<Value>(&mut conn)
                .await
                .map_err(unavailable)
                .and_then(Announced::read);
            if let Err(e) = pushed {
                // The mail stays in Redis; its deadline passes it on if nobody takes it.
                tracing::warn!(error = %e, "could not announce mail to another instance");
            }
        }
    }

    /// Takes `waiter`'s mail and hands it over; mail nobody here can take is passed on.
    /// Returns further waiters to tell.
    pub(super) async fn deliver_local(
        &self,
        target_id: &str,
        waiter: &str,
    ) -> Vec<(String, String)> {
        // A follower of a reusable target has no place in a queue to go back to.
        let arrived = self
            .local
            .arrived(waiter)
            .filter(|_| !fanout::is_follower(waiter));
        let follower = fanout::is_follower(waiter);
        if !follower && self.durable.as_ref().is_some_and(|d| !d.ok()) {
            // Hand-outs cannot be confirmed now (maybe not for long: a master without its
            // replicas): the mail stays for its deadline to pass on, and the caller is let go to
            // be solved alone rather than wait for a confirmation that may never come.
            self.release(waiter);
            return Vec::new();
        }
        let call = TargetCall::Take {
            waiter: waiter.to_owned(),
            arrived,
        };
        let mut op = self.op(call, target_id, Pk::AsRecorded);
        // A reusable answer is shared anyway: only a single-use one is a hand-out to confirm.
        if !follower {
            op = op.handout();
        }
        let Ok(ran) = self.run_handout(&op, true).await else {
            // Unknown after every retry: the mail's deadline passes it on if it is still there.
            return Vec::new();
        };
        let (mail_text, left) = match Taken::read(ran.values) {
            Ok(Taken::Mail { mail, remaining_ms }) => (mail, remaining_ms),
            // No mail (taken or passed on), or a stale answer: the waiter is back in the queue.
            Ok(Taken::Nothing) => return Vec::new(),
            Err(e) => {
                // Unreadable: the mail's deadline passes it on if it is still there.
                tracing::warn!(error = %e, "a mail take's reply could not be read");
                return Vec::new();
            }
        };
        let mail_text = &mail_text;
        if !ran.confirmed {
            self.untake(target_id, waiter, mail_text).await;
            self.release(waiter);
            return Vec::new();
        }
        let Some(delivery) = mail::decode(mail_text) else {
            tracing::warn!("unreadable mail dropped");
            return Vec::new();
        };
        let now = self.local_now();
        let delivery = delivery.map(|a| mail::restamp(a, left, now));
        let local = self.local.take_waiter(waiter);
        let pk = match &local {
            Some(w) => Pk::of(w.poolable),
            None => Pk::AsRecorded,
        };
        let back = match local {
            Some(w) => match w.tx.send(delivery) {
                Ok(()) => return Vec::new(),
                Err(back) => back,
            },
            None => delivery,
        };
        if fanout::is_follower(waiter) {
            // A reusable answer is cached for everyone; a follower that left needs nothing.
            return Vec::new();
        }
        // The caller left between delivery and now: pass the answer on.
        let answer = back.ok();
        let op = self.op(abandon_call(waiter, answer.as_ref(), now), target_id, pk);
        let woken = self
            .run(&op, true)
            .await
            .map_err(StoreError::from)
            .and_then(|values| Woken::read("abandon.lua", values));
        match woken {
            Ok(abandoned) => abandoned
                .woken
                .into_iter()
                .map(|w| (target_id.to_owned(), w))
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

impl Inner {
    /// Lets this instance's `waiter` go: its caller finds its wait closed and is solved alone.
    /// True when it was still waiting here.
    fn release(&self, waiter: &str) -> bool {
        let waiting = self.local.take_waiter(waiter).is_some();
        if waiting {
            self.counters.released.fetch_add(1, Ordering::Relaxed);
        }
        waiting
    }

    /// Waiters of `target_id` that renewal found served or let go in Redis (their mail passed on
    /// after its deadline while this instance could not take it, or a failover lost the reply of
    /// their take): nothing will ever reach them, so the second beat that finds one lets its
    /// caller go to be solved alone instead of waiting out its deadline. Noted in `ended_now`.
    fn let_go_ended(
        &self,
        target_id: &str,
        ended: Vec<String>,
        ended_before: &HashSet<String>,
        ended_now: &mut HashSet<String>,
    ) {
        for waiter in ended {
            if ended_before.contains(&waiter) && self.release(&waiter) {
                tracing::warn!(
                    target_id,
                    "a waiting caller whose mail Redis passed on or lost was let go to be solved alone"
                );
            }
            ended_now.insert(waiter);
        }
    }

    /// Mail taken for `waiter` whose take was not confirmed durable in time goes back to its
    /// mailbox (`untake.lua`): it is there once whether the take survives a failover or not,
    /// and its deadline passes it on to the next waiter or the pool.
    async fn untake(&self, target_id: &str, waiter: &str, mail: &str) {
        if let Some(durable) = &self.durable {
            durable.unconfirmed(keys::probe(target_id));
        }
        let call = TargetCall::Untake {
            waiter: waiter.to_owned(),
            mail: mail.to_owned(),
        };
        let op = self.op(call, target_id, Pk::AsRecorded);
        if let Err(e) = self.run(&op, true).await {
            tracing::warn!(error = %StoreError::from(e), "could not give back mail whose hand-out was withheld");
        }
    }
}

/// The arguments of `abandon.lua` for `waiter`, passing on `answer` (its life counted at `now`)
/// if it had one.
pub(super) fn abandon_call(waiter: &str, answer: Option<&Answer>, now: u64) -> TargetCall {
    TargetCall::Abandon {
        waiter: waiter.to_owned(),
        passed_on: answer.map(|a| (mail::remaining(a, now), mail::answer_json(a))),
    }
}

/// Drains this instance's inbox: announcements of mail for its waiters from other instances.
pub(super) async fn inbox_reader(
    inner: Arc<Inner>,
    mut blocking: Conn,
    shutdown: CancellationToken,
) {
    let inbox = keys::inbox(&inner.instance);
    let block_secs = inner.settings.block.as_secs_f64();
    loop {
        let popped = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = blocking.blpop::<_, Option<(String, String)>>(&inbox, block_secs) => r,
        };
        match popped {
            Ok(Some((_, message))) => {
                if let Some((target_id, waiter)) = message.split_once(' ') {
                    let more = inner.deliver_local(target_id, waiter).await;
                    for (t, w) in more {
                        inner.notify(&t, vec![w]).await;
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                inner.healthy.store(false, Ordering::Relaxed);
                tracing::debug!(error = %e, "inbox read failed; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

/// Renews this instance's leases every third of a lease, checks Redis is back after an outage,
/// and collects mail whose announcement was lost.
pub(super) async fn renewer(inner: Arc<Inner>, shutdown: CancellationToken) {
    let every = inner.settings.lease / 3;
    // Waiters the last beat found ended in Redis: let go when the next beat finds them so too
    // (one report may race the local hand-over of an answer just taken).
    let mut ended_before: HashSet<String> = HashSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let mut conn = inner.conn();
        let pong = redis::cmd("PING").query_async::<String>(&mut conn).await;
        if inner.seen(pong).is_err() {
            continue;
        }
        inner.say_alive().await;
        inner.held.forget_idle();
        inner.renew_shared().await;
        inner.read_server().await;
        let mut ended_now = HashSet::new();
        for (target_id, (target, waiters, claims)) in inner.local.by_target() {
            // Registered again if Redis restarted empty (the epoch check forgot what was known).
            let _ = inner.note_target(&target, now_ms()).await;
            let call = TargetCall::Renew {
                label: target.label.clone(),
                waiters: waiters.clone(),
                claims: claims.clone(),
            };
            let pk = Pk::of(poolable(&target) == "1");
            let op = inner.op(call, &target_id, pk);
            let renewed = inner.run_once(&op).await.and_then(Restored::read);
            if let Ok(Restored {
                waiters: back_w,
                claims: back_c,
                ended,
                woken,
            }) = renewed
            {
                inner.let_go_ended(&target_id, ended, &ended_before, &mut ended_now);
                let back = back_w + back_c;
                inner.counters.restored.fetch_add(back, Ordering::Relaxed);
                if back_w > 0 || back_c > 0 {
                    tracing::info!(
                        target_id,
                        waiters = back_w,
                        claims = back_c,
                        "restored leases a lapse had removed"
                    );
                }
                inner.notify(&target_id, woken).await;
            }
            let waiters: Vec<String> = waiters.into_iter().map(|(id, _)| id).collect();
            if waiters.is_empty() {
                continue;
            }
            // Mail delivered to our waiters whose announcement never arrived.
            let pending: redis::RedisResult<Vec<Option<String>>> = redis::cmd("HMGET")
                .arg(keys::mbox(&target_id))
                .arg(&waiters)
                .query_async(&mut conn)
                .await;
            if let Ok(pending) = pending {
                let with_mail: Vec<String> = waiters
                    .iter()
                    .zip(pending)
                    .filter(|(_, m)| m.is_some())
                    .map(|(w, _)| w.clone())
                    .collect();
                if !with_mail.is_empty() {
                    inner.notify(&target_id, with_mail).await;
                }
            }
        }
        ended_before = ended_now;
    }
}

impl Inner {
    /// Says this instance is alive for its lease and a beat (renewed every beat by the
    /// renewer): while the key is there, nobody takes over the tasks it runs
    /// (`Engine::take_over_if_orphaned`). Failing is left to the next beat.
    pub(super) async fn say_alive(&self) {
        let lease = self.settings.lease;
        let live_for = lease + lease / 3;
        let set: redis::RedisResult<()> = redis::pipe()
            .cmd("SET")
            .arg(keys::alive(&self.instance))
            .arg(1)
            .arg("PX")
            .arg(ms(live_for).max(1))
            .ignore()
            .hset(keys::LEASES, ms(lease), now_ms())
            .ignore()
            .query_async(&mut self.conn())
            .await;
        if let Err(e) = set {
            tracing::debug!(error = %e, "could not say this instance is alive");
        }
    }

    /// The other leases instances of this fleet said they run with in the last hour. A worker
    /// with a shorter lease takes another's entries and tasks for dead before that one's
    /// provider tasks can be adopted, so they are paid twice: one lease for the whole fleet.
    /// Leases unheard of for a day are forgotten.
    pub(super) async fn other_leases(&self) -> redis::RedisResult<Vec<Duration>> {
        let mut conn = self.conn();
        let seen: std::collections::HashMap<u64, u64> = conn.hgetall(keys::LEASES).await?;
        let (now, mine) = (now_ms(), ms(self.settings.lease));
        let mut others = Vec::new();
        for (lease, at) in seen {
            let age = now.saturating_sub(at);
            if age > DAY_MS {
                let _: redis::RedisResult<()> = conn.hdel(keys::LEASES, lease).await;
            } else if lease != mine && age <= HOUR_MS {
                others.push(Duration::from_millis(lease));
            }
        }
        others.sort();
        Ok(others)
    }
}

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;
