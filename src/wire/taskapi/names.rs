//! Task type names: which request each means, and which name each flavor expects for a request.
//! Names are compared without regard to case, as CapSolver spells them `ReCaptchaV2TaskProxyLess`
//! where anti-captcha writes `RecaptchaV2TaskProxyless` (docs/API.md lists the table).

use url::Url;

use crate::model::{Dialect, Kind, ProxyName, TaskName};

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

    /// The dialect as the kinds' declarations name it.
    pub fn dialect(self) -> Dialect {
        match self {
            TaskApiDialect::AntiCaptcha => Dialect::AntiCaptcha,
            TaskApiDialect::CapSolver => Dialect::CapSolver,
            TaskApiDialect::TwoCaptchaV2 => Dialect::TwoCaptchaV2,
        }
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
    /// A type read and written from its declaration (`model::Parameters::Declared`).
    Declared(Kind),
}

impl Shape {
    /// The kind a shape is of.
    pub fn kind(self) -> Kind {
        match self {
            Shape::RecaptchaV2 { .. } => Kind::RecaptchaV2,
            Shape::RecaptchaV3 { .. } => Kind::RecaptchaV3,
            Shape::Declared(kind) => kind,
        }
    }
}

/// Whether the type carries the caller's proxy (`...Task`) or the provider's own
/// (`...TaskProxyless`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyUse {
    Proxyless,
    Proxied,
}

/// What a type name means; `None` for a type the gateway does not solve. The names are the
/// kinds' declarations (`model::Kind::spec`).
pub fn shape_of(type_name: &str) -> Option<(Shape, ProxyUse)> {
    let (kind, name) = Kind::by_task_name(type_name)?;
    let enterprise = name.enterprise == Some(true);
    let shape = match kind {
        Kind::RecaptchaV2 => Shape::RecaptchaV2 { enterprise },
        Kind::RecaptchaV3 => Shape::RecaptchaV3 { enterprise },
        declared => Shape::Declared(declared),
    };
    let proxy = match name.proxy {
        ProxyName::Proxied => ProxyUse::Proxied,
        ProxyName::Proxyless | ProxyName::Either => ProxyUse::Proxyless,
    };
    Some((shape, proxy))
}

/// The type name `flavor` expects for `shape`, with the marker it carries, or `None` where it
/// has no such task.
pub fn name_for(
    flavor: TaskApiDialect,
    shape: Shape,
    proxy: ProxyUse,
) -> Option<&'static TaskName> {
    let enterprise = match shape {
        Shape::RecaptchaV2 { enterprise } | Shape::RecaptchaV3 { enterprise } => enterprise,
        _ => false,
    };
    shape
        .kind()
        .task_name(flavor.dialect(), proxy == ProxyUse::Proxied, enterprise)
}

/// Whether `type_name` is spelled as only CapSolver spells it (`ReCaptchaV2TaskProxyLess`,
/// `AntiTurnstileTaskProxyLess`), case and all: a sign the caller is a CapSolver client. Names
/// every dialect shares (`ImageToTextTask`) say nothing.
pub fn capsolver_spelling(type_name: &str) -> bool {
    let name = type_name.trim();
    let spelled_by = |dialect| {
        Kind::ALL.iter().any(|k| {
            k.spec()
                .task_names
                .iter()
                .any(|n| n.name == name && n.dialects.contains(dialect))
        })
    };
    spelled_by(Dialect::CapSolver)
        && !spelled_by(Dialect::AntiCaptcha)
        && !spelled_by(Dialect::TwoCaptchaV2)
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
        assert_eq!(
            shape_of("FunCaptchaTaskProxyless"),
            Some((Shape::Declared(Kind::Funcaptcha), ProxyUse::Proxyless))
        );
        assert_eq!(shape_of("KeyCaptchaTaskProxyless"), None);
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
            let declared = Kind::ALL
                .iter()
                .flat_map(|k| k.spec().task_names)
                .filter_map(|n| shape_of(n.name));
            for (shape, proxy) in declared {
                let Some(name) = name_for(flavor, shape, proxy) else {
                    continue;
                };
                let (back, _) = shape_of(name.name).expect("an encoded name is a known name");
                // Enterprise v3 reads back through `isEnterprise`, not the name, for anti-captcha;
                // a Cloudflare challenge through its marker, `cloudflareTaskType`.
                let same_family = back.kind() == shape.kind()
                    || (name.marker.is_some() && back == Shape::Declared(Kind::Turnstile));
                assert!(
                    same_family,
                    "{flavor:?} {shape:?} -> {} -> {back:?}",
                    name.name
                );
            }
        }
    }
}
