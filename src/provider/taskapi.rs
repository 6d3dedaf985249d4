//! The JSON task protocol upstream (`createTask` / `getTaskResult` / `getBalance`): anti-captcha,
//! CapSolver and 2captcha's v2 API, over reqwest (docs/API.md, "JSON task protocol").
//!
//! Owns: the endpoints per flavor, the key (in the JSON body only, never in a URL, log line,
//! error or `Debug` output), reading replies leniently (HTML error pages, non-JSON bodies, HTTP
//! statuses) into classified [`ProviderError`]s, and the flavor's limits. Does not own: retries,
//! thread caps or poll timing (`account`, `poller`); the wire format is [`crate::taskapi`].
//!
//! The protocol has no batch check, so [`Provider::supports_batch`] is false and the poller asks
//! about one task per request. CapSolver answers at most 120 checks per task
//! ([`TaskApiDialect::max_checks_per_task`]): the client counts them (`checks`) and ends a task
//! past that without asking, whatever poll budget the account is configured with (20 by default).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use serde_json::{Map, Value};
use url::Url;

use super::classify::code_error;
use super::error::{ErrorClass, ProviderError};
use super::exchange;
use super::parse::{BAD_RESPONSE, snippet};
use super::{PollOutcome, Provider, ThreadsInfo};
use crate::model::{SolveRequest, TaskParams};
use crate::wire::inphp::InPhpDialect;
use crate::wire::inphp::codes;
use crate::wire::taskapi::TaskApiDialect;
use crate::wire::taskapi::{beside_task, encode_task};

/// The code of [`TaskApiProvider::threads_info`]'s error: this protocol has no way to ask for the
/// plan's threads, so the figure is unknown (configure `threads`).
pub const NO_THREADS_INFO: &str = "NO_THREADS_INFO";
/// The code of a report the flavor has no call for.
pub const NO_REPORTS: &str = "NO_REPORTS";
/// Replies are small; a solution is a few kB. Past this the body is not a reply we can use.
const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Answers CapSolver returned with `createTask` (images are solved synchronously) wait here for
/// the first check; each is taken by that check. Past this many, the rest are checked upstream
/// like any task, so a caller that never polls cannot grow it.
const MAX_EARLY_ANSWERS: usize = 1024;
/// An early answer nobody checked by then belongs to a solve that was cancelled before its
/// first check: forgotten, so a week of cancellations cannot fill the map.
const EARLY_ANSWER_KEPT: Duration = Duration::from_secs(600);

/// One account at a JSON task protocol provider.
pub struct TaskApiProvider {
    flavor: TaskApiDialect,
    base: Url,
    key: String,
    name: String,
    http: reqwest::Client,
    early: Mutex<HashMap<String, (PollOutcome, Instant)>>,
    local_ids: AtomicU64,
    checks: checks::CheckBudget,
}

impl fmt::Debug for TaskApiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // By hand, so the key (and any credentials in the base URL) never reach a log.
        f.debug_struct("TaskApiProvider")
            .field("flavor", &self.flavor)
            .field("name", &self.name)
            .field("base", &self.base.origin().ascii_serialization())
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Codes of these providers whose class is not what the shared table
/// ([`classify`](super::classify)) gives them. CapSolver's names are its own.
const CLASSES: &[(&str, ErrorClass)] = &[
    ("ERROR_KEY_DENIED_ACCESS", ErrorClass::Account),
    ("ERROR_SETTLEMENT_FAILED", ErrorClass::Account),
    ("ERROR_IP_BANNED", ErrorClass::Account),
    ("ERROR_ACCOUNT_SUSPENDED", ErrorClass::Account),
    ("ERROR_RATE_LIMIT", ErrorClass::Capacity),
    ("ERROR_TOO_MUCH_REQUESTS", ErrorClass::Capacity),
    ("ERROR_SERVICE_UNAVALIABLE", ErrorClass::Transient),
    ("ERROR_SERVICE_UNAVAILABLE", ErrorClass::Transient),
    ("ERROR_PROXY_CONNECT_REFUSED", ErrorClass::Transient),
    ("ERROR_PROXY_CONNECT_TIMEOUT", ErrorClass::Transient),
    ("ERROR_PROXY_READ_TIMEOUT", ErrorClass::Transient),
    ("ERROR_RECAPTCHA_TIMEOUT", ErrorClass::Transient),
];

/// The class of a provider code. In these protocols `ERROR_ZERO_BALANCE` means no money, as at
/// 2captcha, so the shared table is read with 2captcha's meanings.
pub fn classify_code(code: &str, detail: impl Into<String>) -> ProviderError {
    let mut err = code_error(code, InPhpDialect::TwoCaptcha, detail);
    if let Some((_, class)) = CLASSES.iter().find(|(c, _)| *c == code) {
        err.class = *class;
    }
    err
}

impl TaskApiProvider {
    /// An account at `base_url` (the calls are resolved under it: `{base}/createTask`). `name` is
    /// what logs and metrics call it; `http` should carry a connect timeout (see
    /// `InPhpProvider::http_client`); every request here sets the 30 s request timeout itself.
    pub fn new(
        flavor: TaskApiDialect,
        base_url: Url,
        key: String,
        name: String,
        http: reqwest::Client,
    ) -> Self {
        let mut base = base_url;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        Self {
            flavor,
            base,
            key,
            name,
            http,
            early: Mutex::new(HashMap::new()),
            local_ids: AtomicU64::new(1),
            checks: checks::CheckBudget::new(flavor.max_checks_per_task()),
        }
    }

    pub fn flavor(&self) -> TaskApiDialect {
        self.flavor
    }

    /// One call: `body` plus `clientKey`, POSTed as JSON; the reply's object when `errorId` is
    /// 0, else the classified error.
    async fn call(
        &self,
        method: &str,
        mut body: Map<String, Value>,
    ) -> Result<Map<String, Value>, ProviderError> {
        body.insert("clientKey".into(), Value::String(self.key.clone()));
        let url = self.base.join(method).unwrap_or_else(|_| self.base.clone());
        let request = self.http.post(url).json(&Value::Object(body));
        let (status, text) = self.send(request).await?;
        self.redact_result(read_reply(status, &text))
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<(u16, String), ProviderError> {
        exchange::send(request, MAX_BODY_BYTES, &self.key).await
    }

    fn redact(&self, err: ProviderError) -> ProviderError {
        exchange::redact(err, &self.key)
    }

    fn redact_result<T>(&self, r: Result<T, ProviderError>) -> Result<T, ProviderError> {
        r.map_err(|e| self.redact(e))
    }

    fn keep_early(&self, id: &str, outcome: PollOutcome) {
        let mut early = self
            .early
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if early.len() >= MAX_EARLY_ANSWERS {
            early.retain(|_, (_, at)| now.duration_since(*at) < EARLY_ANSWER_KEPT);
        }
        if early.len() < MAX_EARLY_ANSWERS {
            early.insert(id.to_owned(), (outcome, now));
        }
    }

    fn take_early(&self, id: &str) -> Option<PollOutcome> {
        self.early
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id)
            .map(|(outcome, _)| outcome)
    }

    async fn poll_one(&self, id: &str) -> Result<PollOutcome, ProviderError> {
        if let Some(outcome) = self.take_early(id) {
            return Ok(outcome);
        }
        if !self.checks.take(id) {
            // The provider would refuse this check; the task ends as one that ran out of time.
            self.checks.forget(id);
            return Ok(PollOutcome::Failed(ProviderError::new(
                ErrorClass::Permanent,
                codes::CAPTCHA_UNSOLVABLE,
                format!(
                    "{} answers no more checks of this task",
                    self.flavor.as_str()
                ),
            )));
        }
        let (upstream_id, whole) = split_whole(id);
        let mut body = Map::new();
        body.insert("taskId".into(), task_id_json(self.flavor, upstream_id));
        let outcome = match self.call("getTaskResult", body).await {
            Ok(reply) => outcome_of(&reply, whole),
            // About this task (unsolvable, unknown id, bad parameters): it ends.
            Err(e) if e.class == ErrorClass::Permanent => PollOutcome::Failed(e),
            Err(e) => return Err(e),
        };
        let ended = match &outcome {
            PollOutcome::NotReady => false,
            PollOutcome::Ready { .. } => true,
            PollOutcome::Failed(e) => !e.class.is_retryable(),
        };
        if ended {
            self.checks.forget(id);
        }
        Ok(outcome)
    }
}

/// What a pass-through task's id starts with here: its answer is the whole solution, as the
/// provider gave it, which a `getTaskResult` reply alone does not tell. Carried in the id, so
/// an instance that adopts the task reads it the same way.
const WHOLE: &str = "whole-";

/// The provider's id, and whether the answer is the whole solution.
fn split_whole(id: &str) -> (&str, bool) {
    match id.strip_prefix(WHOLE) {
        Some(upstream_id) => (upstream_id, true),
        None => (id, false),
    }
}

/// A task id back as the provider sent it: CapSolver's are strings (UUIDs); the others' a
/// number where it is one, else the string.
fn task_id_json(flavor: TaskApiDialect, id: &str) -> Value {
    if flavor == TaskApiDialect::CapSolver {
        return Value::from(id);
    }
    match id.parse::<u64>() {
        Ok(n) => Value::from(n),
        Err(_) => Value::from(id),
    }
}

/// Task ids go back into request bodies and our own records: plain tokens only (digits for
/// anti-captcha and 2captcha, a UUID for CapSolver).
fn is_task_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Reads one reply: an HTTP failure, a body that is not a JSON object, an `errorId` with its
/// code, or the object itself.
fn read_reply(status: u16, body: &str) -> Result<Map<String, Value>, ProviderError> {
    let parsed = serde_json::from_str::<Value>(body.trim());
    if status == 429 || (500..=599).contains(&status) {
        return Err(classify_code(&format!("HTTP_{status}"), snippet(body)));
    }
    let Ok(Value::Object(map)) = parsed else {
        let code = if (200..=299).contains(&status) {
            BAD_RESPONSE.to_owned()
        } else {
            format!("HTTP_{status}")
        };
        return Err(classify_code(&code, snippet(body)));
    };
    let error_id = match map.get("errorId") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => n.as_i64().unwrap_or(1),
        // CapSolver and some proxies send it as a string.
        Some(Value::String(s)) => s.trim().parse().unwrap_or(1),
        Some(_) => 1,
    };
    if error_id == 0 {
        return Ok(map);
    }
    let code = map
        .get("errorCode")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty() && c.len() <= 64)
        .unwrap_or(BAD_RESPONSE);
    let detail = map
        .get("errorDescription")
        .and_then(Value::as_str)
        .map(snippet)
        .unwrap_or_default();
    Err(classify_code(code, detail))
}

/// What a `getTaskResult` (or a synchronous `createTask`) reply says about its task.
/// `whole`: the answer is the solution object itself (a pass-through task's).
fn outcome_of(reply: &Map<String, Value>, whole: bool) -> PollOutcome {
    let read = |solution: &Value| {
        if whole {
            let user_agent = solution.get("userAgent").and_then(Value::as_str);
            solution
                .is_object()
                .then(|| (solution.to_string(), user_agent.map(str::to_owned)))
        } else {
            read_any_solution(solution)
        }
    };
    match reply.get("status").and_then(Value::as_str) {
        Some("ready") => match reply.get("solution").and_then(read) {
            Some((text, user_agent)) => PollOutcome::Ready {
                text,
                user_agent,
                price: reply.get("cost").and_then(|c| match c {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                }),
            },
            None => PollOutcome::Failed(ProviderError::new(
                ErrorClass::Transient,
                BAD_RESPONSE,
                "a ready task without a solution this gateway can read",
            )),
        },
        // `processing`, CapSolver's `idle`, or a missing status: not done yet.
        _ => PollOutcome::NotReady,
    }
}

/// A solution object as the answer text the engine stores, whichever kind it is: the poller does
/// not know the kind. A token is told by its field (most specific first: reCAPTCHA's, a
/// Cloudflare clearance, then a plain `token` or `text`); any other object is kept whole, as its
/// JSON text, for the kind's declaration to read (`AnswerShape::canonical`, where the task's
/// kind is known); so is one carrying a key a kind keeps beside its token (hCaptcha's
/// `respKey`).
fn read_any_solution(solution: &Value) -> Option<(String, Option<String>)> {
    use crate::model::AnswerShape;
    if AnswerShape::any_extra(|k| solution.get(k).is_some_and(Value::is_string)) {
        return whole_solution(solution);
    }
    const TOKEN_FIELDS: [&str; 5] = [
        "gRecaptchaResponse",
        "cf_clearance",
        "cookies.cf_clearance",
        "token",
        "text",
    ];
    let Some(token) = TOKEN_FIELDS
        .into_iter()
        .find_map(|f| AnswerShape::field(solution, f).filter(|t| !t.is_empty()))
    else {
        return whole_solution(solution);
    };
    let user_agent = AnswerShape::field(solution, "userAgent").map(str::to_owned);
    Some((token.to_owned(), user_agent))
}

/// A solution kept whole, as its JSON text, with its user agent; `None` for an empty one.
fn whole_solution(solution: &Value) -> Option<(String, Option<String>)> {
    let whole = solution.as_object().filter(|o| !o.is_empty())?;
    let user_agent = whole
        .get("userAgent")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some((solution.to_string(), user_agent))
}

#[async_trait]
impl Provider for TaskApiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn submit(&self, req: &SolveRequest) -> Result<String, ProviderError> {
        let task = encode_task(self.flavor, req).map_err(|e| {
            ProviderError::new(
                ErrorClass::Permanent,
                "ERROR_TASK_NOT_SUPPORTED",
                e.to_string(),
            )
        })?;
        let mut body = beside_task(self.flavor, req);
        body.insert("task".into(), task);
        let reply = self.call("createTask", body).await?;
        let whole = matches!(req.params, TaskParams::Passthrough(_));
        let marked = |id: String| if whole { format!("{WHOLE}{id}") } else { id };
        let ready_now = reply.get("status").and_then(Value::as_str) == Some("ready");
        if ready_now && reply.get("taskId").is_none_or(Value::is_null) {
            // Answered at once without an id: the answer is ours already, and retrying the
            // submit would pay for it twice. A local id carries it to the first check.
            let id = marked(format!(
                "local-{}",
                self.local_ids.fetch_add(1, Ordering::Relaxed)
            ));
            self.keep_early(&id, outcome_of(&reply, whole));
            return Ok(id);
        }
        let id = match reply.get("taskId") {
            Some(Value::Number(n)) => n.as_u64().map(|n| n.to_string()),
            Some(Value::String(s)) => Some(s.trim().to_owned()),
            _ => None,
        }
        .filter(|id| is_task_id(id))
        .ok_or_else(|| {
            ProviderError::new(
                ErrorClass::Transient,
                BAD_RESPONSE,
                "createTask answer has no task id",
            )
        })?;
        let id = marked(id);
        if ready_now {
            self.keep_early(&id, outcome_of(&reply, whole));
        }
        Ok(id)
    }

    async fn poll(
        &self,
        ids: &[String],
        _with_extras: bool,
    ) -> Result<Vec<PollOutcome>, ProviderError> {
        // No batch form: one request per id. A request-level failure stops the round and
        // marks the rest with it, so the poller checks them again later.
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match self.poll_one(id).await {
                Ok(outcome) => out.push(outcome),
                Err(e) if out.is_empty() && ids.len() == 1 => return Err(e),
                Err(e) => {
                    out.resize(ids.len(), PollOutcome::Failed(e));
                    break;
                }
            }
        }
        Ok(out)
    }

    async fn report(&self, task_id: &str, good: bool) -> Result<(), ProviderError> {
        // The poller does not know the task's kind; anti-captcha's reCAPTCHA calls are the ones
        // its users report through (its image report is for image tasks only).
        let method = match (self.flavor, good) {
            (TaskApiDialect::TwoCaptchaV2, true) => "reportCorrect",
            (TaskApiDialect::TwoCaptchaV2, false) => "reportIncorrect",
            (TaskApiDialect::AntiCaptcha, true) => "reportCorrectRecaptcha",
            (TaskApiDialect::AntiCaptcha, false) => "reportIncorrectRecaptcha",
            (TaskApiDialect::CapSolver, _) => {
                return Err(ProviderError::new(
                    ErrorClass::Permanent,
                    NO_REPORTS,
                    "CapSolver's protocol has no report call this gateway uses",
                ));
            }
        };
        let mut body = Map::new();
        body.insert(
            "taskId".into(),
            task_id_json(self.flavor, split_whole(task_id).0),
        );
        self.call(method, body).await.map(|_| ())
    }

    async fn balance(&self) -> Result<String, ProviderError> {
        let reply = self.call("getBalance", Map::new()).await?;
        match reply.get("balance") {
            Some(Value::Number(n)) => Ok(n.to_string()),
            Some(Value::String(s)) if s.trim().parse::<f64>().is_ok() => Ok(s.trim().to_owned()),
            _ => Err(ProviderError::new(
                ErrorClass::Transient,
                BAD_RESPONSE,
                "getBalance answer has no balance",
            )),
        }
    }

    async fn threads_info(&self) -> Result<ThreadsInfo, ProviderError> {
        Err(ProviderError::new(
            ErrorClass::Permanent,
            NO_THREADS_INFO,
            format!(
                "{} has no threadsinfo call; the plan's threads are unknown",
                self.flavor.as_str()
            ),
        ))
    }

    fn supports_batch(&self) -> bool {
        false
    }
}

mod checks;
#[cfg(test)]
mod tests;
