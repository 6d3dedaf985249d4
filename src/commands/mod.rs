//! The commands the binary runs, each built from its settings on the solving stack of
//! `wiring`: `serve` (and `simulate`), `worker`, `submit`, `status`. `bench` is its own module.

pub mod serve;
pub mod status;
pub mod submit;
pub mod worker;
