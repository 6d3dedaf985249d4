use base64::Engine as _;
use bytes::Bytes;

use super::{Params, codes};
use crate::model::{
    Check, Kind, Passthrough, Proxy, ProxyType, RecaptchaVersion, SolveRequest, TaskParams,
    Validation,
};

/// Turns `in.php` parameters into a request, accepting every alias clients send
/// (docs/PROTOCOL.md items 7-8). A method the gateway does not declare, or an image task with a
/// flag that makes it another task (coordinates, a grid), is kept as sent: a pass-through
/// task (kind `other`), forwarded whole to an `in.php` account.
pub fn parse_submit(p: &Params) -> Result<SolveRequest, Validation> {
    let text = p.get(&["textcaptcha"]);
    // A text question may come with no method at all (unicaps, the npm client): it is asked
    // as 2captcha-python asks it, `method=post` with the question.
    let method = p
        .get(&["method"])
        .map(str::to_ascii_lowercase)
        .or_else(|| text.map(|_| "post".to_owned()));
    let declared = method
        .as_deref()
        .and_then(|m| Kind::declared_by_method(m, |flag| flag_set(p, flag)));
    // The flag that chose a kind (`coordinatescaptcha`) changes what the answer means: a value
    // that is neither on nor off is refused rather than guessed at. A kind chosen by one of its
    // own parameters (a question's `textcaptcha`) has that parameter's checks instead.
    let plain_flag = declared.filter(|kind| kind.spec().selecting_param().is_none());
    if let Some(flag) = plain_flag.and_then(|kind| kind.spec().inphp_flag) {
        if let Some(value) = p.get(&[flag]).filter(|_| !p.flag(&[flag])) {
            return Err(Validation::new(
                codes::BAD_PARAMETERS,
                format!("`{flag}` must be 1 or 0, not `{}`", truncate(value, 20)),
            ));
        }
    }
    // A kind its flag chose is that kind; an image carrying another task's flag is not.
    let passes = method
        .as_deref()
        .is_some_and(|m| passes_through(m, text, p));
    let params = match declared {
        Some(kind) if kind.spec().inphp_flag.is_some() || !passes => declared_params(kind, p)?,
        _ if passes => return parse_passthrough(p),
        _ => typed_params(method.as_deref(), text, p)?,
    };
    let mut req = SolveRequest::new(params);
    req.proxy = proxy(p)?;
    req.user_agent = opt(p, &["userAgent", "useragent", "user_agent"]);
    req.cookies = opt(p, &["cookies"]);
    req.validate()?;
    Ok(req)
}

/// Parameters every method may carry besides its own: the call's (`key`, `json`, the clients'
/// `soft_id` and `header_acao`, `pingback`), the proxy and browser, and the native API's own
/// fields.
const COMMON: [&str; 15] = [
    "key",
    "method",
    "json",
    "soft_id",
    "header_acao",
    "pingback",
    "proxy",
    "proxytype",
    "userAgent",
    "useragent",
    "user_agent",
    "cookies",
    "kind",
    "timeout_s",
    "callback_url",
];

/// Whether a task with `method` is passed through: a method no declaration names, or an image
/// task (not a text question) carrying a flag that makes it another task.
fn passes_through(method: &str, text: Option<&str>, p: &Params) -> bool {
    let declared = Kind::ALL
        .into_iter()
        .any(|kind| kind.spec().methods.contains(&method));
    let image = matches!(method, "post" | "base64") && (text.is_none() || p.file("file").is_some());
    !declared || (image && another_task(p))
}

/// The call's own parameters, which a pass-through task does not forward: the key and reply
/// form are the account's, the callback and deadline the gateway's.
const OWN: [&str; 8] = [
    "key",
    "json",
    "soft_id",
    "header_acao",
    "pingback",
    "kind",
    "timeout_s",
    "callback_url",
];

/// A pass-through task from `in.php` parameters (the native API's `other` in its `in.php` form).
pub fn parse_passthrough(p: &Params) -> Result<SolveRequest, Validation> {
    let req = SolveRequest::new(passthrough(p)?);
    req.validate()?;
    Ok(req)
}

/// Every parameter and file the caller sent but the call's own, each sorted by name.
fn passthrough(p: &Params) -> Result<TaskParams, Validation> {
    let mut fields: Vec<(String, String)> = p
        .entries()
        .filter(|(name, _)| !OWN.contains(name) && p.file(name).is_none())
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    fields.sort_unstable();
    let mut files: Vec<(String, Bytes)> = p
        .files()
        .map(|(name, data)| (name.to_owned(), data.clone()))
        .collect();
    files.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(TaskParams::Passthrough(Passthrough::InPhp {
        fields,
        files,
    }))
}

/// A declared type's parameters, each under its declared name or an alias; an object
/// parameter as its JSON text (the native API's form) or as `name[key]=value` fields. A
/// parameter the declaration does not name is refused by name unless it is blank or `0`, so
/// nothing a caller sends is dropped unseen.
fn declared_params(kind: Kind, p: &Params) -> Result<TaskParams, Validation> {
    let params = kind.spec().declared_params();
    let known = |name: &str| {
        COMMON.contains(&name)
            || kind.spec().inphp_flag == Some(name)
            || params.iter().any(|param| {
                param.name == name
                    || param.aliases.contains(&name)
                    || (param.check == Check::Object
                        && name
                            .strip_prefix(param.name)
                            .is_some_and(|rest| rest.starts_with('[')))
            })
    };
    refuse_unknown(kind, p, known)?;
    let mut values = Vec::new();
    for param in params {
        let names: Vec<&str> = std::iter::once(param.name)
            .chain(param.aliases.iter().copied())
            .collect();
        let value = match param.check {
            Check::Flag => declared_flag(p, &names, param.name)?,
            Check::Object => opt(p, &names).or_else(|| keyed_object(p, param.name)),
            Check::Count(_) => opt(p, &names).filter(|v| v.trim() != "0"),
            Check::Text | Check::Page | Check::Key | Check::OneOf(_) => opt(p, &names),
            Check::Image => declared_image(p, &names, param.name)?,
        };
        if let Some(value) = value {
            values.push((param.name, value));
        }
    }
    Ok(TaskParams::Declared { kind, values })
}

/// A declared image as standard base64: an upload under any of `names`, else base64 text.
fn declared_image(p: &Params, names: &[&str], name: &str) -> Result<Option<String>, Validation> {
    use base64::engine::general_purpose::STANDARD;
    if let Some(file) = names.iter().find_map(|n| p.file(n)) {
        return Ok(Some(STANDARD.encode(file)));
    }
    match p.get(names) {
        None => Ok(None),
        Some(raw) => crate::model::image_base64(raw).map(Some).ok_or_else(|| {
            Validation::new(
                codes::UPLOAD,
                format!("parameter `{name}` is not valid base64"),
            )
        }),
    }
}

/// A declared flag: `1` when on, `None` when off or absent; any other value is refused by
/// name rather than read as off.
fn declared_flag(p: &Params, names: &[&str], name: &str) -> Result<Option<String>, Validation> {
    if p.flag(names) {
        return Ok(Some("1".to_owned()));
    }
    match p
        .get(names)
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("" | "0" | "false" | "no" | "off") => Ok(None),
        Some(_) => Err(Validation::new(
            codes::BAD_PARAMETERS,
            format!("`{name}` must be 1 or 0"),
        )),
    }
}

/// Refuses, by name, a parameter that is not `known` unless it is blank or `0` (how clients
/// leave one unset), so nothing a caller sends is dropped unseen.
fn refuse_unknown(kind: Kind, p: &Params, known: impl Fn(&str) -> bool) -> Result<(), Validation> {
    let unknown = p
        .entries()
        .filter(|(name, value)| !known(name) && !matches!(value.trim(), "" | "0"))
        .map(|(name, _)| name)
        .min();
    match unknown {
        None => Ok(()),
        Some(name) => Err(Validation::new(
            codes::BAD_PARAMETERS,
            format!(
                "`{}` is not supported for {kind}: this gateway does not pass it on",
                truncate(name, 40)
            ),
        )),
    }
}

/// The parameters a typed kind's method reads besides [`COMMON`].
fn typed_known(params: &TaskParams) -> &'static [&'static str] {
    match params {
        TaskParams::Recaptcha { .. } => &[
            "googlekey",
            "sitekey",
            "pageurl",
            "version",
            "enterprise",
            "invisible",
            "action",
            "min_score",
            "data-s",
            "domain",
        ],
        TaskParams::Declared { .. } | TaskParams::Passthrough(_) => &[],
    }
}

/// `name[key]=value` fields as the JSON text of one object, keys in order.
fn keyed_object(p: &Params, name: &str) -> Option<String> {
    let object: serde_json::Map<String, serde_json::Value> = p
        .keyed(name)
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.into()))
        .collect();
    (!object.is_empty()).then(|| serde_json::Value::Object(object).to_string())
}

/// The parameters of the typed kinds (reCAPTCHA v2 and v3), whose method is read by hand.
fn typed_params(
    method: Option<&str>,
    text: Option<&str>,
    p: &Params,
) -> Result<TaskParams, Validation> {
    let params = match (method, text) {
        (Some("userrecaptcha"), _) => recaptcha(p)?,
        (Some("textcaptcha"), None) => {
            return Err(Validation::new(
                codes::BAD_PARAMETERS,
                "`textcaptcha` (the question) is missing",
            ));
        }
        (None, _) => {
            return Err(Validation::new(codes::BAD_PARAMETERS, "method is missing"));
        }
        (Some(other), _) => {
            return Err(Validation::new(
                codes::BAD_PARAMETERS,
                format!("method `{}` is not supported", truncate(other, 40)),
            ));
        }
    };
    let known = typed_known(&params);
    refuse_unknown(params.kind(), p, |name| {
        COMMON.contains(&name) || known.contains(&name)
    })?;
    Ok(params)
}

fn recaptcha(p: &Params) -> Result<TaskParams, Validation> {
    let version = match p.get(&["version"]).map(str::to_ascii_lowercase).as_deref() {
        Some("v3" | "3") => RecaptchaVersion::V3,
        _ => RecaptchaVersion::V2,
    };
    Ok(TaskParams::Recaptcha {
        sitekey: required(p, &["googlekey", "sitekey"], codes::GOOGLEKEY, "googlekey")?,
        pageurl: required(p, &["pageurl"], codes::PAGEURL, "pageurl")?,
        version,
        enterprise: p.flag(&["enterprise"]),
        invisible: p.flag(&["invisible"]),
        action: opt(p, &["action"]),
        min_score: match version {
            RecaptchaVersion::V3 => opt(p, &["min_score"]),
            RecaptchaVersion::V2 => None,
        },
        data_s: opt(p, &["data-s"]),
        domain: opt(p, &["domain"]),
    })
}

/// Image parameters that make an image task another task (clicks on a grid, coordinates, a
/// canvas drawing, an instruction image) whose answer is not the image's text: solving the image
/// as text would hand back a confident wrong answer, so such a task is passed through whole.
const ANOTHER_TASK: [&str; 8] = [
    "coordinatescaptcha",
    "recaptcha",
    "canvas",
    "grid_size",
    "recaptcharows",
    "recaptchacols",
    "img_type",
    "imginstructions",
];

/// Whether the caller sent one of [`ANOTHER_TASK`].
fn another_task(p: &Params) -> bool {
    ANOTHER_TASK.into_iter().any(|name| flag_set(p, name))
}

/// Whether the caller sent `name` (a flag of `0` or `false` is not sent).
fn flag_set(p: &Params, name: &str) -> bool {
    let flag_off = |v: &str| matches!(v, "0" | "false");
    p.get(&[name]).is_some_and(|v| !flag_off(v)) || p.file(name).is_some()
}

fn proxy(p: &Params) -> Result<Option<Proxy>, Validation> {
    let Some(address) = p.get(&["proxy"]) else {
        return Ok(None);
    };
    let kind = match p.get(&["proxytype"]) {
        None => ProxyType::Http,
        Some(t) => ProxyType::parse(t).ok_or_else(|| {
            Validation::new(
                codes::BAD_PROXY,
                "proxytype must be HTTP, HTTPS, SOCKS4 or SOCKS5",
            )
        })?,
    };
    let host_port = address.rsplit_once('@').map(|(_, h)| h).unwrap_or(address);
    let valid = host_port
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !valid {
        return Err(Validation::new(
            codes::BAD_PROXY,
            "proxy must be host:port or user:password@host:port",
        ));
    }
    Ok(Some(Proxy {
        kind,
        address: address.to_owned(),
    }))
}

fn required(
    p: &Params,
    names: &[&str],
    code: &'static str,
    what: &str,
) -> Result<String, Validation> {
    opt(p, names).ok_or_else(|| Validation::new(code, format!("parameter `{what}` is missing")))
}

fn opt(p: &Params, names: &[&str]) -> Option<String> {
    p.get(names).map(str::to_owned)
}

fn truncate(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;
    use proptest::prelude::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789";

    fn parse(pairs: &[(&str, &str)]) -> Result<SolveRequest, Validation> {
        parse_submit(&Params::from_pairs(pairs.iter().copied()))
    }

    #[test]
    fn recaptcha_flags_are_explicit() {
        let r = parse(&[
            ("method", "userrecaptcha"),
            ("googlekey", "6Le-k"),
            ("pageurl", "https://a.example/x"),
            ("enterprise", "0"),
            ("invisible", "1"),
            ("version", "v2"),
            ("soft_id", "4580"),
        ])
        .unwrap();
        assert_eq!(r.kind(), Kind::RecaptchaV2);
        match r.params {
            TaskParams::Recaptcha {
                enterprise,
                invisible,
                ..
            } => {
                assert!(!enterprise);
                assert!(invisible);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn missing_or_bad_parameters_get_their_codes() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[
                    ("method", "userrecaptcha"),
                    ("pageurl", "https://a.example"),
                ],
                codes::GOOGLEKEY,
            ),
            (
                &[("method", "userrecaptcha"), ("googlekey", "k")],
                codes::PAGEURL,
            ),
            (
                &[
                    ("method", "userrecaptcha"),
                    ("googlekey", "k"),
                    ("pageurl", "not a url"),
                ],
                codes::PAGEURL,
            ),
            (
                &[
                    ("method", "userrecaptcha"),
                    ("googlekey", "k"),
                    ("pageurl", "https://a.example"),
                    ("version", "v3"),
                ],
                codes::BAD_PARAMETERS,
            ),
            (
                &[
                    ("method", "cloudflare_challenge"),
                    ("pageurl", "https://a.example"),
                ],
                codes::BAD_PROXY,
            ),
            (
                &[
                    ("method", "turnstile"),
                    ("sitekey", "k"),
                    ("pageurl", "https://a.example"),
                    ("proxy", "nohostport"),
                ],
                codes::BAD_PROXY,
            ),
            (&[("method", "base64")], codes::ZERO_CAPTCHA_FILESIZE),
            (
                &[("method", "base64"), ("body", "!!!notbase64!!!")],
                codes::UPLOAD,
            ),
            (
                &[("method", "base64"), ("body", "aGVsbG8=")],
                codes::ZERO_CAPTCHA_FILESIZE,
            ),
            (&[("method", "post")], codes::ZERO_CAPTCHA_FILESIZE),
            (&[("method", "non sense")], codes::BAD_PARAMETERS),
            (&[("key", "x")], codes::BAD_PARAMETERS),
        ];
        for (pairs, code) in cases {
            assert_eq!(parse(pairs).unwrap_err().code, *code, "{pairs:?}");
        }
    }

    #[test]
    fn images_and_text_with_aliases() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(PNG);
        let r = parse(&[
            ("method", "base64"),
            ("body", &b64),
            ("caseSensitive", "1"),
            ("minLen", "4"),
        ])
        .unwrap();
        assert_eq!(r.kind(), Kind::Image);
        assert_eq!(r.params.declared("body"), Some(b64.as_str()));
        assert_eq!(r.params.declared("regsense"), Some("1"));
        assert_eq!(r.params.declared("min_len"), Some("4"));
        let mut p = Params::from_pairs([("method", "post")]);
        p.insert_file("file", Bytes::from_static(PNG));
        assert_eq!(parse_submit(&p).unwrap().kind(), Kind::Image);
        assert_eq!(
            parse(&[("textcaptcha", "2+2?")]).unwrap().kind(),
            Kind::Text
        );
        assert_eq!(
            parse(&[("method", "post"), ("textcaptcha", "2+2?")])
                .unwrap()
                .kind(),
            Kind::Text
        );
        let big = base64::engine::general_purpose::STANDARD
            .encode([PNG, &vec![0u8; 1024 * 1024]].concat());
        assert_eq!(
            parse(&[("method", "base64"), ("body", &big)])
                .unwrap_err()
                .code,
            codes::TOO_BIG_CAPTCHA_FILESIZE
        );
        let gif = base64::engine::general_purpose::STANDARD
            .encode([b"XXXX".as_slice(), &[0u8; 200]].concat());
        assert_eq!(
            parse(&[("method", "base64"), ("body", &gif)])
                .unwrap_err()
                .code,
            codes::IMAGE_TYPE_NOT_SUPPORTED
        );
    }

    proptest! {
        #[test]
        fn random_parameter_maps_never_panic(
            pairs in proptest::collection::vec(
                (prop_oneof![
                    Just("method".to_owned()), Just("googlekey".to_owned()), Just("sitekey".to_owned()),
                    Just("pageurl".to_owned()), Just("version".to_owned()), Just("body".to_owned()),
                    Just("proxy".to_owned()), Just("proxytype".to_owned()), Just("textcaptcha".to_owned()),
                    Just("gt".to_owned()), Just("challenge".to_owned()), Just("min_len".to_owned()),
                    Just("max_len".to_owned()), Just("numeric".to_owned()), Just("language".to_owned()),
                    Just("min_score".to_owned()), Just("action".to_owned()), Just("enterprise".to_owned()),
                    Just("userAgent".to_owned()), Just("cookies".to_owned()), Just("data-s".to_owned()),
                    ".{0,12}"
                ],
                prop_oneof![
                    Just("userrecaptcha".to_owned()), Just("turnstile".to_owned()), Just("geetest".to_owned()),
                    Just("base64".to_owned()), Just("post".to_owned()), Just("cloudflare_challenge".to_owned()),
                    Just("https://example.com/a".to_owned()), Just("v3".to_owned()), Just("u:p@h:1".to_owned()),
                    Just("https://u:p@example.com/a?q=1".to_owned()), Just("1e20".to_owned()), Just("-1".to_owned()),
                    Just("NaN".to_owned()), Just("4294967296".to_owned()), Just("0.3".to_owned()),
                    "[0-9.eE+-]{1,24}", ".{0,40}"
                ]),
                0..12,
            )
        ) {
            let p = Params::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            match parse_submit(&p) {
                Ok(req) => prop_assert!(req.validate().is_ok()),
                Err(v) => prop_assert!(v.code.starts_with("ERROR_")),
            }
        }
    }
}
