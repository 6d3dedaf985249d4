//! `Idempotency-Key` on `POST /v1/solve` and `POST /v1/tasks` (docs/API.md "Idempotency keys").
//!
//! The same key from the same tenant names one gateway task for as long as that task's result is
//! kept: the first call opens the task and binds the key to it in the store (atomically, so two
//! instances sharing Redis never both win); a repeat, on any instance, finds the binding and
//! joins the task (`/v1/tasks` answers its id, `/v1/solve` waits for its answer) instead of
//! solving again. A key whose task ended in a server-side failure (`ERROR_SERVER_ERROR`: its
//! instance shut down, the store or queue was away) holds no answer: the next call with it takes
//! the key over and starts a new task. Reusing a key with a different body is refused (422). A
//! task whose instance died is taken over by whoever reads it next (`Engine::task`), so a repeat
//! simply joins it.
//!
//! Owns: reading the header, the per-tenant digest that names the binding, the fingerprint of the
//! body, and the join-or-start decision. The binding itself is the store's (`IdempotencyKeys::bind_key`).

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::AppState;
use super::error::ApiError;
use crate::engine::{Handout, SolveError, SolveFailure, TaskState};
use crate::model::{SolveRequest, now_ms};
use crate::wire::inphp::codes;

pub const HEADER: &str = "idempotency-key";
/// `request` marks a key a balancer generated to move the call, not one its caller will come
/// back with (`super::request_scoped`).
pub const SCOPE_HEADER: &str = "idempotency-scope";
/// Longest key accepted; a UUID is 36, Stripe's limit is 255.
pub const MAX_KEY_LEN: usize = 255;
/// How many times one call tries to bind a key another call keeps taking first.
const BIND_ATTEMPTS: usize = 3;
/// A caller's key, scoped to its tenant, with the fingerprint of the body it came with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdemKey {
    /// Hex SHA-256 of tenant and key: names the binding, so neither reaches a store key.
    scoped: String,
    /// Hex SHA-256 of the body as JSON with its keys sorted (whitespace and order do not matter).
    fingerprint: String,
    /// Sent with `Idempotency-Scope: request`: a solve under it ends when its callers leave.
    request_scoped: bool,
}

impl IdemKey {
    /// This key for a task for later (`POST /v1/tasks`): such a task is meant to outlive its
    /// request whatever the key's scope.
    pub fn outliving_the_request(self) -> Self {
        Self {
            request_scoped: false,
            ..self
        }
    }
}

fn bad_key(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("bad_idempotency_key", message)
}

fn hex_digest(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// The call's key, if it sent one: 1-255 visible ASCII characters, sent once.
pub fn read(headers: &HeaderMap, tenant: &str, body: &[u8]) -> Result<Option<IdemKey>, ApiError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(bad_key("send one `Idempotency-Key` header, not several"));
    }
    let key = value.as_bytes();
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.iter().all(u8::is_ascii_graphic) {
        return Err(bad_key(format!(
            "`Idempotency-Key` must be 1-{MAX_KEY_LEN} visible ASCII characters (a UUID will do)"
        )));
    }
    // The body was parsed before this; a canonical form makes a resent body match whatever
    // the client's JSON encoder did with spaces and key order.
    let canonical = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| serde_json::to_vec(&v).ok())
        .unwrap_or_else(|| body.to_vec());
    let mut scopes = headers.get_all(SCOPE_HEADER).iter().map(|v| v.as_bytes());
    let request_scoped = match (scopes.next(), scopes.next()) {
        (None, _) => false,
        (Some(b"request"), None) => true,
        _ => {
            return Err(bad_key(
                "`Idempotency-Scope` is one header `request` (a key that names only this request), or absent",
            ));
        }
    };
    Ok(Some(IdemKey {
        scoped: hex_digest(&[tenant.as_bytes(), key]),
        fingerprint: hex_digest(&[&canonical]),
        request_scoped,
    }))
}

/// What a key's binding says now.
pub(super) enum Found {
    /// Bound to a live or finished task of this tenant: join it.
    Join(String),
    /// Unbound (`None`), or bound (to this value) to a task that can no longer answer: start one.
    Free(Option<String>),
}

fn unavailable() -> ApiError {
    ApiError::from(SolveError::Unavailable)
}

/// A task that ended without an answer because of the gateway, not the captcha.
fn server_failure(f: &SolveFailure) -> bool {
    f.code == codes::SERVER_ERROR
}

impl AppState {
    /// How long a binding lasts: as long as its task's record can (its timeout, then the
    /// record's retention), so a key never outlives the answer it names, and goes with it.
    fn key_ttl(&self, timeout: Duration) -> u64 {
        let life = timeout.saturating_add(self.engine.settings().result_retention);
        u64::try_from(life.as_millis()).unwrap_or(u64::MAX)
    }

    /// Reads the key's binding: the task to join, or that a new one must start.
    pub(super) async fn find_keyed(&self, tenant: &str, key: &IdemKey) -> Result<Found, ApiError> {
        let store = self.engine.store();
        let Some(bound) = store
            .bound_key(&key.scoped, now_ms())
            .await
            .map_err(|_| unavailable())?
        else {
            return Ok(Found::Free(None));
        };
        let (fingerprint, id) = bound.split_once(':').unwrap_or(("", ""));
        if fingerprint != key.fingerprint {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "this Idempotency-Key was used with a different body; use a new key per task",
            ));
        }
        // A pending task whose instance died is taken over by this read (`Engine::task`).
        let record = self.engine.task(tenant, id, Duration::ZERO).await?;
        Ok(match record.map(|r| r.state) {
            Some(TaskState::Failed(f)) if server_failure(&f) => Found::Free(Some(bound)),
            Some(_) => Found::Join(id.to_owned()),
            // The record expired (or the store lost it): nothing left to join.
            None => Found::Free(Some(bound)),
        })
    }

    /// Opens a task for a keyed call and binds the key to it, or joins the task another call
    /// bound first. Returns the task id and whether this call started it. `hold` lives as long
    /// as the task when this call starts it, and is dropped at once when it joins.
    pub(super) async fn submit_keyed(
        &self,
        tenant: &str,
        key: &IdemKey,
        req: SolveRequest,
        timeout: Duration,
        hold: impl Send + 'static,
    ) -> Result<(String, bool), ApiError> {
        let store = self.engine.store();
        for _ in 0..BIND_ATTEMPTS {
            let previous = match self.find_keyed(tenant, key).await? {
                Found::Join(id) => return Ok((id, false)),
                Found::Free(previous) => previous,
            };
            // The record exists before the binding names it, so whoever reads the binding
            // finds the task.
            let in_process = self.in_process().then_some(timeout);
            let id = self.engine.open_task(tenant, &req, in_process).await?;
            let value = format!("{}:{id}", key.fingerprint);
            let bound = store
                .bind_key(
                    &key.scoped,
                    previous.as_deref(),
                    &value,
                    self.key_ttl(timeout),
                    now_ms(),
                )
                .await;
            match bound {
                Ok(true) if key.request_scoped && self.in_process() => {
                    let (wanted, forget) = self.request_scoped.track(&id);
                    self.engine
                        .start_task_while(id.clone(), req, timeout, (hold, forget), wanted);
                    return Ok((id, true));
                }
                Ok(true) => {
                    let queue_key = format!("idem:{}", key.scoped);
                    let started = self
                        .start_opened(tenant, id.clone(), req, timeout, hold, Some(queue_key))
                        .await?;
                    if started != id {
                        // The queue already held a task under this key: that one is the task.
                        let value_now = format!("{}:{started}", key.fingerprint);
                        let _ = store
                            .bind_key(
                                &key.scoped,
                                Some(&value),
                                &value_now,
                                self.key_ttl(timeout),
                                now_ms(),
                            )
                            .await;
                        self.engine.fail_task(&id, superseded()).await;
                    }
                    return Ok((started, true));
                }
                Ok(false) => self.engine.fail_task(&id, superseded()).await,
                Err(_) => {
                    self.engine.fail_task(&id, superseded()).await;
                    return Err(unavailable());
                }
            }
        }
        Err(unavailable())
    }

    /// `/v1/solve` with a key: joins or starts the key's task and waits for its answer. A task
    /// that another instance failed on its way down is started again here; when this instance
    /// is the one stopping, the caller hears `shutting_down` and retries elsewhere with the key.
    /// The outer error is a refusal (before any solve); the inner result is the solve's.
    pub(super) async fn solve_keyed(
        &self,
        tenant: &str,
        key: &IdemKey,
        req: SolveRequest,
        deadline: Instant,
    ) -> Result<Result<Handout, SolveError>, ApiError> {
        let mut starts = 0;
        loop {
            let id = match self.find_keyed(tenant, key).await? {
                Found::Join(id) => id,
                Found::Free(_) if starts == BIND_ATTEMPTS => return Err(unavailable()),
                Found::Free(_) => {
                    starts += 1;
                    // Only a call that may start work is counted against the limits; a call
                    // joining a running task costs nothing upstream.
                    let mut req = req.clone();
                    let (permit, pass) = self.admit_native(tenant, &mut req).await?;
                    let timeout = deadline.saturating_duration_since(Instant::now());
                    self.submit_keyed(tenant, key, req, timeout, (permit, pass))
                        .await?
                        .0
                }
            };
            // A task whose instance died or stopped is taken over by this wait (`Engine::task`
            // looks every second). Under a request-scoped key, the task this process runs ends
            // if every caller waiting on it here leaves.
            let _waiting = self.request_scoped.wait_on(&id);
            match self.wait_answer(tenant, &id, deadline).await {
                Err(SolveError::Failed(f)) if server_failure(&f) && self.engine.is_cut() => {
                    return Ok(Err(SolveError::ShuttingDown));
                }
                Err(SolveError::Failed(f)) if server_failure(&f) => continue,
                other => return Ok(other),
            }
        }
    }
}

/// The failure written to a task opened for a key that another call bound first: nobody holds
/// its id, so nobody reads it; it only ends the record.
fn superseded() -> SolveFailure {
    SolveFailure::new(
        codes::CAPTCHA_UNSOLVABLE,
        "superseded by another task under the same idempotency key",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HEADER, HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn no_header_is_no_key() {
        assert_eq!(read(&HeaderMap::new(), "t", b"{}").unwrap(), None);
    }

    #[test]
    fn a_scope_is_request_or_absent() {
        let mut h = headers(&[b"k"]);
        assert!(!read(&h, "t", b"{}").unwrap().unwrap().request_scoped);
        h.insert(SCOPE_HEADER, HeaderValue::from_static("request"));
        let key = read(&h, "t", b"{}").unwrap().unwrap();
        assert!(key.request_scoped);
        assert!(!key.outliving_the_request().request_scoped);
        h.append(SCOPE_HEADER, HeaderValue::from_static("request"));
        assert_eq!(
            read(&h, "t", b"{}").unwrap_err().code,
            "bad_idempotency_key",
            "sent twice"
        );
        for bad in [
            &b"forever"[..],
            b"REQUEST",
            b"request ",
            b"",
            "r\u{e9}quest".as_bytes(),
        ] {
            h.insert(SCOPE_HEADER, HeaderValue::from_bytes(bad).unwrap());
            assert_eq!(
                read(&h, "t", b"{}").unwrap_err().code,
                "bad_idempotency_key",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn keys_outside_the_range_are_refused() {
        let long = vec![b'a'; MAX_KEY_LEN + 1];
        for bad in [&b""[..], b"has space", b"tab\there", &long] {
            let err = read(&headers(&[bad]), "t", b"{}").unwrap_err();
            assert_eq!(err.code, "bad_idempotency_key", "{bad:?}");
        }
        let err = read(&headers(&[b"a", b"b"]), "t", b"{}").unwrap_err();
        assert_eq!(err.code, "bad_idempotency_key");
        let longest = vec![b'k'; MAX_KEY_LEN];
        assert!(read(&headers(&[&longest]), "t", b"{}").unwrap().is_some());
    }

    #[test]
    fn keys_are_scoped_per_tenant_and_bodies_compare_as_json() {
        let h = headers(&[b"order-1"]);
        let a = read(&h, "alice", br#"{"kind":"turnstile","sitekey":"x"}"#)
            .unwrap()
            .unwrap();
        let b = read(&h, "bob", br#"{"kind":"turnstile","sitekey":"x"}"#)
            .unwrap()
            .unwrap();
        assert_ne!(a.scoped, b.scoped);
        assert_eq!(a.fingerprint, b.fingerprint);
        let respaced = read(&h, "alice", br#"{ "sitekey": "x", "kind": "turnstile" }"#)
            .unwrap()
            .unwrap();
        assert_eq!(a, respaced);
        let other = read(&h, "alice", br#"{"kind":"turnstile","sitekey":"y"}"#)
            .unwrap()
            .unwrap();
        assert_ne!(a.fingerprint, other.fingerprint);
        // Length-prefixed parts: tenant "a" with key "bc" is not tenant "ab" with key "c".
        assert_ne!(hex_digest(&[b"a", b"bc"]), hex_digest(&[b"ab", b"c"]));
    }
}
