//! The wire protocols, one folder each: what goes over the network, with no routing, solving or
//! transport around it. The gateway's endpoints (`http`), the simulator (`sim`) and the upstream
//! clients (`provider`) all read and write through these, so a request means the same wherever
//! it arrives and a reply is spelled once.
//!
//! - [`inphp`]: the `in.php`/`res.php` protocol of CaptchaAI and 2captcha (the compatible API,
//!   docs/PROTOCOL.md items 1-15, and "Upstream").
//! - [`taskapi`]: the JSON task protocol (`createTask`/`getTaskResult`) of anti-captcha,
//!   CapSolver and 2captcha's v2 API (docs/API.md, "JSON task protocol").
//! - [`native`]: the gateway's own request body (`POST /v1/solve`, `/v1/tasks`, queued tasks).

pub mod inphp;
pub mod native;
pub mod taskapi;
