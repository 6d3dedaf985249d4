//! The `in.php` encoder: a [`SolveRequest`] as the parameters providers of the `in.php` family
//! take (docs/PROTOCOL.md, "Upstream"). It is the inverse of [`parse_submit`](super::parse_submit),
//! which a property test checks.
//!
//! Owns: parameter names and value spellings. Does not own: the key, `json=1` or transport
//! (`provider::inphp`).

use std::borrow::Cow;

use crate::model::{Check, Param, Passthrough, RecaptchaVersion, SolveRequest, TaskParams};

/// The files `req` uploads beside [`submit_params`]: a pass-through task's, as the caller sent
/// them; none for any other.
pub fn submit_files(req: &SolveRequest) -> &[(String, bytes::Bytes)] {
    match &req.params {
        TaskParams::Passthrough(Passthrough::InPhp { files, .. }) => files,
        _ => &[],
    }
}

/// The `in.php` parameters for `req`, without `key` and `json`. Flags are sent only when on
/// (providers read a missing flag as off); optional values only when present.
pub fn submit_params(req: &SolveRequest) -> Vec<(Cow<'static, str>, String)> {
    let mut out: Vec<(Cow<'static, str>, String)> = Vec::new();
    // Names made from a value (`data[blob]`), added after the rest.
    let mut keyed: Vec<(Cow<'static, str>, String)> = Vec::new();
    let mut put = |name: &'static str, value: &str| out.push((name.into(), value.to_owned()));
    match &req.params {
        // As the caller sent it (its proxy and browser among its fields); a `createTask` one
        // never reaches an `in.php` account, and has no `in.php` form.
        TaskParams::Passthrough(Passthrough::InPhp { fields, .. }) => {
            return fields
                .iter()
                .map(|(name, value)| (Cow::Owned(name.clone()), value.clone()))
                .collect();
        }
        TaskParams::Passthrough(Passthrough::TaskApi { .. }) => return out,
        TaskParams::Recaptcha {
            sitekey,
            pageurl,
            version,
            enterprise,
            invisible,
            action,
            min_score,
            data_s,
            domain,
        } => {
            put("method", "userrecaptcha");
            put("googlekey", sitekey);
            put("pageurl", pageurl);
            if *version == RecaptchaVersion::V3 {
                put("version", "v3");
                if let Some(score) = min_score {
                    put("min_score", score);
                }
            }
            if *enterprise {
                put("enterprise", "1");
            }
            if *invisible {
                put("invisible", "1");
            }
            if let Some(action) = action {
                put("action", action);
            }
            if let Some(data_s) = data_s {
                put("data-s", data_s);
            }
            if let Some(domain) = domain {
                put("domain", domain);
            }
        }
        TaskParams::Declared { kind, values } => {
            put("method", kind.spec().methods[0]);
            // A flag is sent on; a selecting parameter of the kind's own goes with the rest.
            if let Some(flag) = kind.spec().inphp_flag {
                if kind.spec().selecting_param().is_none() {
                    put(flag, "1");
                }
            }
            // Values are kept in declaration order: each is sent as its declaration says.
            for param in kind.spec().declared_params() {
                let Some((name, value)) = values.iter().find(|(n, _)| *n == param.name) else {
                    continue;
                };
                match declared_object(param, value) {
                    // `data[blob]=...`: how in.php takes an object (FunCaptcha's `data`).
                    Some(object) => {
                        for (key, v) in object {
                            let v = v.as_str().unwrap_or_default().to_owned();
                            keyed.push((format!("{name}[{key}]").into(), v));
                        }
                    }
                    None => {
                        put(name, value);
                        if let Some(also) = param.also_sent_as {
                            put(also, value);
                        }
                    }
                }
            }
        }
    }
    if let Some(proxy) = &req.proxy {
        put("proxy", &proxy.address);
        put("proxytype", proxy.kind.as_str());
    }
    if let Some(ua) = &req.user_agent {
        put("userAgent", ua);
    }
    if let Some(cookies) = &req.cookies {
        put("cookies", cookies);
    }
    out.append(&mut keyed);
    out
}

/// A declared parameter's value as the object it is, where its declaration says so
/// (`validate` checked it is an object of strings).
fn declared_object(
    param: &Param,
    value: &str,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    (param.check == Check::Object)
        .then(|| serde_json::from_str(value).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::{Kind, Param, Proxy, ProxyType};
    use crate::wire::inphp::{Params, parse_submit};

    /// Values as clients send them: trimmed, non-empty (the parser treats blank as absent).
    fn word() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_.:;=/ -]{0,30}[A-Za-z0-9_]"
            .prop_map(|s| s.trim().to_owned())
            .prop_filter("non-empty", |s| !s.is_empty())
    }

    fn sitekey() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_-]{1,40}"
    }

    fn page() -> impl Strategy<Value = String> {
        "https?://[a-z]{1,10}\\.example(/[a-z0-9]{0,8})?(\\?q=[a-z0-9]{1,5})?"
    }

    fn params() -> impl Strategy<Value = TaskParams> {
        let recaptcha = (
            sitekey(),
            page(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            proptest::option::of(word()),
            proptest::option::of("0\\.[1-9]"),
            proptest::option::of(word()),
            proptest::option::of(prop_oneof![
                Just("google.com".to_owned()),
                Just("recaptcha.net".to_owned())
            ]),
        )
            .prop_map(
                |(sitekey, pageurl, v3, enterprise, invisible, action, score, data_s, domain)| {
                    let version = if v3 {
                        RecaptchaVersion::V3
                    } else {
                        RecaptchaVersion::V2
                    };
                    TaskParams::Recaptcha {
                        sitekey,
                        pageurl,
                        version,
                        enterprise,
                        invisible,
                        // v3 needs an action; v2 carries no score (the parser drops it there).
                        action: if v3 {
                            Some(action.unwrap_or_else(|| "login".into()))
                        } else {
                            action
                        },
                        min_score: if v3 { score } else { None },
                        data_s,
                        domain,
                    }
                },
            );
        prop_oneof![recaptcha, declared()]
    }

    /// A request of any declared kind, each parameter drawn by its declared form: a new
    /// declaration is covered without a word here.
    fn declared() -> impl Strategy<Value = TaskParams> {
        let kinds: Vec<Kind> = Kind::ALL
            .into_iter()
            .filter(|k| !k.spec().declared_params().is_empty())
            .collect();
        proptest::sample::select(kinds).prop_flat_map(|kind| {
            let values: Vec<_> = kind
                .spec()
                .declared_params()
                .iter()
                .map(declared_value)
                .collect();
            values.prop_map(move |values| TaskParams::Declared {
                kind,
                values: values.into_iter().flatten().collect(),
            })
        })
    }

    fn declared_value(param: &'static Param) -> BoxedStrategy<Option<(&'static str, String)>> {
        let value = match param.check {
            Check::Page => page().boxed(),
            Check::Key => sitekey().boxed(),
            Check::Text => word().boxed(),
            Check::Flag => Just("1".to_owned()).boxed(),
            Check::Object => proptest::collection::btree_map("[a-z]{1,6}", word(), 1..3)
                .prop_map(|object| serde_json::to_string(&object).expect("strings serialize"))
                .boxed(),
            Check::Image => word()
                .prop_map(|w| crate::model::kind::sample_image(&w))
                .boxed(),
            // 0 is how clients leave a count unset: it reads as absent.
            Check::Count(max) => (1..=max).prop_map(|n| n.to_string()).boxed(),
            Check::OneOf(words) => proptest::sample::select(words)
                .prop_map(str::to_owned)
                .boxed(),
        };
        if param.required {
            value.prop_map(move |v| Some((param.name, v))).boxed()
        } else {
            proptest::option::of(value)
                .prop_map(move |v| v.map(|v| (param.name, v)))
                .boxed()
        }
    }

    fn request() -> impl Strategy<Value = SolveRequest> {
        let proxy = (
            prop_oneof![
                Just(ProxyType::Http),
                Just(ProxyType::Https),
                Just(ProxyType::Socks4),
                Just(ProxyType::Socks5)
            ],
            "([a-z]{1,6}:[a-z0-9]{1,6}@)?[a-z0-9.]{1,12}:[1-9][0-9]{0,3}",
        )
            .prop_map(|(kind, address)| Proxy { kind, address });
        (
            params(),
            proptest::option::of(proxy),
            proptest::option::of(word()),
            proptest::option::of(word()),
        )
            .prop_map(|(params, proxy, user_agent, cookies)| {
                let mut req = SolveRequest::new(params);
                req.proxy = proxy;
                req.user_agent = user_agent;
                req.cookies = cookies;
                req
            })
            .prop_filter("valid requests only", |r| r.validate().is_ok())
    }

    proptest! {
        #[test]
        fn the_native_parser_inverts_the_native_body(req in request()) {
            let body = serde_json::to_vec(&crate::wire::native::native_body(&req)).unwrap();
            let parsed = crate::wire::native::parse_native(&body, std::time::Duration::MAX);
            prop_assert_eq!(parsed.map(|n| n.req).map_err(|e| format!("{e:?}")), Ok(req));
        }

        #[test]
        fn parse_submit_inverts_the_encoder(req in request()) {
            let pairs = submit_params(&req);
            let parsed = parse_submit(&Params::from_pairs(pairs.iter().map(|(k, v)| (k.as_ref(), v.as_str()))));
            prop_assert_eq!(parsed, Ok(req));
        }
    }

    #[test]
    fn flags_and_names_as_providers_spell_them() {
        let req = SolveRequest::new(TaskParams::Recaptcha {
            sitekey: "6Le".into(),
            pageurl: "https://a.example/".into(),
            version: RecaptchaVersion::V3,
            enterprise: true,
            invisible: false,
            action: Some("login".into()),
            min_score: Some("0.3".into()),
            data_s: None,
            domain: None,
        });
        let pairs = submit_params(&req);
        let get = |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("method"), Some("userrecaptcha"));
        assert_eq!(get("version"), Some("v3"));
        assert_eq!(get("enterprise"), Some("1"));
        assert_eq!(get("invisible"), None);
        assert_eq!(get("min_score"), Some("0.3"));
        assert_eq!(get("key"), None);

        // Case sensitivity under both spellings: CaptchaAI's docs' and its SDK's.
        let body = crate::model::kind::sample_image("case");
        let image = SolveRequest::new(TaskParams::declared_of(
            Kind::Image,
            &[("body", &body), ("regsense", "1")],
        ));
        let pairs = submit_params(&image);
        let sent: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_ref(), v.as_str()))
            .collect();
        assert!(sent.contains(&("method", "base64")), "{sent:?}");
        assert!(sent.contains(&("regsense", "1")) && sent.contains(&("caseSensitive", "1")));
    }
}
