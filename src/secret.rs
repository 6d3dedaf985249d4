//! Values that must never be shown (promise 8): a [`Secret`] prints as `<redacted>` in `Debug`,
//! and [`redact_url`] strips the password from a URL before it is shown anywhere.

use std::fmt;
use std::str::FromStr;

/// A provider key, gateway key or URL with a password. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

/// `url` with its user info's password replaced by `***`; text that does not parse as a URL is
/// not shown at all.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        Err(_) => "<unparsable URL>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_survives_redaction() {
        let shown = redact_url("rediss://gateway:hunter2@redis:6380/0");
        assert_eq!(shown, "rediss://gateway:***@redis:6380/0");
        assert_eq!(redact_url("redis://:hunter2@redis/"), "redis://:***@redis/");
        assert!(!redact_url("not a url hunter2").contains("hunter2"));
        assert_eq!(
            format!("{:?}", Secret("hunter2".into())),
            "Secret(<redacted>)"
        );
    }
}
