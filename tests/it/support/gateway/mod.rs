//! The one way a test starts a gateway: in this process ([`TestGateway`]: quickest, and the
//! test can reach into it), or as the real binary ([`GatewayProcess`], from a [`Launch`]) when
//! the test needs what only a process shows: signals, restarts, several instances on one
//! Redis, its log and stdout, a `worker`.

mod in_process;
mod process;

pub use in_process::{TestGateway, fast_settings};
pub use process::{
    GatewayProcess, Launch, OutputLine, SimAccountConfig, Stderr, Transcript, log_filter,
};
