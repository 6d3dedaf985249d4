//! What a task type declaration holds (see `catalog.rs` for the declarations themselves).

use std::time::Duration;

use super::Reuse;

/// A provider's dialect of one of the two wire protocols: a type's names and whether a
/// provider solves it are stated per dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// CaptchaAI's `in.php`/`res.php` (the simulator speaks it too).
    CaptchaAi,
    /// 2captcha's `in.php`/`res.php`.
    TwoCaptcha,
    /// anti-captcha's `createTask`.
    AntiCaptcha,
    /// CapSolver's `createTask`.
    CapSolver,
    /// 2captcha's v2 `createTask` (anti-captcha's names, with a few of its own).
    TwoCaptchaV2,
}

impl Dialect {
    pub const ALL: [Dialect; 5] = [
        Dialect::CaptchaAi,
        Dialect::TwoCaptcha,
        Dialect::AntiCaptcha,
        Dialect::CapSolver,
        Dialect::TwoCaptchaV2,
    ];

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of dialects, written in a declaration as `Dialects::of(&[...])`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialects(u8);

impl Dialects {
    pub const NONE: Dialects = Dialects(0);
    pub const ALL: Dialects = Dialects::of(&Dialect::ALL);
    /// The two `in.php` dialects.
    pub const INPHP: Dialects = Dialects::of(&[Dialect::CaptchaAi, Dialect::TwoCaptcha]);
    /// anti-captcha and 2captcha v2, which share anti-captcha's names.
    pub const ANTI_NAMES: Dialects = Dialects::of(&[Dialect::AntiCaptcha, Dialect::TwoCaptchaV2]);
    pub const CAPSOLVER: Dialects = Dialects::of(&[Dialect::CapSolver]);

    pub const fn of(dialects: &[Dialect]) -> Dialects {
        let mut bits = 0;
        let mut i = 0;
        while i < dialects.len() {
            bits |= dialects[i].bit();
            i += 1;
        }
        Dialects(bits)
    }

    pub const fn union(self, other: Dialects) -> Dialects {
        Dialects(self.0 | other.0)
    }

    pub fn contains(self, dialect: Dialect) -> bool {
        self.0 & dialect.bit() != 0
    }
}

/// Whether a task type name carries the caller's proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyName {
    /// `...TaskProxyless`: the provider's own proxy.
    Proxyless,
    /// `...Task`: the caller's proxy, in the task's proxy fields.
    Proxied,
    /// One name either way (`ImageToTextTask`, CapSolver's `AntiTurnstileTaskProxyLess`).
    Either,
}

/// One `createTask` type name of a task type.
#[derive(Debug, Clone, Copy)]
pub struct TaskName {
    /// As the dialect spells it; read back without regard to case.
    pub name: &'static str,
    pub proxy: ProxyName,
    /// The dialects that take this name. `NONE`: a legacy name read from callers, never sent.
    pub dialects: Dialects,
    /// reCAPTCHA's Enterprise variants: `Some(true)` for a name that says it
    /// (`...EnterpriseTask`), `None` for one that serves both (anti-captcha's v3, which marks
    /// Enterprise with `isEnterprise`).
    pub enterprise: Option<bool>,
}

impl TaskName {
    pub const fn new(name: &'static str, proxy: ProxyName, dialects: Dialects) -> TaskName {
        TaskName {
            name,
            proxy,
            dialects,
            enterprise: Some(false),
        }
    }

    pub const fn enterprise(self) -> TaskName {
        TaskName {
            enterprise: Some(true),
            ..self
        }
    }

    pub const fn with_or_without_enterprise(self) -> TaskName {
        TaskName {
            enterprise: None,
            ..self
        }
    }
}

/// A figure and where it comes from (a vendor's or provider's documentation, or why the
/// cautious guess was taken), so a reader can check it.
#[derive(Debug, Clone, Copy)]
pub struct Sourced<T> {
    pub value: T,
    pub source: &'static str,
}

pub const fn secs(value: u64, source: &'static str) -> Sourced<Duration> {
    Sourced {
        value: Duration::from_secs(value),
        source,
    }
}

/// One task type, declared once: every layer reads its facts from here.
#[derive(Debug, Clone, Copy)]
pub struct TypeSpec {
    /// The native API's and the metrics' name; never changes.
    pub name: &'static str,
    /// The `in.php` `method` values that ask for it. reCAPTCHA v2 and v3 share `userrecaptcha`
    /// (`version=v3` tells them apart); a text question comes as `textcaptcha=` with `method=post`
    /// or none.
    pub methods: &'static [&'static str],
    /// Its `createTask` names, each with the dialects that take it.
    pub task_names: &'static [TaskName],
    /// The `in.php` dialects that solve it (the `createTask` ones are those with a name for it).
    pub inphp: Dialects,
    pub reuse: Reuse,
    /// How long an answer lives from the moment the provider reported it ready.
    pub lifetime: Sourced<Duration>,
    /// When the first poll for a task is worth making.
    pub first_poll: Sourced<Duration>,
}

impl TypeSpec {
    /// The dialects that solve it: its `in.php` ones and every dialect one of its names is sent to.
    pub fn solved_in(&self) -> Dialects {
        self.task_names
            .iter()
            .fold(self.inphp, |all, n| all.union(n.dialects))
    }
}
