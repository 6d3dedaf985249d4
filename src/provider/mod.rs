//! Talking to CAPTCHA providers (docs/ARCHITECTURE.md, "provider" and "poller").
//!
//! Owns: the [`Provider`] seam (one implementation per protocol family; today the
//! `in.php`/`res.php` family of CaptchaAI, 2captcha and the simulator, and the JSON task family
//! of anti-captcha, CapSolver and 2captcha v2), the typed error taxonomy
//! with its retry policy ([`ProviderError`], [`ErrorClass`]), the per-account thread cap and
//! capacity retries ([`Account`]), and the batched poller (one loop per account).
//! Does not own: which caller gets an answer (the engine), or pools.
//!
//! # Layout
//!
//! - `error`: [`ProviderError`] and [`ErrorClass`].
//! - `classify`: the table of provider codes -> class and suggested wait.
//! - `parse`: lenient reading of upstream replies and batch answers.
//! - `encode`: a request as `in.php` parameters.
//! - `exchange`: one bounded HTTP exchange with redacted errors, shared by the clients.
//! - `inphp`: [`InPhpProvider`], the `in.php`/`res.php` client.
//! - `budget`: the account's thread budget ([`ThreadBudget`]), in-process or fleet-wide,
//!   interactive callers before queued work before refills ([`Priority`]).
//! - `account`: [`Account`], the thread cap and submit retries of one account.
//! - `poller`: the batched poller behind each account.
//! - `schedule`: learned solve times and the check plan and cadence made from them.
//! - `taskapi`: [`TaskApiProvider`], the `createTask`/`getTaskResult` client (anti-captcha,
//!   CapSolver, 2captcha v2).

mod account;
pub mod budget;
mod classify;
mod error;
mod exchange;
mod inphp;
mod kind;
mod parse;
mod poller;
mod requests;
mod schedule;
mod stats;
mod taskapi;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

pub use account::{Account, AccountSettings, SHUTDOWN, Schedule, Solved, TIMEOUT, UNSTARTED};
pub use budget::{
    Budget, BudgetSettings, BudgetStats, CapRule, CapSettings, Lease, MemoryBudget, Priority,
    ThreadBudget,
};
pub use classify::{classify, code_error, retry_after};
pub use error::{ErrorClass, ProviderError};
pub use exchange::{CONNECT_TIMEOUT, REQUEST_TIMEOUT};
pub use inphp::InPhpProvider;
pub use kind::{AccountProvider, Protocol};
pub use parse::{BAD_RESPONSE, Extras, UpstreamReply, parse_reply, split_batch};
pub use poller::PollSettings;
pub use requests::{Endpoint, RESULTS, RequestTable};
pub use stats::AccountStats;
pub use taskapi::{NO_REPORTS, NO_THREADS_INFO, TaskApiProvider};

use async_trait::async_trait;

use crate::model::SolveRequest;

/// What one check of one upstream task found.
#[derive(Debug, Clone, PartialEq)]
pub enum PollOutcome {
    NotReady,
    /// Solved: the answer, the user agent it is bound to and the price, where reported.
    Ready {
        text: String,
        user_agent: Option<String>,
        price: Option<String>,
    },
    /// The task ended without an answer, or (for a non-permanent class) this check failed.
    Failed(ProviderError),
}

/// The plan's thread figures as `threadsinfo` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadsInfo {
    pub threads: u32,
    pub working_threads: u32,
}

/// One account at one provider, speaking its protocol. Implementations do one HTTP exchange per
/// call (except a batch poll whose answer does not parse, which falls back to one per id) and no
/// retries: retry policy lives in [`Account`] and the poller, where it is data.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// A name safe for logs and metric labels (never the key).
    fn name(&self) -> &str;
    /// Submits one task; returns the provider's task id.
    async fn submit(&self, req: &SolveRequest) -> Result<String, ProviderError>;
    /// Checks several tasks in one request where the protocol allows (`action=get&ids=`); the
    /// result has one outcome per id, in order. `with_extras` asks for the single-id JSON form
    /// that carries `user_agent` (Enterprise, Cloudflare Challenge) and GeeTest objects.
    /// `Err` means the whole request failed and says nothing about the tasks; a
    /// [`PollOutcome::Failed`] with a permanent or account class ends its task, any other class
    /// means "check again later".
    async fn poll(
        &self,
        ids: &[String],
        with_extras: bool,
    ) -> Result<Vec<PollOutcome>, ProviderError>;
    async fn report(&self, task_id: &str, good: bool) -> Result<(), ProviderError>;
    async fn balance(&self) -> Result<String, ProviderError>;
    async fn threads_info(&self) -> Result<ThreadsInfo, ProviderError>;
    /// Whether several ids may share one `poll` call. The poller asks before every batch, so an
    /// implementation can stop batching once it learns the provider does not support it.
    fn supports_batch(&self) -> bool {
        true
    }
}
