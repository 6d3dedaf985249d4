use base64::Engine as _;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::model::Kind;
use crate::wire::taskapi::names::TaskApiDialect;
use crate::wire::taskapi::{beside_task, encode_task};

const PAGE: &str = "https://example.com/login";

fn png_b64() -> String {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(&[7u8; 200]);
    base64::engine::general_purpose::STANDARD.encode(png)
}

fn decode(task: Value) -> Result<SolveRequest, Validation> {
    decode_task(Some(&task))
}

/// One request of every kind and variant the encoder writes.
fn samples() -> Vec<SolveRequest> {
    let proxy = Proxy {
        kind: ProxyType::Socks5,
        address: "u:p@10.0.0.1:1080".into(),
    };
    let mut out = vec![SolveRequest::recaptcha_v2("6Le-a", PAGE)];
    let mut invisible = SolveRequest::recaptcha_v2("6Le-b", PAGE);
    if let TaskParams::Recaptcha {
        invisible: i,
        data_s,
        ..
    } = &mut invisible.params
    {
        *i = true;
        *data_s = Some("s-val".into());
    }
    invisible.proxy = Some(proxy.clone());
    invisible.user_agent = Some("UA/1".into());
    invisible.cookies = Some("a=b".into());
    out.push(invisible);
    out.push(SolveRequest::new(TaskParams::Recaptcha {
        sitekey: "6Le-c".into(),
        pageurl: PAGE.into(),
        version: RecaptchaVersion::V3,
        enterprise: true,
        invisible: false,
        action: Some("login".into()),
        min_score: Some("0.7".into()),
        data_s: None,
        domain: Some("recaptcha.net".into()),
    }));
    out.push(SolveRequest::new(TaskParams::Recaptcha {
        sitekey: "6Le-d".into(),
        pageurl: PAGE.into(),
        version: RecaptchaVersion::V2,
        enterprise: true,
        invisible: false,
        action: None,
        min_score: None,
        data_s: Some("ent-s".into()),
        domain: None,
    }));
    out.push(SolveRequest::new(TaskParams::declared_of(
        Kind::Turnstile,
        &[
            ("sitekey", "0x4AAA"),
            ("pageurl", PAGE),
            ("action", "a"),
            ("data", "c"),
            ("pagedata", "p"),
        ],
    )));
    let mut cf = SolveRequest::new(TaskParams::declared_of(
        Kind::CloudflareChallenge,
        &[("pageurl", PAGE)],
    ));
    cf.proxy = Some(proxy);
    cf.user_agent = Some("UA/2".into());
    out.push(cf);
    out.push(SolveRequest::new(TaskParams::Declared {
        kind: Kind::GeetestV3,
        values: vec![
            ("gt", "g".repeat(32)),
            ("challenge", "c".repeat(32)),
            ("pageurl", PAGE.into()),
            ("api_server", "api.geetest.com".into()),
            (
                "geetestGetLib",
                r#"{"path":"/static/js/fullpage.9.1.9.js"}"#.into(),
            ),
        ],
    }));
    out.push(SolveRequest::new(TaskParams::declared_of(
        crate::model::Kind::Image,
        &[
            ("body", &png_b64()),
            ("phrase", "1"),
            ("regsense", "1"),
            ("numeric", "1"),
            ("min_len", "4"),
            ("max_len", "8"),
            ("lang", "en"),
            ("textinstructions", "type the red letters"),
        ],
    )));
    out.push(SolveRequest::new(TaskParams::declared_of(
        crate::model::Kind::Text,
        &[("textcaptcha", "2+2?"), ("lang", "en")],
    )));
    out
}

#[test]
fn every_encoded_task_decodes_to_the_same_request() {
    for flavor in TaskApiDialect::ALL {
        for req in samples().into_iter().chain(
            Kind::ALL
                .into_iter()
                .filter_map(crate::model::kind::declared_sample),
        ) {
            let task = match encode_task(flavor, &req) {
                Ok(t) => t,
                Err(_) if !req.kind().spec().declared_params().is_empty() => {
                    assert!(
                        !req.kind().solved_in(flavor.dialect()),
                        "{flavor:?} {req:?}"
                    );
                    continue;
                }
                Err(_) => {
                    // Only text questions lack a type outside 2captcha v2.
                    assert_eq!(req.kind(), Kind::Text, "{flavor:?}");
                    assert_ne!(flavor, TaskApiDialect::TwoCaptchaV2);
                    continue;
                }
            };
            let back = decode(task.clone()).unwrap_or_else(|e| panic!("{flavor:?} {task}: {e}"));
            assert_eq!(back, req, "{flavor:?} {task}");
        }
    }
}

#[test]
fn the_anticaptcha_clients_bodies_read_with_their_empty_values() {
    // As anticaptchaofficial sends them: empty strings, `false` and `0` for "not set".
    let r = decode(json!({
        "type": "RecaptchaV2TaskProxyless", "websiteURL": PAGE, "websiteKey": "6Le-x",
        "websiteSToken": "", "recaptchaDataSValue": "", "isInvisible": true
    }))
    .unwrap();
    assert_eq!(r.kind(), Kind::RecaptchaV2);
    assert!(matches!(
        r.params,
        TaskParams::Recaptcha {
            invisible: true,
            data_s: None,
            ..
        }
    ));
    let r = decode(json!({
        "type": "ImageToTextTask", "body": png_b64(), "phrase": false, "case": false,
        "numeric": 0, "math": false, "minLength": 0, "maxLength": 0, "comment": false,
        "languagePool": "en"
    }))
    .unwrap();
    assert_eq!(r.kind(), Kind::Image);
    assert_eq!(r.params.declared("min_len"), None);
    assert_eq!(r.params.declared("numeric"), None);
    assert_eq!(r.params.declared("textinstructions"), None);
    assert_eq!(r.params.declared("lang"), Some("en"));
    let r = decode(json!({
        "type": "GeeTestTaskProxyless", "websiteURL": PAGE, "gt": "g", "challenge": "c",
        "geetestApiServerSubdomain": "", "geetestGetLib": "", "version": 3, "initParameters": {}
    }))
    .unwrap();
    assert_eq!(r.kind(), Kind::GeetestV3);
    let r = decode(json!({
        "type": "RecaptchaV3TaskProxyless", "websiteURL": PAGE, "websiteKey": "k",
        "minScore": 0.9, "pageAction": "login", "isEnterprise": true
    }))
    .unwrap();
    assert!(matches!(
        r.params,
        TaskParams::Recaptcha {
            enterprise: true,
            ..
        }
    ));
}

#[test]
fn proxies_with_a_colon_in_the_password_survive_every_flavor() {
    let mut req = SolveRequest::recaptcha_v2("6Le-a", PAGE);
    req.proxy = Some(Proxy {
        kind: ProxyType::Http,
        address: "user:pa:ss@proxy.example:3128".into(),
    });
    for flavor in TaskApiDialect::ALL {
        let task = encode_task(flavor, &req).unwrap();
        assert_eq!(decode(task.clone()).unwrap(), req, "{flavor:?} {task}");
    }
}

#[test]
fn capsolver_proxy_strings_in_every_documented_form() {
    for (line, want) in [
        ("1.2.3.4:8080", "1.2.3.4:8080"),
        ("1.2.3.4:8080:u:p", "u:p@1.2.3.4:8080"),
        ("socks5:1.2.3.4:8080:u:p", "u:p@1.2.3.4:8080"),
        ("http://u:p@proxy.example:3128", "u:p@proxy.example:3128"),
    ] {
        let r = decode(json!({"type": "ReCaptchaV2Task", "websiteURL": PAGE,
            "websiteKey": "k", "proxy": line}))
        .unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(r.proxy.unwrap().address, want, "{line}");
    }
}

#[test]
fn bad_tasks_get_codes_and_messages_naming_the_field() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!("nope"), TASK_ABSENT, "task"),
        (json!({"websiteURL": PAGE}), TASK_ABSENT, "type"),
        (json!({"type": 7}), TASK_NOT_SUPPORTED, "`7`"),
        (
            json!({"type": "Key Captcha"}),
            TASK_NOT_SUPPORTED,
            "Key Captcha",
        ),
        (
            json!({"type": "RecaptchaV2TaskProxyless", "websiteURL": PAGE}),
            codes::GOOGLEKEY,
            "websiteKey",
        ),
        (
            json!({"type": "RecaptchaV2TaskProxyless", "websiteKey": "k"}),
            codes::PAGEURL,
            "websiteURL",
        ),
        (
            json!({"type": "RecaptchaV2TaskProxyless", "websiteKey": "k", "websiteURL": PAGE,
            "isInvisible": "maybe"}),
            codes::BAD_PARAMETERS,
            "isInvisible",
        ),
        (
            json!({"type": "RecaptchaV3TaskProxyless", "websiteKey": "k", "websiteURL": PAGE,
            "pageAction": "a", "minScore": 7}),
            codes::BAD_PARAMETERS,
            "min_score",
        ),
        (
            json!({"type": "RecaptchaV2Task", "websiteKey": "k", "websiteURL": PAGE}),
            codes::BAD_PROXY,
            "proxyAddress",
        ),
        (
            json!({"type": "RecaptchaV2EnterpriseTaskProxyless", "websiteKey": "k",
            "websiteURL": PAGE, "enterprisePayload": {"s": "x", "rqdata": "y"}}),
            codes::BAD_PARAMETERS,
            "enterprisePayload.rqdata",
        ),
        (
            // hCaptcha's `rqdata` is passed on; no other member of its `enterprisePayload` is.
            json!({"type": "HCaptchaTaskProxyless", "websiteKey": "k", "websiteURL": PAGE,
            "enterprisePayload": {"rqdata": "r", "sentry": true}}),
            codes::BAD_PARAMETERS,
            "`enterprisePayload.sentry` is not supported for hcaptcha",
        ),
        (
            json!({"type": "HCaptchaTaskProxyless", "websiteKey": "k", "websiteURL": PAGE,
            "enterprisePayload": "r"}),
            codes::BAD_PARAMETERS,
            "`enterprisePayload` must be an object",
        ),
        (
            json!({"type": "RecaptchaV2Task", "websiteKey": "k", "websiteURL": PAGE,
            "proxyAddress": "h", "proxyPort": 70000}),
            codes::BAD_PROXY,
            "proxyPort",
        ),
        (
            json!({"type": "RecaptchaV2Task", "websiteKey": "k", "websiteURL": PAGE,
            "proxyAddress": "h", "proxyPort": -1}),
            codes::BAD_PROXY,
            "proxyPort",
        ),
        (
            json!({"type": "RecaptchaV2Task", "websiteKey": "k", "websiteURL": PAGE,
            "proxyAddress": "h", "proxyPort": 80, "proxyLogin": "a@b", "proxyPassword": "p"}),
            codes::BAD_PROXY,
            "proxy",
        ),
        (
            json!({"type": "ImageToTextTask", "body": png_b64(), "minLength": 1e30}),
            codes::BAD_PARAMETERS,
            "minLength",
        ),
        (
            json!({"type": "ImageToTextTask", "body": png_b64(), "numeric": 9}),
            codes::BAD_PARAMETERS,
            "numeric",
        ),
        (
            json!({"type": "ImageToTextTask", "body": "!!"}),
            codes::UPLOAD,
            "body",
        ),
        (
            json!({"type": "ImageToTextTask"}),
            codes::ZERO_CAPTCHA_FILESIZE,
            "body",
        ),
        (
            // Version 4 is GeeTest v4, which has no challenge: refused by name, not dropped.
            json!({"type": "GeeTestTaskProxyless", "websiteURL": PAGE, "gt": "g",
            "challenge": "c", "version": 4}),
            codes::BAD_PARAMETERS,
            "`challenge` is not supported for geetest_v4",
        ),
        (
            json!({"type": "TurnstileTaskProxyless", "websiteURL": PAGE,
            "websiteKey": {"x": 1}}),
            codes::BAD_PARAMETERS,
            "websiteKey",
        ),
    ];
    for (task, code, mention) in cases {
        let err = decode(task.clone()).expect_err(&task.to_string());
        assert_eq!(err.code, code, "{task}");
        assert!(err.message.contains(mention), "{task}: {}", err.message);
    }
    assert!(decode_task(None).is_err());
}

/// A type no declaration names is kept whole, to be forwarded as sent (kind `other`).
#[test]
fn an_undeclared_type_passes_through_whole() {
    let task = json!({"type": "KeyCaptchaTaskProxyless", "s_s_c_user_id": 15,
        "s_s_c_session_id": "s", "websiteURL": PAGE, "nested": {"a": [1, 2]}});
    let req = decode(task.clone()).expect("passes through");
    assert_eq!(req.kind(), Kind::Other);
    let TaskParams::Passthrough(crate::model::Passthrough::TaskApi { task: kept }) = &req.params
    else {
        panic!("{:?}", req.params);
    };
    assert_eq!(&Value::Object(kept.clone()), &task);
    let back = encode_task(TaskApiDialect::AntiCaptcha, &req).unwrap();
    assert_eq!(back, task, "sent on exactly as it came");
    let huge = json!({"type": "CapyTask", "x": "y".repeat(2_000_000)});
    assert_eq!(decode(huge).unwrap_err().code, codes::BAD_PARAMETERS);
}

#[test]
fn task_ids_are_digits_whichever_way_they_come() {
    assert_eq!(task_id_from(Some(&json!(123))).as_deref(), Some("123"));
    assert_eq!(task_id_from(Some(&json!("456"))).as_deref(), Some("456"));
    for bad in [
        json!(-1),
        json!(1.5),
        json!("a-uuid"),
        json!(""),
        json!(null),
        json!([1]),
    ] {
        assert_eq!(task_id_from(Some(&bad)), None, "{bad}");
    }
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,20}".prop_map(Value::from),
        Just(Value::from("RecaptchaV2Task")),
        Just(Value::from(PAGE)),
    ];
    leaf.prop_recursive(2, 16, 4, |inner| {
        prop::collection::vec(inner, 0..3).prop_map(Value::Array)
    })
}

proptest! {
    #[test]
    fn random_tasks_never_panic(
        ty in prop_oneof![Just("RecaptchaV2Task"), Just("RecaptchaV3TaskProxyless"),
            Just("TurnstileTask"), Just("AntiCloudflareTask"), Just("GeeTestTask"),
            Just("ImageToTextTask"), Just("TextCaptchaTask"), Just("x")],
        fields in prop::collection::vec((prop_oneof![
            Just("websiteURL"), Just("websiteKey"), Just("proxy"), Just("proxyPort"),
            Just("proxyAddress"), Just("proxyType"), Just("minScore"), Just("numeric"),
            Just("minLength"), Just("body"), Just("gt"), Just("challenge"), Just("comment"),
            Just("version"), Just("isInvisible"), Just("enterprisePayload"), Just("pageAction"),
        ], any_json()), 0..10)
    ) {
        let mut task = Map::new();
        task.insert("type".into(), Value::from(ty));
        for (k, v) in fields {
            task.insert(k.to_owned(), v);
        }
        match decode_task(Some(&Value::Object(task))) {
            Ok(req) => prop_assert!(req.validate().is_ok()),
            Err(v) => prop_assert!(v.code.starts_with("ERROR_")),
        }
    }
}

/// A typed kind's field that its reading does not understand is refused by name, never
/// dropped; left empty it asks for nothing. A proxy field on a proxyless type is told so. So
/// too for GeeTest v3, which moved onto its declaration.
#[test]
fn a_typed_kinds_unread_field_is_refused_by_name() {
    let recaptcha = |extra: Value| {
        let mut task = json!({"type": "RecaptchaV2TaskProxyless", "websiteURL": PAGE,
            "websiteKey": "6Le-a"});
        for (k, v) in extra.as_object().unwrap() {
            task[k] = v.clone();
        }
        decode(task)
    };
    let refused = recaptcha(json!({"websiteSToken": "tok"})).expect_err("unread");
    assert_eq!(refused.code, codes::BAD_PARAMETERS);
    assert!(refused.message.contains("websiteSToken"), "{refused}");
    // anticaptchaofficial sends its unset fields empty.
    assert!(recaptcha(json!({"websiteSToken": "", "recaptchaDataSValue": null})).is_ok());
    let proxied = recaptcha(json!({"proxyAddress": "10.0.0.1"})).expect_err("proxyless");
    assert!(proxied.message.contains("proxyless"), "{proxied}");
    let geetest = decode(
        json!({"type": "GeeTestTaskProxyless", "websiteURL": PAGE, "gt": "g",
        "challenge": "c", "geetestGetLib": "{\"path\":\"/x.js\"}", "initParameters": {"riskType": "slide"}}),
    )
    .expect_err("unread");
    assert!(geetest.message.contains("initParameters"), "{geetest}");
    // A version the type has no such task for is refused by its number, not read as v3.
    let v5 = decode(
        json!({"type": "GeeTestTaskProxyless", "websiteURL": PAGE, "gt": "g",
        "challenge": "c", "version": 5}),
    )
    .expect_err("version 5");
    assert_eq!(v5.code, TASK_NOT_SUPPORTED, "{v5}");
    assert!(v5.message.contains("versions: 3, 4"), "{v5}");
    let image = decode(json!({"type": "ImageToTextTask", "body": png_b64(), "websiteURL": PAGE}))
        .expect_err("unread");
    assert!(image.message.contains("websiteURL"), "{image}");
}

/// GeeTest v4's `captcha_id` in each dialect's own field (anti-captcha's `gt`, 2captcha v2's
/// `initParameters.captcha_id`, as its documents and callers send it, CapSolver's `captchaId`)
/// is one request, written back in each account's own field; any other `initParameters` key
/// is refused by name.
#[test]
fn geetest_v4_is_read_and_written_in_each_dialects_field() {
    let id = "e392e1d7fd421dc63325744d5a2b9c73";
    let v4 = |fields: Value| {
        let mut task = json!({"type": "GeeTestTaskProxyless", "websiteURL": PAGE});
        task.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        decode(task)
    };
    let anti = v4(json!({"version": 4, "gt": id})).unwrap();
    assert_eq!(anti.kind(), Kind::GeetestV4);
    assert_eq!(anti.params.declared("captcha_id"), Some(id));
    for fields in [
        json!({"version": 4, "initParameters": {"captcha_id": id}}),
        json!({"version": 4, "gt": id, "initParameters": {"captcha_id": id}}),
        // `initParameters` is v4's alone, so it tells v4 even without the version.
        json!({"initParameters": {"captcha_id": id}}),
    ] {
        assert_eq!(
            v4(fields.clone()).unwrap_or_else(|e| panic!("{fields}: {e}")),
            anti,
            "{fields}"
        );
    }
    let capsolver = decode(json!({"type": "GeeTestTaskProxyLess", "websiteURL": PAGE,
        "captchaId": id}))
    .unwrap();
    assert_eq!(capsolver, anti);
    let risk = v4(json!({"version": 4, "initParameters": {"captcha_id": id, "riskType": "slide"}}))
        .expect_err("not carried");
    assert!(risk.message.contains("initParameters.riskType"), "{risk}");

    let written = |flavor| encode_task(flavor, &anti).unwrap();
    let two = written(TaskApiDialect::TwoCaptchaV2);
    assert_eq!(two["initParameters"], json!({"captcha_id": id}), "{two}");
    assert_eq!(two.get("gt"), None, "{two}");
    assert_eq!(two["version"], 4);
    let anti_task = written(TaskApiDialect::AntiCaptcha);
    assert_eq!(anti_task["gt"], id, "{anti_task}");
    assert_eq!(anti_task.get("initParameters"), None, "{anti_task}");
    assert_eq!(written(TaskApiDialect::CapSolver)["captchaId"], id);
}

/// anti-captcha's `TurnstileTask` is two kinds: with `cloudflareTaskType: cf_clearance` the
/// Cloudflare challenge (its declared marker, written back with the name), without it
/// Turnstile. Any other `cloudflareTaskType` (anti-captcha's `token`, a Turnstile token on a
/// challenge page) is refused by name: answering it with a clearance would be a confident
/// wrong answer.
#[test]
fn a_shared_name_is_told_apart_by_its_marker() {
    let proxy = json!({"proxyType": "http", "proxyAddress": "10.0.0.1", "proxyPort": 3128});
    let task = |extra: Value| {
        let mut task = json!({"type": "TurnstileTask", "websiteURL": PAGE, "websiteKey": "0x4AAA"});
        let fields = task.as_object_mut().unwrap();
        fields.extend(proxy.as_object().unwrap().clone());
        fields.extend(extra.as_object().unwrap().clone());
        decode(task)
    };
    let challenge = task(json!({"cloudflareTaskType": "cf_clearance"})).unwrap();
    assert_eq!(challenge.kind(), Kind::CloudflareChallenge);
    assert_eq!(challenge.params.declared("sitekey"), Some("0x4AAA"));
    assert_eq!(task(json!({})).unwrap().kind(), Kind::Turnstile);
    let token = task(json!({"cloudflareTaskType": "token"})).expect_err("not carried");
    assert!(token.message.contains("`cloudflareTaskType`"), "{token}");
    for flavor in [TaskApiDialect::AntiCaptcha, TaskApiDialect::TwoCaptchaV2] {
        let written = encode_task(flavor, &challenge).unwrap();
        assert_eq!(written["type"], "TurnstileTask", "{written}");
        assert_eq!(written["cloudflareTaskType"], "cf_clearance", "{written}");
        assert_eq!(decode(written).unwrap(), challenge);
    }
    let capsolver = encode_task(TaskApiDialect::CapSolver, &challenge).unwrap();
    assert_eq!(capsolver["type"], "AntiCloudflareTask");
    assert_eq!(capsolver.get("cloudflareTaskType"), None, "{capsolver}");
}

/// Turnstile's optional values under each dialect's names: anti-captcha's `cData` and
/// `chlPageData`, CapSolver's `metadata`, 2captcha v2's `data` and `pagedata`; each read back
/// to the same request.
#[test]
fn turnstile_values_go_under_each_dialects_names() {
    let req = SolveRequest::new(TaskParams::declared_of(
        Kind::Turnstile,
        &[
            ("sitekey", "0x4AAA"),
            ("pageurl", PAGE),
            ("action", "login"),
            ("data", "cd-1"),
            ("pagedata", "pd-1"),
        ],
    ));
    let anti = encode_task(TaskApiDialect::AntiCaptcha, &req).unwrap();
    assert_eq!(
        (&anti["cData"], &anti["chlPageData"]),
        (&json!("cd-1"), &json!("pd-1"))
    );
    let two = encode_task(TaskApiDialect::TwoCaptchaV2, &req).unwrap();
    assert_eq!(
        (&two["data"], &two["pagedata"]),
        (&json!("cd-1"), &json!("pd-1"))
    );
    assert_eq!(two.get("cData"), None, "{two}");
    let capsolver = encode_task(TaskApiDialect::CapSolver, &req).unwrap();
    assert_eq!(
        capsolver["metadata"],
        json!({"action": "login", "cdata": "cd-1"})
    );
    for task in [anti, two] {
        assert_eq!(decode(task.clone()).unwrap(), req, "{task}");
    }
}

/// A `createTask` body's own fields beside the task: `languagePool` where anti-captcha's docs
/// put it (beside) or where its clients do (inside), read as the kind's `lang`; the call's own
/// fields taken; any other field, or `languagePool` on a kind without it, refused by name. The
/// upstream writer puts it in both places.
#[test]
fn a_createtask_body_is_read_beside_its_task() {
    let image = json!({"type": "ImageToTextTask", "body": png_b64()});
    let body = |extra: Value| {
        let mut body = json!({"clientKey": "k", "task": image, "softId": 0, "appId": "",
            "callbackUrl": "https://hooks.example/x"});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body.as_object().unwrap().clone()
    };
    let beside = decode_create(&body(json!({"languagePool": "rn"}))).unwrap();
    assert_eq!(beside.params.declared("lang"), Some("rn"));
    let mut inside = image.clone();
    inside["languagePool"] = json!("en");
    let inside = decode_create(&body(json!({"task": inside}))).unwrap();
    assert_eq!(inside.params.declared("lang"), Some("en"));
    assert_eq!(
        decode_create(&body(json!({})))
            .unwrap()
            .params
            .declared("lang"),
        None
    );

    let refused = decode_create(&body(json!({"priority": 5}))).unwrap_err();
    assert!(refused.message.contains("`priority`"), "{refused:?}");
    let recaptcha = json!({"type": "RecaptchaV2TaskProxyless", "websiteURL": PAGE,
        "websiteKey": "k"});
    let refused = decode_create(&body(json!({"task": recaptcha, "languagePool": "en"})));
    assert!(refused.unwrap_err().message.contains("`languagePool`"));

    for flavor in [TaskApiDialect::AntiCaptcha, TaskApiDialect::TwoCaptchaV2] {
        assert_eq!(
            beside_task(flavor, &beside),
            *json!({"languagePool": "rn"}).as_object().unwrap()
        );
        assert_eq!(encode_task(flavor, &beside).unwrap()["languagePool"], "rn");
    }
    assert!(beside_task(TaskApiDialect::AntiCaptcha, &decode(recaptcha).unwrap()).is_empty());
}
