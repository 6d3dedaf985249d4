//! The spend guard (docs/API.md "Accounts and failover"): reads each account's balance now and
//! then, pauses an account that has no money left and resumes it once it has some again. Only
//! providers that bill per solve: CaptchaAI bills threads, and its balance is not read as money.
//!
//! Owns: the balance loop and what a balance reply means. A paused account keeps its tasks in
//! flight and takes no new ones; the gateway does not stop. Does not own: the breaker (a refused
//! key found here opens it through [`Breaker::trip`](super::Breaker::trip)).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Member, Upstream, lock};
use crate::model::now_ms;
use crate::provider::ErrorClass;

/// A balance check that takes longer than this tells nothing; the next one will.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// What a balance reply says: `Some(true)` money left, `Some(false)` none, `None` unreadable.
pub(crate) fn has_money(balance: &str) -> Option<bool> {
    let value: f64 = balance.trim().parse().ok()?;
    value.is_finite().then_some(value > 0.0)
}

/// Checks every account now, then every `every`, until `stop`.
pub fn spawn_spend_guard(upstream: Arc<Upstream>, every: Duration, stop: CancellationToken) {
    tokio::spawn(async move {
        loop {
            for member in upstream.members() {
                tokio::select! {
                    () = check(&upstream, member) => {}
                    () = stop.cancelled() => return,
                }
            }
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = stop.cancelled() => return,
            }
        }
    });
}

async fn check(upstream: &Upstream, member: &Arc<Member>) {
    let reply = tokio::time::timeout(CHECK_TIMEOUT, member.account.balance()).await;
    match reply {
        // A thread-priced account is only checked for a refused key.
        Ok(Ok(_)) if !member.provider.billed_per_solve() => {}
        Ok(Ok(balance)) => match has_money(&balance) {
            Some(money) => {
                *lock(&member.balance) = balance.trim().parse().ok();
                resume_or_pause(upstream, member, money);
            }
            None => tracing::debug!(account = member.name(), "balance reply is not a number"),
        },
        Ok(Err(e)) if e.class == ErrorClass::Account => {
            tracing::error!(account = member.name(), code = %e.code, "balance check refused; account out of rotation");
            lock(&member.breaker).trip(now_ms(), e.retry_after);
        }
        Ok(Err(e)) => tracing::debug!(account = member.name(), error = %e, "balance check failed"),
        Err(_) => tracing::debug!(account = member.name(), "balance check timed out"),
    }
}

fn resume_or_pause(upstream: &Upstream, member: &Member, money: bool) {
    let was_paused = member.paused.swap(!money, Ordering::Relaxed);
    match (was_paused, money) {
        (false, false) => {
            tracing::error!(
                account = member.name(),
                "provider account has no money; paused"
            );
        }
        (true, true) => {
            tracing::info!(
                account = member.name(),
                "provider account has money again; resumed"
            );
            upstream.changed.notify_waiters();
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balance_replies_read_as_money_or_not() {
        assert_eq!(has_money("100.00"), Some(true));
        assert_eq!(has_money(" 0.001\n"), Some(true));
        assert_eq!(has_money("0"), Some(false));
        assert_eq!(has_money("0.00"), Some(false));
        assert_eq!(has_money("-3.5"), Some(false));
        assert_eq!(has_money("NaN"), None);
        assert_eq!(has_money("inf"), None);
        assert_eq!(has_money("ERROR_KEY_DOES_NOT_EXIST"), None);
        assert_eq!(has_money(""), None);
    }
}
