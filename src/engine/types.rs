//! Values the engine hands across its seams: deliveries to waiters, handouts to callers, failures,
//! task records.

use std::time::Duration;

use crate::model::{Answer, Kind, Millis, Source};

/// What reaches a waiting caller's mailbox.
pub type Delivery = Result<Answer, SolveFailure>;

/// A terminal failure for one caller, with the compatible-API code that tells it (e.g.
/// `ERROR_CAPTCHA_UNSOLVABLE`). Never carries secrets: the message is ours, not the provider's body.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct SolveFailure {
    pub code: String,
    pub message: String,
}

/// The code of [`SolveFailure::shutting_down`]. Never a caller's: the engine hands such a task's
/// work back instead of delivering it.
const SHUTTING_DOWN: &str = "SHUTTING_DOWN";
/// The code of [`SolveFailure::unstarted`]. Never a caller's: the engine withdraws such a task.
const UNSTARTED: &str = "UNSTARTED";

impl SolveFailure {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }

    /// An upstream task cut short because this instance is stopping: nothing is wrong with the
    /// task, so nobody is failed for it (its claim is requeued, docs/CONFIGURATION.md
    /// "Shutdown").
    pub fn shutting_down() -> Self {
        Self::new(SHUTTING_DOWN, "the gateway is shutting down")
    }

    pub fn is_shutting_down(&self) -> bool {
        self.code == SHUTTING_DOWN
    }

    /// The task was never submitted, and its `start_by` (its caller's deadline) has passed.
    pub fn unstarted() -> Self {
        Self::new(UNSTARTED, "not started before its caller's deadline")
    }

    pub fn is_unstarted(&self) -> bool {
        self.code == UNSTARTED
    }
}

/// An answer handed to one caller.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Handout {
    pub kind: Kind,
    pub answer: Answer,
    pub source: Source,
}

/// Why a solve did not hand out an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SolveError {
    #[error("no answer before the deadline")]
    Timeout,
    #[error("{0}")]
    Failed(SolveFailure),
    #[error("store unavailable")]
    Unavailable,
    /// This instance stopped before the caller's answer came: safe to ask another instance.
    #[error("the gateway is shutting down")]
    ShuttingDown,
}

impl SolveError {
    /// The compatible-API code for this error.
    pub fn code(&self) -> &str {
        match self {
            SolveError::Timeout => crate::wire::inphp::codes::CAPTCHA_UNSOLVABLE,
            SolveError::Failed(f) => &f.code,
            SolveError::Unavailable | SolveError::ShuttingDown => {
                crate::wire::inphp::codes::SERVER_ERROR
            }
        }
    }
}

/// A task of the compatible or native asynchronous API: created on submit, finished once.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskRecord {
    /// Digit-only, as clients expect (docs/PROTOCOL.md item 2).
    pub id: String,
    /// Only this tenant may read it (promise 8).
    pub tenant: String,
    pub kind: Kind,
    pub target_id: String,
    pub created_at: Millis,
    pub state: TaskState,
    pub finished_at: Option<Millis>,
    /// Set once the tenant reported the answer, so a second report is refused.
    pub reported: bool,
    /// For a task solved in an instance's own process on a shared store: what another instance
    /// needs to run it again should that instance die (`Engine::task` takes it over). Kept by
    /// the store beside the record while the task is pending (it may hold an image of
    /// megabytes) and dropped when the task ends, so it is not part of the record's JSON.
    #[serde(skip)]
    pub redo: Option<Redo>,
}

/// A pending task's request, kept with its record so that another instance can take it over.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Redo {
    /// The request as a native body (`wire::native::native_body`), the form queued tasks use too.
    pub request: serde_json::Value,
    /// When the task's own deadline passes (ms since epoch).
    pub deadline_at: Millis,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TaskState {
    Pending,
    Ready(Handout),
    Failed(SolveFailure),
}

/// How a pool refill's upstream solve went, for sizing its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefillDone {
    /// From the refill's start (thread wait included) to its outcome.
    pub took: Duration,
    /// Whether it produced an answer (fresh or not).
    pub answered: bool,
}

/// Who an upstream task is for: callers waiting now go before queued work, which goes before
/// pool refills (promise 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    Interactive,
    /// Work accepted for later (the queue): nobody blocks on it now, but somebody will.
    Queued,
    Refill,
}

/// The failure of a task whose deadline passed before it had an answer.
pub(super) fn past_deadline() -> SolveFailure {
    SolveFailure::new(
        crate::wire::inphp::codes::CAPTCHA_UNSOLVABLE,
        "no answer before the task's deadline",
    )
}
