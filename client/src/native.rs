//! The native JSON API's bodies (docs/API.md "Native JSON API"): what a call sends and what
//! it gets back.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The kinds of CAPTCHA the gateway solves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Kind {
    RecaptchaV2,
    RecaptchaV3,
    Turnstile,
    CloudflareChallenge,
    GeetestV3,
    Image,
    Text,
}

/// One CAPTCHA to solve: the body of `POST /v1/solve` and `POST /v1/tasks`.
#[derive(Clone, Debug, PartialEq)]
pub struct SolveRequest {
    kind: Kind,
    params: Map<String, Value>,
    timeout: Option<Duration>,
    idempotency_key: Option<String>,
}

impl SolveRequest {
    /// A request of `kind` with no parameters yet; add them with [`param`](Self::param).
    pub fn new(kind: Kind) -> Self {
        Self {
            kind,
            params: Map::new(),
            timeout: None,
            idempotency_key: None,
        }
    }

    /// reCAPTCHA v2 on `pageurl` with the site's `sitekey`.
    pub fn recaptcha_v2(sitekey: &str, pageurl: &str) -> Self {
        Self::new(Kind::RecaptchaV2)
            .param("sitekey", sitekey)
            .param("pageurl", pageurl)
    }

    /// Turnstile on `pageurl` with the site's `sitekey`.
    pub fn turnstile(sitekey: &str, pageurl: &str) -> Self {
        Self::new(Kind::Turnstile)
            .param("sitekey", sitekey)
            .param("pageurl", pageurl)
    }

    /// Sets a parameter under its compatible-API name (`sitekey`, `pageurl`, `action`,
    /// `min_score`, `proxy`, `body`, ...). `kind` and `timeout_s` are set by their own methods.
    pub fn param(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.params.insert(name.to_owned(), value.into());
        self
    }

    /// How long the gateway may work on it (`timeout_s`; the gateway takes more than 0 and at
    /// most 600 s, and answers 400 `bad_timeout` otherwise). Without it, the gateway's 180 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The call's own `Idempotency-Key`: a repeat with it, from any caller of the tenant, joins
    /// the same task. Without one the client generates a key per call (unless
    /// `generated_idempotency_keys(false)`), which only its own retries use; see docs/CLIENTS.md.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub(crate) fn key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// The gateway's deadline for this call, for the client's own HTTP timeout.
    pub(crate) fn deadline(&self) -> Duration {
        self.timeout.unwrap_or(Duration::from_secs(180))
    }

    pub(crate) fn body(&self) -> Value {
        let mut body = self.params.clone();
        body.insert(
            "kind".into(),
            serde_json::to_value(self.kind).unwrap_or(Value::Null),
        );
        if let Some(t) = self.timeout {
            body.insert("timeout_s".into(), Value::from(t.as_secs_f64()));
        }
        Value::Object(body)
    }
}

/// An answer: the body of a `200` from `POST /v1/solve`, or a ready task's `result`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct Solution {
    /// The token (a string), or GeeTest's object of `challenge`, `validate`, `seccode`.
    pub token: Value,
    pub kind: Kind,
    /// `pool`, `solved` or `shared`.
    pub source: String,
    pub solved_at: Option<String>,
    pub expires_at: Option<String>,
    pub user_agent: Option<String>,
    /// The upstream provider's task id.
    pub task_id: Option<String>,
}

impl Solution {
    /// The token as text, when it is one (every kind but GeeTest).
    pub fn token_text(&self) -> Option<&str> {
        self.token.as_str()
    }
}

/// A task submitted with [`crate::Client::submit`]: its id and the gateway that took it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRef {
    pub id: String,
    /// Base URL of the gateway that took it; it is asked first for the outcome.
    pub address: String,
}

/// Where a task is, from `GET /v1/tasks/{id}?wait=`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TaskState {
    Pending,
    Ready(Solution),
    /// The gateway's error code and message.
    Failed {
        code: String,
        message: String,
    },
}

#[derive(Deserialize)]
pub(crate) struct Submitted {
    pub task_id: String,
}

#[derive(Deserialize)]
pub(crate) struct TaskBody {
    pub status: String,
    pub result: Option<Solution>,
    pub error: Option<ErrorBody>,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct ErrorBody {
    pub code: String,
    #[serde(default)]
    pub message: String,
}

impl TaskBody {
    pub fn into_state(self) -> Result<TaskState, String> {
        match (self.status.as_str(), self.result, self.error) {
            ("pending", _, _) => Ok(TaskState::Pending),
            ("ready", Some(result), _) => Ok(TaskState::Ready(result)),
            ("failed", _, Some(e)) => Ok(TaskState::Failed {
                code: e.code,
                message: e.message,
            }),
            (status, _, _) => Err(format!(
                "task status {status:?} without its result or error"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_body_has_kind_params_and_timeout() {
        let req = SolveRequest::recaptcha_v2("6Le", "https://example.com/")
            .param("action", "login")
            .timeout(Duration::from_millis(2500));
        assert_eq!(
            req.body(),
            json!({"kind": "recaptcha_v2", "sitekey": "6Le", "pageurl": "https://example.com/",
                   "action": "login", "timeout_s": 2.5})
        );
    }

    #[test]
    fn task_bodies_become_states_or_say_what_is_missing() {
        let ready: TaskBody = serde_json::from_value(json!({"task_id": "1", "status": "ready",
            "result": {"token": "t", "kind": "turnstile", "source": "solved"}}))
        .unwrap();
        assert!(
            matches!(ready.into_state(), Ok(TaskState::Ready(s)) if s.token_text() == Some("t"))
        );
        let failed: TaskBody = serde_json::from_value(json!({"status": "failed",
            "error": {"code": "ERROR_CAPTCHA_UNSOLVABLE", "message": "m"}}))
        .unwrap();
        assert!(
            matches!(failed.into_state(), Ok(TaskState::Failed { code, .. }) if code == "ERROR_CAPTCHA_UNSOLVABLE")
        );
        let broken: TaskBody = serde_json::from_value(json!({"status": "ready"})).unwrap();
        assert!(broken.into_state().is_err());
    }
}
