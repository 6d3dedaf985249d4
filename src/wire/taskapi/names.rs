//! Task type names: which request each means, and which name each flavor expects for a request.
//! Names are compared without regard to case, as CapSolver spells them `ReCaptchaV2TaskProxyLess`
//! where anti-captcha writes `RecaptchaV2TaskProxyless` (docs/API.md lists the table).

use url::Url;

/// Which provider's dialect of the protocol: the same envelope, different type names, proxy
/// fields and task id types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskApiDialect {
    AntiCaptcha,
    CapSolver,
    /// 2captcha's v2 API (`api.2captcha.com`), which takes anti-captcha's task names.
    TwoCaptchaV2,
}

impl TaskApiDialect {
    pub const ALL: [TaskApiDialect; 3] = [
        TaskApiDialect::AntiCaptcha,
        TaskApiDialect::CapSolver,
        TaskApiDialect::TwoCaptchaV2,
    ];

    /// The provider's public endpoint.
    pub fn default_base_url(self) -> Url {
        let raw = match self {
            TaskApiDialect::AntiCaptcha => "https://api.anti-captcha.com",
            TaskApiDialect::CapSolver => "https://api.capsolver.com",
            TaskApiDialect::TwoCaptchaV2 => "https://api.2captcha.com",
        };
        Url::parse(raw).expect("a literal, valid URL")
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskApiDialect::AntiCaptcha => "anticaptcha",
            TaskApiDialect::CapSolver => "capsolver",
            TaskApiDialect::TwoCaptchaV2 => "2captcha-v2",
        }
    }

    /// The flavor a provider name in settings means (`anticaptcha`, `capsolver`, `2captcha-v2`,
    /// as [`as_str`](TaskApiDialect::as_str) spells them; case is ignored).
    pub fn from_name(name: &str) -> Option<TaskApiDialect> {
        TaskApiDialect::ALL
            .into_iter()
            .find(|f| f.as_str().eq_ignore_ascii_case(name.trim()))
    }

    /// Most `getTaskResult` calls the provider answers per task: CapSolver documents 120; the
    /// others document no figure, and the poller's own budget (about 20) is far below it.
    pub fn max_checks_per_task(self) -> Option<u32> {
        match self {
            TaskApiDialect::CapSolver => Some(120),
            TaskApiDialect::AntiCaptcha | TaskApiDialect::TwoCaptchaV2 => None,
        }
    }
}

/// What a task type asks for, before its fields are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    RecaptchaV2 {
        enterprise: bool,
    },
    RecaptchaV3 {
        enterprise: bool,
    },
    Turnstile,
    /// anti-captcha's `TurnstileTask` with `cloudflareTaskType`, CapSolver's `AntiCloudflareTask`.
    CloudflareChallenge,
    Geetest,
    Image,
    Text,
}

/// Whether the type carries the caller's proxy (`...Task`) or the provider's own
/// (`...TaskProxyless`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyUse {
    Proxyless,
    Proxied,
}

/// Every name accepted downstream (lowercase), with what it means.
const NAMES: &[(&str, Shape, ProxyUse)] = &[
    (
        "recaptchav2taskproxyless",
        Shape::RecaptchaV2 { enterprise: false },
        ProxyUse::Proxyless,
    ),
    (
        "nocaptchataskproxyless",
        Shape::RecaptchaV2 { enterprise: false },
        ProxyUse::Proxyless,
    ),
    (
        "recaptchav2task",
        Shape::RecaptchaV2 { enterprise: false },
        ProxyUse::Proxied,
    ),
    (
        "nocaptchatask",
        Shape::RecaptchaV2 { enterprise: false },
        ProxyUse::Proxied,
    ),
    (
        "recaptchav2enterprisetaskproxyless",
        Shape::RecaptchaV2 { enterprise: true },
        ProxyUse::Proxyless,
    ),
    (
        "recaptchav2enterprisetask",
        Shape::RecaptchaV2 { enterprise: true },
        ProxyUse::Proxied,
    ),
    (
        "recaptchav3taskproxyless",
        Shape::RecaptchaV3 { enterprise: false },
        ProxyUse::Proxyless,
    ),
    (
        "recaptchav3task",
        Shape::RecaptchaV3 { enterprise: false },
        ProxyUse::Proxied,
    ),
    (
        "recaptchav3enterprisetaskproxyless",
        Shape::RecaptchaV3 { enterprise: true },
        ProxyUse::Proxyless,
    ),
    (
        "recaptchav3enterprisetask",
        Shape::RecaptchaV3 { enterprise: true },
        ProxyUse::Proxied,
    ),
    (
        "turnstiletaskproxyless",
        Shape::Turnstile,
        ProxyUse::Proxyless,
    ),
    ("turnstiletask", Shape::Turnstile, ProxyUse::Proxied),
    (
        "antiturnstiletaskproxyless",
        Shape::Turnstile,
        ProxyUse::Proxyless,
    ),
    (
        "anticloudflaretask",
        Shape::CloudflareChallenge,
        ProxyUse::Proxied,
    ),
    ("geetesttaskproxyless", Shape::Geetest, ProxyUse::Proxyless),
    ("geetesttask", Shape::Geetest, ProxyUse::Proxied),
    ("imagetotexttask", Shape::Image, ProxyUse::Proxyless),
    ("textcaptchatask", Shape::Text, ProxyUse::Proxyless),
];

/// What a type name means; `None` for a type the gateway does not solve.
pub fn shape_of(type_name: &str) -> Option<(Shape, ProxyUse)> {
    let lower = type_name.trim().to_ascii_lowercase();
    NAMES
        .iter()
        .find(|(name, _, _)| *name == lower)
        .map(|(_, shape, proxy)| (*shape, *proxy))
}

/// The type name `flavor` expects for `shape`, or `None` where it has no such task.
pub fn name_for(flavor: TaskApiDialect, shape: Shape, proxy: ProxyUse) -> Option<&'static str> {
    use ProxyUse::{Proxied, Proxyless};
    use Shape::*;
    let capsolver = flavor == TaskApiDialect::CapSolver;
    Some(match (shape, proxy, capsolver) {
        (RecaptchaV2 { enterprise: false }, Proxyless, false) => "RecaptchaV2TaskProxyless",
        (RecaptchaV2 { enterprise: false }, Proxied, false) => "RecaptchaV2Task",
        (RecaptchaV2 { enterprise: true }, Proxyless, false) => {
            "RecaptchaV2EnterpriseTaskProxyless"
        }
        (RecaptchaV2 { enterprise: true }, Proxied, false) => "RecaptchaV2EnterpriseTask",
        (RecaptchaV2 { enterprise: false }, Proxyless, true) => "ReCaptchaV2TaskProxyLess",
        (RecaptchaV2 { enterprise: false }, Proxied, true) => "ReCaptchaV2Task",
        (RecaptchaV2 { enterprise: true }, Proxyless, true) => "ReCaptchaV2EnterpriseTaskProxyLess",
        (RecaptchaV2 { enterprise: true }, Proxied, true) => "ReCaptchaV2EnterpriseTask",
        // anti-captcha marks Enterprise v3 with `isEnterprise` on the one v3 type.
        (RecaptchaV3 { .. }, Proxyless, false) => "RecaptchaV3TaskProxyless",
        (RecaptchaV3 { .. }, Proxied, false) => "RecaptchaV3Task",
        (RecaptchaV3 { enterprise: false }, Proxyless, true) => "ReCaptchaV3TaskProxyLess",
        (RecaptchaV3 { enterprise: false }, Proxied, true) => "ReCaptchaV3Task",
        (RecaptchaV3 { enterprise: true }, Proxyless, true) => "ReCaptchaV3EnterpriseTaskProxyLess",
        (RecaptchaV3 { enterprise: true }, Proxied, true) => "ReCaptchaV3EnterpriseTask",
        (Turnstile, Proxyless, false) => "TurnstileTaskProxyless",
        (Turnstile, Proxied, false) => "TurnstileTask",
        (Turnstile, _, true) => "AntiTurnstileTaskProxyLess",
        // anti-captcha: a `TurnstileTask` with `cloudflareTaskType: "cf_clearance"`.
        (CloudflareChallenge, _, false) => "TurnstileTask",
        (CloudflareChallenge, _, true) => "AntiCloudflareTask",
        (Geetest, Proxyless, false) => "GeeTestTaskProxyless",
        (Geetest, Proxied, false) => "GeeTestTask",
        (Geetest, Proxyless, true) => "GeeTestTaskProxyLess",
        (Geetest, Proxied, true) => return None,
        (Image, _, _) => "ImageToTextTask",
        // A 2captcha v2 task; anti-captcha and CapSolver have no text questions.
        (Text, _, _) if flavor == TaskApiDialect::TwoCaptchaV2 => "TextCaptchaTask",
        (Text, _, _) => return None,
    })
}

/// Whether `type_name` is spelled as only CapSolver spells it (`ReCaptchaV2TaskProxyLess`,
/// `AntiTurnstileTaskProxyLess`), case and all: a sign the caller is a CapSolver client. Names
/// every dialect shares (`ImageToTextTask`) say nothing.
pub fn capsolver_spelling(type_name: &str) -> bool {
    let name = type_name.trim();
    NAMES.iter().any(|(_, shape, proxy)| {
        let theirs = |flavor| name_for(flavor, *shape, *proxy) == Some(name);
        theirs(TaskApiDialect::CapSolver)
            && !theirs(TaskApiDialect::AntiCaptcha)
            && !theirs(TaskApiDialect::TwoCaptchaV2)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_without_case_and_every_encoded_name_reads_back() {
        assert_eq!(
            shape_of("ReCaptchaV2TaskProxyLess"),
            Some((
                Shape::RecaptchaV2 { enterprise: false },
                ProxyUse::Proxyless
            ))
        );
        assert_eq!(
            shape_of("NoCaptchaTask"),
            Some((Shape::RecaptchaV2 { enterprise: false }, ProxyUse::Proxied))
        );
        assert_eq!(shape_of("FunCaptchaTaskProxyless"), None);
        assert!(capsolver_spelling("ReCaptchaV2TaskProxyLess"));
        assert!(capsolver_spelling("AntiTurnstileTaskProxyLess"));
        assert!(!capsolver_spelling("RecaptchaV2TaskProxyless"));
        assert!(!capsolver_spelling("recaptchav2taskproxyless"));
        assert!(!capsolver_spelling("ImageToTextTask"));
        for flavor in TaskApiDialect::ALL {
            assert_eq!(
                TaskApiDialect::from_name(&flavor.as_str().to_uppercase()),
                Some(flavor)
            );
        }
        assert_eq!(TaskApiDialect::from_name("captchaai"), None);
        for flavor in TaskApiDialect::ALL {
            for (_, shape, proxy) in NAMES {
                let Some(name) = name_for(flavor, *shape, *proxy) else {
                    continue;
                };
                let (back, _) = shape_of(name).expect("an encoded name is a known name");
                // Enterprise v3 reads back through `isEnterprise`, not the name, for anti-captcha;
                // a Cloudflare challenge through `cloudflareTaskType`.
                let same_family = std::mem::discriminant(&back) == std::mem::discriminant(shape)
                    || (*shape == Shape::CloudflareChallenge && back == Shape::Turnstile);
                assert!(same_family, "{flavor:?} {shape:?} -> {name} -> {back:?}");
            }
        }
    }
}
