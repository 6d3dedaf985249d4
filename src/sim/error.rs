//! What a simulator setting can get wrong, worded for the person who typed it.

/// A problem with a simulator setting.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    #[error("invalid duration `{input}`: {reason} (examples: 250ms, 2s, 1.5s, 2m)")]
    Duration { input: String, reason: &'static str },
    #[error("invalid latency range `{0}`: the minimum is larger than the maximum")]
    Reversed(String),
    #[error("expected KIND=VALUE (e.g. recaptcha_v2=2s..5s), got `{0}`")]
    MissingKind(String),
    #[error("{0}")]
    UnknownKind(String),
    #[error("{name} must be between 0 and 1, got {value}")]
    Rate { name: &'static str, value: f64 },
    #[error("capacity_code must not be empty")]
    EmptyCapacityCode,
    #[error("slow_ms must be at most {max} (a minute), got {got}")]
    SlowTooLong { got: u64, max: u64 },
}
