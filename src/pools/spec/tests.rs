//! `[[pools]]` validation: what is accepted, and the one-line error for each mistake.

use super::*;
use crate::model::{RecaptchaVersion, TaskParams};

fn table(toml_text: &str) -> PoolTable {
    toml::from_str(toml_text).expect("the test table parses as TOML")
}

fn spec(toml_text: &str) -> Result<PoolSpec, ConfigError> {
    table(toml_text).spec(0)
}

#[test]
fn a_pool_hits_the_same_target_as_its_callers() {
    let s = spec(
        r#"kind = "recaptcha_v3"
           sitekey = "6Le-pool"
           pageurl = "https://Example.com/login?x=1"
           action = "login"
           min_score = 0.3
           size = 20"#,
    )
    .unwrap();
    assert_eq!(s.size, PoolSize::Fixed(20));
    match &s.req.params {
        TaskParams::Recaptcha {
            version,
            action,
            min_score,
            ..
        } => {
            assert_eq!(*version, RecaptchaVersion::V3);
            assert_eq!(action.as_deref(), Some("login"));
            assert_eq!(min_score.as_deref(), Some("0.3"));
        }
        other => panic!("{other:?}"),
    }
    // A caller sending the same values through in.php lands on the pool's target.
    let caller = parse_submit(&Params::from_pairs([
        ("method", "userrecaptcha"),
        ("version", "v3"),
        ("googlekey", "6Le-pool"),
        ("pageurl", "https://example.com/login"),
        ("action", "login"),
        ("min_score", "0.3"),
    ]))
    .unwrap();
    let policy = TargetPolicy::default();
    assert_eq!(Target::of(&s.req, policy), Target::of(&caller, policy));
}

/// A declared kind's table is read through its declaration: the fields it declares, and the
/// target a caller of the same widget hits, whichever protocol it came in.
#[test]
fn a_declared_kinds_pool_hits_the_same_target_as_its_callers() {
    let policy = TargetPolicy::default();
    let turnstile = spec(
        r#"kind = "turnstile"
           sitekey = "0x4AAA-pool"
           pageurl = "https://example.com/signup"
           action = "signup"
           data = "cdata-1"
           size = 3"#,
    )
    .unwrap();
    assert_eq!(turnstile.req.params.declared("data"), Some("cdata-1"));
    let caller = parse_submit(&Params::from_pairs([
        ("method", "turnstile"),
        ("sitekey", "0x4AAA-pool"),
        ("pageurl", "https://example.com/signup?ref=1"),
        ("action", "signup"),
        ("data", "cdata-1"),
    ]))
    .unwrap();
    assert_eq!(
        Target::of(&turnstile.req, policy),
        Target::of(&caller, policy)
    );
    let task = crate::wire::taskapi::decode_task(Some(&serde_json::json!({
        "type": "AntiTurnstileTaskProxyLess",
        "websiteURL": "https://example.com/signup",
        "websiteKey": "0x4AAA-pool",
        "metadata": {"action": "signup", "cdata": "cdata-1"},
    })))
    .unwrap();
    assert_eq!(
        Target::of(&turnstile.req, policy),
        Target::of(&task, policy)
    );
    let hcaptcha = spec(
        r#"kind = "hcaptcha"
           sitekey = "a5f74b19-9e45-40e0-b45d-47ff91b7a6c2"
           pageurl = "https://example.com/"
           invisible = true
           size = 2"#,
    )
    .unwrap();
    assert_eq!(hcaptcha.req.kind(), Kind::Hcaptcha);
    assert_eq!(hcaptcha.req.params.declared("invisible"), Some("1"));
}

#[test]
fn auto_sizes_take_defaults_and_ranges() {
    let s = spec(
        r#"kind = "turnstile"
           sitekey = "0x4AAA"
           pageurl = "https://example.com/"
           size = "auto""#,
    )
    .unwrap();
    assert_eq!(
        s.size,
        PoolSize::Auto {
            min: 0,
            max: 20,
            predict: false
        }
    );
    assert_eq!(s.size.mode(), "auto");
    let s = spec(
        r#"kind = "recaptcha_v2"
           sitekey = "6Le"
           pageurl = "https://example.com/"
           invisible = true
           size = "auto"
           min = 2
           max = 40
           predict = true"#,
    )
    .unwrap();
    assert_eq!(
        s.size,
        PoolSize::Auto {
            min: 2,
            max: 40,
            predict: true
        }
    );
}

#[test]
fn each_mistake_names_its_setting() {
    let base = "sitekey = \"6Le\"\npageurl = \"https://example.com/\"\n";
    let cases = [
        (
            "kind = \"image\"\nsize = 5",
            "pools[0].kind",
            "cannot be pooled",
        ),
        (
            "kind = \"geetest_v3\"\nsize = 5",
            "pools[0].kind",
            "cannot be pooled",
        ),
        (
            "kind = \"keycaptcha\"\nsize = 5",
            "pools[0].kind",
            "unknown kind",
        ),
        (
            "kind = \"funcaptcha\"\nsize = 5",
            "pools[0].kind",
            "more than a sitekey and a page",
        ),
        (
            "kind = \"hcaptcha\"\nsize = 5\naction = \"login\"",
            "pools[0].action",
            "not a hcaptcha parameter",
        ),
        // hCaptcha's `rqdata` is fresh with each page load: no pooled answer could carry it.
        (
            "kind = \"hcaptcha\"\nsize = 5\ndata = \"rq-1\"",
            "pools[0].data",
            "changes with every load",
        ),
        ("kind = \"recaptcha_v2\"", "pools[0].size", "count or"),
        (
            "kind = \"recaptcha_v2\"\nsize = 0",
            "pools[0].size",
            "between 1",
        ),
        (
            "kind = \"recaptcha_v2\"\nsize = -3",
            "pools[0].size",
            "between 1",
        ),
        (
            "kind = \"recaptcha_v2\"\nsize = \"big\"",
            "pools[0].size",
            "count or",
        ),
        (
            "kind = \"recaptcha_v2\"\nsize = 5\nmax = 9",
            "pools[0].size",
            "only apply",
        ),
        (
            "kind = \"recaptcha_v2\"\nsize = 5\npredict = true",
            "pools[0].size",
            "only apply",
        ),
        (
            "kind = \"recaptcha_v2\"\nsize = \"auto\"\nmin = 9\nmax = 3",
            "pools[0].max",
            "range",
        ),
        (
            "kind = \"recaptcha_v3\"\nsize = 5",
            "pools[0].action",
            "action",
        ),
        (
            "kind = \"recaptcha_v2\"\nsize = 5\ndata = \"x\"",
            "pools[0].data",
            "not a",
        ),
        (
            "kind = \"turnstile\"\nsize = 5\ninvisible = true",
            "pools[0].invisible",
            "not a",
        ),
    ];
    for (extra, setting, problem) in cases {
        let e = spec(&format!("{base}{extra}")).unwrap_err();
        assert_eq!(e.setting, setting, "{extra}: {e}");
        assert!(e.problem.contains(problem), "{extra}: {e}");
        assert!(!e.fix.is_empty());
    }
    let e = spec("kind = \"recaptcha_v2\"\npageurl = \"https://e.com/\"\nsize = 1").unwrap_err();
    assert_eq!(e.setting, "pools[0].sitekey", "{e}");
    let e = spec("kind = \"turnstile\"\nsitekey = \"0x4\"\npageurl = \"ftp://e.com/\"\nsize = 1")
        .unwrap_err();
    assert_eq!(e.setting, "pools[0].pageurl", "{e}");
}

#[test]
fn two_tables_for_one_target_are_refused() {
    let one = table(
        "kind = \"recaptcha_v2\"\nsitekey = \"6Le\"\npageurl = \"https://e.com/a\"\nsize = 1",
    );
    // Same target once the query is dropped.
    let two = table(
        "kind = \"recaptcha_v2\"\nsitekey = \"6Le\"\npageurl = \"https://e.com/a?q=1\"\nsize = 2",
    );
    let e = specs(&[one.clone(), two.clone()], TargetPolicy::default()).unwrap_err();
    assert_eq!(e.setting, "pools[1].sitekey");
    // With the query kept they are different targets.
    let kept = specs(&[one, two], TargetPolicy { drop_query: false }).unwrap();
    assert_eq!(kept.len(), 2);
}
