//! What can go wrong on the queue's producer side.

use crate::model::Validation;

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Redis could not be reached or refused a command. The text never holds a URL (the
    /// password lives there), only the client's description of the failure.
    #[error("redis: {0}")]
    Redis(String),
    /// The task was refused before it reached Redis (bad id, bad request).
    #[error("{}: {}", .0.code, .0.message)]
    Invalid(Validation),
    /// What Redis holds under a queue key is not what this version writes.
    #[error("unreadable queue data: {0}")]
    Corrupt(String),
}

/// A script reply that is not what its contract says: the data under the queue's keys, or the
/// script that wrote it, is not what this version expects.
impl From<crate::redis_base::ReplyError> for QueueError {
    fn from(e: crate::redis_base::ReplyError) -> Self {
        QueueError::Corrupt(e.to_string())
    }
}

impl From<redis::RedisError> for QueueError {
    fn from(e: redis::RedisError) -> Self {
        QueueError::Redis(e.to_string())
    }
}

impl QueueError {
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        QueueError::Invalid(Validation::new(code, message))
    }
}
