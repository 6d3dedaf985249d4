//! The `in.php`/`res.php` protocol (docs/PROTOCOL.md items 1-15, and "Upstream"), both ways: the
//! gateway's `/in.php` + `/res.php` and the simulator read requests and write replies with it,
//! and the upstream client writes requests with it.
//!
//! Owns: reading parameters from every request encoding ([`Params`]), turning `in.php` parameters
//! into a [`SolveRequest`](crate::model::SolveRequest) ([`parse_submit`]) and back
//! ([`submit_params`]), the error codes ([`codes`]), the exact reply bodies ([`Reply`]) and which
//! provider's reading of the codes applies ([`InPhpDialect`]). Does not own routing, authentication or
//! transport; reading a provider's replies into retry classes is the client's
//! (`provider::inphp`).

pub mod codes;
mod dialect;
mod encode;
mod params;
mod reply;
mod submit;
#[cfg(test)]
mod tests;

pub use dialect::InPhpDialect;
pub use encode::{submit_files, submit_params};
pub use params::{Params, declared_over};
pub use reply::{Mode, Reply, plain_answer};
pub use submit::{parse_passthrough, parse_submit};
