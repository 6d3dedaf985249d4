//! A caller of the JSON task protocol: which provider's client it is, and the replies that
//! client expects, with exactly the fields its provider documents (docs/PROTOCOL.md item 17).
//!
//! Strict clients build their reply objects from the documented fields and refuse any other:
//! `python3-capsolver` fails on any key CapSolver does not document (`cost`, `solveCount`), and
//! `python3-anticaptcha` on a `status` in a `createTask` reply or a `taskId` in a
//! `getTaskResult` one. So CapSolver callers and anti-captcha callers cannot share one shape.
//! 2captcha's v2 API documents anti-captcha's fields, so its callers get anti-captcha's shape.

use axum::http::{HeaderMap, header};
use serde_json::{Map, Value, json};

use super::names::{TaskApiDialect, capsolver_spelling};
use super::reply::{error_body, solution, task_id_value};
use crate::model::{Answer, Kind};

/// What a request says about its sender beyond its body.
#[derive(Debug, Clone, Default)]
pub struct Hints {
    /// The `Host` the caller addressed (a gateway may be reached under a provider's name).
    pub host: Option<String>,
    /// The official `capsolver` package sends `X-capsolver-Client-User-Agent` on every call.
    pub capsolver_sdk: bool,
}

impl Hints {
    /// Read before the body is taken from the request.
    pub fn of(headers: &HeaderMap) -> Hints {
        Hints {
            host: headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_ascii_lowercase),
            capsolver_sdk: headers.contains_key("x-capsolver-client-user-agent"),
        }
    }
}

/// Which dialect's replies `body` (a `createTask`, `getTaskResult`, `getBalance` or report
/// body) should get. Anti-captcha's when nothing says otherwise: every known client of
/// anti-captcha's and 2captcha's shape reads it, and it is the protocol's original form.
pub fn dialect_of(hints: &Hints, body: &Map<String, Value>) -> TaskApiDialect {
    if hints.capsolver_sdk || body.contains_key("appId") {
        return TaskApiDialect::CapSolver;
    }
    let host = hints.host.as_deref().unwrap_or_default();
    if host.contains("capsolver") {
        return TaskApiDialect::CapSolver;
    }
    if host.contains("2captcha") {
        return TaskApiDialect::TwoCaptchaV2;
    }
    if host.contains("anti-captcha") {
        return TaskApiDialect::AntiCaptcha;
    }
    // CapSolver callers are given their task ids as strings (CapSolver's are UUIDs); the
    // other dialects' ids are numbers, and their clients send them back as numbers.
    if body.get("taskId").is_some_and(Value::is_string) {
        return TaskApiDialect::CapSolver;
    }
    let type_name = body
        .get("task")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str);
    if type_name.is_some_and(capsolver_spelling) {
        return TaskApiDialect::CapSolver;
    }
    TaskApiDialect::AntiCaptcha
}

/// A task id as `dialect` carries it: a string for CapSolver, a number where it fits for the
/// others (their clients may do arithmetic on it).
pub fn id_value(dialect: TaskApiDialect, id: &str) -> Value {
    match dialect {
        TaskApiDialect::CapSolver => Value::from(id),
        TaskApiDialect::AntiCaptcha | TaskApiDialect::TwoCaptchaV2 => task_id_value(id),
    }
}

/// `createTask` accepted the task. CapSolver's has `status` (its client reads it at once, as
/// CapSolver may answer some tasks in the same reply); anti-captcha's must not.
pub fn created(dialect: TaskApiDialect, id: &str) -> Value {
    match dialect {
        TaskApiDialect::CapSolver => {
            json!({"errorId": 0, "taskId": id_value(dialect, id), "status": "idle"})
        }
        TaskApiDialect::AntiCaptcha | TaskApiDialect::TwoCaptchaV2 => {
            json!({"errorId": 0, "taskId": id_value(dialect, id)})
        }
    }
}

/// `getTaskResult` while the task runs.
pub fn processing(dialect: TaskApiDialect, id: &str) -> Value {
    match dialect {
        TaskApiDialect::CapSolver => {
            json!({"errorId": 0, "taskId": id_value(dialect, id), "status": "processing"})
        }
        TaskApiDialect::AntiCaptcha | TaskApiDialect::TwoCaptchaV2 => {
            json!({"errorId": 0, "status": "processing"})
        }
    }
}

/// A finished task as `getTaskResult` reports it.
#[derive(Debug, Clone, Copy)]
pub struct Finished<'a> {
    pub kind: Kind,
    pub answer: &'a Answer,
    /// What the task cost, as a decimal string (anti-captcha and 2captcha document a string).
    pub cost: &'a str,
    /// The address of the worker that solved it.
    pub ip: &'a str,
    /// Seconds since the epoch.
    pub created_s: u64,
    pub ended_s: u64,
}

/// `getTaskResult` with the answer. Anti-captcha and 2captcha add what the task cost, where and
/// when it ran.
pub fn ready(dialect: TaskApiDialect, id: &str, done: Finished<'_>) -> Value {
    let mut solution = solution(done.kind, done.answer, dialect);
    // The solution object carries every dialect's keys, as anti-captcha's and 2captcha's callers
    // cannot be told apart; a reCAPTCHA `token` is 2captcha's alone, never CapSolver's.
    if dialect == TaskApiDialect::CapSolver
        && matches!(done.kind, Kind::RecaptchaV2 | Kind::RecaptchaV3)
        && let Value::Object(map) = &mut solution
    {
        map.remove("token");
    }
    match dialect {
        TaskApiDialect::CapSolver => json!({
            "errorId": 0,
            "taskId": id_value(dialect, id),
            "status": "ready",
            "solution": solution,
        }),
        TaskApiDialect::AntiCaptcha | TaskApiDialect::TwoCaptchaV2 => json!({
            "errorId": 0,
            "status": "ready",
            "solution": solution,
            "cost": done.cost,
            "ip": done.ip,
            "createTime": done.created_s,
            "endTime": done.ended_s,
            "solveCount": 1,
        }),
    }
}

/// `getTaskResult` of a task that failed with `code`. CapSolver says `failed` with the task's
/// id, which its client waits for to stop polling; the others send the bare error.
pub fn failed(dialect: TaskApiDialect, id: &str, code: &str) -> Value {
    let mut body = error_body(code, None);
    if dialect == TaskApiDialect::CapSolver
        && let Value::Object(map) = &mut body
    {
        map.insert("taskId".into(), id_value(dialect, id));
        map.insert("status".into(), Value::from("failed"));
    }
    body
}

/// `getBalance`. CapSolver documents its credit packages beside the balance; the gateway sells
/// none, so the list is empty.
pub fn balance(dialect: TaskApiDialect, balance: serde_json::Number) -> Value {
    match dialect {
        TaskApiDialect::CapSolver => json!({"errorId": 0, "balance": balance, "packages": []}),
        TaskApiDialect::AntiCaptcha | TaskApiDialect::TwoCaptchaV2 => {
            json!({"errorId": 0, "balance": balance})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(map) => map,
            _ => unreachable!("an object literal"),
        }
    }

    fn keys(v: &Value) -> Vec<&str> {
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn the_caller_is_known_by_its_sdk_app_id_host_id_type_or_spelling() {
        let none = &Hints::default();
        let anti = body(json!({"clientKey": "k", "task": {"type": "RecaptchaV2TaskProxyless"}}));
        assert_eq!(dialect_of(none, &anti), TaskApiDialect::AntiCaptcha);
        let sdk = &Hints {
            capsolver_sdk: true,
            ..Hints::default()
        };
        assert_eq!(dialect_of(sdk, &anti), TaskApiDialect::CapSolver);
        let app = body(json!({"appId": "x", "task": {"type": "RecaptchaV2TaskProxyless"}}));
        assert_eq!(dialect_of(none, &app), TaskApiDialect::CapSolver);
        let spelled = body(json!({"task": {"type": "ReCaptchaV2TaskProxyLess"}}));
        assert_eq!(dialect_of(none, &spelled), TaskApiDialect::CapSolver);
        assert_eq!(
            dialect_of(none, &body(json!({"taskId": "17"}))),
            TaskApiDialect::CapSolver
        );
        assert_eq!(
            dialect_of(none, &body(json!({"taskId": 17}))),
            TaskApiDialect::AntiCaptcha
        );
        let host = |h: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, h.parse().unwrap());
            Hints::of(&headers)
        };
        let plain = body(json!({"clientKey": "k"}));
        assert_eq!(
            dialect_of(&host("API.2captcha.com"), &plain),
            TaskApiDialect::TwoCaptchaV2
        );
        assert_eq!(
            dialect_of(&host("api.capsolver.com:443"), &plain),
            TaskApiDialect::CapSolver
        );
        assert_eq!(
            dialect_of(&host("127.0.0.1:8080"), &plain),
            TaskApiDialect::AntiCaptcha
        );
    }

    #[test]
    fn each_dialect_gets_exactly_its_documented_fields() {
        let answer = Answer {
            text: "tok".into(),
            user_agent: None,
            solved_at: 1,
            expires_at: 2,
            upstream: None,
        };
        let done = Finished {
            kind: Kind::RecaptchaV2,
            answer: &answer,
            cost: "0",
            ip: "",
            created_s: 1,
            ended_s: 2,
        };
        let cap = TaskApiDialect::CapSolver;
        assert_eq!(keys(&created(cap, "7")), ["errorId", "status", "taskId"]);
        assert_eq!(created(cap, "7")["taskId"], "7");
        assert_eq!(
            keys(&ready(cap, "7", done)),
            ["errorId", "solution", "status", "taskId"]
        );
        assert_eq!(
            keys(&ready(cap, "7", done)["solution"]),
            ["gRecaptchaResponse"]
        );
        let other = &ready(TaskApiDialect::AntiCaptcha, "7", done)["solution"];
        assert_eq!(keys(other), ["gRecaptchaResponse", "token"]);
        assert_eq!(
            keys(&failed(cap, "7", "ERROR_CAPTCHA_UNSOLVABLE")),
            [
                "errorCode",
                "errorDescription",
                "errorId",
                "status",
                "taskId"
            ]
        );
        for other in [TaskApiDialect::AntiCaptcha, TaskApiDialect::TwoCaptchaV2] {
            assert_eq!(keys(&created(other, "7")), ["errorId", "taskId"]);
            assert_eq!(created(other, "7")["taskId"], 7);
            assert_eq!(keys(&processing(other, "7")), ["errorId", "status"]);
            assert_eq!(
                keys(&ready(other, "7", done)),
                [
                    "cost",
                    "createTime",
                    "endTime",
                    "errorId",
                    "ip",
                    "solution",
                    "solveCount",
                    "status"
                ]
            );
            assert_eq!(
                keys(&failed(other, "7", "ERROR_CAPTCHA_UNSOLVABLE")),
                ["errorCode", "errorDescription", "errorId"]
            );
            assert_eq!(keys(&balance(other, 1.into())), ["balance", "errorId"]);
        }
        assert_eq!(
            keys(&balance(cap, 1.into())),
            ["balance", "errorId", "packages"]
        );
    }
}
