//! The task queue (docs/QUEUE.md): producers enqueue solve requests into a Redis stream, workers
//! (`captcha-gateway worker`) consume them through a consumer group and store one result per
//! task under its own key, with a wake-up on a Pub/Sub channel for producers that wait.
//!
//! Owns: key names ([`keys`]), the entry and result formats ([`entry`], [`result`]), the producer
//! side ([`Queue`]), and the one worker ([`worker`]) over a source: the stream ([`stream`]) or
//! seed 003's lists (`worker --seed-queue`, [`seed`]). Every multi-step change is one Lua script
//! (`lua/queue_*.lua`, `lua/seed_*.lua`); every key of a stream queue shares one hash tag, so
//! Redis Cluster works.
//!
//! Does not own: solving (the engine), the HTTP front (`serve --queue`).

pub mod calls;
mod entry;
mod error;
pub mod figures;
pub mod keys;
mod producer;
mod reply;
mod result;
pub mod seed;
pub mod settings;
pub mod steps;
pub mod stream;
pub mod worker;

pub use entry::{Enqueued, NewTask, valid_task_id};
pub use error::QueueError;
pub use producer::Queue;
pub use result::{QueueResult, ResultError, ResultStatus};
pub use settings::{QueueFile, QueueSettings, check_name};
