//! Waking waiters: telling instances that mail arrived, taking this instance's mail, the inbox
//! reader and the lease renewer (see `fanout.rs` for the local registry they serve).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;

use super::conn::Conn;
use super::fanout::{self, instance_of};
use super::{Inner, keys, mail, ms, scripts, split_reply_all};
use crate::model::now_ms;

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
            let inbox = keys::inbox(instance);
            let mut conn = self.conn();
            let pushed: redis::RedisResult<()> = async {
                conn.rpush::<_, _, ()>(&inbox, format!("{target_id} {waiter}"))
                    .await?;
                // A dead instance's inbox does not outlive the mail it announces.
                conn.pexpire::<_, ()>(&inbox, (ms(self.settings.mail_ttl) * 2) as i64)
                    .await
            }
            .await;
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
        let mut conn = self.conn();
        let taken = scripts::TAKE
            .key(keys::mbox(target_id))
            .key(keys::mlease(target_id))
            .arg(waiter)
            .invoke_async::<Option<String>>(&mut conn)
            .await;
        let Ok(Some(mail_text)) = self.seen(taken) else {
            return Vec::new();
        };
        let Some(delivery) = mail::decode(&mail_text) else {
            tracing::warn!("unreadable mail dropped");
            return Vec::new();
        };
        let local = self.local.take_waiter(waiter);
        let poolable = local.as_ref().map(|w| w.poolable).unwrap_or(true);
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
        let args = [
            now_ms().to_string(),
            waiter.to_owned(),
            if back.is_ok() {
                mail::encode(&back)
            } else {
                String::new()
            },
            if poolable { "1" } else { "0" }.to_owned(),
            self.mail_ttl().to_string(),
        ];
        match self.run_target(&scripts::ABANDON, target_id, &args).await {
            Ok(values) => split_reply_all(values)
                .into_iter()
                .map(|w| (target_id.to_owned(), w))
                .collect(),
            Err(_) => Vec::new(),
        }
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
        inner.renew_shared().await;
        let lease = inner.lease_end(now_ms()).to_string();
        for (target_id, (_, waiters, claims)) in inner.local.by_target() {
            let mut inv = scripts::RENEW.prepare_invoke();
            inv.key(keys::wlease(&target_id))
                .key(keys::inflight(&target_id));
            inv.arg(&lease).arg(waiters.len());
            for id in waiters.iter().chain(claims.iter()) {
                inv.arg(id);
            }
            let renewed = inv.invoke_async::<(u64, u64)>(&mut conn).await;
            match inner.seen(renewed) {
                Ok((w, c)) if (w as usize) < waiters.len() || (c as usize) < claims.len() => {
                    tracing::debug!(
                        target_id,
                        "some leases were gone at renewal (served, finished, or lost in a pause)"
                    );
                }
                _ => {}
            }
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
    }
}
