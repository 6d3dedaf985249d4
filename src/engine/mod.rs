//! The engine: solve orchestration and the promises of docs/ARCHITECTURE.md (once, fresh, exact
//! demand, coalesced). For each caller it decides pool / wait for an in-flight task / start a new
//! one (through the [`Store`], atomically), starts upstream tasks through a [`Solver`], and routes
//! every finished answer to exactly one waiter or to the pool.
//!
//! Does not own: wire protocols (http, compat), upstream retries and polling (provider).

mod active;
mod admission;
mod arrival;
mod busy;
mod figures;
mod reusable;
mod solve;
pub mod store;
mod takeover;
mod tasks;
mod trace;
mod types;

pub use admission::{Admission, Permit};
pub use busy::{LABEL_MAX, TargetCount, bounded as bounded_label};
pub use figures::{EngineFigures, EngineReading};
pub use solve::{Engine, EngineSettings, Solution, Solver};
pub use store::{MemoryStore, Store, StoreError, TargetCounts, TargetFigures};
pub use tasks::ReportOutcome;
pub use types::{
    Delivery, Handout, Priority, Redo, RefillDone, SolveError, SolveFailure, TaskRecord, TaskState,
};

#[cfg(test)]
mod tests;
