//! The JSON task protocol (`createTask` / `getTaskResult` / `getBalance`) of anti-captcha,
//! CapSolver and 2captcha's v2 API, shared by the gateway's own endpoints (`http::taskapi`), the
//! simulator (which speaks it as a provider does) and the upstream client
//! (`provider::TaskApiProvider`). The wire contract is in docs/API.md, "JSON task protocol".
//!
//! Owns: the task type names and which [`Kind`](crate::model::Kind) and proxy variant each means
//! ([`names`]), reading a JSON task into a [`SolveRequest`](crate::model::SolveRequest) with every
//! value type- and range-checked ([`decode_task`]), writing a request as each flavor's task
//! ([`encode_task`]), the solution objects both ways and the error codes and reply bodies
//! ([`reply`]), and which dialect a caller speaks with the reply fields each documents ([`caller`]).
//! Does not own: routing, authentication, solving or retries.

pub mod caller;
mod decode;
mod encode;
pub mod names;
pub mod reply;

pub use decode::{decode_create, decode_task, task_id_from};
pub use encode::{Unsupported, beside_task, encode_task};
pub use names::TaskApiDialect;
