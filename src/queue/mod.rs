//! Queued work: `worker` processes that consume tasks from Redis and store their results.
//!
//! - [`seed`]: seed 003's list protocol (`worker --seed-queue`).

pub mod seed;
