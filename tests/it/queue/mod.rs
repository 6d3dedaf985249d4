//! The task queue (docs/QUEUE.md): the producer API against a real Redis, `worker` processes
//! under faults (crash, pause, poison entries, Redis restarts), each followed by the query KEDA
//! runs, `submit`, `serve --queue` front ends, and seed 003's list (`worker --seed-queue`).

mod basics;
mod faults;
mod front;
mod producer;
mod records;
mod seed;
mod seed_workers;
mod steps;
mod submit;
pub(crate) mod support;
