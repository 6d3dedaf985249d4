//! The compatible parser against the limits of `model::limits`: numbers out of range, values
//! too long, malformed sitekeys and page URLs get their protocol codes.

use base64::Engine as _;

use super::{Params, codes, parse_submit};
use crate::model::{Kind, SolveRequest, Validation, limits};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789";

fn parse(pairs: &[(&str, &str)]) -> Result<SolveRequest, Validation> {
    parse_submit(&Params::from_pairs(pairs.iter().copied()))
}

#[test]
fn numbers_and_lengths_are_range_checked() {
    let b64 = base64::engine::general_purpose::STANDARD.encode(PNG);
    let image = |extra: (&str, &str)| {
        parse(&[("method", "base64"), ("body", &b64), extra]).map(|r| r.params)
    };
    for ok in [
        ("numeric", "4"),
        ("min_len", "0"),
        ("max_len", "20"),
        ("language", "2"),
    ] {
        assert!(image(ok).is_ok(), "{ok:?}");
    }
    for bad in [
        ("numeric", "5"),
        ("numeric", "300"),
        ("numeric", "-1"),
        ("numeric", "1e20"),
        ("min_len", "21"),
        ("minLen", "4294967296"),
        ("max_len", "abc"),
        ("language", "3"),
        ("language", "256"),
        ("textinstructions", &"x".repeat(limits::MAX_TEXT_LEN + 1)),
    ] {
        assert_eq!(
            image(bad).unwrap_err().code,
            codes::BAD_PARAMETERS,
            "{bad:?}"
        );
    }
    let v3 = |score: &str| {
        parse(&[
            ("method", "userrecaptcha"),
            ("version", "v3"),
            ("googlekey", "k"),
            ("pageurl", "https://a.example/"),
            ("action", "login"),
            ("min_score", score),
        ])
    };
    assert!(v3("0.3").is_ok());
    for bad in ["1e20", "-0.1", "NaN", "inf", "1.5", "high"] {
        let e = v3(bad).unwrap_err();
        assert_eq!(e.code, codes::BAD_PARAMETERS, "{bad}");
        assert!(e.message.contains("min_score"), "{}", e.message);
    }
    let long_page = format!("https://a.example/{}", "p".repeat(limits::MAX_PAGEURL_LEN));
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("method", "turnstile"),
                ("sitekey", "k"),
                ("pageurl", &long_page),
            ],
            codes::PAGEURL,
        ),
        (
            &[
                ("method", "turnstile"),
                ("sitekey", "k"),
                ("pageurl", "https://a.example/"),
                ("userAgent", &"u".repeat(limits::MAX_USER_AGENT_LEN + 1)),
            ],
            codes::BAD_PARAMETERS,
        ),
        (
            &[
                ("method", "turnstile"),
                ("sitekey", "k"),
                ("pageurl", "https://a.example/"),
                (
                    "proxy",
                    &format!("{}:p@h:1", "u".repeat(limits::MAX_PROXY_LEN)),
                ),
            ],
            codes::BAD_PROXY,
        ),
        (
            &[
                ("method", "turnstile"),
                ("sitekey", "k e y"),
                ("pageurl", "https://a.example/"),
            ],
            codes::BAD_PARAMETERS,
        ),
        (
            &[
                ("method", "userrecaptcha"),
                ("googlekey", "6Le<script>"),
                ("pageurl", "https://a.example/"),
            ],
            codes::GOOGLEKEY,
        ),
        (
            &[
                ("method", "userrecaptcha"),
                ("googlekey", "k"),
                ("pageurl", "/relative/page"),
            ],
            codes::PAGEURL,
        ),
        (
            &[
                ("method", "userrecaptcha"),
                ("googlekey", "k"),
                ("pageurl", "ftp://a.example/"),
            ],
            codes::PAGEURL,
        ),
        (
            &[("textcaptcha", &"q".repeat(limits::MAX_TEXT_LEN + 1))],
            codes::BAD_PARAMETERS,
        ),
    ];
    for (pairs, code) in cases {
        assert_eq!(
            parse(pairs).unwrap_err().code,
            *code,
            "{:?}",
            pairs[..2].to_vec()
        );
    }
}

/// Every `method` a kind's declaration lists is one the parser reads: without its parameters it
/// is refused for what is missing, never as an unknown method.
#[test]
fn every_declared_method_is_read() {
    for kind in Kind::ALL {
        for method in kind.spec().methods {
            let refused = parse(&[("method", method)]).expect_err("no parameters");
            assert!(
                !refused.message.contains("not supported"),
                "{kind}: method={method}: {refused}"
            );
        }
    }
    let unknown = parse(&[("method", "no_such_method")]).expect_err("unknown");
    assert!(unknown.message.contains("not supported"), "{unknown}");
}

/// An image parameter that changes what the answer means (coordinates, a grid) and that the
/// gateway cannot pass on is refused by name, never dropped for a plain text answer.
#[test]
fn image_parameters_that_change_the_answer_are_refused_by_name() {
    let b64 = base64::engine::general_purpose::STANDARD.encode(PNG);
    for (name, value) in [
        ("coordinatescaptcha", "1"),
        ("recaptcha", "1"),
        ("grid_size", "3x3"),
        ("recaptcharows", "4"),
        ("img_type", "recaptcha"),
    ] {
        let refused =
            parse(&[("method", "base64"), ("body", &b64), (name, value)]).expect_err(name);
        assert_eq!(refused.code, codes::BAD_PARAMETERS, "{name}");
        assert!(refused.message.contains(name), "{name}: {refused}");
    }
    // Sent as off, they ask for nothing.
    let plain = parse(&[
        ("method", "base64"),
        ("body", &b64),
        ("coordinatescaptcha", "0"),
    ]);
    assert!(plain.is_ok(), "{plain:?}");
}

/// A declared kind's parameters are read by their declared names and aliases, an object from
/// its `name[key]` fields; a parameter its declaration does not name is refused by name
/// unless blank or `0` (how clients leave one unset).
#[test]
fn a_declared_kinds_parameters_are_read_and_the_rest_refused_by_name() {
    use crate::model::TaskParams;
    let page = ("pageurl", "https://example.com/a");
    let funcaptcha = |extra: &[(&str, &str)]| {
        let mut pairs = vec![("method", "funcaptcha"), ("sitekey", "PK-1"), page];
        pairs.extend_from_slice(extra);
        parse(&pairs)
    };
    let req =
        funcaptcha(&[("data[blob]", "b1"), ("data[x]", "2"), ("soft_id", "4580")]).expect("parses");
    assert_eq!(req.kind(), Kind::Funcaptcha);
    assert_eq!(req.params.declared("publickey"), Some("PK-1"), "the alias");
    assert_eq!(
        req.params.declared("data"),
        Some(r#"{"blob":"b1","x":"2"}"#)
    );
    assert!(matches!(req.params, TaskParams::Declared { .. }));
    for (name, value) in [("invisible", "1"), ("rqdata", "r"), ("datax", "y")] {
        let refused = funcaptcha(&[(name, value)]).expect_err(name);
        assert_eq!(refused.code, codes::BAD_PARAMETERS, "{name}");
        assert!(refused.message.contains(name), "{name}: {refused}");
    }
    assert!(funcaptcha(&[("invisible", "0"), ("rqdata", "")]).is_ok());
    let missing = parse(&[("method", "lemin"), page, ("div_id", "d")]).expect_err("no id");
    assert!(missing.message.contains("captcha_id"), "{missing}");
    let no_proxy = parse(&[
        ("method", "datadome"),
        ("captcha_url", "https://geo.captcha-delivery.com/c"),
        page,
        ("userAgent", "UA"),
    ])
    .expect_err("no proxy");
    assert_eq!(no_proxy.code, codes::BAD_PROXY, "{no_proxy}");
}
