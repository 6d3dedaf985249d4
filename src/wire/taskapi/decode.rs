//! A JSON task as a [`SolveRequest`]. Every value is checked for its JSON type and range before
//! it is used: callers send `0`, `false`, `""` and `null` for "not set" (the anti-captcha client
//! sends `"comment": false` and `"minLength": 0`), so those read as absent; anything else of the
//! wrong type is refused with a message naming the field. Lengths are checked by
//! `SolveRequest::validate`, as for every other protocol.

use std::cell::RefCell;

use serde_json::{Map, Value};

use super::names::{ProxyUse, Shape, shape_of};
use super::reply::{TASK_ABSENT, TASK_NOT_SUPPORTED};
use crate::model::{
    Kind, Passthrough, Proxy, ProxyType, RecaptchaVersion, SolveRequest, TaskParams, Validation,
    limits,
};
use crate::wire::inphp::codes;

/// The fields of a `createTask` body that are the call's own rather than the task's: the key,
/// the caller's software id (anti-captcha's `softId`, CapSolver's `appId`: the gateway's
/// accounts send none of the caller's), and the callback, which the HTTP layer reads.
const OWN: [&str; 5] = ["clientKey", "task", "softId", "appId", "callbackUrl"];

/// Reads a whole `createTask` body: its task, and the fields a kind carries beside it
/// (`languagePool`). Any other field of the body is refused by name unless it is empty.
pub fn decode_create(body: &Map<String, Value>) -> Result<SolveRequest, Validation> {
    let beside = Fields::new(body);
    let req = decode(body.get("task"), Some(&beside))?;
    beside.refuse_unread(req.kind(), |name| OWN.contains(&name))?;
    Ok(req)
}

/// Reads the `task` object of a `createTask` body, without the fields beside it.
pub fn decode_task(task: Option<&Value>) -> Result<SolveRequest, Validation> {
    decode(task, None)
}

fn decode(task: Option<&Value>, beside: Option<&Fields<'_>>) -> Result<SolveRequest, Validation> {
    let Some(Value::Object(task)) = task else {
        return Err(Validation::new(TASK_ABSENT, "`task` must be an object"));
    };
    let t = Fields::new(task);
    let type_name = t
        .string("type")?
        .ok_or_else(|| Validation::new(TASK_ABSENT, "`task.type` is missing"))?;
    // A type no declaration names is kept as sent: a pass-through task (kind `other`),
    // forwarded whole to a `createTask` account.
    let Some((mut shape, proxy_use)) = shape_of(&type_name) else {
        if !Passthrough::well_named(&type_name) {
            let shown: String = type_name.chars().take(60).collect();
            return Err(Validation::new(
                TASK_NOT_SUPPORTED,
                format!("task type `{shown}` is not supported"),
            ));
        }
        let req = SolveRequest::new(TaskParams::Passthrough(Passthrough::TaskApi {
            task: task.clone(),
        }));
        req.validate()?;
        return Ok(req);
    };
    // A name two kinds share, told apart by a marker field (anti-captcha asks for a
    // `cf_clearance` cookie through its Turnstile type). The field is read only where its value
    // is the marker's, so any other value is refused by name rather than dropped.
    let marked = |field: &str, value: &str| {
        t.0.get(field)
            .and_then(Value::as_str)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case(value))
    };
    if let Some((kind, field)) = Kind::marked_task_name(&type_name, marked) {
        t.get(field);
        shape = Shape::Declared(kind);
    }
    // A name two kinds share (GeeTest v3's and v4's): the task says which it is. A `version`
    // that is no number is left to the kind's own reading to refuse.
    let version =
        t.0.get("version")
            .and_then(|v| v.as_u64().or_else(|| v.as_str()?.trim().parse().ok()))
            .and_then(|v| u32::try_from(v).ok());
    let has = |name: &str| t.0.get(name).is_some_and(|v| !is_empty(v));
    if let Some(kind) = Kind::sharing_task_name(shape.kind(), &type_name, version, has) {
        shape = Shape::Declared(kind);
    }
    let params = match shape {
        Shape::RecaptchaV2 { enterprise } | Shape::RecaptchaV3 { enterprise } => {
            let version = if matches!(shape, Shape::RecaptchaV3 { .. }) {
                RecaptchaVersion::V3
            } else {
                RecaptchaVersion::V2
            };
            let min_score = match version {
                RecaptchaVersion::V3 => t.number_text("minScore")?,
                RecaptchaVersion::V2 => None,
            };
            if let Some(score) = &min_score {
                limits::check_min_score(score)?;
            }
            TaskParams::Recaptcha {
                sitekey: t.required("websiteKey", codes::GOOGLEKEY)?,
                pageurl: t.required("websiteURL", codes::PAGEURL)?,
                version,
                // Read whatever the name says, so a redundant `isEnterprise` is understood.
                enterprise: t.flag("isEnterprise")? || enterprise,
                invisible: t.flag("isInvisible")?,
                action: t.string("pageAction")?,
                min_score,
                data_s: match t.string("recaptchaDataSValue")? {
                    Some(s) => Some(s),
                    None => t.enterprise_s()?,
                },
                domain: t.string("apiDomain")?,
            }
        }
        Shape::Declared(kind) => {
            check_version(kind, &type_name, &t)?;
            declared::params(kind, &t, beside)?
        }
    };
    let mut req = SolveRequest::new(params);
    if proxy_use == ProxyUse::Proxied {
        req.proxy = Some(proxy(&t)?);
    }
    req.user_agent = t.string("userAgent")?;
    req.cookies = t.string("cookies")?;
    // Every field of the task was read above, or is the type's name.
    t.refuse_unread(req.kind(), |name| name == "type")?;
    req.validate()?;
    Ok(req)
}

/// A type two kinds share by `version` (GeeTest's): a version neither is, refused by its
/// number rather than read as the first.
fn check_version(kind: Kind, type_name: &str, t: &Fields<'_>) -> Result<(), Validation> {
    let Some(own) = kind.spec().task_version else {
        return Ok(());
    };
    match t.whole("version", u32::from(u8::MAX))? {
        Some(sent) if sent != u32::from(own) => {
            let versions: Vec<String> = Kind::ALL
                .into_iter()
                .filter(|k| {
                    let names = k.spec().task_names.iter();
                    names
                        .clone()
                        .any(|n| n.name.eq_ignore_ascii_case(type_name.trim()))
                })
                .filter_map(|k| k.spec().task_version.map(|v| v.to_string()))
                .collect();
            Err(Validation::new(
                TASK_NOT_SUPPORTED,
                format!(
                    "`version` {sent} is not supported for this type (versions: {})",
                    versions.join(", ")
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// A `taskId` as sent: a whole number (anti-captcha, 2captcha) or a string (CapSolver). Only
/// digit strings can name a gateway task, so anything else is `None`.
pub fn task_id_from(value: Option<&Value>) -> Option<String> {
    let id = match value? {
        Value::Number(n) => n.as_u64()?.to_string(),
        Value::String(s) => s.trim().to_owned(),
        _ => return None,
    };
    let plain = !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit());
    plain.then_some(id)
}

/// Typed reads of one task object, each field's name noted as it is read, so the fields no
/// reading understood can be told (`refuse_unread`).
struct Fields<'a>(&'a Map<String, Value>, RefCell<Vec<&'static str>>);

impl<'a> Fields<'a> {
    fn new(map: &'a Map<String, Value>) -> Self {
        Fields(map, RefCell::new(Vec::new()))
    }

    fn get(&self, name: &'static str) -> Option<&'a Value> {
        self.1.borrow_mut().push(name);
        self.0.get(name)
    }

    /// Refuses, by name, the first field that is neither read nor `known` nor empty (`null`,
    /// `""`, `false`, `0`, `{}`, `[]`: how clients leave a field unset), so nothing a caller
    /// sends is dropped unseen. A proxy field on a type without the caller's proxy is told so.
    fn refuse_unread(&self, kind: Kind, known: impl Fn(&str) -> bool) -> Result<(), Validation> {
        let read = self.1.borrow();
        let unread = self.0.iter().find(|(name, value)| {
            !read.contains(&name.as_str()) && !known(name) && !is_empty(value)
        });
        let Some((name, _)) = unread else {
            return Ok(());
        };
        let shown: String = name.chars().take(40).collect();
        let why = if PROXY_FIELDS.contains(&name.as_str()) {
            "a proxyless type does not carry the caller's proxy; send the type without `Proxyless`"
        } else {
            "this gateway does not pass it on"
        };
        Err(bad(format!("`{shown}` is not supported for {kind}: {why}")))
    }

    /// A text value; `null`, `false` and `""` read as absent, numbers as their digits.
    fn string(&self, name: &'static str) -> Result<Option<String>, Validation> {
        match self.get(name) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(bad(format!("`{name}` must be a string"))),
        }
    }

    fn required(&self, name: &'static str, code: &'static str) -> Result<String, Validation> {
        self.string(name)?
            .ok_or_else(|| Validation::new(code, format!("`{name}` is missing")))
    }

    /// `true`/`false`, `1`/`0` or their strings.
    fn flag(&self, name: &'static str) -> Result<bool, Validation> {
        match self.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::Number(n)) if n.as_u64() == Some(0) => Ok(false),
            Some(Value::Number(n)) if n.as_u64() == Some(1) => Ok(true),
            Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "" | "0" | "false" => Ok(false),
                "1" | "true" => Ok(true),
                _ => Err(bad(format!("`{name}` must be true or false"))),
            },
            Some(_) => Err(bad(format!("`{name}` must be true or false"))),
        }
    }

    /// A whole number from 0 to `max` (also as a digit string); `0`, `false` and `null` read as
    /// absent, which is how clients say "no limit".
    fn whole(&self, name: &'static str, max: u32) -> Result<Option<u32>, Validation> {
        let out_of_range = || bad(format!("`{name}` must be a whole number from 0 to {max}"));
        let n = match self.get(name) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => return Ok(None),
            Some(Value::Number(n)) => n.as_u64().ok_or_else(out_of_range)?,
            Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
            Some(Value::String(s)) => s.trim().parse::<u64>().map_err(|_| out_of_range())?,
            Some(_) => return Err(out_of_range()),
        };
        let n = u32::try_from(n)
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(out_of_range)?;
        Ok((n != 0).then_some(n))
    }

    /// A decimal number kept as its text (`minScore`), so targets compare exactly as sent.
    fn number_text(&self, name: &'static str) -> Result<Option<String>, Validation> {
        match self.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
            Some(_) => Err(bad(format!("`{name}` must be a number"))),
        }
    }

    /// anti-captcha's `enterprisePayload: {"s": "..."}`, the Enterprise form of `data-s`. Any
    /// other key is refused by name: it would change the answer, and no protocol upstream
    /// carries it yet, so passing the rest on would drop it silently.
    fn enterprise_s(&self) -> Result<Option<String>, Validation> {
        match self.get("enterprisePayload") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(payload)) => {
                if let Some(other) = payload.keys().find(|k| k.as_str() != "s") {
                    let shown: String = other.chars().take(40).collect();
                    return Err(bad(format!(
                        "`enterprisePayload.{shown}` is not supported: only `s` is passed on"
                    )));
                }
                Fields::new(payload).string("s")
            }
            Some(_) => Err(bad("`enterprisePayload` must be an object".into())),
        }
    }
}

/// Fields every task type may carry besides its own: the proxy's (read only for a type that
/// takes the caller's proxy).
const PROXY_FIELDS: [&str; 6] = [
    "proxyType",
    "proxyAddress",
    "proxyPort",
    "proxyLogin",
    "proxyPassword",
    "proxy",
];

/// How clients leave a field unset.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.trim().is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Bool(true) => false,
    }
}

fn bad(message: String) -> Validation {
    Validation::new(codes::BAD_PARAMETERS, message)
}

/// The caller's proxy: anti-captcha's split fields, or CapSolver's one `proxy` string
/// (`host:port`, `host:port:user:pass`, `type:host:port[:user:pass]`, `type://user:pass@host:port`).
fn proxy(t: &Fields<'_>) -> Result<Proxy, Validation> {
    let refuse = |why: &str| Validation::new(codes::BAD_PROXY, why.to_owned());
    if let Some(line) = t.string("proxy")? {
        return parse_proxy_line(&line).ok_or_else(|| {
            refuse("`proxy` must be host:port, host:port:user:pass or type://user:pass@host:port")
        });
    }
    let kind = match t.string("proxyType")? {
        None => ProxyType::Http,
        Some(s) => ProxyType::parse(&s)
            .ok_or_else(|| refuse("`proxyType` must be http, https, socks4 or socks5"))?,
    };
    let host = t
        .string("proxyAddress")?
        .ok_or_else(|| refuse("this task type needs `proxyAddress` and `proxyPort`"))?;
    let port = t
        .whole("proxyPort", u32::from(u16::MAX))
        .map_err(|_| refuse("`proxyPort` must be from 1 to 65535"))?
        .ok_or_else(|| refuse("`proxyPort` must be from 1 to 65535"))?;
    let login = t.string("proxyLogin")?;
    let password = t.string("proxyPassword")?;
    build_proxy(
        kind,
        &host,
        &port.to_string(),
        login.as_deref(),
        password.as_deref(),
    )
    .ok_or_else(|| refuse("proxy host, login or password has characters a proxy cannot carry"))
}

fn parse_proxy_line(line: &str) -> Option<Proxy> {
    let (kind, rest) = match line.split_once("://") {
        Some((scheme, rest)) => (ProxyType::parse(scheme)?, rest),
        None => match line.split_once(':') {
            Some((scheme, rest)) if ProxyType::parse(scheme).is_some() => {
                (ProxyType::parse(scheme)?, rest)
            }
            _ => (ProxyType::Http, line),
        },
    };
    if let Some((user_pass, host_port)) = rest.rsplit_once('@') {
        let (user, pass) = user_pass.split_once(':')?;
        let (host, port) = host_port.rsplit_once(':')?;
        return build_proxy(kind, host, port, Some(user), Some(pass));
    }
    let parts: Vec<&str> = rest.split(':').collect();
    match parts.as_slice() {
        [host, port] => build_proxy(kind, host, port, None, None),
        [host, port, user, pass] => build_proxy(kind, host, port, Some(user), Some(pass)),
        _ => None,
    }
}

/// `user:pass@host:port` from parts, refusing what would make that form ambiguous.
fn build_proxy(
    kind: ProxyType,
    host: &str,
    port: &str,
    login: Option<&str>,
    password: Option<&str>,
) -> Option<Proxy> {
    let port: u16 = port.trim().parse().ok().filter(|p| *p != 0)?;
    let plain = |s: &str| !s.is_empty() && !s.contains(['@', '/', ' ', '\t', '\r', '\n']);
    if !plain(host) || host.contains(':') {
        return None;
    }
    let address = match (login, password) {
        (Some(user), Some(pass)) if plain(user) && !user.contains(':') && plain(pass) => {
            format!("{user}:{pass}@{host}:{port}")
        }
        (None, None) => format!("{host}:{port}"),
        _ => return None,
    };
    Some(Proxy { kind, address })
}

mod declared;
#[cfg(test)]
mod tests;
