//! The `in.php`/`res.php` protocol family (CaptchaAI, 2captcha and compatibles;
//! docs/PROTOCOL.md "Upstream") over reqwest.
//!
//! Owns: URLs, the key, timeouts, body limits, batch polls with their single-id fallback, and
//! keeping the key out of every error, log line and `Debug` output (docs/ARCHITECTURE.md
//! promise 8).
//! Does not own: retries, thread caps or poll timing (`account`, `poller`).

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use serde_json::Value;
use url::Url;

use super::error::{ErrorClass, ProviderError};
use super::exchange::{self, CONNECT_TIMEOUT, REQUEST_TIMEOUT};
use super::parse::{BAD_RESPONSE, UpstreamReply, batch_reply, parse_reply};
use super::{PollOutcome, Provider, ThreadsInfo};
use crate::model::{Passthrough, SolveRequest, TaskParams};
use crate::wire::inphp::InPhpDialect;
use crate::wire::inphp::codes;
use crate::wire::inphp::{submit_files, submit_params};

/// Replies are small; a batch of 100 reCAPTCHA tokens is ~250 kB. Anything past this is not a
/// reply we can use, and reading it all would let a broken upstream exhaust memory.
const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// After this many consecutive batch answers that do not parse, stop batching for this account:
/// the provider evidently does not support `ids=` (unconfirmed for CaptchaAI).
const BATCH_GIVE_UP: u32 = 3;

/// One account at an `in.php`/`res.php` provider.
pub struct InPhpProvider {
    family: InPhpDialect,
    base: Url,
    in_url: Url,
    res_url: Url,
    key: String,
    name: String,
    http: reqwest::Client,
    batch_failures: AtomicU32,
}

impl fmt::Debug for InPhpProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // By hand, so the key (and any credentials in the base URL) never reach a log.
        f.debug_struct("InPhpProvider")
            .field("family", &self.family)
            .field("name", &self.name)
            .field("base", &self.base.origin().ascii_serialization())
            .field("key", &"<redacted>")
            .finish()
    }
}

impl InPhpProvider {
    /// An account at `base_url` (`/in.php` and `/res.php` are resolved under it). `name` is what
    /// logs and metrics call it; `http` should come from [`InPhpProvider::http_client`] or carry
    /// its own connect timeout (every request here sets the 30 s request timeout itself).
    pub fn new(
        family: InPhpDialect,
        base_url: Url,
        key: String,
        name: String,
        http: reqwest::Client,
    ) -> Self {
        let mut base = base_url;
        // `join` replaces the last path segment unless the path ends with `/`.
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let join = |file| base.join(file).unwrap_or_else(|_| base.clone());
        Self {
            family,
            in_url: join("in.php"),
            res_url: join("res.php"),
            base,
            key,
            name,
            http,
            batch_failures: AtomicU32::new(0),
        }
    }

    /// A client with the timeouts this protocol wants (connect 5 s, whole request 30 s).
    pub fn http_client() -> reqwest::Result<reqwest::Client> {
        reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()
    }

    pub fn family(&self) -> InPhpDialect {
        self.family
    }

    async fn submit_reply(&self, req: &SolveRequest) -> Result<UpstreamReply, ProviderError> {
        let mut form = submit_params(req);
        form.push(("key".into(), self.key.clone()));
        form.push(("json".into(), "1".to_owned()));
        // POST keeps the key and the (possibly large) image out of URLs.
        let request = self.http.post(self.in_url.clone());
        let files = submit_files(req);
        let request = if files.is_empty() {
            request.form(&form)
        } else {
            // A pass-through task's uploads go on as the caller sent them: multipart.
            let mut multipart = reqwest::multipart::Form::new();
            for (name, value) in form {
                multipart = multipart.text(name, value);
            }
            for (name, data) in files {
                let part = reqwest::multipart::Part::bytes(data.to_vec()).file_name(name.clone());
                multipart = multipart.part(name.clone(), part);
            }
            request.multipart(multipart)
        };
        self.exchange(request).await
    }

    /// One `res.php` GET with `key` and `json=1` added.
    async fn res(&self, params: &[(&str, &str)]) -> Result<UpstreamReply, ProviderError> {
        let (status, body) = self.res_raw(params).await?;
        Ok(self.redact_reply(parse_reply(self.family, status, &body)))
    }

    async fn res_raw(&self, params: &[(&str, &str)]) -> Result<(u16, String), ProviderError> {
        let mut query: Vec<(&str, &str)> = params.to_vec();
        query.push(("key", &self.key));
        query.push(("json", "1"));
        let request = self.http.get(self.res_url.clone()).query(&query);
        self.send(request).await
    }

    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<UpstreamReply, ProviderError> {
        let (status, body) = self.send(request).await?;
        Ok(self.redact_reply(parse_reply(self.family, status, &body)))
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<(u16, String), ProviderError> {
        exchange::send(request, MAX_BODY_BYTES, &self.key).await
    }

    fn redact(&self, err: ProviderError) -> ProviderError {
        exchange::redact(err, &self.key)
    }

    fn redact_reply(&self, reply: UpstreamReply) -> UpstreamReply {
        match reply {
            UpstreamReply::Error(e) => UpstreamReply::Error(self.redact(e)),
            other => other,
        }
    }

    async fn poll_one(&self, id: &str) -> Result<PollOutcome, ProviderError> {
        self.res(&[("action", "get"), ("id", id)])
            .await?
            .into_outcome()
    }

    /// One request per id. A request-level failure stops the round (hammering a rate-limited or
    /// broken endpoint with the rest would not help) and marks the remaining ids with it, so the
    /// poller checks them again later.
    async fn poll_each(&self, ids: &[String]) -> Vec<PollOutcome> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match self.poll_one(id).await {
                Ok(outcome) => out.push(outcome),
                Err(e) => {
                    out.resize(ids.len(), PollOutcome::Failed(e));
                    break;
                }
            }
        }
        out
    }

    async fn poll_batch(&self, ids: &[String]) -> Result<Vec<PollOutcome>, ProviderError> {
        let joined = ids.join(",");
        let (status, body) = self.res_raw(&[("action", "get"), ("ids", &joined)]).await?;
        if let Some(outcomes) = batch_reply(status, &body, ids.len(), self.family) {
            self.batch_failures.store(0, Ordering::Relaxed);
            return Ok(outcomes);
        }
        match self.redact_reply(parse_reply(self.family, status, &body)) {
            // An answer that does not line up with the ids.
            UpstreamReply::Ok { .. } => {}
            // About the request (busy, broken, bad key), not the batch format.
            UpstreamReply::Error(e) if e.class != ErrorClass::Permanent => return Err(e),
            // A lone `CAPCHA_NOT_READY` or a permanent code for n ids may mean the provider
            // ignored `ids`: not trusted for every id.
            UpstreamReply::NotReady | UpstreamReply::Error(_) => {}
        }
        let failures = self.batch_failures.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(
            account = %self.name,
            ids = ids.len(),
            failures,
            "batch poll answer did not line up with the ids; polling them one by one"
        );
        Ok(self.poll_each(ids).await)
    }
}

#[async_trait]
impl Provider for InPhpProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn submit(&self, req: &SolveRequest) -> Result<String, ProviderError> {
        if matches!(
            req.params,
            TaskParams::Passthrough(Passthrough::TaskApi { .. })
        ) {
            // Routing sends a `createTask` pass-through task only to `createTask` accounts.
            return Err(ProviderError::new(
                ErrorClass::Permanent,
                "ERROR_TASK_NOT_SUPPORTED",
                "a createTask task passed through has no in.php form",
            ));
        }
        match self.submit_reply(req).await? {
            UpstreamReply::Ok { request, .. } if is_task_id(&request) => Ok(request),
            UpstreamReply::Error(e) => Err(e),
            UpstreamReply::Ok { .. } | UpstreamReply::NotReady => Err(ProviderError::new(
                ErrorClass::Transient,
                BAD_RESPONSE,
                "submit answer is not a task id",
            )),
        }
    }

    async fn poll(
        &self,
        ids: &[String],
        with_extras: bool,
    ) -> Result<Vec<PollOutcome>, ProviderError> {
        match ids {
            [] => Ok(Vec::new()),
            [id] => self.poll_one(id).await.map(|o| vec![o]),
            // Extras (user agents, GeeTest objects) only come in the single-id form.
            _ if with_extras || !self.supports_batch() => Ok(self.poll_each(ids).await),
            _ => self.poll_batch(ids).await,
        }
    }

    async fn report(&self, task_id: &str, good: bool) -> Result<(), ProviderError> {
        let action = if good { "reportgood" } else { "reportbad" };
        match self.res(&[("action", action), ("id", task_id)]).await? {
            UpstreamReply::Ok { .. } => Ok(()),
            // Already reported: the report stands (the npm client treats it as success too).
            UpstreamReply::Error(e) if e.code == codes::DUPLICATE_REPORT => Ok(()),
            UpstreamReply::Error(e) => Err(e),
            UpstreamReply::NotReady => Err(unexpected("report")),
        }
    }

    async fn balance(&self) -> Result<String, ProviderError> {
        match self.res(&[("action", "getbalance")]).await? {
            UpstreamReply::Ok { request, .. } => Ok(request),
            UpstreamReply::Error(e) => Err(e),
            UpstreamReply::NotReady => Err(unexpected("getbalance")),
        }
    }

    async fn threads_info(&self) -> Result<ThreadsInfo, ProviderError> {
        let (status, body) = self.res_raw(&[("action", "threadsinfo")]).await?;
        if let Some(info) = threads_from_json(&body) {
            return Ok(info);
        }
        match self.redact_reply(parse_reply(self.family, status, &body)) {
            UpstreamReply::Error(e) => Err(e),
            _ => Err(unexpected("threadsinfo")),
        }
    }

    fn supports_batch(&self) -> bool {
        self.batch_failures.load(Ordering::Relaxed) < BATCH_GIVE_UP
    }
}

/// Task ids go back into URLs and `ids=` lists: only plain tokens are accepted.
fn is_task_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `{"threads":10,"working_threads":3}` (the captchaai SDK's reading), also inside `request`,
/// with numbers or numeric strings.
fn threads_from_json(body: &str) -> Option<ThreadsInfo> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    let doc = match value.get("request") {
        Some(Value::Object(_)) => value.get("request")?.clone(),
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(value.clone()),
        _ => value,
    };
    let num = |name: &str| match doc.get(name)? {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    Some(ThreadsInfo {
        threads: num("threads")?,
        working_threads: num("working_threads").unwrap_or(0),
    })
}

fn unexpected(what: &str) -> ProviderError {
    ProviderError::new(
        ErrorClass::Transient,
        BAD_RESPONSE,
        format!("unexpected {what} answer"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_key() {
        let key = "0123456789abcdef0123456789abcdef";
        let base = Url::parse("https://user:secret@ocr.captchaai.com/api").unwrap();
        let p = InPhpProvider::new(
            InPhpDialect::CaptchaAi,
            base,
            key.into(),
            "ai-1".into(),
            reqwest::Client::new(),
        );
        let dbg = format!("{p:?}");
        assert!(!dbg.contains(key) && !dbg.contains("secret"), "{dbg}");
        assert!(dbg.contains("ai-1"));
        assert_eq!(
            p.in_url.as_str(),
            "https://user:secret@ocr.captchaai.com/api/in.php"
        );
        assert_eq!(p.res_url.path(), "/api/res.php");
    }

    #[test]
    fn threads_info_shapes() {
        let want = ThreadsInfo {
            threads: 10,
            working_threads: 3,
        };
        for body in [
            r#"{"threads":10,"working_threads":3}"#,
            r#"{"status":1,"request":{"threads":"10","working_threads":"3"}}"#,
            r#"{"status":1,"request":"{\"threads\":10,\"working_threads\":3}"}"#,
        ] {
            assert_eq!(threads_from_json(body), Some(want), "{body}");
        }
        assert_eq!(threads_from_json("ERROR_WRONG_USER_KEY"), None);
        assert_eq!(
            threads_from_json(r#"{"status":0,"request":"ERROR_EMPTY_ACTION"}"#),
            None
        );
    }

    #[test]
    fn task_ids_are_plain_tokens() {
        assert!(is_task_id("73548291"));
        assert!(!is_task_id(""));
        assert!(!is_task_id("1|2"));
        assert!(!is_task_id("1,2"));
        assert!(!is_task_id(&"9".repeat(65)));
    }
}
