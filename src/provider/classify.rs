//! The retry policy of upstream error codes, as one table (docs/PROTOCOL.md "Retry
//! classes").
//!
//! Owns: which [`ErrorClass`] a provider code belongs to, per protocol family, and the wait the
//! provider asks for after it. Does not own: reading codes out of bodies (`parse`) or acting on
//! the class (`account`, `poller`).

use std::time::Duration;

use super::error::{ErrorClass, ProviderError};
use crate::wire::inphp::InPhpDialect;
use ErrorClass::{Account, Capacity, Permanent, Transient};
use InPhpDialect::{CaptchaAi, TwoCaptcha};

/// One row of the table: `family: None` applies to every family.
struct Rule {
    code: &'static str,
    family: Option<InPhpDialect>,
    class: ErrorClass,
    /// The provider's own advice on when to try again, where it gives one.
    retry_after: Option<Duration>,
}

const fn rule(
    code: &'static str,
    family: Option<InPhpDialect>,
    class: ErrorClass,
    retry_after_secs: Option<u64>,
) -> Rule {
    let retry_after = match retry_after_secs {
        Some(s) => Some(Duration::from_secs(s)),
        None => None,
    };
    Rule {
        code,
        family,
        class,
        retry_after,
    }
}

/// Codes whose class is not the default. Anything else starting with `ERROR_` is
/// [`ErrorClass::Permanent`] (bad parameters, page URL, sitekey, unsolvable, image errors, bad
/// proxy, wrong id...); anything else at all is [`ErrorClass::Transient`] (unknown bodies,
/// `BAD_RESPONSE`, `TRANSPORT`, `TIMEOUT`, 5xx).
const RULES: &[Rule] = &[
    // 2captcha limits page: "after ERROR_NO_SLOT_AVAILABLE wait 5 s".
    rule("ERROR_NO_SLOT_AVAILABLE", None, Capacity, Some(5)),
    // 2captcha: >60 in.php requests within 3 s; "wait 10 s".
    rule("MAX_USER_TURN", None, Capacity, Some(10)),
    rule("ERROR_TOO_MUCH_REQUESTS", None, Capacity, None),
    // Unconfirmed meaning ("too many unrecognisable images"); slowing down is the advice.
    rule("TOO_MANY_BAD_IMAGES", None, Capacity, None),
    rule("HTTP_429", None, Capacity, None),
    // CaptchaAI documents this as "You don't have free threads": the plan is busy, not broke.
    rule("ERROR_ZERO_BALANCE", Some(CaptchaAi), Capacity, None),
    // 2captcha: no money. The limits page asks for 60 s before the next try.
    rule("ERROR_ZERO_BALANCE", Some(TwoCaptcha), Account, Some(60)),
    rule("ERROR_WRONG_USER_KEY", None, Account, None),
    rule("ERROR_KEY_DOES_NOT_EXIST", None, Account, None),
    // CaptchaAI: "automatically lifted after 5 minutes".
    rule("IP_BANNED", None, Account, Some(300)),
    rule("ERROR_IP_NOT_ALLOWED", None, Account, None),
    rule("ERROR_IP_BLOCKED", None, Account, None),
    // CaptchaAI: transient, "retry ~10 s"; the SDK backs off 5, 10, 20 s.
    rule("ERROR_SERVER_ERROR", None, Transient, None),
    rule("ERROR_INTERNAL_SERVER_ERROR", None, Transient, None),
    // The solver could not reach the caller's proxy this time; the SDK retries it.
    rule("ERROR_PROXY_CONNECTION_FAILED", None, Transient, None),
];

fn lookup(code: &str, family: InPhpDialect) -> Option<&'static Rule> {
    RULES
        .iter()
        .find(|r| r.code == code && r.family.is_none_or(|f| f == family))
}

/// The class of a provider code for `family`: the table above, then the defaults
/// (`ERROR: 100x` request-limit blocks are capacity, other `ERROR_*` codes permanent,
/// everything unknown transient).
pub fn classify(code: &str, family: InPhpDialect) -> ErrorClass {
    if let Some(rule) = lookup(code, family) {
        return rule.class;
    }
    if code.starts_with("ERROR: ") {
        // 2captcha's request-limit blocks (`ERROR: 1001`..`1005`); unicaps treats every one as
        // "too many requests".
        Capacity
    } else if code.starts_with("ERROR_") {
        Permanent
    } else {
        Transient
    }
}

/// The wait the provider documents after `code`, if any.
pub fn retry_after(code: &str, family: InPhpDialect) -> Option<Duration> {
    lookup(code, family).and_then(|r| r.retry_after)
}

/// A classified error for a provider code, carrying the provider's suggested wait.
pub fn code_error(code: &str, family: InPhpDialect, detail: impl Into<String>) -> ProviderError {
    let mut err = ProviderError::new(classify(code, family), code, detail);
    err.retry_after = retry_after(code, family);
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_decides_classes_per_family() {
        let cases: &[(&str, InPhpDialect, ErrorClass)] = &[
            ("ERROR_NO_SLOT_AVAILABLE", TwoCaptcha, Capacity),
            ("ERROR_NO_SLOT_AVAILABLE", CaptchaAi, Capacity),
            ("MAX_USER_TURN", TwoCaptcha, Capacity),
            ("ERROR_TOO_MUCH_REQUESTS", CaptchaAi, Capacity),
            ("ERROR: 1001", TwoCaptcha, Capacity),
            ("ERROR: 1005", CaptchaAi, Capacity),
            ("HTTP_429", CaptchaAi, Capacity),
            ("ERROR_ZERO_BALANCE", CaptchaAi, Capacity),
            ("ERROR_ZERO_BALANCE", TwoCaptcha, Account),
            ("ERROR_WRONG_USER_KEY", CaptchaAi, Account),
            ("ERROR_KEY_DOES_NOT_EXIST", TwoCaptcha, Account),
            ("IP_BANNED", CaptchaAi, Account),
            ("ERROR_IP_NOT_ALLOWED", TwoCaptcha, Account),
            ("ERROR_IP_BLOCKED", TwoCaptcha, Account),
            ("ERROR_SERVER_ERROR", CaptchaAi, Transient),
            ("ERROR_INTERNAL_SERVER_ERROR", TwoCaptcha, Transient),
            ("ERROR_PROXY_CONNECTION_FAILED", CaptchaAi, Transient),
            ("BAD_RESPONSE", CaptchaAi, Transient),
            ("TRANSPORT", TwoCaptcha, Transient),
            ("HTTP_502", TwoCaptcha, Transient),
            ("SOMETHING_NEW", CaptchaAi, Transient),
            ("ERROR_CAPTCHA_UNSOLVABLE", CaptchaAi, Permanent),
            ("ERROR_PAGEURL", TwoCaptcha, Permanent),
            ("ERROR_GOOGLEKEY", CaptchaAi, Permanent),
            ("ERROR_BAD_PARAMETERS", CaptchaAi, Permanent),
            ("ERROR_BAD_PROXY", TwoCaptcha, Permanent),
            ("ERROR_WRONG_CAPTCHA_ID", TwoCaptcha, Permanent),
            ("ERROR_TOO_BIG_CAPTCHA_FILESIZE", CaptchaAi, Permanent),
        ];
        for (code, family, class) in cases {
            assert_eq!(classify(code, *family), *class, "{code} for {family:?}");
        }
    }

    #[test]
    fn provider_waits_ride_along() {
        let secs = |code, family| retry_after(code, family).map(|d| d.as_secs());
        assert_eq!(secs("ERROR_NO_SLOT_AVAILABLE", CaptchaAi), Some(5));
        assert_eq!(secs("ERROR_ZERO_BALANCE", TwoCaptcha), Some(60));
        assert_eq!(secs("ERROR_ZERO_BALANCE", CaptchaAi), None);
        assert_eq!(secs("MAX_USER_TURN", TwoCaptcha), Some(10));
        assert_eq!(secs("IP_BANNED", CaptchaAi), Some(300));
        assert_eq!(secs("ERROR_CAPTCHA_UNSOLVABLE", CaptchaAi), None);
        let err = code_error("ERROR_NO_SLOT_AVAILABLE", TwoCaptcha, "busy");
        assert_eq!(err.class, Capacity);
        assert_eq!(err.retry_after, Some(Duration::from_secs(5)));
        assert_eq!(err.detail, "busy");
    }
}
