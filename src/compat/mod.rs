//! The 2captcha-compatible wire format (docs/PROTOCOL.md items 1-15), shared by the gateway's
//! `/in.php` + `/res.php` and by the simulator, which speaks the same protocol as a provider.
//!
//! Owns: reading parameters from every request encoding ([`Params`]), turning `in.php` parameters
//! into a [`SolveRequest`](crate::model::SolveRequest) ([`parse_submit`]), the error codes
//! ([`codes`]) and the exact reply bodies ([`Reply`]). Does not own routing or authentication.

pub mod codes;
#[cfg(test)]
mod limits_tests;
mod native;
mod params;
mod reply;
mod submit;

pub use native::{
    NativeRequest, checked_seconds, out_of_range, parse_native, parse_native_value, seconds_value,
};
pub use params::{Params, declared_over};
pub use reply::{Mode, Reply};
pub use submit::parse_submit;
