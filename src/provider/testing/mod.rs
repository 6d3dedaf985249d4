//! Test doubles for this module: a scripted in-memory provider for virtual-time tests and a
//! scripted HTTP upstream for behaviour over real sockets.

pub mod fake;
pub mod mock_upstream;
