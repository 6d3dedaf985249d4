//! Which provider an account is at: the one name the config file, `/health`, logs and the
//! account's protocol client share.

use std::fmt;

use serde::Deserialize;

use crate::model::{Dialect, Kind, PassProtocol, SolveRequest, TaskParams};
use crate::wire::inphp::InPhpDialect;
use crate::wire::taskapi::TaskApiDialect;

/// Which protocol and default base URL an account uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum AccountProvider {
    #[serde(rename = "captchaai")]
    Captchaai,
    #[serde(rename = "2captcha")]
    TwoCaptcha,
    #[serde(rename = "anticaptcha")]
    AntiCaptcha,
    #[serde(rename = "capsolver")]
    CapSolver,
    /// The simulator: the in-process one without `base_url`, a `simulate` server with it.
    #[serde(rename = "sim")]
    Sim,
}

impl AccountProvider {
    /// The providers `--provider` (the one-account shortcut) can name.
    pub const SHORTCUT: [AccountProvider; 3] = [
        AccountProvider::Captchaai,
        AccountProvider::TwoCaptcha,
        AccountProvider::Sim,
    ];

    /// The name used in the config file, `/health` and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            AccountProvider::Captchaai => "captchaai",
            AccountProvider::TwoCaptcha => "2captcha",
            AccountProvider::AntiCaptcha => "anticaptcha",
            AccountProvider::CapSolver => "capsolver",
            AccountProvider::Sim => "sim",
        }
    }

    /// The protocol its client speaks, in this provider's dialect. The simulator speaks
    /// CaptchaAI's.
    pub fn protocol(self) -> Protocol {
        match self {
            AccountProvider::Captchaai | AccountProvider::Sim => {
                Protocol::InPhp(InPhpDialect::CaptchaAi)
            }
            AccountProvider::TwoCaptcha => Protocol::InPhp(InPhpDialect::TwoCaptcha),
            AccountProvider::AntiCaptcha => Protocol::TaskApi(TaskApiDialect::AntiCaptcha),
            AccountProvider::CapSolver => Protocol::TaskApi(TaskApiDialect::CapSolver),
        }
    }

    /// The dialect its declarations are read in (the simulator's is CaptchaAI's).
    pub fn dialect(self) -> Dialect {
        match self.protocol() {
            Protocol::InPhp(InPhpDialect::CaptchaAi) => Dialect::CaptchaAi,
            Protocol::InPhp(InPhpDialect::TwoCaptcha) => Dialect::TwoCaptcha,
            Protocol::TaskApi(dialect) => dialect.dialect(),
        }
    }

    /// Whether it solves `kind` at all (the kind's declaration says which dialects do); the
    /// simulator solves every kind.
    pub fn solves(self, kind: Kind) -> bool {
        // Every provider takes some pass-through task: those of its protocol.
        if self == AccountProvider::Sim || kind == Kind::Other {
            return true;
        }
        kind.solved_in(self.dialect())
    }

    /// Whether it may be sent `req`: it solves the kind, and a pass-through task (kind `other`)
    /// goes only to a provider that speaks the protocol it came in.
    pub fn solves_request(self, req: &SolveRequest) -> bool {
        match &req.params {
            TaskParams::Passthrough(pass) => {
                matches!(
                    (self.protocol(), pass.protocol()),
                    (Protocol::InPhp(_), PassProtocol::InPhp)
                        | (Protocol::TaskApi(_), PassProtocol::TaskApi)
                )
            }
            // A parameter only some providers take keeps the task to their accounts (the
            // simulator takes every one).
            params => {
                let taken = match params.restricted() {
                    Some((_, taken)) => {
                        self == AccountProvider::Sim || taken.contains(self.dialect())
                    }
                    None => true,
                };
                taken && self.solves(req.kind())
            }
        }
    }

    /// Whether it sells threads and says how many (`threadsinfo`), so the account's cap can be
    /// read from it and calibrated; the others sell solves.
    pub fn sells_threads(self) -> bool {
        matches!(self, AccountProvider::Captchaai | AccountProvider::Sim)
    }

    /// Whether its balance is money that solves spend, so an empty balance means no more
    /// solves. CaptchaAI sells threads, not solves: what its `getbalance` figure means is not
    /// documented, so it never pauses an account.
    pub fn billed_per_solve(self) -> bool {
        !matches!(self, AccountProvider::Captchaai)
    }
}

impl fmt::Display for AccountProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The wire protocol of an account, with the dialect its provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    InPhp(InPhpDialect),
    TaskApi(TaskApiDialect),
}
