use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::codes;
use crate::model::{Answer, AnswerShape, Kind, points};

/// Plain text unless the client sent `json=1` (docs/PROTOCOL.md item 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Plain,
    Json,
}

impl Mode {
    pub fn from_json_flag(json: bool) -> Mode {
        if json { Mode::Json } else { Mode::Plain }
    }
}

/// One compatible-API reply. Always HTTP 200 (item 4) with `Access-Control-Allow-Origin: *`
/// (item 15); the body shapes are exact because clients compare strings.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    mode: Mode,
    body: Body,
}

#[derive(Debug, Clone, PartialEq)]
enum Body {
    /// `OK|<payload>` / `{"status":1,"request":"<payload>"}`.
    Ok(String),
    /// A bare word: `CAPCHA_NOT_READY`, `OK_REPORT_RECORDED`, a balance / `status` 0 or 1.
    Bare { text: String, status: u8 },
    /// A solved answer with the extra fields some clients read.
    Answer {
        request: Value,
        plain: String,
        extra: serde_json::Map<String, Value>,
    },
    /// A JSON document answered as is in both modes (`threadsinfo`).
    Document(Value),
}

/// A stored answer as `in.php` writes it in plain text (after `OK|`, or as one part of an
/// `ids=` batch): points as `coordinates:x=..,y=..;..`, a token without what is kept beside it
/// (plain text has no room for hCaptcha's `respKey`), anything else as stored.
pub fn plain_answer(kind: Kind, text: String) -> String {
    match kind.spec().answer {
        AnswerShape::Points { .. } => points::inphp_plain(&text),
        shape @ AnswerShape::Token { extras, .. } if !extras.is_empty() => {
            shape.token_parts(&text).0.into_owned()
        }
        _ => text,
    }
}

impl Reply {
    pub fn ok(mode: Mode, payload: impl Into<String>) -> Reply {
        Reply {
            mode,
            body: Body::Ok(payload.into()),
        }
    }

    pub fn error(mode: Mode, code: &str) -> Reply {
        Reply {
            mode,
            body: Body::Bare {
                text: code.to_owned(),
                status: 0,
            },
        }
    }

    /// An error whose reason the caller can act on (which parameter, why): in JSON mode beside
    /// the code as `error_text`, as 2captcha's own JSON replies give one; the plain form is the
    /// code alone, all that protocol has room for.
    pub fn error_because(mode: Mode, code: &str, reason: &str) -> Reply {
        match mode {
            Mode::Plain => Reply::error(mode, code),
            Mode::Json => Reply::document(json!({
                "status": 0,
                "request": code,
                "error_text": reason,
            })),
        }
    }

    pub fn not_ready(mode: Mode) -> Reply {
        Reply::error(mode, codes::NOT_READY)
    }

    /// A bare success word or number (`getbalance`, reports): no `OK|` prefix in plain mode.
    pub fn bare(mode: Mode, text: impl Into<String>) -> Reply {
        Reply {
            mode,
            body: Body::Bare {
                text: text.into(),
                status: 1,
            },
        }
    }

    pub fn document(value: Value) -> Reply {
        Reply {
            mode: Mode::Json,
            body: Body::Document(value),
        }
    }

    /// A solved answer: `request` always; `result` only for the kinds whose answer CaptchaAI
    /// documents there (reCAPTCHA, for its Enterprise variants, which the stored answer does not
    /// tell apart, and Cloudflare Challenge; the captchaai SDK reads it, item 10); the user agent
    /// an answer is bound to as `user_agent` (CaptchaAI's name) and `useragent` (2captcha's); the
    /// caller's provider cannot be told from its request, so both. The `request` of a kind whose
    /// answer is an object (GeeTest, Lemin) is that object in JSON mode; points are
    /// `coordinates:x=..,y=..;..` in plain mode and an array of `{"x", "y"}` in JSON mode, as
    /// 2captcha writes them; `price` for `get2`. Nothing else (item 17).
    pub fn answer(mode: Mode, kind: Kind, answer: &Answer, price: Option<&str>) -> Reply {
        let request = match kind.spec().answer {
            AnswerShape::Points { .. } => points::inphp_json(&answer.text),
            _ => kind.answer_value(&answer.text),
        };
        let plain = plain_answer(kind, answer.text.clone());
        let mut extra = serde_json::Map::new();
        if kind.spec().inphp_result {
            extra.insert("result".into(), Value::String(answer.text.clone()));
        }
        if let Some(ua) = &answer.user_agent {
            extra.insert("user_agent".into(), Value::String(ua.clone()));
            extra.insert("useragent".into(), Value::String(ua.clone()));
        }
        if let Some(price) = price {
            extra.insert("price".into(), Value::String(price.to_owned()));
        }
        // Beside `request`, as 2captcha writes hCaptcha's `respKey`.
        for (key, value) in kind.spec().answer.token_parts(&answer.text).1 {
            extra.insert(key.into(), Value::String(value));
        }
        Reply {
            mode,
            body: Body::Answer {
                request,
                plain,
                extra,
            },
        }
    }

    /// The `ids=` batch form: every part joined by `|` in request order (answers as
    /// [`plain_answer`] writes them).
    pub fn batch(mode: Mode, parts: Vec<String>) -> Reply {
        Reply::ok(mode, parts.join("|"))
    }

    /// `ok`, or the code an error or status reply carries: a bounded set, safe as a metric label.
    pub fn outcome(&self) -> &str {
        match &self.body {
            Body::Bare { text, status: 0 } => text,
            // An error with `error_text` (tenant limits) is a document with status 0.
            Body::Document(v) if v["status"] == 0 => v["request"].as_str().unwrap_or("error"),
            _ => "ok",
        }
    }

    pub fn body_text(&self) -> String {
        match (&self.body, self.mode) {
            (Body::Ok(p), Mode::Plain) => format!("OK|{p}"),
            (Body::Ok(p), Mode::Json) => json!({"status": 1, "request": p}).to_string(),
            (Body::Bare { text, .. }, Mode::Plain) => text.clone(),
            (Body::Bare { text, status }, Mode::Json) => {
                json!({"status": status, "request": text}).to_string()
            }
            (Body::Answer { plain, .. }, Mode::Plain) => format!("OK|{plain}"),
            (Body::Answer { request, extra, .. }, Mode::Json) => {
                let mut obj = serde_json::Map::new();
                obj.insert("status".into(), json!(1));
                obj.insert("request".into(), request.clone());
                obj.extend(extra.clone());
                Value::Object(obj).to_string()
            }
            (Body::Document(v), _) => v.to_string(),
        }
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let content_type = match self.mode {
            Mode::Json => "application/json",
            Mode::Plain => "text/plain; charset=utf-8",
        };
        let mut res = (StatusCode::OK, self.body_text()).into_response();
        let headers = res.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str, ua: Option<&str>) -> Answer {
        Answer {
            text: text.into(),
            user_agent: ua.map(Into::into),
            solved_at: 0,
            expires_at: 1,
            upstream: None,
        }
    }

    #[test]
    fn exact_bodies() {
        assert_eq!(Reply::ok(Mode::Plain, "123").body_text(), "OK|123");
        assert_eq!(
            Reply::ok(Mode::Json, "123").body_text(),
            r#"{"request":"123","status":1}"#
        );
        assert_eq!(
            Reply::not_ready(Mode::Plain).body_text(),
            "CAPCHA_NOT_READY"
        );
        assert_eq!(
            Reply::not_ready(Mode::Json).body_text(),
            r#"{"request":"CAPCHA_NOT_READY","status":0}"#
        );
        assert_eq!(Reply::bare(Mode::Plain, "10.5").body_text(), "10.5");
        assert_eq!(
            Reply::error(Mode::Plain, codes::WRONG_CAPTCHA_ID).body_text(),
            "ERROR_WRONG_CAPTCHA_ID"
        );
    }

    #[test]
    fn answers_carry_result_user_agent_and_geetest_objects() {
        let a = answer("cf-cookie", Some("Mozilla/5.0"));
        let v: Value = serde_json::from_str(
            &Reply::answer(Mode::Json, Kind::CloudflareChallenge, &a, None).body_text(),
        )
        .unwrap();
        assert_eq!(v["status"], 1);
        assert_eq!(v["request"], "cf-cookie");
        assert_eq!(v["result"], "cf-cookie");
        assert_eq!(v["user_agent"], "Mozilla/5.0");
        assert_eq!(
            Reply::answer(Mode::Plain, Kind::CloudflareChallenge, &a, None).body_text(),
            "OK|cf-cookie"
        );

        let g = answer(r#"{"geetest_challenge":"c","challenge":"c"}"#, None);
        let v: Value = serde_json::from_str(
            &Reply::answer(Mode::Json, Kind::GeetestV3, &g, Some("0.001")).body_text(),
        )
        .unwrap();
        assert_eq!(v["request"]["geetest_challenge"], "c");
        assert_eq!(v["price"], "0.001");
        assert!(v.get("result").is_none(), "{v}");

        // hCaptcha's `respKey` beside `request` in JSON mode, as 2captcha writes it; plain text
        // has room for the token alone, and so has an `ids=` part.
        let h = answer(r#"{"token":"P1_t","respKey":"E0_k"}"#, Some("UA/2"));
        let v: Value =
            serde_json::from_str(&Reply::answer(Mode::Json, Kind::Hcaptcha, &h, None).body_text())
                .unwrap();
        assert_eq!(
            (&v["request"], &v["respKey"]),
            (&json!("P1_t"), &json!("E0_k"))
        );
        assert_eq!(
            Reply::answer(Mode::Plain, Kind::Hcaptcha, &h, None).body_text(),
            "OK|P1_t"
        );
        assert_eq!(plain_answer(Kind::Hcaptcha, h.text.clone()), "P1_t");
        let bare = answer("P1_t", None);
        let v: Value = serde_json::from_str(
            &Reply::answer(Mode::Json, Kind::Hcaptcha, &bare, None).body_text(),
        )
        .unwrap();
        assert!(v.get("respKey").is_none(), "{v}");
    }
}
