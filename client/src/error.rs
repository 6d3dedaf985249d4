//! What a call can end in besides an answer. Messages carry gateway addresses and the
//! gateway's own error codes, never the key.

use std::time::Duration;

/// Why a call did not return an answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The gateway answered with an error about this call (bad input, unknown task, unsolvable,
    /// provider failure, timeout...). Retrying elsewhere would get the same answer.
    #[error("{address} answered {status} {code}: {message}")]
    Api {
        address: String,
        status: u16,
        code: String,
        message: String,
        /// `Retry-After`, when the gateway sent one (`shutting_down`).
        retry_after: Option<Duration>,
    },
    /// Every attempt was refused at admission (the instances tried were full) or could not
    /// connect. Nothing was started anywhere: the call can be sent again later.
    #[error("no gateway took the call after {attempts} attempts; last: {last}")]
    Exhausted {
        attempts: u32,
        /// The last refusal or connection failure.
        last: Box<Error>,
    },
    /// A gateway refused the call at admission (`503` + `Retry-After`): it was full.
    #[error("{address} is full ({code}); retry after {retry_after:?}")]
    Refused {
        address: String,
        code: String,
        retry_after: Option<Duration>,
    },
    /// A fleet-wide limit is exhausted (`429`): every gateway would answer the same, so the
    /// call was not retried elsewhere. Wait `retry_after`.
    #[error("{address}: fleet-wide limit {code}: {message}")]
    FleetLimited {
        address: String,
        code: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// No HTTP answer: connection refused or reset, timeout, unreadable reply. `sent` says
    /// whether the request may have reached the gateway (then it may be running there).
    #[error("{address}: {what}")]
    Transport {
        address: String,
        what: String,
        sent: bool,
    },
    /// The gateway answered 2xx with a body this client cannot read.
    #[error("{address} sent an unreadable answer: {what}")]
    BadAnswer { address: String, what: String },
}

impl Error {
    /// The `Retry-After` the gateway sent, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Api { retry_after, .. }
            | Error::Refused { retry_after, .. }
            | Error::FleetLimited { retry_after, .. } => *retry_after,
            Error::Exhausted { last, .. } => last.retry_after(),
            Error::Transport { .. } | Error::BadAnswer { .. } => None,
        }
    }
}
