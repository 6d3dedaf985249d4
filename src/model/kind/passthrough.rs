//! Pass-through: a task of a type the gateway has no declaration for, kept as the caller sent it
//! and forwarded to an account whose provider speaks the caller's protocol (docs/API.md,
//! "Pass-through"). Its kind is `other`; its answer is returned as the provider gave it.

use bytes::Bytes;
use serde_json::{Map, Value};

/// The wire protocol a pass-through task came in, which is the one it is sent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PassProtocol {
    /// `in.php` / `res.php` (CaptchaAI, 2captcha).
    InPhp,
    /// `createTask` / `getTaskResult` (anti-captcha, CapSolver).
    TaskApi,
}

impl PassProtocol {
    pub const ALL: [PassProtocol; 2] = [PassProtocol::InPhp, PassProtocol::TaskApi];

    /// The name in metric labels and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            PassProtocol::InPhp => "in.php",
            PassProtocol::TaskApi => "createTask",
        }
    }
}

/// A task forwarded as sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Passthrough {
    /// Every `in.php` parameter the caller sent except the call's own (`key`, `json`, ...),
    /// `method` among them, and every uploaded file with its field's name; each sorted by name.
    InPhp {
        fields: Vec<(String, String)>,
        files: Vec<(String, Bytes)>,
    },
    /// The `createTask` `task` object as sent, `type` among its fields.
    TaskApi { task: Map<String, Value> },
}

/// Most fields a pass-through task may carry, and the longest name and value: a bound on what a
/// caller makes the gateway hold and forward, well above any documented type's.
pub const MAX_FIELDS: usize = 64;
pub const MAX_NAME_LEN: usize = 64;
/// A base64 image of the largest size the gateway takes, with room to spare.
pub const MAX_VALUE_LEN: usize = 1_500_000;

impl Passthrough {
    pub fn protocol(&self) -> PassProtocol {
        match self {
            Passthrough::InPhp { .. } => PassProtocol::InPhp,
            Passthrough::TaskApi { .. } => PassProtocol::TaskApi,
        }
    }

    /// The type as the caller named it: the `in.php` `method` or the `createTask` `type`.
    pub fn name(&self) -> &str {
        match self {
            Passthrough::InPhp { fields, .. } => fields
                .iter()
                .find(|(n, _)| n == "method")
                .map_or("", |(_, v)| v.as_str()),
            Passthrough::TaskApi { task } => task.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The type's name as a metric label: its documented spelling when it is one of
    /// [`DOCUMENTED`], else `unlisted`, so a caller cannot grow the label set.
    pub fn label(&self) -> &'static str {
        label_of(self.protocol(), self.name())
    }

    /// Whether the name is one a caller may send: a letter, then letters, digits, `_`, `-` and
    /// `.`, at most [`MAX_NAME_LEN`] in all.
    pub fn well_named(name: &str) -> bool {
        name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name.len() <= MAX_NAME_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    }
}

/// The label a type name gets in `protocol`'s list (see [`Passthrough::label`]).
pub fn label_of(protocol: PassProtocol, name: &str) -> &'static str {
    documented(protocol)
        .iter()
        .find(|known| known.eq_ignore_ascii_case(name))
        .copied()
        .unwrap_or(UNLISTED)
}

/// The label of a type name not in the documented list.
pub const UNLISTED: &str = "unlisted";

/// The names `protocol`'s providers document for types the gateway forwards rather than
/// declares, as their docs spell them (2captcha's API v1 and v2 method lists, anti-captcha's
/// and CapSolver's task types). The metric label set, with [`UNLISTED`].
pub fn documented(protocol: PassProtocol) -> &'static [&'static str] {
    match protocol {
        PassProtocol::InPhp => &[
            "keycaptcha",
            "capy",
            "cutcaptcha",
            "tencent",
            "yandex",
            "amazon_waf",
            "prosopo",
            "captchafox",
            "altcha",
            "atb_captcha",
            "cybersiara",
            "audio",
            "rotatecaptcha",
            "vkimage",
            "vkcaptcha",
            "temuimage",
            "binance",
            "yidun",
            "hunt",
            "alibaba",
            "tspd",
            "basilisk",
            "drag_drop",
            "incapsula",
            "base64",
            "post",
            "bls",
        ],
        PassProtocol::TaskApi => &[
            "KeyCaptchaTask",
            "KeyCaptchaTaskProxyless",
            "CapyTask",
            "CapyTaskProxyless",
            "CutCaptchaTask",
            "CutCaptchaTaskProxyless",
            "TencentTask",
            "TencentTaskProxyless",
            "YandexSmartCaptchaTask",
            "YandexSmartCaptchaTaskProxyless",
            "AmazonTask",
            "AmazonTaskProxyless",
            "AntiAwsWafTask",
            "AntiAwsWafTaskProxyLess",
            "ProsopoTask",
            "ProsopoTaskProxyless",
            "CaptchaFoxTask",
            "CaptchaFoxTaskProxyless",
            "AltchaTask",
            "AltchaTaskProxyless",
            "AtbCaptchaTask",
            "AtbCaptchaTaskProxyless",
            "AntiCyberSiAraTask",
            "AntiCyberSiAraTaskProxyLess",
            "AudioTask",
            "RotateTask",
            "CoordinatesTask",
            "ImageToCoordinatesTask",
            "GridTask",
            "DrawAroundTask",
            "BoundingBoxTask",
            "VisionEngine",
            "AntiGateTask",
            "ReCaptchaV2Classification",
            "AwsWafClassification",
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_a_documented_spelling_or_unlisted() {
        assert_eq!(label_of(PassProtocol::InPhp, "KEYCAPTCHA"), "keycaptcha");
        assert_eq!(
            label_of(PassProtocol::TaskApi, "capytaskproxyless"),
            "CapyTaskProxyless"
        );
        assert_eq!(label_of(PassProtocol::InPhp, "CapyTaskProxyless"), UNLISTED);
        assert_eq!(label_of(PassProtocol::TaskApi, "x1y2z3"), UNLISTED);
    }

    #[test]
    fn a_name_is_well_formed_only_when_short_and_plain() {
        assert!(Passthrough::well_named("atb_captcha"));
        assert!(Passthrough::well_named("AntiAwsWafTaskProxyLess"));
        assert!(!Passthrough::well_named(""));
        assert!(!Passthrough::well_named("a b"));
        assert!(!Passthrough::well_named("7"));
        assert!(!Passthrough::well_named(&"a".repeat(MAX_NAME_LEN + 1)));
    }

    #[test]
    fn the_name_is_the_method_or_the_type() {
        let inphp = Passthrough::InPhp {
            fields: vec![
                ("method".into(), "capy".into()),
                ("sitekey".into(), "k".into()),
            ],
            files: Vec::new(),
        };
        assert_eq!((inphp.name(), inphp.label()), ("capy", "capy"));
        let mut task = Map::new();
        task.insert("type".into(), Value::from("TencentTaskProxyless"));
        let taskapi = Passthrough::TaskApi { task };
        assert_eq!(taskapi.name(), "TencentTaskProxyless");
        assert_eq!(taskapi.protocol(), PassProtocol::TaskApi);
    }
}
