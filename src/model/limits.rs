//! How long and how large each caller-sent value of a [`SolveRequest`] may be, and the ranges of
//! its numeric hints. Checked by `SolveRequest::validate`, so every protocol (compatible, native,
//! seed worker API, pool imports) refuses the same things with the same compatible code.
//!
//! The bounds are generous for real use (each comment says what real values look like) and small
//! enough that one request cannot make the gateway hold, hash, forward or label megabytes.

// Declarations bound their words and texts by these too (`Param::longest`), so they live there.
pub use super::kind::{MAX_TEXT_LEN, MAX_WORD_LEN};
use super::kind::{PassProtocol, Passthrough};
use super::{Check, SolveRequest, TaskParams, Validation};

/// Page URLs: real ones are under 2 KB; 8 KB is the most a request line may carry anyway.
pub const MAX_PAGEURL_LEN: usize = 4096;
/// reCAPTCHA (40), Turnstile (~24), GeeTest `gt` (32) and `challenge` (32-34) are far shorter.
pub const MAX_SITEKEY_LEN: usize = 256;
/// reCAPTCHA `data-s` and Turnstile `cData`/`pagedata`: opaque values of a few hundred bytes.
pub const MAX_DATA_LEN: usize = 8192;
/// An image parameter's base64 text: the largest image's (`MAX_IMAGE_BYTES`) and room for a
/// data-URI prefix and line breaks.
pub const MAX_IMAGE_BASE64_LEN: usize = super::MAX_IMAGE_BYTES / 3 * 4 + 64 * 1024;
/// Browser user agents are 100-300 characters.
pub const MAX_USER_AGENT_LEN: usize = 1024;
/// Cookies passed to the provider's worker; browsers cap one cookie at 4 KB.
pub const MAX_COOKIES_LEN: usize = 16 * 1024;
/// `user:password@host:port`.
pub const MAX_PROXY_LEN: usize = 512;

fn too_long(code: &'static str, field: &str, max: usize) -> Validation {
    Validation::new(code, format!("`{field}` is longer than {max} bytes"))
}

fn check(
    code: &'static str,
    field: &str,
    value: Option<&str>,
    max: usize,
) -> Result<(), Validation> {
    match value {
        Some(v) if v.len() > max => Err(too_long(code, field, max)),
        _ => Ok(()),
    }
}

/// A reCAPTCHA v3 `min_score`: a number from 0 to 1 (providers take 0.1 to 0.9).
pub fn check_min_score(raw: &str) -> Result<(), Validation> {
    match raw.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=1.0).contains(&s) => Ok(()),
        _ => Err(Validation::new(
            "ERROR_BAD_PARAMETERS",
            "`min_score` must be a number from 0 to 1, e.g. 0.3",
        )),
    }
}

/// The length and range checks of every caller-sent value of `req`.
pub fn check_request(req: &SolveRequest) -> Result<(), Validation> {
    const BAD: &str = "ERROR_BAD_PARAMETERS";
    match &req.params {
        TaskParams::Recaptcha {
            pageurl,
            action,
            min_score,
            data_s,
            domain,
            ..
        } => {
            check("ERROR_PAGEURL", "pageurl", Some(pageurl), MAX_PAGEURL_LEN)?;
            check(BAD, "action", action.as_deref(), MAX_WORD_LEN)?;
            check(BAD, "data-s", data_s.as_deref(), MAX_DATA_LEN)?;
            check(BAD, "domain", domain.as_deref(), MAX_WORD_LEN)?;
            if let Some(score) = min_score {
                check_min_score(score)?;
            }
        }
        TaskParams::Passthrough(pass) => check_passthrough(pass)?,
        TaskParams::Declared { kind, values } => {
            for param in kind.spec().declared_params() {
                let value = values.iter().find(|(n, _)| *n == param.name);
                let (code, max) = match param.check {
                    Check::Page => ("ERROR_PAGEURL", MAX_PAGEURL_LEN),
                    Check::Key => (BAD, MAX_SITEKEY_LEN),
                    Check::Text | Check::Flag | Check::Object => (BAD, MAX_DATA_LEN),
                    Check::Count(_) | Check::OneOf(_) => (BAD, MAX_WORD_LEN),
                    // Base64 takes four characters for three bytes, and a data-URI prefix.
                    Check::Image => ("ERROR_TOO_BIG_CAPTCHA_FILESIZE", MAX_IMAGE_BASE64_LEN),
                };
                let max = param.longest.unwrap_or(max);
                check(code, param.name, value.map(|(_, v)| v.as_str()), max)?;
            }
        }
    }
    check(
        BAD,
        "userAgent",
        req.user_agent.as_deref(),
        MAX_USER_AGENT_LEN,
    )?;
    check(BAD, "cookies", req.cookies.as_deref(), MAX_COOKIES_LEN)?;
    check(
        "ERROR_BAD_PROXY",
        "proxy",
        req.proxy.as_ref().map(|p| p.address.as_str()),
        MAX_PROXY_LEN,
    )?;
    Ok(())
}

/// A pass-through task: a well-formed type name, and a bounded number of bounded fields.
fn check_passthrough(pass: &Passthrough) -> Result<(), Validation> {
    use super::kind::passthrough::{MAX_FIELDS, MAX_NAME_LEN, MAX_VALUE_LEN};
    const BAD: &str = "ERROR_BAD_PARAMETERS";
    let what = match pass.protocol() {
        PassProtocol::InPhp => "method",
        PassProtocol::TaskApi => "type",
    };
    if !Passthrough::well_named(pass.name()) {
        return Err(Validation::new(
            BAD,
            format!(
                "`{what}` must be a letter, then letters, digits, `_`, `-` or `.`, at most {MAX_NAME_LEN} in all"
            ),
        ));
    }
    let fields: Vec<(&str, usize)> = match pass {
        Passthrough::InPhp { fields, files } => fields
            .iter()
            .map(|(n, v)| (n.as_str(), v.len()))
            .chain(files.iter().map(|(n, f)| (n.as_str(), f.len())))
            .collect(),
        Passthrough::TaskApi { task } => task
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str(),
                    v.as_str().map_or_else(|| v.to_string().len(), str::len),
                )
            })
            .collect(),
    };
    if fields.len() > MAX_FIELDS {
        return Err(Validation::new(
            BAD,
            format!("a task of a type passed through carries at most {MAX_FIELDS} fields"),
        ));
    }
    for (name, len) in fields {
        if name.len() > MAX_NAME_LEN || len > MAX_VALUE_LEN {
            let shown: String = name.chars().take(MAX_NAME_LEN).collect();
            return Err(Validation::new(
                BAD,
                format!(
                    "`{shown}` is too long: a field's name holds at most {MAX_NAME_LEN} bytes, its value {MAX_VALUE_LEN}"
                ),
            ));
        }
    }
    Ok(())
}
