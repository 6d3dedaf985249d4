use std::fmt;

use bytes::Bytes;

use super::Kind;
use super::kind::{Check, Dialects, PAGE, Passthrough};

/// Everything a caller asks for: one task's parameters plus the browser context the answer may be
/// bound to. Built by the protocol parsers (compatible, native, seed worker API) and consumed by
/// the engine and the provider encoder.
#[derive(Clone, PartialEq)]
pub struct SolveRequest {
    pub params: TaskParams,
    pub proxy: Option<Proxy>,
    pub user_agent: Option<String>,
    pub cookies: Option<String>,
    /// Whose targets these are: `None` shares them with every tenant; a tenant with
    /// `pools = "isolated"` puts its name here, so its targets, pools and answers are its own.
    pub partition: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecaptchaVersion {
    V2,
    V3,
}

/// The kind-specific part of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskParams {
    Recaptcha {
        sitekey: String,
        pageurl: String,
        version: RecaptchaVersion,
        enterprise: bool,
        invisible: bool,
        /// v3 `action`; on v2 the `sa` value some clients send (kept, it changes the answer).
        action: Option<String>,
        /// v3 `min_score`, kept as sent ("0.3") so targets compare exactly.
        min_score: Option<String>,
        data_s: Option<String>,
        /// `google.com` or `recaptcha.net`.
        domain: Option<String>,
    },
    /// A type whose parameters are read and written from its declaration
    /// (`Parameters::Declared`): each value under its declared name, in declaration order,
    /// absent ones left out. A flag is `1` when on and absent when off; an object is its JSON
    /// text.
    Declared {
        kind: Kind,
        values: Vec<(&'static str, String)>,
    },
    /// A type the gateway does not declare, kept as sent and forwarded to an account of the
    /// protocol it came in (kind `other`).
    Passthrough(Passthrough),
}

impl TaskParams {
    pub fn kind(&self) -> Kind {
        match self {
            TaskParams::Recaptcha { version, .. } => match version {
                RecaptchaVersion::V2 => Kind::RecaptchaV2,
                RecaptchaVersion::V3 => Kind::RecaptchaV3,
            },
            TaskParams::Declared { kind, .. } => *kind,
            TaskParams::Passthrough(_) => Kind::Other,
        }
    }

    /// A declared kind's parameters from `(name, value)` pairs, for requests built in code
    /// (tests, benches, examples); the pairs are put in declaration order.
    ///
    /// # Panics
    /// On a name the kind does not declare: a mistake in the calling code, not in input.
    pub fn declared_of(kind: Kind, pairs: &[(&str, &str)]) -> TaskParams {
        let params = kind.spec().declared_params();
        for (name, _) in pairs {
            assert!(
                params.iter().any(|p| p.name == *name),
                "{kind} declares no parameter `{name}`"
            );
        }
        let values = params
            .iter()
            .filter_map(|p| {
                let (_, value) = pairs.iter().find(|(n, _)| *n == p.name)?;
                Some((p.name, (*value).to_owned()))
            })
            .collect();
        TaskParams::Declared { kind, values }
    }

    /// A declared parameter's value, by its declared name.
    pub fn declared(&self, name: &str) -> Option<&str> {
        match self {
            TaskParams::Declared { values, .. } => values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str()),
            _ => None,
        }
    }

    /// The parameters it sets that only some providers take (hCaptcha's `domain`, an image's
    /// `numeric` 4): the first one's name, and the dialects that take them all. Such a task
    /// goes only to their accounts.
    pub fn restricted(&self) -> Option<(&'static str, Dialects)> {
        let TaskParams::Declared { kind, values } = self else {
            return None;
        };
        let mut restricted = None;
        for param in kind.spec().declared_params() {
            let Some((_, value)) = values.iter().find(|(n, _)| *n == param.name) else {
                continue;
            };
            let taken = param.taken_by(value);
            if taken != Dialects::ALL {
                let (name, all) = restricted.unwrap_or((param.name, Dialects::ALL));
                restricted = Some((name, all.intersection(taken)));
            }
        }
        restricted
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProxyType {
    Http,
    Https,
    Socks4,
    Socks5,
}

impl ProxyType {
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyType::Http => "HTTP",
            ProxyType::Https => "HTTPS",
            ProxyType::Socks4 => "SOCKS4",
            ProxyType::Socks5 => "SOCKS5",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_uppercase().as_str() {
            "HTTP" => Some(ProxyType::Http),
            "HTTPS" => Some(ProxyType::Https),
            "SOCKS4" => Some(ProxyType::Socks4),
            "SOCKS5" => Some(ProxyType::Socks5),
            _ => None,
        }
    }
}

/// A proxy as the providers take it: `user:pass@host:port` or `host:port`.
/// `Debug` and `Display` never show the credentials (docs/ARCHITECTURE.md promise 8).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Proxy {
    pub kind: ProxyType,
    pub address: String,
}

impl Proxy {
    /// `host:port` without the credentials: safe to log and to use in metric-free labels.
    pub fn endpoint(&self) -> &str {
        self.address
            .rsplit_once('@')
            .map(|(_, host)| host)
            .unwrap_or(&self.address)
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.kind.as_str(), self.endpoint())
    }
}

impl fmt::Debug for SolveRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // What a log line may show: the kind and the page's host (a page URL can carry user
        // info and a session in its query), the proxy's endpoint, whether cookies were sent
        // (they carry sessions), never their values.
        let page = match &self.params {
            TaskParams::Recaptcha { pageurl, .. } => Some(super::target::host_of(pageurl)),
            TaskParams::Declared { .. } => {
                self.params.declared(PAGE.name).map(super::target::host_of)
            }
            TaskParams::Passthrough(_) => None,
        };
        // A pass-through task's fields are never shown (they may hold a proxy's password):
        // its type's label only.
        let passthrough = match &self.params {
            TaskParams::Passthrough(p) => Some((p.protocol().as_str(), p.label())),
            _ => None,
        };
        f.debug_struct("SolveRequest")
            .field("kind", &self.kind())
            .field("page_host", &page)
            .field("passthrough", &passthrough)
            .field("proxy", &self.proxy)
            .field("user_agent", &self.user_agent)
            .field("cookies", &self.cookies.as_ref().map(|_| "<set>"))
            .field("partition", &self.partition)
            .finish()
    }
}

/// A request that cannot be solved as given, with the compatible-API error code that says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Validation {
    pub code: &'static str,
    pub message: String,
}

impl Validation {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Images below this are not images (CaptchaAI: "image < 100 bytes").
pub const MIN_IMAGE_BYTES: usize = 100;
/// CaptchaAI's docs disagree (100 kB / 1024 kB); we accept the larger so no valid upload is refused
/// here that the provider would take.
pub const MAX_IMAGE_BYTES: usize = 1024 * 1024;

impl SolveRequest {
    pub fn new(params: TaskParams) -> Self {
        Self {
            params,
            proxy: None,
            user_agent: None,
            cookies: None,
            partition: None,
        }
    }

    /// A plain reCAPTCHA v2 request (no flags, no proxy): the most common target.
    pub fn recaptcha_v2(sitekey: impl Into<String>, pageurl: impl Into<String>) -> Self {
        Self::new(TaskParams::Recaptcha {
            sitekey: sitekey.into(),
            pageurl: pageurl.into(),
            version: RecaptchaVersion::V2,
            enterprise: false,
            invisible: false,
            action: None,
            min_score: None,
            data_s: None,
            domain: None,
        })
    }

    pub fn kind(&self) -> Kind {
        self.params.kind()
    }

    /// Whether the provider answers this request with a `user_agent` the answer is bound to
    /// (the captchaai SDK reads `result` + `user_agent` for these).
    pub fn answer_has_user_agent(&self) -> bool {
        match &self.params {
            TaskParams::Recaptcha { enterprise, .. } => *enterprise,
            _ => self.kind().spec().answer_user_agent,
        }
    }

    /// The checks every entry point shares, so each protocol reports the same problems.
    pub fn validate(&self) -> Result<(), Validation> {
        super::limits::check_request(self)?;
        fn page(url: &str) -> Result<(), Validation> {
            match url::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
                _ => Err(Validation::new(
                    "ERROR_PAGEURL",
                    "pageurl must be an absolute http(s) URL",
                )),
            }
        }
        fn sitekey(key: &str, code: &'static str) -> Result<(), Validation> {
            let ok = !key.is_empty()
                && key.len() <= super::limits::MAX_SITEKEY_LEN
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
            if ok {
                Ok(())
            } else {
                Err(Validation::new(code, "sitekey is missing or malformed"))
            }
        }
        match &self.params {
            TaskParams::Recaptcha {
                sitekey: key,
                pageurl,
                version,
                action,
                ..
            } => {
                sitekey(key, "ERROR_GOOGLEKEY")?;
                page(pageurl)?;
                if *version == RecaptchaVersion::V3 && action.as_deref().unwrap_or("").is_empty() {
                    return Err(Validation::new(
                        "ERROR_BAD_PARAMETERS",
                        "reCAPTCHA v3 needs an action",
                    ));
                }
            }
            TaskParams::Declared { kind, .. } => self.validate_declared(*kind, page, sitekey)?,
            // Its fields are the provider's to judge; `limits` bounds them.
            TaskParams::Passthrough(_) => {}
        }
        Ok(())
    }
}

impl SolveRequest {
    /// A declared type's checks, from its declaration: every required parameter present, each
    /// value of its form, and the proxy and user agent it needs.
    fn validate_declared(
        &self,
        kind: Kind,
        page: fn(&str) -> Result<(), Validation>,
        sitekey: fn(&str, &'static str) -> Result<(), Validation>,
    ) -> Result<(), Validation> {
        const BAD: &str = "ERROR_BAD_PARAMETERS";
        let spec = kind.spec();
        for param in spec.declared_params() {
            let Some(value) = self.params.declared(param.name) else {
                if param.required {
                    let code = match param.check {
                        Check::Page => "ERROR_PAGEURL",
                        Check::Image => "ERROR_ZERO_CAPTCHA_FILESIZE",
                        _ => BAD,
                    };
                    let aliases: String =
                        param.aliases.iter().map(|a| format!(" or `{a}`")).collect();
                    return Err(Validation::new(
                        code,
                        format!(
                            "{kind} needs `{}`{aliases} (`{}` in createTask)",
                            param.name, param.task
                        ),
                    ));
                }
                continue;
            };
            let bad = |what: &str| Validation::new(BAD, format!("`{}` must be {what}", param.name));
            match param.check {
                Check::Text => {}
                Check::Page => page(value).map_err(|e| Validation {
                    message: format!("`{}` must be an absolute http(s) URL", param.name),
                    ..e
                })?,
                Check::Key => {
                    sitekey(value, BAD).map_err(|_| bad("letters, digits, `-`, `_` or `.`"))?
                }
                Check::Flag if value != "1" => return Err(bad("1 or absent")),
                Check::Flag => {}
                Check::Object => {
                    let object: Option<serde_json::Map<String, serde_json::Value>> =
                        serde_json::from_str(value).ok();
                    if object.is_none_or(|o| o.values().any(|v| !v.is_string())) {
                        return Err(bad("an object of strings"));
                    }
                }
                Check::Image => match decode_base64_image(value) {
                    Some(image) => check_image(&image).map_err(|e| Validation {
                        message: format!("`{}`: {}", param.name, e.message),
                        ..e
                    })?,
                    None => {
                        return Err(Validation::new(
                            "ERROR_UPLOAD",
                            format!("`{}` is not valid base64", param.name),
                        ));
                    }
                },
                Check::OneOf(words) if !words.contains(&value) => {
                    return Err(bad(&format!("one of {}", words.join(", "))));
                }
                Check::OneOf(_) => {}
                Check::Count(max) => {
                    let Some(n) = value.parse::<u32>().ok().filter(|n| *n <= max) else {
                        return Err(bad(&format!("a whole number from 0 to {max}")));
                    };
                    let limit = param.not_above.and_then(|other| {
                        let limit = self.params.declared(other)?.parse::<u32>().ok()?;
                        Some((other, limit))
                    });
                    if let Some((other, limit)) = limit.filter(|(_, limit)| n > *limit) {
                        return Err(bad(&format!("at most `{other}` ({limit})")));
                    }
                }
            }
        }
        if spec.needs_proxy && self.proxy.is_none() {
            return Err(Validation::new(
                "ERROR_BAD_PROXY",
                format!("{kind} needs a proxy and proxytype"),
            ));
        }
        if spec.needs_user_agent && self.user_agent.is_none() {
            return Err(Validation::new(BAD, format!("{kind} needs `userAgent`")));
        }
        Ok(())
    }
}

/// An image's size and format, as a provider would judge them.
fn check_image(body: &[u8]) -> Result<(), Validation> {
    if body.len() < MIN_IMAGE_BYTES {
        return Err(Validation::new(
            "ERROR_ZERO_CAPTCHA_FILESIZE",
            format!("image is smaller than {MIN_IMAGE_BYTES} bytes"),
        ));
    }
    if body.len() > MAX_IMAGE_BYTES {
        return Err(Validation::new(
            "ERROR_TOO_BIG_CAPTCHA_FILESIZE",
            format!("image is larger than {MAX_IMAGE_BYTES} bytes"),
        ));
    }
    if image_format(body).is_none() {
        return Err(Validation::new(
            "ERROR_IMAGE_TYPE_NOT_SUPPORTED",
            "image must be JPEG, PNG, GIF, BMP or WebP",
        ));
    }
    Ok(())
}

/// An image sent as base64 text, as clients send it: a data-URI prefix, whitespace, padding
/// or its lack, the URL-safe alphabet, and `+` turned to a space by form encoding are all read.
pub fn decode_base64_image(raw: &str) -> Option<Bytes> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let data = raw.rsplit_once("base64,").map(|(_, d)| d).unwrap_or(raw);
    let cleaned: String = data
        .chars()
        .map(|c| if c == ' ' { '+' } else { c })
        .filter(|c| !c.is_whitespace())
        .collect();
    let cleaned = cleaned.trim_end_matches('=');
    STANDARD_NO_PAD
        .decode(cleaned)
        .or_else(|_| URL_SAFE_NO_PAD.decode(cleaned))
        .ok()
        .map(Bytes::from)
}

/// An image sent as base64 text, as the one form every layer keeps it in: standard base64 with
/// padding, so the same picture however it was written is the same target.
pub fn image_base64(raw: &str) -> Option<String> {
    use base64::Engine as _;
    decode_base64_image(raw).map(|image| base64::engine::general_purpose::STANDARD.encode(image))
}

/// The image format by its magic bytes, or `None` when the bytes are not an image we pass on.
pub fn image_format(body: &[u8]) -> Option<&'static str> {
    if body.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("jpeg")
    } else if body.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("png")
    } else if body.starts_with(b"GIF87a") || body.starts_with(b"GIF89a") {
        Some("gif")
    } else if body.starts_with(b"BM") {
        Some("bmp")
    } else if body.len() > 12 && &body[0..4] == b"RIFF" && &body[8..12] == b"WEBP" {
        Some("webp")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Dialect;

    fn image(hints: &[(&str, &str)]) -> TaskParams {
        let body = crate::model::kind::sample_image("restricted");
        let mut pairs = vec![("body", body.as_str())];
        pairs.extend_from_slice(hints);
        TaskParams::declared_of(Kind::Image, &pairs)
    }

    /// A value only some providers take narrows where a task goes; two such parameters narrow
    /// it to the providers that take both, which may be none.
    #[test]
    fn restricted_values_narrow_the_providers_together() {
        assert_eq!(image(&[("numeric", "2")]).restricted(), None);
        let (name, taken) = image(&[("numeric", "4")]).restricted().unwrap();
        assert_eq!(name, "numeric");
        assert!(!taken.contains(Dialect::AntiCaptcha) && !taken.contains(Dialect::CapSolver));
        assert!(taken.contains(Dialect::TwoCaptcha) && taken.contains(Dialect::TwoCaptchaV2));
        let (_, taken) = image(&[("numeric", "4"), ("language", "1")])
            .restricted()
            .unwrap();
        assert_eq!(taken, Dialects::INPHP);

        let body = crate::model::kind::sample_image("clicks");
        let both = TaskParams::declared_of(
            Kind::Coordinates,
            &[("body", &body), ("lang", "en"), ("mode", "rectangles")],
        );
        assert_eq!(both.restricted(), Some(("lang", Dialects::NONE)));
    }
}
