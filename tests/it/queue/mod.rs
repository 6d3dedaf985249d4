//! The task queue (docs/QUEUE.md): the producer API against a real Redis, and `worker`
//! processes under faults (crash, pause, poison entries, Redis restarts), each followed by the
//! query KEDA runs.

mod basics;
mod faults;
mod producer;
mod seed;
mod seed_workers;
mod support;
