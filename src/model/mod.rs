//! The vocabulary of docs/ARCHITECTURE.md ("Vocabulary") as types: what a caller asks for
//! ([`SolveRequest`]), which requests are interchangeable ([`Target`]), what a solve returns
//! ([`Answer`]).
//!
//! Pure data and pure functions only: no I/O, no clock reads (time is passed in).

mod answer;
pub(crate) mod kind;
pub mod limits;
mod request;
mod target;

pub use answer::{Answer, BySource, Source, UpstreamRef};
pub use kind::table::{markdown as task_types_table, parameters_markdown as task_parameters_table};
pub use kind::{
    AnswerShape, Check, Dialect, Dialects, IdForm, Identity, Kind, MAX_COUNT, PAGE, Param,
    Parameters, PassProtocol, Passthrough, ProxyName, Reuse, SITEKEY, Sourced, TaskName, TypeSpec,
    UNLISTED, passthrough_documented, points,
};
pub use request::{
    MAX_IMAGE_BYTES, MIN_IMAGE_BYTES, Proxy, ProxyType, RecaptchaVersion, SolveRequest, TaskParams,
    Validation, decode_base64_image, image_base64, image_format,
};
pub use target::{Target, TargetPolicy};

/// Milliseconds since the Unix epoch: the one clock unit stored and compared everywhere.
pub type Millis = u64;

/// The wall clock in [`Millis`]. Only callers at the edges (engine, simulator) read it.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}
