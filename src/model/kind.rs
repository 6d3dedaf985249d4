use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The CAPTCHA type of a request. The names (`as_str`) are part of the native API and of
/// metric labels, so they never change.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    RecaptchaV2,
    RecaptchaV3,
    Turnstile,
    CloudflareChallenge,
    GeetestV3,
    Image,
    Text,
}

/// How an answer of a kind may be handed out (docs/PROTOCOL.md, "Answer lifetimes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// One caller only. `poolable` says whether a spare answer may wait in a pool for the next
    /// caller of the same target (false for GeeTest, whose challenge is fresh per page load).
    SingleUse { poolable: bool },
    /// May be shared by every caller of the same target until it expires.
    Reusable,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::RecaptchaV2,
        Kind::RecaptchaV3,
        Kind::Turnstile,
        Kind::CloudflareChallenge,
        Kind::GeetestV3,
        Kind::Image,
        Kind::Text,
    ];

    /// Its place in [`Kind::ALL`], for tables indexed by kind.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::RecaptchaV2 => "recaptcha_v2",
            Kind::RecaptchaV3 => "recaptcha_v3",
            Kind::Turnstile => "turnstile",
            Kind::CloudflareChallenge => "cloudflare_challenge",
            Kind::GeetestV3 => "geetest_v3",
            Kind::Image => "image",
            Kind::Text => "text",
        }
    }

    pub fn reuse(self) -> Reuse {
        match self {
            Kind::RecaptchaV2 | Kind::RecaptchaV3 | Kind::Turnstile => {
                Reuse::SingleUse { poolable: true }
            }
            Kind::GeetestV3 => Reuse::SingleUse { poolable: false },
            Kind::CloudflareChallenge | Kind::Image | Kind::Text => Reuse::Reusable,
        }
    }

    /// How long an answer lives from the moment the provider reported it ready.
    /// reCAPTCHA: "valid for two minutes" (Google siteverify docs); Turnstile: 300 s (Cloudflare);
    /// `cf_clearance`: a site setting, 15-45 min recommended, so the short end; GeeTest: unknown,
    /// the reCAPTCHA figure is the cautious guess; image/text answers never go stale, the figure is
    /// how long the coalescing cache keeps them.
    pub fn default_lifetime(self) -> Duration {
        match self {
            Kind::RecaptchaV2 | Kind::RecaptchaV3 | Kind::GeetestV3 => Duration::from_secs(120),
            Kind::Turnstile => Duration::from_secs(300),
            Kind::CloudflareChallenge => Duration::from_secs(15 * 60),
            Kind::Image | Kind::Text => Duration::from_secs(60 * 60),
        }
    }

    /// When the first poll for a task of this kind is worth making: the official CaptchaAI SDK's
    /// initial waits (15 s reCAPTCHA v2, CF challenge and GeeTest, 10 s v3 and Turnstile, 1 s images).
    pub fn typical_ready(self) -> Duration {
        match self {
            Kind::RecaptchaV2 | Kind::CloudflareChallenge | Kind::GeetestV3 => {
                Duration::from_secs(15)
            }
            Kind::RecaptchaV3 | Kind::Turnstile => Duration::from_secs(10),
            Kind::Image | Kind::Text => Duration::from_secs(1),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<_> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown kind `{s}`; expected one of {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kinds_index_is_its_place_in_all() {
        for (i, kind) in Kind::ALL.iter().enumerate() {
            assert_eq!(kind.index(), i, "{kind:?}");
        }
    }
}
