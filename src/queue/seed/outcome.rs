//! Results in the shape seed 003's worker wrote to `captcha:results`, which its producer reads:
//! `{"status":"success","token":...,"duration":"4.2s","worker":...}` or
//! `{"status":"error","error":...,"worker":...}`. `error` is the compatible API's code (the seed
//! passed on the provider's `in.php`/`res.php` code the same way).

use std::time::Duration;

use serde_json::{Value, json};

use crate::model::{Answer, Kind};

/// A solved task. `token` is what `res.php` returns as `request` (an object for GeeTest and Lemin);
/// `user_agent` is added when the answer is bound to one, so it can be used.
pub fn success(kind: Kind, answer: &Answer, took: Duration, worker: &str) -> String {
    let token = kind.answer_value(&answer.text);
    let mut result = json!({
        "status": "success",
        "token": token,
        "duration": format!("{:.1}s", took.as_secs_f64()),
        "worker": worker,
    });
    if let Some(ua) = &answer.user_agent {
        result["user_agent"] = Value::String(ua.clone());
    }
    // What the answer keeps beside its token (hCaptcha's `respKey`), under its own name.
    for (key, value) in kind.spec().answer.token_parts(&answer.text).1 {
        result[key] = Value::String(value);
    }
    result.to_string()
}

/// A task that ended without an answer.
pub fn error(code: &str, worker: &str) -> String {
    json!({"status": "error", "error": code, "worker": worker}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Answer {
        Answer {
            text: text.into(),
            user_agent: None,
            solved_at: 0,
            expires_at: 0,
            upstream: None,
        }
    }

    #[test]
    fn a_success_has_the_seeds_fields_and_duration_format() {
        let r = success(
            Kind::RecaptchaV2,
            &answer("03AGdBq"),
            Duration::from_millis(4_249),
            "h-1",
        );
        let v: Value = serde_json::from_str(&r).unwrap();
        assert_eq!(
            v,
            json!({"status":"success","token":"03AGdBq","duration":"4.2s","worker":"h-1"})
        );
    }

    #[test]
    fn an_error_carries_the_code() {
        let v: Value = serde_json::from_str(&error("ERROR_CAPTCHA_UNSOLVABLE", "h-1")).unwrap();
        assert_eq!(
            v,
            json!({"status":"error","error":"ERROR_CAPTCHA_UNSOLVABLE","worker":"h-1"})
        );
    }
}
