//! The task queue (docs/QUEUE.md): the producer API against a real Redis, `worker` processes
//! under faults (crash, pause, poison entries, Redis restarts), each followed by the query KEDA
//! runs, `submit`, and `serve --queue` front ends.

mod basics;
mod faults;
mod front;
mod producer;
mod submit;
mod support;
