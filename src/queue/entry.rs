//! The stream entry (docs/QUEUE.md "Entry"): what a producer writes with one `XADD`, and what a
//! worker reads back, checked field by field (a hostile producer's entry is a reason, never a
//! panic).

use std::collections::HashMap;

use rand::Rng;
use serde_json::Value;

use super::QueueError;
use crate::telemetry::request_id::RequestId;

/// Longest accepted `request` (bytes): the native API's largest body (an image) with room.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// Longest tenant, idempotency key or partition name.
const MAX_NAME: usize = 256;

/// A task for [`Queue::enqueue`](super::Queue::enqueue).
#[derive(Debug, Clone, Default)]
pub struct NewTask {
    /// The task id; `None` picks a fresh 15-digit one.
    pub id: Option<String>,
    /// The native API body of `POST /v1/solve`.
    pub request: Value,
    /// The gateway tenant that owns it (`serve --queue`).
    pub tenant: Option<String>,
    /// A second enqueue with the same key returns the first task's id.
    pub idem: Option<String>,
    /// The isolated-pools partition (`serve --queue`).
    pub partition: Option<String>,
    /// The caller's budget for one solve, in ms.
    pub timeout_ms: Option<u64>,
    /// When the caller stops waiting (ms since the epoch): a worker that takes the task later
    /// fails it without solving (`serve --queue` sets it from the caller's timeout).
    pub deadline_at: Option<u64>,
    /// The id of the HTTP request that handed the task over (`serve --queue`): the worker's log
    /// lines for the task carry it (docs/API.md "Request ids").
    pub request_id: Option<String>,
}

/// What an enqueue did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    pub id: String,
    /// The idempotency key was already used: `id` is the first task's, nothing was added.
    pub duplicate: bool,
}

/// A task id: 1-64 characters of `[A-Za-z0-9_.:-]` (15 digits when we pick it, as compatible
/// ids are).
pub fn valid_task_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// A fresh 15-digit id, first digit not 0 (clients parse compatible ids as numbers).
pub fn new_task_id() -> String {
    rand::rng()
        .random_range(100_000_000_000_000u64..1_000_000_000_000_000)
        .to_string()
}

fn name_field(field: &str, value: &Option<String>) -> Result<(), QueueError> {
    match value {
        Some(v) if v.is_empty() || v.len() > MAX_NAME || v.chars().any(char::is_control) => {
            Err(QueueError::invalid(
                "bad_field",
                format!("`{field}` must be 1-{MAX_NAME} printable characters"),
            ))
        }
        _ => Ok(()),
    }
}

impl NewTask {
    /// What `Queue::enqueue` would refuse in this task, without Redis: `submit` checks a whole
    /// file before enqueueing any of it.
    pub fn check(&self) -> Result<(), QueueError> {
        let id = self.id.as_deref().unwrap_or("0");
        self.fields(id, 0).map(drop)
    }

    /// The entry's fields in `XADD` order, after checking what a worker would refuse.
    pub(super) fn fields(
        &self,
        id: &str,
        now_ms: u64,
    ) -> Result<Vec<(String, String)>, QueueError> {
        if !valid_task_id(id) {
            return Err(QueueError::invalid(
                "bad_task_id",
                "a task id is 1-64 characters of A-Z a-z 0-9 _ . : -",
            ));
        }
        name_field("tenant", &self.tenant)?;
        name_field("idem", &self.idem)?;
        name_field("partition", &self.partition)?;
        if let Some(r) = &self.request_id {
            if RequestId::accept(r.as_bytes()).is_none() {
                return Err(QueueError::invalid(
                    "bad_field",
                    "`request_id` must be 1-64 characters of A-Z a-z 0-9 - _ . :",
                ));
            }
        }
        // The same parser the worker runs: a request it would refuse is refused now.
        crate::wire::native::parse_native_value(self.request.clone(), MAX_TIMEOUT)
            .map_err(QueueError::Invalid)?;
        let request = self.request.to_string();
        if request.len() > MAX_REQUEST_BYTES {
            return Err(QueueError::invalid(
                "body_too_large",
                format!("`request` is over {MAX_REQUEST_BYTES} bytes"),
            ));
        }
        let mut fields = vec![
            ("id".to_owned(), id.to_owned()),
            ("request".to_owned(), request),
            ("enqueued_at".to_owned(), now_ms.to_string()),
        ];
        let optional = [
            ("tenant", self.tenant.clone()),
            ("idem", self.idem.clone()),
            ("partition", self.partition.clone()),
            ("timeout_ms", self.timeout_ms.map(|t| t.to_string())),
            ("deadline_at", self.deadline_at.map(|t| t.to_string())),
            ("request_id", self.request_id.clone()),
        ];
        for (name, value) in optional {
            if let Some(v) = value {
                fields.push((name.to_owned(), v));
            }
        }
        Ok(fields)
    }
}

/// The longest `timeout_s` a queued request may ask for (as the native API's default bound).
pub const MAX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// An entry as a worker reads it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The stream id (`1700000000000-0`).
    pub stream_id: String,
    /// All fields as read, to dead-letter or retry the entry unchanged.
    pub fields: Vec<(String, String)>,
}

/// A well-formed task taken from an entry.
#[derive(Debug, Clone)]
pub struct Task {
    pub id: String,
    pub request: Value,
    pub tenant: Option<String>,
    pub partition: Option<String>,
    pub attempt: u32,
    pub timeout_ms: Option<u64>,
    /// When the caller stops waiting (ms since the epoch, the producer's clock).
    pub deadline_at: Option<u64>,
}

/// Why an entry cannot be processed at all: it goes to the dead-letter stream with this reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The task id, when at least that was readable (a failed result is written for it).
    pub id: Option<String>,
    pub reason: String,
}

impl Entry {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The id of the request that enqueued it, when present and safe to log.
    pub fn request_id(&self) -> Option<RequestId> {
        self.field("request_id")
            .and_then(|r| RequestId::accept(r.as_bytes()))
    }

    /// The task in this entry, or why there is none.
    pub fn task(&self) -> Result<Task, Unreadable> {
        let id = self
            .field("id")
            .filter(|id| valid_task_id(id))
            .map(str::to_owned);
        let fail = |reason: String| Unreadable {
            id: id.clone(),
            reason,
        };
        let Some(task_id) = id.clone() else {
            return Err(fail(
                "`id` is missing or not 1-64 characters of A-Z a-z 0-9 _ . : -".into(),
            ));
        };
        let raw = self
            .field("request")
            .ok_or_else(|| fail("`request` is missing".into()))?;
        if raw.len() > MAX_REQUEST_BYTES {
            return Err(fail(format!("`request` is over {MAX_REQUEST_BYTES} bytes")));
        }
        let request: Value =
            serde_json::from_str(raw).map_err(|e| fail(format!("`request` is not JSON: {e}")))?;
        if !request.is_object() {
            return Err(fail("`request` is not a JSON object".into()));
        }
        let number = |name: &str, max: u64| -> Result<Option<u64>, Unreadable> {
            match self.field(name) {
                None => Ok(None),
                Some(v) => v
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n <= max)
                    .map(Some)
                    .ok_or_else(|| fail(format!("`{name}` must be a whole number up to {max}"))),
            }
        };
        let attempt = number("attempt", 1000)?.unwrap_or(0) as u32;
        let timeout_ms = number("timeout_ms", MAX_TIMEOUT.as_millis() as u64)?.filter(|t| *t > 0);
        // Up to the year 33658: any real clock.
        let deadline_at = number("deadline_at", 1_000_000_000_000_000)?;
        let text = |name: &str| -> Result<Option<String>, Unreadable> {
            match self.field(name) {
                None => Ok(None),
                Some(v)
                    if v.is_empty() || v.len() > MAX_NAME || v.chars().any(char::is_control) =>
                {
                    Err(fail(format!(
                        "`{name}` must be 1-{MAX_NAME} printable characters"
                    )))
                }
                Some(v) => Ok(Some(v.to_owned())),
            }
        };
        Ok(Task {
            id: task_id,
            request,
            tenant: text("tenant")?,
            partition: text("partition")?,
            attempt,
            timeout_ms,
            deadline_at,
        })
    }

    /// The fields with `attempt` set to `attempt` (for the retry schedule), as a JSON object.
    pub fn retry_payload(&self, attempt: u32) -> String {
        let mut map: HashMap<&str, &str> = HashMap::new();
        let attempt = attempt.to_string();
        for (k, v) in &self.fields {
            map.insert(k, v);
        }
        map.insert("attempt", &attempt);
        let mut pairs: Vec<(&str, &str)> = map.into_iter().collect();
        pairs.sort();
        serde_json::to_string(&pairs).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(fields: &[(&str, &str)]) -> Entry {
        Entry {
            stream_id: "1-0".into(),
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn ids_are_checked() {
        assert!(valid_task_id("123456789012345"));
        assert!(valid_task_id("job:a-1_b.c"));
        for bad in ["", "a b", "{x}", &"1".repeat(65), "é"] {
            assert!(!valid_task_id(bad), "{bad}");
        }
        let id = new_task_id();
        assert_eq!(id.len(), 15);
        assert!(valid_task_id(&id));
    }

    #[test]
    fn hostile_entries_give_reasons() {
        let req = r#"{"kind":"turnstile","sitekey":"k","pageurl":"https://a.example/"}"#;
        assert!(entry(&[("id", "1"), ("request", req)]).task().is_ok());
        let reason = |fields: &[(&str, &str)]| entry(fields).task().unwrap_err();
        assert_eq!(reason(&[("request", req)]).id, None);
        assert_eq!(reason(&[("id", "{bad}"), ("request", req)]).id, None);
        let no_req = reason(&[("id", "7")]);
        assert_eq!(no_req.id.as_deref(), Some("7"));
        assert!(no_req.reason.contains("request"));
        assert!(
            reason(&[("id", "7"), ("request", "{")])
                .reason
                .contains("not JSON")
        );
        assert!(
            reason(&[("id", "7"), ("request", "[1]")])
                .reason
                .contains("object")
        );
        assert!(
            reason(&[("id", "7"), ("request", req), ("attempt", "-1")])
                .reason
                .contains("attempt")
        );
        assert!(
            reason(&[
                ("id", "7"),
                ("request", req),
                ("attempt", "99999999999999999999")
            ])
            .reason
            .contains("attempt")
        );
        assert!(
            reason(&[("id", "7"), ("request", req), ("tenant", "")])
                .reason
                .contains("tenant")
        );
    }

    #[test]
    fn enqueue_refuses_what_a_worker_would() {
        let task = NewTask {
            request: json!({"kind": "nope"}),
            ..NewTask::default()
        };
        assert!(matches!(task.fields("1", 0), Err(QueueError::Invalid(v)) if v.code == "bad_kind"));
        let task = NewTask {
            request: json!({"kind": "turnstile", "sitekey": "k", "pageurl": "https://a.example/"}),
            tenant: Some("t".into()),
            ..NewTask::default()
        };
        assert!(task.fields("bad id", 0).is_err());
        let fields = task.fields("1", 5).unwrap();
        assert!(fields.contains(&("tenant".into(), "t".into())));
        assert!(fields.contains(&("enqueued_at".into(), "5".into())));
    }
}
