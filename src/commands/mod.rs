//! The commands the binary runs, each built from its settings on the solving stack of
//! `wiring`: `serve` (and `simulate`), `worker`, `submit`, `status`, `advise`. `bench` is its own module.

pub mod advise;
pub mod serve;
pub mod status;
pub mod submit;
pub mod worker;
