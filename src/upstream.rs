//! The engine's view of the providers: implements [`Solver`] over the configured account, maps
//! provider errors to the codes callers see, and tracks whether the account is usable.
//!
//! Today one account; failover between accounts and providers plugs in here without the engine
//! or the HTTP layer noticing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::compat::codes;
use crate::engine::{Priority, Solution, SolveFailure, Solver};
use crate::model::{Millis, SolveRequest, UpstreamRef, now_ms};
use crate::provider::{self, Account, ErrorClass, ProviderError};
use crate::telemetry::metrics::{counter, escape, gauge};

/// How long an account stays out of rotation after an account error without a provider hint.
const ACCOUNT_COOL_OFF: Duration = Duration::from_secs(60);

pub struct Upstream {
    account: Arc<Account>,
    /// Until when (ms) the account is out of rotation after a bad-key / no-money / banned error.
    unusable_until: AtomicU64,
}

impl Upstream {
    pub fn new(account: Arc<Account>) -> Self {
        Self {
            account,
            unusable_until: AtomicU64::new(0),
        }
    }

    pub fn threads(&self) -> u32 {
        self.account.threads()
    }

    /// Threads taken, fleet-wide with Redis.
    pub fn in_flight(&self) -> u32 {
        self.account.in_flight()
    }

    /// The cap now: threads, lowered to the plan and for a while by capacity errors.
    pub fn effective_threads(&self) -> u32 {
        self.account.effective_threads()
    }

    /// False while the account is out of rotation.
    pub fn usable(&self) -> bool {
        now_ms() >= self.unusable_until.load(Ordering::Relaxed)
    }

    pub async fn balance(&self) -> Result<String, SolveFailure> {
        self.account.balance().await.map_err(|e| self.failure(e))
    }

    /// What a caller is told about an upstream failure: the provider's code for problems with
    /// the request itself, a terminal code for everything the caller cannot fix. Never the
    /// provider's body, which may echo our key.
    fn failure(&self, e: ProviderError) -> SolveFailure {
        if e.code == provider::SHUTDOWN {
            return SolveFailure::shutting_down();
        }
        match e.class {
            ErrorClass::Permanent if e.code.starts_with("ERROR_") => SolveFailure::new(
                e.code.clone(),
                format!("the provider refused the task ({})", e.code),
            ),
            ErrorClass::Permanent => {
                SolveFailure::new(codes::CAPTCHA_UNSOLVABLE, "the provider could not solve it")
            }
            ErrorClass::Account => {
                let until =
                    now_ms() + e.retry_after.unwrap_or(ACCOUNT_COOL_OFF).as_millis() as Millis;
                self.unusable_until.store(until, Ordering::Relaxed);
                tracing::error!(account = self.account.name(), code = %e.code, "provider account unusable; check its key and balance");
                SolveFailure::new(
                    codes::SERVER_ERROR,
                    "the gateway's provider account is unusable",
                )
            }
            ErrorClass::Capacity | ErrorClass::Transient => SolveFailure::new(
                codes::CAPTCHA_UNSOLVABLE,
                format!("no answer in time ({})", e.code),
            ),
        }
    }

    /// Account gauges and counters, in OpenMetrics text.
    pub fn write_metrics(&self, out: &mut String) {
        let a = &self.account;
        let label = format!("account=\"{}\"", escape(a.name()));
        let one = |v: u64| vec![(label.clone(), v)];
        let s = a.stats();
        gauge(
            out,
            "upstream_threads",
            "Plan threads of the account",
            &one(a.threads().into()),
        );
        gauge(
            out,
            "upstream_in_flight",
            "Upstream tasks in flight",
            &one(a.in_flight().into()),
        );
        gauge(
            out,
            "upstream_usable",
            "1 while the account is in rotation",
            &one(u64::from(self.usable())),
        );
        gauge(
            out,
            "upstream_threads_in_use",
            "Threads of the account taken, fleet-wide with Redis (as of the last renewal)",
            &one(a.in_flight().into()),
        );
        gauge(
            out,
            "upstream_threads_cap",
            "Effective cap: threads, lowered to the plan and for a while by capacity errors",
            &one(a.effective_threads().into()),
        );
        let b = a.budget_stats();
        counter(
            out,
            "upstream_thread_leases_lost",
            "Thread leases found lapsed while their task ran",
            &one(b.leases_lost),
        );
        counter(
            out,
            "upstream_thread_over_admissions",
            "Threads used without the fleet's agreement (lost leases, grants while Redis was unreachable)",
            &one(b.over_admissions),
        );
        counter(
            out,
            "upstream_submits",
            "Tasks submitted upstream",
            &one(s.submits),
        );
        let by_class = [
            (
                format!("{label},class=\"capacity\""),
                s.submit_errors_capacity,
            ),
            (
                format!("{label},class=\"transient\""),
                s.submit_errors_transient,
            ),
            (
                format!("{label},class=\"permanent\""),
                s.submit_errors_permanent,
            ),
            (
                format!("{label},class=\"account\""),
                s.submit_errors_account,
            ),
        ];
        counter(
            out,
            "upstream_submit_errors",
            "Submit errors by class",
            &by_class,
        );
        for (name, help, value) in [
            (
                "upstream_capacity_retries",
                "Submits retried after a capacity error",
                s.capacity_retries,
            ),
            (
                "upstream_transient_retries",
                "Submits retried after a transient error",
                s.transient_retries,
            ),
            (
                "upstream_poll_requests",
                "res.php requests (one may ask for many ids)",
                s.poll_requests,
            ),
            ("upstream_ids_polled", "Task ids asked about", s.ids_polled),
            (
                "upstream_solved",
                "Upstream tasks that ended with an answer",
                s.solved,
            ),
            (
                "upstream_failed",
                "Upstream tasks that ended with an error",
                s.failed,
            ),
            (
                "upstream_timeouts",
                "Upstream tasks given up at their deadline",
                s.timeouts,
            ),
        ] {
            counter(out, name, help, &one(value));
        }
    }
}

#[async_trait]
impl Solver for Upstream {
    async fn solve(
        &self,
        req: &SolveRequest,
        deadline: Instant,
        priority: Priority,
    ) -> Result<Solution, SolveFailure> {
        // Refills take only the threads no caller is waiting for (promise 5).
        let priority = match priority {
            Priority::Interactive => provider::Priority::Interactive,
            Priority::Queued => provider::Priority::Queued,
            Priority::Refill => provider::Priority::Refill,
        };
        let solved = self
            .account
            .solve(req, deadline, priority)
            .await
            .map_err(|e| self.failure(e))?;
        Ok(Solution {
            text: solved.text,
            user_agent: solved.user_agent,
            upstream: UpstreamRef {
                account: self.account.name().to_owned(),
                task_id: solved.task_id,
            },
            solved_at: solved.solved_at,
        })
    }

    async fn report(&self, task: &UpstreamRef, good: bool) -> Result<(), SolveFailure> {
        self.account
            .report(&task.task_id, good)
            .await
            .map_err(|e| self.failure(e))
    }
}
