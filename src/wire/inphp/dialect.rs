//! Which dialect of the `in.php`/`res.php` protocol an account speaks.

use url::Url;

/// Which provider dialect of the protocol an account speaks. The wire format is shared; the
/// meaning of some codes is not (`ERROR_ZERO_BALANCE`: CaptchaAI "no free threads", 2captcha
/// "no money").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InPhpDialect {
    CaptchaAi,
    TwoCaptcha,
}

impl InPhpDialect {
    /// The provider's public endpoint.
    pub fn default_base_url(self) -> Url {
        let raw = match self {
            InPhpDialect::CaptchaAi => "https://ocr.captchaai.com",
            InPhpDialect::TwoCaptcha => "https://2captcha.com",
        };
        Url::parse(raw).expect("a literal, valid URL")
    }

    pub fn as_str(self) -> &'static str {
        match self {
            InPhpDialect::CaptchaAi => "captchaai",
            InPhpDialect::TwoCaptcha => "2captcha",
        }
    }
}
