use std::fmt;
use std::time::Duration;

/// What kind of failure an upstream error is, which decides what we do about it
/// (docs/PROTOCOL.md "Retry classes"). Retry policy is this data, never string matching
/// at call sites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The plan's threads or the provider's queue are full: back off with jitter and retry while
    /// the caller's time remains; never surfaced to a caller while time remains.
    Capacity,
    /// Server errors, HTML pages, unparsable bodies, timeouts, proxy hiccups: retry a bounded
    /// number of times.
    Transient,
    /// The request itself is bad or unsolvable: fail the task with the provider's code.
    Permanent,
    /// The account is unusable (bad key, no money, banned IP): take it out of rotation.
    Account,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Capacity => "capacity",
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
            ErrorClass::Account => "account",
        }
    }

    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorClass::Capacity | ErrorClass::Transient)
    }
}

/// An upstream failure: its class, the provider's code (`ERROR_...`, or `TRANSPORT` /
/// `BAD_RESPONSE` for failures below the API), and a detail that never contains a key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ProviderError {
    pub class: ErrorClass,
    pub code: String,
    pub detail: String,
    /// How long the provider asks us to wait before retrying, where it says (2captcha's limits page).
    pub retry_after: Option<Duration>,
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} upstream error {}", self.class.as_str(), self.code)?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl ProviderError {
    pub fn new(class: ErrorClass, code: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            class,
            code: code.into(),
            detail: detail.into(),
            retry_after: None,
        }
    }

    pub fn transport(detail: impl Into<String>) -> Self {
        Self::new(ErrorClass::Transient, "TRANSPORT", detail)
    }

    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }
}
