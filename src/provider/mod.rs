//! Talking to CAPTCHA providers (DESIGN.md section 6, "provider" and "poller").
//!
//! Owns: the [`Provider`] seam (one implementation per protocol family; today the
//! `in.php`/`res.php` family of CaptchaAI, 2captcha and the simulator), the typed error taxonomy
//! with its retry policy ([`ProviderError`], [`ErrorClass`]), the per-account thread cap and
//! capacity retries ([`Account`]), and the batched poller (one loop per account).
//! Does not own: which caller gets an answer (the engine), or pools.

mod error;

pub use error::{ErrorClass, ProviderError};

use async_trait::async_trait;

use crate::model::SolveRequest;

/// What one check of one upstream task found.
#[derive(Debug, Clone, PartialEq)]
pub enum PollOutcome {
    NotReady,
    Ready {
        text: String,
        user_agent: Option<String>,
        price: Option<String>,
    },
    Failed(ProviderError),
}

/// The plan's thread figures as `threadsinfo` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadsInfo {
    pub threads: u32,
    pub working_threads: u32,
}

/// One account at one provider, speaking its protocol. Implementations do one HTTP exchange per
/// call and no retries: retry policy lives in [`Account`], where it is data.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// A name safe for logs and metric labels (never the key).
    fn name(&self) -> &str;
    /// Submits one task; returns the provider's task id.
    async fn submit(&self, req: &SolveRequest) -> Result<String, ProviderError>;
    /// Checks several tasks in one request where the protocol allows (`action=get&ids=`); the
    /// result has one outcome per id, in order. `with_extras` asks for the single-id JSON form
    /// that carries `user_agent` (Enterprise, Cloudflare Challenge) and GeeTest objects.
    async fn poll(
        &self,
        ids: &[String],
        with_extras: bool,
    ) -> Result<Vec<PollOutcome>, ProviderError>;
    async fn report(&self, task_id: &str, good: bool) -> Result<(), ProviderError>;
    async fn balance(&self) -> Result<String, ProviderError>;
    async fn threads_info(&self) -> Result<ThreadsInfo, ProviderError>;
}
