//! Every task type the gateway declares, one entry each: its names in every dialect, which
//! providers solve it, how its answers may be handed out, how long they live and when a first
//! poll is worth making, each figure with its source. docs/API.md ("Task types") shows the
//! table.

use super::Reuse;
use super::spec::{Dialect, Dialects, ProxyName, TaskName, TypeSpec, secs};

use ProxyName::{Either, Proxied, Proxyless};

const ANTI: Dialects = Dialects::ANTI_NAMES;
const CAPSOLVER: Dialects = Dialects::CAPSOLVER;
/// Every `createTask` dialect.
const TASK_APIS: Dialects = Dialects::of(&[
    Dialect::AntiCaptcha,
    Dialect::CapSolver,
    Dialect::TwoCaptchaV2,
]);

/// The official CaptchaAI SDK's first waits (`captchaai/core/registry.py`): 15 s for reCAPTCHA
/// v2, the Cloudflare challenge and GeeTest, 10 s for v3 and Turnstile, 1 s for images.
const SDK_FIRST_WAIT: &str = "the official CaptchaAI SDK's first wait for the type";
/// Google's siteverify documentation: a token is "valid for two minutes" and verified once.
const RECAPTCHA_LIFETIME: &str = "Google reCAPTCHA docs: a token is valid for two minutes, once";

pub const RECAPTCHA_V2: TypeSpec = TypeSpec {
    name: "recaptcha_v2",
    methods: &["userrecaptcha"],
    task_names: &[
        TaskName::new("RecaptchaV2TaskProxyless", Proxyless, ANTI),
        TaskName::new("RecaptchaV2Task", Proxied, ANTI),
        TaskName::new("RecaptchaV2EnterpriseTaskProxyless", Proxyless, ANTI).enterprise(),
        TaskName::new("RecaptchaV2EnterpriseTask", Proxied, ANTI).enterprise(),
        TaskName::new("ReCaptchaV2TaskProxyLess", Proxyless, CAPSOLVER),
        TaskName::new("ReCaptchaV2Task", Proxied, CAPSOLVER),
        TaskName::new("ReCaptchaV2EnterpriseTaskProxyLess", Proxyless, CAPSOLVER).enterprise(),
        TaskName::new("ReCaptchaV2EnterpriseTask", Proxied, CAPSOLVER).enterprise(),
        // anti-captcha's legacy names, still sent by older clients.
        TaskName::new("NoCaptchaTaskProxyless", Proxyless, Dialects::NONE),
        TaskName::new("NoCaptchaTask", Proxied, Dialects::NONE),
    ],
    inphp: Dialects::INPHP,
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(120, RECAPTCHA_LIFETIME),
    first_poll: secs(15, SDK_FIRST_WAIT),
};

pub const RECAPTCHA_V3: TypeSpec = TypeSpec {
    name: "recaptcha_v3",
    // `userrecaptcha` with `version=v3`.
    methods: &["userrecaptcha"],
    task_names: &[
        TaskName::new("RecaptchaV3TaskProxyless", Proxyless, ANTI).with_or_without_enterprise(),
        TaskName::new("RecaptchaV3Task", Proxied, ANTI).with_or_without_enterprise(),
        TaskName::new("ReCaptchaV3TaskProxyLess", Proxyless, CAPSOLVER),
        TaskName::new("ReCaptchaV3Task", Proxied, CAPSOLVER),
        TaskName::new("ReCaptchaV3EnterpriseTaskProxyLess", Proxyless, CAPSOLVER).enterprise(),
        TaskName::new("ReCaptchaV3EnterpriseTask", Proxied, CAPSOLVER).enterprise(),
    ],
    inphp: Dialects::INPHP,
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(120, RECAPTCHA_LIFETIME),
    first_poll: secs(10, SDK_FIRST_WAIT),
};

pub const TURNSTILE: TypeSpec = TypeSpec {
    name: "turnstile",
    methods: &["turnstile"],
    task_names: &[
        TaskName::new("TurnstileTaskProxyless", Proxyless, ANTI),
        TaskName::new("TurnstileTask", Proxied, ANTI),
        TaskName::new("AntiTurnstileTaskProxyLess", Either, CAPSOLVER),
    ],
    inphp: Dialects::INPHP,
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(
        300,
        "Cloudflare Turnstile docs: a token is valid for 300 seconds, once",
    ),
    first_poll: secs(10, SDK_FIRST_WAIT),
};

pub const CLOUDFLARE_CHALLENGE: TypeSpec = TypeSpec {
    name: "cloudflare_challenge",
    methods: &["cloudflare_challenge"],
    task_names: &[
        // anti-captcha asks for `cf_clearance` through its Turnstile type with
        // `cloudflareTaskType`, and always with the caller's proxy.
        TaskName::new("TurnstileTask", Proxied, ANTI),
        TaskName::new("AntiCloudflareTask", Proxied, CAPSOLVER),
    ],
    inphp: Dialects::INPHP,
    reuse: Reuse::Reusable,
    lifetime: secs(
        15 * 60,
        "Cloudflare docs: the clearance lifetime is a site setting, 15-45 min recommended; the short end",
    ),
    first_poll: secs(15, SDK_FIRST_WAIT),
};

pub const GEETEST_V3: TypeSpec = TypeSpec {
    name: "geetest_v3",
    methods: &["geetest"],
    task_names: &[
        TaskName::new("GeeTestTaskProxyless", Proxyless, ANTI),
        TaskName::new("GeeTestTask", Proxied, ANTI),
        TaskName::new("GeeTestTaskProxyLess", Proxyless, CAPSOLVER),
    ],
    inphp: Dialects::INPHP,
    // The challenge is fresh per page load: an answer is for that load only.
    reuse: Reuse::SingleUse { poolable: false },
    lifetime: secs(
        120,
        "not documented by GeeTest; the reCAPTCHA figure is the cautious guess",
    ),
    first_poll: secs(15, SDK_FIRST_WAIT),
};

pub const IMAGE: TypeSpec = TypeSpec {
    name: "image",
    methods: &["base64", "post"],
    task_names: &[TaskName::new("ImageToTextTask", Either, TASK_APIS)],
    inphp: Dialects::INPHP,
    reuse: Reuse::Reusable,
    lifetime: secs(
        60 * 60,
        "the same image has the same text: how long the coalescing cache keeps an answer",
    ),
    first_poll: secs(1, SDK_FIRST_WAIT),
};

pub const TEXT: TypeSpec = TypeSpec {
    name: "text",
    // `textcaptcha=` with `method=post`, `method=textcaptcha` or no method.
    methods: &["textcaptcha"],
    // 2captcha v2's; anti-captcha and CapSolver ask no text questions.
    task_names: &[TaskName::new(
        "TextCaptchaTask",
        Either,
        Dialects::of(&[Dialect::TwoCaptchaV2]),
    )],
    inphp: Dialects::INPHP,
    reuse: Reuse::Reusable,
    lifetime: secs(
        60 * 60,
        "the same question has the same answer: how long the coalescing cache keeps one",
    ),
    first_poll: secs(
        1,
        "an answer to a text question is typed as quickly as an image's",
    ),
};
