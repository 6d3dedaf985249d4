//! A [`SolveRequest`] as one flavor's JSON task: the inverse of `decode_task`, which a test
//! checks for every kind and flavor.

use serde_json::{Map, Value, json};

use super::names::{ProxyUse, Shape, TaskApiDialect, name_for};
use crate::model::{
    Check, Param, Passthrough, Proxy, ProxyName, RecaptchaVersion, SolveRequest, TaskParams,
};

/// A request the flavor has no task type for (text questions at anti-captcha or CapSolver,
/// GeeTest with the caller's proxy at CapSolver).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flavor} has no task type for {kind}")]
pub struct Unsupported {
    pub flavor: &'static str,
    pub kind: &'static str,
}

/// The fields of the `createTask` request beside the task for `req` (`languagePool`): each
/// declared so, also written inside the task, where anti-captcha's own clients put it.
pub fn beside_task(flavor: TaskApiDialect, req: &SolveRequest) -> Map<String, Value> {
    let TaskParams::Declared { kind, values } = &req.params else {
        return Map::new();
    };
    let beside = kind
        .spec()
        .declared_params()
        .iter()
        .filter(|p| p.beside_task);
    beside
        .filter_map(|param| {
            let (_, value) = values.iter().find(|(n, _)| *n == param.name)?;
            Some((
                param.task_field(flavor.dialect()).to_owned(),
                Value::from(value.as_str()),
            ))
        })
        .collect()
}

/// The `task` object for `req` in `flavor`'s dialect.
pub fn encode_task(flavor: TaskApiDialect, req: &SolveRequest) -> Result<Value, Unsupported> {
    let mut task = Map::new();
    let mut put = |name: &str, value: Value| {
        task.insert(name.to_owned(), value);
    };
    let text = |s: &String| Value::String(s.clone());
    let shape = match &req.params {
        // As the caller sent it; an `in.php` one never reaches a `createTask` account.
        TaskParams::Passthrough(Passthrough::TaskApi { task }) => {
            return Ok(Value::Object(task.clone()));
        }
        TaskParams::Passthrough(Passthrough::InPhp { .. }) => {
            return Err(Unsupported {
                flavor: flavor.as_str(),
                kind: req.kind().as_str(),
            });
        }
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
            put("websiteURL", text(pageurl));
            put("websiteKey", text(sitekey));
            if *invisible {
                put("isInvisible", Value::Bool(true));
            }
            if let Some(action) = action {
                put("pageAction", text(action));
            }
            if let Some(score) = min_score {
                // Kept as sent; `validate` checked it is a number from 0 to 1.
                let number = score
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64);
                put(
                    "minScore",
                    number.map_or_else(|| text(score), Value::Number),
                );
            }
            if let Some(s) = data_s {
                if *enterprise {
                    put("enterprisePayload", json!({ "s": s }));
                } else {
                    put("recaptchaDataSValue", text(s));
                }
            }
            if let Some(domain) = domain {
                put("apiDomain", text(domain));
            }
            match version {
                RecaptchaVersion::V2 => Shape::RecaptchaV2 {
                    enterprise: *enterprise,
                },
                RecaptchaVersion::V3 => {
                    if *enterprise {
                        put("isEnterprise", Value::Bool(true));
                    }
                    Shape::RecaptchaV3 {
                        enterprise: *enterprise,
                    }
                }
            }
        }
        TaskParams::Declared { kind, values } => {
            // Object fields that carry declared values inside them (`enterprisePayload`).
            let mut objects: Map<String, Value> = Map::new();
            for param in kind.spec().declared_params() {
                let Some((_, value)) = values.iter().find(|(n, _)| *n == param.name) else {
                    continue;
                };
                // Routing sends such a task to `in.php` accounts only; never drop it here.
                if !param.in_task_api() {
                    return Err(Unsupported {
                        flavor: flavor.as_str(),
                        kind: req.kind().as_str(),
                    });
                }
                let value = match param.check {
                    Check::Flag => Value::Bool(true),
                    // An object travels as its JSON text (FunCaptcha's `data`).
                    Check::Text
                    | Check::Page
                    | Check::Key
                    | Check::Object
                    | Check::Image
                    | Check::OneOf(_) => text(value),
                    // Validated as a whole number; 2captcha's `minClicks` is an integer.
                    Check::Count(_) => value
                        .parse::<u32>()
                        .map_or_else(|_| text(value), Value::from),
                };
                match Param::split_field(param.task_field(flavor.dialect())) {
                    (outer, Some(inner)) => {
                        if let Value::Object(object) =
                            objects.entry(outer).or_insert_with(|| json!({}))
                        {
                            object.insert(inner.to_owned(), value);
                        }
                    }
                    (field, None) => put(field, value),
                }
            }
            for (outer, object) in objects {
                put(&outer, object);
            }
            if let Some(version) = kind.spec().task_version {
                if flavor != TaskApiDialect::CapSolver {
                    put("version", Value::from(version));
                }
            }
            Shape::Declared(*kind)
        }
    };
    // A kind with one name either way (images, text questions) never goes through the
    // caller's proxy: it has no proxy fields.
    let never_proxied = req
        .kind()
        .spec()
        .task_names
        .iter()
        .all(|n| n.proxy == ProxyName::Either);
    let proxy_use = match &req.proxy {
        _ if never_proxied => ProxyUse::Proxyless,
        None => ProxyUse::Proxyless,
        Some(proxy) => {
            put_proxy(flavor, proxy, &mut put);
            ProxyUse::Proxied
        }
    };
    if let Some(ua) = &req.user_agent {
        put("userAgent", text(ua));
    }
    if let Some(cookies) = &req.cookies {
        put("cookies", text(cookies));
    }
    let name = name_for(flavor, shape, proxy_use).ok_or(Unsupported {
        flavor: flavor.as_str(),
        kind: req.kind().as_str(),
    })?;
    put("type", Value::from(name.name));
    if let Some((field, value)) = name.marker {
        put(field, Value::from(value));
    }
    Ok(Value::Object(task))
}

fn put_proxy(flavor: TaskApiDialect, proxy: &Proxy, put: &mut impl FnMut(&str, Value)) {
    let scheme = proxy.kind.as_str().to_ascii_lowercase();
    let (credentials, endpoint) = match proxy.address.rsplit_once('@') {
        Some((creds, endpoint)) => (Some(creds), endpoint),
        None => (None, proxy.address.as_str()),
    };
    let (host, port) = endpoint.rsplit_once(':').unwrap_or((endpoint, "0"));
    if flavor == TaskApiDialect::CapSolver {
        // CapSolver's `type:host:port:user:pass`; a password with a `:` in it only fits the
        // URL form, `type://user:pass@host:port`.
        let line = match credentials {
            None => format!("{scheme}:{host}:{port}"),
            Some(creds) if creds.matches(':').count() == 1 => {
                format!("{scheme}:{host}:{port}:{creds}")
            }
            Some(_) => format!("{scheme}://{}", proxy.address),
        };
        put("proxy", Value::from(line));
        return;
    }
    put("proxyType", Value::from(scheme));
    put("proxyAddress", Value::from(host));
    put("proxyPort", Value::from(port.parse::<u16>().unwrap_or(0)));
    if let Some((login, password)) = credentials.and_then(|c| c.split_once(':')) {
        put("proxyLogin", Value::from(login));
        put("proxyPassword", Value::from(password));
    }
}
