//! One queued solve, the same for every source: the engine at queued priority (below
//! interactive callers, above pool refills), with the shutdown's cut told apart from a failure
//! of the task itself.

use tokio::time::Instant;

use crate::engine::{Engine, Handout, Priority, SolveError};
use crate::model::SolveRequest;

/// How a queued solve ended.
#[derive(Debug)]
pub enum Solved {
    Answer(Handout),
    /// The process is stopping (the engine's cut, or an account refusing new submits after the
    /// signal): says nothing about the task, whose entry goes back to the queue.
    HandBack,
    Failed(SolveError),
}

/// Solves `req` at queued priority by `deadline`.
pub async fn solve_queued(engine: &Engine, req: SolveRequest, deadline: Instant) -> Solved {
    match engine.solve_at(req, deadline, Priority::Queued).await {
        Ok(handout) => Solved::Answer(handout),
        Err(SolveError::ShuttingDown) => Solved::HandBack,
        Err(SolveError::Failed(f))
            if f.is_shutting_down() || f.code == crate::provider::SHUTDOWN =>
        {
            Solved::HandBack
        }
        Err(e) => Solved::Failed(e),
    }
}
