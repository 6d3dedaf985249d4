//! The result of a task (docs/QUEUE.md "Result"): one JSON string per task id, written once.

use serde::{Deserialize, Serialize};

use crate::engine::{Handout, SolveFailure};
use crate::model::{Kind, Source};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultStatus {
    Ready,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultError {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueResult {
    pub id: String,
    pub status: ResultStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    /// The token or text (GeeTest: its JSON as a string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// When the answer stops being accepted (ms since epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The user agent the answer must be used with, when the provider named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ResultError>,
    /// Deliveries it took (1 when the first worker finished it).
    pub attempts: u32,
    /// The consumer that wrote it.
    pub worker: String,
    pub finished_at: u64,
    pub duration_ms: u64,
}

/// Who finished a task, when, after how much work: the fields every result has.
#[derive(Debug, Clone)]
pub struct Finish {
    pub attempts: u32,
    pub worker: String,
    pub finished_at: u64,
    pub duration_ms: u64,
}

impl QueueResult {
    pub fn ready(id: &str, handout: &Handout, finish: Finish) -> Self {
        Self {
            id: id.to_owned(),
            status: ResultStatus::Ready,
            kind: Some(handout.kind),
            answer: Some(handout.answer.text.clone()),
            source: Some(handout.source),
            expires_at: Some(handout.answer.expires_at),
            user_agent: handout.answer.user_agent.clone(),
            error: None,
            attempts: finish.attempts,
            worker: finish.worker,
            finished_at: finish.finished_at,
            duration_ms: finish.duration_ms,
        }
    }

    pub fn failed(id: &str, kind: Option<Kind>, failure: &SolveFailure, finish: Finish) -> Self {
        Self {
            id: id.to_owned(),
            status: ResultStatus::Failed,
            kind,
            answer: None,
            source: None,
            expires_at: None,
            user_agent: None,
            error: Some(ResultError {
                code: failure.code.clone(),
                message: failure.message.clone(),
            }),
            attempts: finish.attempts,
            worker: finish.worker,
            finished_at: finish.finished_at,
            duration_ms: finish.duration_ms,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}
