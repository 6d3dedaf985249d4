//! `submit`'s settings: the queue's Redis and name, and the tasks, each checked with the native
//! API's own parser before anything is enqueued, so a bad line costs nothing and names itself.

use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use super::{ConfigError, FileConfig, bad, redis_settings};
use crate::cli::{ServeArgs, SubmitArgs};
use crate::redis_base::RedisTarget;

/// The largest task file line read: an image task's base64 body stays well inside it.
const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// One task to enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmitTask {
    /// A producer-chosen id; the queue makes one when absent.
    pub id: Option<String>,
    pub idempotency_key: Option<String>,
    /// A native API body (`kind` plus its parameters), already checked.
    pub request: Value,
}

#[derive(Debug, Clone)]
pub struct SubmitSettings {
    pub redis: RedisTarget,
    pub queue: String,
    pub tasks: Vec<SubmitTask>,
    pub timeout: Duration,
    pub wait: bool,
}

pub fn load_submit(args: &SubmitArgs) -> Result<SubmitSettings, ConfigError> {
    let serve_like = ServeArgs {
        redis_url: args.redis_url.clone(),
        redis_cluster: args.redis_cluster,
        ..ServeArgs::default()
    };
    let redis = redis_settings(&serve_like, &FileConfig::default())?.ok_or_else(|| {
        bad(
            "--redis-url",
            "is missing: the queue lives in Redis",
            "pass --redis-url redis://host:6379/0 or set REDIS_URL",
        )
    })?;
    let tasks = match (&args.file, &args.kind) {
        (Some(path), _) => read_tasks(path)?,
        (None, Some(kind)) => {
            let task = task_from_args(kind, &args.params)?;
            vec![task; args.count as usize]
        }
        (None, None) => {
            return Err(bad(
                "--file",
                "no tasks given",
                "pass --file tasks.jsonl (or - for stdin), or --kind K --param name=value ...",
            ));
        }
    };
    Ok(SubmitSettings {
        redis: redis.target,
        queue: {
            crate::queue::check_name("--queue", &args.queue)?;
            args.queue.clone()
        },
        tasks,
        timeout: Duration::from_secs(args.timeout_s),
        wait: !args.no_wait,
    })
}

fn task_from_args(kind: &str, params: &[String]) -> Result<SubmitTask, ConfigError> {
    let mut body = Map::new();
    body.insert("kind".into(), Value::String(kind.to_owned()));
    for param in params {
        let Some((name, value)) = param.split_once('=').filter(|(n, _)| !n.is_empty()) else {
            return Err(bad(
                "--param",
                format!("`{}` is not name=value", printable(param)),
                "write e.g. --param sitekey=6Le-demo --param pageurl=https://example.com/",
            ));
        };
        body.insert(name.to_owned(), Value::String(value.to_owned()));
    }
    let task = SubmitTask {
        id: None,
        idempotency_key: None,
        request: Value::Object(body),
    };
    check_task(&task).map_err(|code| {
        bad(
            "--param",
            format!("the task is refused as {code}"),
            "give the parameters the kind needs (docs/API.md, native API)",
        )
    })?;
    Ok(task)
}

fn read_tasks(path: &Path) -> Result<Vec<SubmitTask>, ConfigError> {
    let reader: Box<dyn BufRead> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path).map_err(|e| {
            bad(
                "--file",
                format!("cannot read {}: {e}", path.display()),
                "pass an existing JSON-lines file, or - for stdin",
            )
        })?;
        Box::new(std::io::BufReader::new(file))
    };
    let mut tasks = Vec::new();
    for (n, line) in reader.split(b'\n').enumerate() {
        let at = |problem: String| {
            bad(
                "--file",
                format!("line {}: {problem}", n + 1),
                "write one JSON object per line: a native API body, optionally with `id` and `idempotency_key`",
            )
        };
        let line = line.map_err(|e| at(format!("cannot be read: {e}")))?;
        if line.len() > MAX_LINE_BYTES {
            return Err(at(format!("longer than {MAX_LINE_BYTES} bytes")));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        tasks.push(parse_line(&line).map_err(at)?);
    }
    if tasks.is_empty() {
        return Err(bad(
            "--file",
            "holds no task",
            "write one JSON object per line",
        ));
    }
    Ok(tasks)
}

fn parse_line(line: &[u8]) -> Result<SubmitTask, String> {
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(line) else {
        return Err("not a JSON object".into());
    };
    let mut text_field = |name: &str| match body.remove(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("`{name}` must be a string")),
    };
    let id = text_field("id")?;
    let idempotency_key = text_field("idempotency_key")?;
    let task = SubmitTask {
        id,
        idempotency_key,
        request: Value::Object(body),
    };
    check_task(&task).map_err(|code| format!("the task is refused as {code}"))?;
    Ok(task)
}

/// What enqueueing this task would refuse (its request as `POST /v1/solve` would answer it, its
/// id and key), short of enqueueing it.
fn check_task(task: &SubmitTask) -> Result<(), String> {
    let new = crate::queue::NewTask {
        id: task.id.clone(),
        request: task.request.clone(),
        idem: task.idempotency_key.clone(),
        ..crate::queue::NewTask::default()
    };
    new.check().map_err(|e| match e {
        crate::queue::QueueError::Invalid(v) => v.code.to_string(),
        other => other.to_string(),
    })
}

/// A value as it may be echoed in a one-line error: control characters escaped, length bounded.
fn printable(s: &str) -> String {
    s.chars().take(80).flat_map(char::escape_debug).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> SubmitArgs {
        SubmitArgs {
            redis_url: Some(crate::secret::Secret("redis://127.0.0.1:6399/0".into())),
            queue: "captcha".into(),
            count: 1,
            timeout_s: 300,
            ..SubmitArgs::default()
        }
    }

    #[test]
    fn a_task_from_arguments_is_checked_and_repeated() {
        let mut a = args();
        a.kind = Some("recaptcha_v2".into());
        a.params = vec![
            "sitekey=6Le-demo".into(),
            "pageurl=https://example.com/login".into(),
        ];
        a.count = 3;
        let s = load_submit(&a).unwrap();
        assert_eq!(s.tasks.len(), 3);
        assert_eq!(s.tasks[0].request["sitekey"], "6Le-demo");

        a.params.pop();
        let e = load_submit(&a).unwrap_err();
        assert_eq!(e.setting, "--param");
        assert!(e.problem.contains("ERROR_PAGEURL"), "{e}");
        a.params = vec!["no-equals-sign\u{1b}[2J".into()];
        let e = load_submit(&a).unwrap_err().to_string();
        assert!(e.contains("\\u{1b}") && !e.contains('\u{1b}'), "{e}");
    }

    #[test]
    fn a_bad_line_is_named_by_its_number_before_anything_is_enqueued() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        std::fs::write(
            &path,
            concat!(
                r#"{"kind": "turnstile", "sitekey": "0x4A", "pageurl": "https://a.example/", "id": "t-1", "idempotency_key": "k1"}"#,
                "\n\n",
                r#"{"kind": "turnstile", "sitekey": "0x4A"}"#,
                "\n"
            ),
        )
        .unwrap();
        let mut a = args();
        a.file = Some(path.clone());
        let e = load_submit(&a).unwrap_err();
        assert_eq!(e.setting, "--file");
        assert!(e.problem.starts_with("line 3:"), "{e}");

        let first = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, first.lines().next().unwrap()).unwrap();
        let s = load_submit(&a).unwrap();
        assert_eq!(s.tasks.len(), 1);
        assert_eq!(s.tasks[0].id.as_deref(), Some("t-1"));
        assert_eq!(s.tasks[0].idempotency_key.as_deref(), Some("k1"));
        assert!(s.tasks[0].request.get("id").is_none());

        std::fs::write(
            &path,
            r#"{"kind": "turnstile", "sitekey": "0x4A", "pageurl": "https://a.example/", "id": "a{b}"}"#,
        )
        .unwrap();
        let e = load_submit(&a).unwrap_err();
        assert!(
            e.problem.contains("line 1") && e.problem.contains("bad_task_id"),
            "{e}"
        );

        std::fs::write(&path, r#"{"kind": "turnstile", "id": 5}"#).unwrap();
        assert!(
            load_submit(&a)
                .unwrap_err()
                .problem
                .contains("`id` must be a string")
        );
    }

    #[test]
    fn without_redis_submit_says_where_the_queue_lives() {
        let mut a = args();
        a.redis_url = None;
        a.kind = Some("turnstile".into());
        assert_eq!(load_submit(&a).unwrap_err().setting, "--redis-url");
    }
}
