//! Every declared kind, solved end to end from its declaration alone: the requests are built
//! from `model::Kind`'s declarations (its names, parameters, needs and answer shape), never from
//! a list in this file, so a kind added to `src/model/kind/catalog.rs` is solved here through
//! `in.php` and `createTask` callers and by every kind of account that solves it, with no
//! change to this test (docs/API.md, "Task types").

use captcha_gateway::config::AccountProvider;
use std::collections::HashSet;

use captcha_gateway::model::{AnswerShape, Check, Kind, Param, ProxyName, Reuse, TypeSpec};
use serde_json::{Map, Value, json};

use crate::failover::{LATENCY, account, json_account, settings};
use crate::support::TestGateway;
use crate::support::fleet::SimServer;
use crate::task_types::{solve_inphp, solve_task};

const UA: &str = "Mozilla/5.0 (declared kinds)";

/// A value its declaration accepts, made distinct by `tag` so no two cases share a target.
fn value(param: &Param, tag: &str) -> Value {
    match param.check {
        Check::Page => json!(format!("https://shop.example.com/{tag}/{}", param.name)),
        Check::Key | Check::Text => json!(format!("{}-{tag}", param.name)),
        Check::Flag => json!("1"),
        Check::Object => json!({ "blob": format!("b-{tag}") }),
        Check::Image => json!(png_base64(&format!("{tag}-{}", param.name))),
        // Above 2, some providers' `numeric` would keep the task from the others.
        Check::Count(max) => json!(max.min(2).to_string()),
        Check::OneOf(words) => json!(words[0]),
    }
}

/// A PNG's base64, its bytes made distinct by `tag`.
fn png_base64(tag: &str) -> String {
    use base64::Engine as _;
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend([b'p'; 120]);
    png.extend(tag.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(png)
}

/// Whether a task with `param` set may go to `provider`'s accounts (the simulator takes every
/// parameter; another provider only those its dialect documents).
fn taken_by(param: &Param, provider: AccountProvider) -> bool {
    provider == AccountProvider::Sim || param.only.contains(provider.dialect())
}

/// The `in.php` form: every declared parameter by its name (an object as `name[key]=`), the
/// caller's proxy and browser where the kind needs them. For a `createTask` account, without the
/// parameters `createTask` has no field for (they keep a task to `in.php` accounts).
fn inphp_form(spec: &TypeSpec, tag: &str, provider: AccountProvider) -> Vec<(String, String)> {
    let mut form = vec![("method".to_owned(), spec.methods[0].to_owned())];
    // A flag that selects the kind on its method; a selecting parameter of its own (a
    // question's `textcaptcha`) is sent with the rest.
    if let Some(flag) = spec.inphp_flag.filter(|_| spec.selecting_param().is_none()) {
        form.push((flag.to_owned(), "1".to_owned()));
    }
    let params = spec.declared_params().iter();
    for param in params.filter(|p| taken_by(p, provider)) {
        match value(param, tag) {
            Value::Object(object) => form.extend(
                object
                    .into_iter()
                    .map(|(k, v)| (format!("{}[{k}]", param.name), v.as_str().unwrap().into())),
            ),
            v => form.push((param.name.to_owned(), v.as_str().unwrap().to_owned())),
        }
    }
    if spec.needs_proxy {
        form.push(("proxy".into(), "user:pw@127.0.0.1:3128".into()));
        form.push(("proxytype".into(), "HTTP".into()));
    }
    if spec.needs_user_agent {
        form.push(("userAgent".into(), UA.into()));
    }
    form
}

/// The `createTask` task: one of its names as some dialect sends it, every parameter that has a
/// `createTask` field under it (one inside an object field as `outer.inner`), `version` or the
/// name's marker where its names are another kind's too, and the caller's proxy and browser
/// where it needs them.
fn task(spec: &TypeSpec, tag: &str, provider: AccountProvider) -> Value {
    let name = spec
        .task_names
        .iter()
        .filter(|n| n.dialects != captcha_gateway::model::Dialects::NONE)
        .find(|n| match n.proxy {
            ProxyName::Either => true,
            ProxyName::Proxied => spec.needs_proxy,
            ProxyName::Proxyless => !spec.needs_proxy,
        })
        .expect("a createTask name");
    let mut task = Map::new();
    task.insert("type".into(), json!(name.name));
    // A name another kind shares carries the field that says which kind it is.
    if let Some((field, value)) = name.marker {
        task.insert(field.into(), json!(value));
    }
    let params = spec.declared_params().iter();
    for param in params.filter(|p| p.in_task_api() && taken_by(p, provider)) {
        let v = match value(param, tag) {
            Value::Object(object) => json!(Value::Object(object).to_string()),
            Value::String(s) if param.check == Check::Flag => json!(s == "1"),
            Value::String(s) if matches!(param.check, Check::Count(_)) => {
                json!(s.parse::<u32>().unwrap())
            }
            v => v,
        };
        match Param::split_field(param.task) {
            (outer, Some(inner)) => {
                task.insert(outer.into(), json!({ inner: v }));
            }
            (field, None) => {
                task.insert(field.into(), v);
            }
        }
    }
    if let Some(version) = spec.task_version {
        task.insert("version".into(), json!(version));
    }
    if spec.needs_proxy {
        for (k, v) in [
            ("proxyType", json!("http")),
            ("proxyAddress", json!("127.0.0.1")),
            ("proxyPort", json!(3128)),
            ("proxyLogin", json!("user")),
            ("proxyPassword", json!("pw")),
        ] {
            task.insert(k.into(), v);
        }
    }
    if spec.needs_user_agent {
        task.insert("userAgent".into(), json!(UA));
    }
    Value::Object(task)
}

/// The single-use credential in an answer of `spec`'s shape: the token, or an object's first
/// key; `None` for points, which are checked for their shape in each protocol's form instead,
/// and for words a person typed.
/// A `createTask` solution also carries what the kind keeps beside its token (hCaptcha's
/// `respKey`), whichever protocol the account that solved it speaks.
fn credential(spec: &TypeSpec, answer: &Value) -> Option<String> {
    // Words a person typed (a question's answer) are no token: present, and nothing to verify.
    if !spec.typical.token {
        let words = answer.as_str().or_else(|| answer["text"].as_str());
        assert!(
            words.is_some_and(|w| !w.is_empty()),
            "{}: {answer}",
            spec.name
        );
        return None;
    }
    let found = match spec.answer {
        AnswerShape::Token { fields, extras } => {
            if answer.is_object() {
                for key in extras {
                    assert!(
                        answer[*key].as_str().is_some_and(|v| !v.is_empty()),
                        "{} solution lacks `{key}`: {answer}",
                        spec.name
                    );
                }
            }
            answer
                .as_str()
                .or_else(|| answer[fields[0]].as_str())
                .map(str::to_owned)
        }
        AnswerShape::Object { keys, .. } => {
            let object = match answer.as_str() {
                Some(text) => serde_json::from_str(text).unwrap_or(Value::Null),
                None => answer.clone(),
            };
            for key in keys {
                assert!(
                    !object[*key].is_null(),
                    "{} answer lacks `{key}`: {object}",
                    spec.name
                );
            }
            object[keys[0]].as_str().map(str::to_owned)
        }
        AnswerShape::Points { field } => {
            assert_points(spec, answer, field);
            return None;
        }
        AnswerShape::AsGiven => None,
    };
    Some(found.unwrap_or_else(|| panic!("{}: no credential in {answer}", spec.name)))
}

/// Points as each protocol writes them: `in.php`'s `coordinates:x=..,y=..;..`, a `createTask`
/// solution's list of `[x, y]` under `field`; at least one, each inside the image.
fn assert_points(spec: &TypeSpec, answer: &Value, field: &str) {
    let points: Vec<Vec<u64>> = match answer {
        Value::String(text) => text
            .strip_prefix("coordinates:")
            .unwrap_or_else(|| panic!("{}: {text}", spec.name))
            .split(';')
            .map(|p| {
                p.split(',')
                    .map(|xy| xy[2..].parse().expect("a number"))
                    .collect()
            })
            .collect(),
        solution => serde_json::from_value(solution[field].clone()).expect("[[x, y], ..]"),
    };
    assert!(!points.is_empty(), "{}: {answer}", spec.name);
    for p in points {
        assert!(
            p.len() == 2 && p.iter().all(|n| (1..=300).contains(n)),
            "{}: {answer}",
            spec.name
        );
    }
}

#[tokio::test]
async fn every_declared_kind_is_solved_end_to_end_from_its_declaration_alone() {
    let providers = [
        AccountProvider::Sim,
        AccountProvider::AntiCaptcha,
        AccountProvider::CapSolver,
    ];
    let declared: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| !k.spec().declared_params().is_empty())
        .collect();
    assert!(declared.len() >= 7, "{declared:?}");
    let mut solved = 0;
    for provider in providers {
        let sim = SimServer::start(LATENCY, 8).await;
        let spec = match provider {
            AccountProvider::Sim => account("acct", &sim, 8),
            other => json_account("acct", other, &sim),
        };
        let gw = TestGateway::with(settings(vec![spec])).await;
        for kind in declared.iter().filter(|k| provider.solves(**k)) {
            let spec = kind.spec();
            let tag = format!("{provider:?}-{}", spec.name).to_ascii_lowercase();
            let form = inphp_form(spec, &format!("i-{tag}"), provider);
            let form: Vec<(&str, &str)> =
                form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let by_inphp = json!(solve_inphp(&gw, &form).await);
            let by_task = solve_task(&gw, task(spec, &format!("t-{tag}"), provider)).await;
            let mut verified = HashSet::new();
            for answer in [by_inphp, by_task] {
                if let Some(token) = credential(spec, &answer) {
                    // A reusable answer (a Cloudflare clearance is the host's) is shared by both
                    // callers of its target: verified once.
                    if spec.reuse == Reuse::Reusable && !verified.insert(token.clone()) {
                        solved += 1;
                        continue;
                    }
                    let verdict = sim.verify(&gw.http, &token).await;
                    assert_eq!(verdict["success"], true, "{tag}: {answer}: {verdict}");
                }
                solved += 1;
            }
        }
    }
    // Every declared kind through the simulator's account, both protocols, and more through the
    // `createTask` accounts.
    assert!(solved > 2 * declared.len(), "{solved}");
}
