//! The one error every settings type reports: which setting, what is wrong, how to fix it. It
//! sits at the bottom of the crate so each module can check its own settings without importing
//! `config`, which composes them (docs/ARCHITECTURE.md, "Layers").

use std::fmt;

/// A configuration problem, printed as one line (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub setting: String,
    pub problem: String,
    pub fix: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; {}", self.setting, self.problem, self.fix)
    }
}

impl std::error::Error for ConfigError {}

/// Shorthand for a [`ConfigError`].
pub fn bad(setting: &str, problem: impl Into<String>, fix: impl Into<String>) -> ConfigError {
    ConfigError {
        setting: setting.to_owned(),
        problem: problem.into(),
        fix: fix.into(),
    }
}
