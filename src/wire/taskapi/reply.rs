//! Reply bodies of the JSON task protocol and the solution object of each kind, both ways.
//!
//! Every reply carries `errorId` (clients read it first, and unicaps pops it unconditionally);
//! errors are `errorId` 1 with `errorCode` and `errorDescription`, always with HTTP 200.

use serde_json::{Map, Value, json};

use super::names::TaskApiDialect;
use crate::model::{Answer, AnswerShape, Kind, points};
use crate::wire::inphp::codes;

/// No `task` object or no `type` in it.
pub const TASK_ABSENT: &str = "ERROR_TASK_ABSENT";
/// A task type the gateway does not solve.
pub const TASK_NOT_SUPPORTED: &str = "ERROR_TASK_NOT_SUPPORTED";
/// An unknown or expired task id (sic: the protocol spells it so).
pub const NO_SUCH_CAPCHA_ID: &str = "ERROR_NO_SUCH_CAPCHA_ID";
/// A request body that is not a JSON object.
pub const BAD_REQUEST: &str = "ERROR_BAD_REQUEST";

/// The code a JSON-protocol client expects for a code of the compatible API: the two protocols
/// name a few conditions differently.
pub fn json_code(compat_code: &str) -> &str {
    match compat_code {
        codes::WRONG_USER_KEY => codes::KEY_DOES_NOT_EXIST,
        codes::WRONG_CAPTCHA_ID | codes::WRONG_ID_FORMAT => NO_SUCH_CAPCHA_ID,
        codes::GOOGLEKEY => "ERROR_RECAPTCHA_INVALID_SITEKEY",
        other => other,
    }
}

/// A plain description for the codes callers meet; the code itself for the rest.
fn description(code: &str) -> &str {
    match code {
        codes::KEY_DOES_NOT_EXIST => "clientKey is not a key of this gateway",
        codes::NO_SLOT_AVAILABLE => "no free slot; try again in a few seconds",
        NO_SUCH_CAPCHA_ID => "no task with this taskId for this key (unknown or expired)",
        codes::CAPTCHA_UNSOLVABLE => "the task could not be solved in time",
        TASK_NOT_SUPPORTED => "this task type is not supported",
        _ => code,
    }
}

/// `{"errorId":1,"errorCode":...,"errorDescription":...}`. `detail`, where given, is a message
/// written by the gateway (never caller input or a secret) and replaces the stock description.
pub fn error_body(code: &str, detail: Option<&str>) -> Value {
    let code = json_code(code);
    json!({
        "errorId": 1,
        "errorCode": code,
        "errorDescription": detail.unwrap_or(description(code)),
    })
}

/// A task id as the protocol carries it: a number where it fits (anti-captcha and 2captcha
/// clients may do arithmetic on it), else a string.
pub fn task_id_value(id: &str) -> Value {
    match id.parse::<u64>() {
        Ok(n) => Value::from(n),
        Err(_) => Value::from(id),
    }
}

/// The solution object of an answer. Keys of every flavor are present, so a client of any of
/// them finds its own: `gRecaptchaResponse` and `token` for reCAPTCHA, `token` and
/// `cf_clearance` for a Cloudflare challenge, the GeeTest triple, `text` for images and text.
/// Points go in the caller's dialect's form: 2captcha's `{"x", "y"}` objects, else
/// anti-captcha's `[x, y]` pairs (the two cannot share a key).
pub fn solution(kind: Kind, answer: &Answer, dialect: TaskApiDialect) -> Value {
    let text = Value::String(answer.text.clone());
    let mut out = match kind {
        Kind::RecaptchaV2 | Kind::RecaptchaV3 => {
            json!({"gRecaptchaResponse": text, "token": text})
        }
        declared => match declared.spec().answer {
            shape @ AnswerShape::Token { fields, .. } => {
                let (token, extras) = shape.token_parts(&answer.text);
                let token = Value::String(token.into_owned());
                // A field inside an object (CapSolver's `cookies.cf_clearance`) is read, never
                // written: that object is more than the token (a cookie jar), and a client that
                // reads it expects all of it.
                let fields = fields
                    .iter()
                    .filter(|f| !f.contains('.'))
                    .map(|f| ((*f).to_owned(), token.clone()));
                let extras = extras.into_iter().map(|(k, v)| (k.to_owned(), v.into()));
                Value::Object(fields.chain(extras).collect())
            }
            AnswerShape::Object { .. } | AnswerShape::AsGiven => {
                match serde_json::from_str(&answer.text) {
                    Ok(object @ Value::Object(_)) => object,
                    _ => json!({"text": text}),
                }
            }
            AnswerShape::Points { field } => {
                let objects = dialect == TaskApiDialect::TwoCaptchaV2;
                json!({ field: points::task_list(&answer.text, objects) })
            }
        },
    };
    if let (Some(ua), Value::Object(map)) = (&answer.user_agent, &mut out) {
        map.insert("userAgent".into(), Value::String(ua.clone()));
    }
    out
}

/// An upstream solution as the answer text the engine stores, with its user agent: the inverse
/// of [`solution`]. `None` when the object lacks the field this kind needs.
pub fn read_solution(kind: Kind, solution: &Value) -> Option<(String, Option<String>)> {
    let field = |name: &str| {
        solution
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let text = match kind {
        Kind::RecaptchaV2 | Kind::RecaptchaV3 => {
            field("gRecaptchaResponse").or_else(|| field("token"))?
        }
        declared => match declared.spec().answer {
            // The token, with what the kind keeps beside it (hCaptcha's `respKey`).
            shape @ AnswerShape::Token { fields, .. } => {
                fields
                    .iter()
                    .find_map(|f| AnswerShape::field(solution, f).filter(|t| !t.is_empty()))?;
                shape.canonical(solution.to_string())
            }
            // Whole, as the provider gave it.
            AnswerShape::AsGiven => solution.to_string(),
            AnswerShape::Points { field } => {
                points::read(&solution.to_string(), field)?.to_string()
            }
            AnswerShape::Object { keys, .. } => {
                let object: Map<String, Value> = keys
                    .iter()
                    .map(|k| Some(((*k).to_owned(), solution.get(*k)?.clone())))
                    .collect::<Option<_>>()?;
                Value::Object(object).to_string()
            }
        },
    };
    Some((text, field("userAgent")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str, ua: Option<&str>) -> Answer {
        Answer {
            text: text.into(),
            user_agent: ua.map(str::to_owned),
            solved_at: 1,
            expires_at: 2,
            upstream: None,
        }
    }

    /// hCaptcha's `respKey` is written beside the token in every dialect's solution and read
    /// back with it; an answer without one is written without it.
    #[test]
    fn a_key_kept_beside_the_token_is_written_and_read_back() {
        let a = answer(r#"{"respKey":"E0_k","token":"P1_t"}"#, Some("UA/1"));
        for dialect in [TaskApiDialect::AntiCaptcha, TaskApiDialect::TwoCaptchaV2] {
            let s = solution(Kind::Hcaptcha, &a, dialect);
            assert_eq!(
                s,
                json!({"gRecaptchaResponse": "P1_t", "token": "P1_t", "respKey": "E0_k",
                    "userAgent": "UA/1"})
            );
            assert_eq!(
                read_solution(Kind::Hcaptcha, &s),
                Some((a.text.clone(), Some("UA/1".to_owned())))
            );
        }
        let bare = solution(
            Kind::Hcaptcha,
            &answer("P1_t", None),
            TaskApiDialect::AntiCaptcha,
        );
        assert_eq!(bare, json!({"gRecaptchaResponse": "P1_t", "token": "P1_t"}));
    }

    /// A clearance inside CapSolver's `cookies` object is read, by the kind and by the poller
    /// that does not know the kind; the gateway's own solutions carry it at the top level only.
    #[test]
    fn a_clearance_is_read_from_inside_cookies_and_written_at_the_top() {
        let capsolver = json!({"cookies": {"cf_clearance": "cf-1", "__cf_bm": "bm"},
            "userAgent": "UA/2"});
        let read = Some(("cf-1".to_owned(), Some("UA/2".to_owned())));
        assert_eq!(read_solution(Kind::CloudflareChallenge, &capsolver), read);
        let a = answer("cf-1", Some("UA/2"));
        let written = solution(Kind::CloudflareChallenge, &a, TaskApiDialect::CapSolver);
        assert_eq!(
            written,
            json!({"cf_clearance": "cf-1", "token": "cf-1", "userAgent": "UA/2"})
        );
        assert_eq!(read_solution(Kind::CloudflareChallenge, &written), read);
    }

    #[test]
    fn every_kind_reads_back_what_it_wrote() {
        for kind in Kind::ALL {
            let text = match kind.spec().answer {
                AnswerShape::Object { keys, .. } => Value::Object(
                    keys.iter()
                        .map(|k| ((*k).to_owned(), Value::from(format!("v-{k}"))))
                        .collect(),
                )
                .to_string(),
                AnswerShape::Token { .. } => "tok-1".to_owned(),
                AnswerShape::AsGiven => json!({"cell": [1, 2], "token": "t"}).to_string(),
                AnswerShape::Points { .. } => "[[1,2],[30,40]]".to_owned(),
            };
            let a = answer(&text, Some("UA/1"));
            let (back, ua) = read_solution(kind, &solution(kind, &a, TaskApiDialect::AntiCaptcha))
                .expect("reads");
            // 2captcha's other form of points reads back the same.
            let (again, _) = read_solution(kind, &solution(kind, &a, TaskApiDialect::TwoCaptchaV2))
                .expect("reads");
            assert_eq!(back, again, "{kind}");
            assert_eq!(ua.as_deref(), Some("UA/1"), "{kind}");
            if kind.spec().answer.is_object() {
                let (back, sent): (Value, Value) = (
                    serde_json::from_str(&back).unwrap(),
                    serde_json::from_str(&text).unwrap(),
                );
                if matches!(kind.spec().answer, AnswerShape::AsGiven) {
                    // Whole, with the user agent the solution carried.
                    let mut with_agent = sent.clone();
                    with_agent["userAgent"] = Value::from("UA/1");
                    assert_eq!(back, with_agent, "{kind}");
                } else {
                    assert_eq!(back, sent, "{kind}");
                }
            } else {
                assert_eq!(back, "tok-1", "{kind}");
            }
        }
        assert_eq!(read_solution(Kind::Turnstile, &json!({"text": "x"})), None);
        assert_eq!(
            read_solution(Kind::GeetestV3, &json!({"challenge": "c"})),
            None
        );
    }

    #[test]
    fn errors_use_the_protocols_codes() {
        let body = error_body(codes::WRONG_USER_KEY, None);
        assert_eq!(body["errorId"], 1);
        assert_eq!(body["errorCode"], codes::KEY_DOES_NOT_EXIST);
        assert_eq!(
            error_body(codes::WRONG_CAPTCHA_ID, None)["errorCode"],
            NO_SUCH_CAPCHA_ID
        );
        assert_eq!(task_id_value("123"), json!(123));
        assert_eq!(
            task_id_value("99999999999999999999"),
            json!("99999999999999999999")
        );
    }
}
