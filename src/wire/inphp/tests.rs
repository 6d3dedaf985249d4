//! The compatible parser against the limits of `model::limits`: numbers out of range, values
//! too long, malformed sitekeys and page URLs get their protocol codes.

use base64::Engine as _;

use super::{Params, codes, parse_submit, submit_params};
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
            &[("textcaptcha", &"q".repeat(limits::MAX_DATA_LEN + 1))],
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
    // A method no declaration names passes through (kind `other`).
    let unknown = parse(&[("method", "no_such_method")]).expect("passes through");
    assert_eq!(unknown.kind(), Kind::Other);
}

/// An image parameter that changes what the answer means (coordinates, a grid) makes the task
/// another one: it passes through whole, never solved as the image's text.
#[test]
fn image_parameters_that_change_the_answer_pass_the_task_through_whole() {
    let b64 = base64::engine::general_purpose::STANDARD.encode(PNG);
    for (name, value) in [
        ("recaptcha", "1"),
        ("grid_size", "3x3"),
        ("recaptcharows", "4"),
        ("img_type", "recaptcha"),
    ] {
        let req = parse(&[
            ("method", "base64"),
            ("body", &b64),
            (name, value),
            ("textinstructions", "the cats"),
        ])
        .expect(name);
        assert_eq!(req.kind(), Kind::Other, "{name}");
        let sent: Vec<(String, String)> = submit_params(&req)
            .into_iter()
            .map(|(n, v)| (n.into_owned(), v))
            .collect();
        for want in [
            ("method", "base64"),
            ("body", b64.as_str()),
            (name, value),
            ("textinstructions", "the cats"),
        ] {
            assert!(
                sent.contains(&(want.0.to_owned(), want.1.to_owned())),
                "{name}: {want:?} in {sent:?}"
            );
        }
        assert!(!sent.iter().any(|(n, _)| n == "key" || n == "json"));
    }
    // Sent as off, they ask for nothing.
    let plain = parse(&[
        ("method", "base64"),
        ("body", &b64),
        ("coordinatescaptcha", "0"),
    ]);
    assert_eq!(plain.expect("an image").kind(), Kind::Image);
    // Uploaded files go on as uploads, under their fields' names; the call's own key does not.
    let mut upload = Params::from_pairs([
        ("method", "post"),
        ("grid_size", "3x3"),
        ("key", "caller-key"),
    ]);
    upload.insert_file("file", bytes::Bytes::from_static(PNG));
    upload.insert_file("imginstructions", bytes::Bytes::from_static(b"hint"));
    let req = parse_submit(&upload).expect("passes through");
    let sent = submit_params(&req);
    assert!(sent.iter().any(|(n, v)| n == "method" && v == "post"));
    assert!(!sent.iter().any(|(n, _)| n == "key" || n == "file"));
    let files: Vec<(&str, &[u8])> = super::submit_files(&req)
        .iter()
        .map(|(n, f)| (n.as_str(), f.as_ref()))
        .collect();
    assert_eq!(
        files,
        vec![("file", PNG), ("imginstructions", &b"hint"[..])]
    );
    // The native form (how a queued or adopted task is stored) means the same task.
    let body = serde_json::to_vec(&crate::wire::native::native_body(&req)).unwrap();
    let back = crate::wire::native::parse_native(&body, std::time::Duration::from_secs(60));
    assert_eq!(back.expect("parses back").req, req);
}

/// `coordinatescaptcha=1` on an image asks for the coordinates kind: its image as base64 or an
/// upload (the same picture either way, the same target), its instruction as text or an image,
/// and on the way up `method=base64` with the flag, whatever the caller used.
#[test]
fn a_coordinates_image_is_the_coordinates_kind_however_it_is_sent() {
    use crate::model::{Target, TargetPolicy};
    let b64 = base64::engine::general_purpose::STANDARD.encode(PNG);
    let data_uri = format!("data:image/png;base64,{}", b64.trim_end_matches('='));
    let as_text = parse(&[
        ("method", "base64"),
        ("coordinatescaptcha", "1"),
        ("body", &data_uri),
        ("textinstructions", "the cats"),
        ("min_clicks", "2"),
    ])
    .expect("base64");
    assert_eq!(as_text.kind(), Kind::Coordinates);
    let mut upload = Params::from_pairs([
        ("method", "post"),
        ("coordinatescaptcha", "1"),
        ("textinstructions", "the cats"),
        ("min_clicks", "2"),
    ]);
    upload.insert_file("file", bytes::Bytes::from_static(PNG));
    let uploaded = parse_submit(&upload).expect("an upload");
    assert_eq!(uploaded, as_text, "the same picture, the same task");
    assert_eq!(
        Target::of(&uploaded, TargetPolicy::default()),
        Target::of(&as_text, TargetPolicy::default())
    );
    let sent: Vec<(String, String)> = submit_params(&uploaded)
        .into_iter()
        .map(|(n, v)| (n.into_owned(), v))
        .collect();
    for want in [
        ("method", "base64"),
        ("coordinatescaptcha", "1"),
        ("body", b64.as_str()),
        ("textinstructions", "the cats"),
        ("min_clicks", "2"),
    ] {
        assert!(
            sent.contains(&(want.0.to_owned(), want.1.to_owned())),
            "{want:?} in {sent:?}"
        );
    }
    assert!(super::submit_files(&uploaded).is_empty());

    // Another instruction is another task.
    let other = parse(&[
        ("method", "base64"),
        ("coordinatescaptcha", "1"),
        ("body", &b64),
        ("textinstructions", "the dogs"),
        ("min_clicks", "2"),
    ])
    .expect("base64");
    assert_ne!(
        Target::of(&other, TargetPolicy::default()),
        Target::of(&as_text, TargetPolicy::default())
    );
    // What cannot be is refused by name; a parameter coordinates has not, too.
    for (bad, named) in [
        (("min_clicks", "many"), "min_clicks"),
        (("max_clicks", "1001"), "max_clicks"),
        (("imginstructions", "%%%"), "imginstructions"),
        (("grid_size", "3x3"), "grid_size"),
        (("mode", "circles"), "mode"),
    ] {
        let refused = parse(&[
            ("method", "base64"),
            ("coordinatescaptcha", "1"),
            ("body", &b64),
            bad,
        ])
        .expect_err(named);
        assert!(refused.message.contains(named), "{named}: {refused}");
    }
    let no_image = parse(&[("method", "base64"), ("coordinatescaptcha", "1")]);
    assert!(no_image.expect_err("no image").message.contains("body"));
    // The flag is on or off, never guessed at.
    let unclear = parse(&[
        ("method", "base64"),
        ("coordinatescaptcha", "2"),
        ("body", &b64),
    ])
    .expect_err("neither on nor off");
    assert!(unclear.message.contains("coordinatescaptcha"), "{unclear}");
    // On as every flag is (`1`, `true`, `yes`, `on`).
    for word in ["true", "Yes"] {
        let on = parse(&[
            ("method", "base64"),
            ("coordinatescaptcha", word),
            ("body", &b64),
        ]);
        assert_eq!(on.expect(word).kind(), Kind::Coordinates);
    }
}

/// A `createTask` pass-through task's native form means the same task.
#[test]
fn a_createtask_pass_through_task_survives_its_native_form() {
    let task = serde_json::json!({"type": "CapyTaskProxyless", "websiteKey": "PUZZLE_x",
        "websiteURL": "https://example.com/", "extra": {"n": [1, 2]}});
    let req = crate::wire::taskapi::decode_task(Some(&task)).expect("passes through");
    let body = serde_json::to_vec(&crate::wire::native::native_body(&req)).unwrap();
    let back = crate::wire::native::parse_native(&body, std::time::Duration::from_secs(60));
    assert_eq!(back.expect("parses back").req, req);
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

/// A declared flag with a value that is neither on nor off, and a provider's own parameter that
/// is not a plain name (hCaptcha's `domain`), are refused by name, not read as off or passed on.
#[test]
fn a_declared_flag_or_name_that_cannot_be_is_refused_by_name() {
    let page = ("pageurl", "https://example.com/a");
    let funcaptcha = |nojs: &str| {
        parse(&[
            ("method", "funcaptcha"),
            ("publickey", "PK-1"),
            page,
            ("nojs", nojs),
        ])
    };
    let refused = funcaptcha("abc").expect_err("abc");
    assert_eq!(refused.code, codes::BAD_PARAMETERS, "{refused}");
    assert!(refused.message.contains("`nojs`"), "{refused}");
    assert_eq!(funcaptcha("0").unwrap().params.declared("nojs"), None);
    assert_eq!(
        funcaptcha("true").unwrap().params.declared("nojs"),
        Some("1")
    );
    for domain in ["a\r\nb", "js.hcaptcha.com/../x", "\u{0}"] {
        let refused = parse(&[
            ("method", "hcaptcha"),
            ("sitekey", "k"),
            page,
            ("domain", domain),
        ])
        .expect_err(domain);
        assert!(
            refused.message.contains("`domain`"),
            "{domain:?}: {refused}"
        );
    }
}

/// A typed kind's parameter that its method does not read is refused by name, never dropped;
/// left blank or `0` (how clients leave one unset) it asks for nothing. So too for GeeTest v3,
/// which moved onto its declaration.
#[test]
fn a_typed_kinds_unread_parameter_is_refused_by_name() {
    let recaptcha = |extra: &[(&str, &str)]| {
        let mut pairs = vec![
            ("method", "userrecaptcha"),
            ("googlekey", "6Le-key"),
            ("pageurl", "https://example.com/a"),
            ("soft_id", "4580"),
            ("header_acao", "1"),
        ];
        pairs.extend_from_slice(extra);
        parse(&pairs)
    };
    for name in ["websiteSToken", "cookie_typo", "rqdata"] {
        let refused = recaptcha(&[(name, "x")]).expect_err(name);
        assert_eq!(refused.code, codes::BAD_PARAMETERS, "{name}");
        assert!(
            refused.message.contains(name) && refused.message.contains("recaptcha_v2"),
            "{name}: {refused}"
        );
    }
    assert!(recaptcha(&[("rqdata", ""), ("websiteSToken", "0")]).is_ok());
    // Every parameter the method reads is one it does not refuse.
    let all = recaptcha(&[
        ("invisible", "1"),
        ("action", "login"),
        ("data-s", "s"),
        ("domain", "recaptcha.net"),
        ("enterprise", "1"),
        ("userAgent", "UA"),
        ("cookies", "a=b"),
        ("proxy", "u:p@10.0.0.1:8080"),
        ("proxytype", "HTTP"),
    ]);
    assert!(all.is_ok(), "{all:?}");
    let geetest = parse(&[
        ("method", "geetest"),
        ("gt", "g"),
        ("challenge", "c"),
        ("pageurl", "https://example.com/a"),
        ("initParameters", "{}x"),
    ])
    .expect_err("unread");
    assert!(geetest.message.contains("initParameters"), "{geetest}");
    let text = parse(&[("textcaptcha", "2+2?"), ("lang", "en"), ("phrase", "1")]);
    assert!(text.expect_err("unread").message.contains("phrase"));
}
