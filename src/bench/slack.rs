//! todo
use super::{BenchError, Opts, RunResult};
pub async fn run(_o: &Opts) -> Result<RunResult, BenchError> {
    Err(BenchError::Setup("todo".into()))
}
