//! The shipped NGINX config (deploy/nginx/captcha-gateway.conf) run by a real `nginx` (Debian
//! package) in front of three gateway processes on one Redis and one simulator. The test changes
//! only the lines the file marks `# address`, so what runs is the shipped file.

mod leaving;
mod scenarios;
mod warmup;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::KEY;
use crate::support::eventually::eventually;
use crate::support::redis::free_port;

const SHIPPED: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/nginx/captcha-gateway.conf"
));
const MARK: &str = "# address";

/// The shipped file with its `server` lines pointing at `gateways` (`host:port` and the
/// instance's `max_concurrent` for `max_conns`, in order) and its `listen` line at `listen`;
/// every other line as shipped.
pub fn shipped_with(gateways: &[(String, u64)], listen: &str) -> String {
    let mut next = gateways.iter();
    let mut out = String::new();
    for line in SHIPPED.lines() {
        let Some(directive) = line.strip_suffix(MARK) else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let indent = &line[..line.len() - line.trim_start().len()];
        let mut words = directive.split_whitespace();
        let edited = match words.next() {
            Some("server") => {
                let _shipped_address = words.next();
                let (address, max) = next.next().expect("as many gateways as server lines");
                let rest: Vec<String> = words
                    .map(|w| match w.strip_prefix("max_conns=") {
                        Some(_) => format!("max_conns={max};"),
                        None => w.to_owned(),
                    })
                    .collect();
                assert!(
                    rest.iter().any(|w| w.starts_with("max_conns=")),
                    "the shipped server line sets max_conns: {directive}"
                );
                format!("server {address} {}", rest.join(" "))
            }
            Some("listen") => format!("listen {listen};"),
            other => panic!("an address line that is neither server nor listen: {other:?}"),
        };
        out.push_str(&format!("{indent}{edited}  {MARK}\n"));
    }
    assert!(next.next().is_none(), "as many server lines as gateways");
    out
}

/// A private `nginx` (master and two workers) serving the shipped file on a free loopback port.
pub struct Nginx {
    child: Child,
    pub base: String,
    _dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts it in front of `gateways` (base URLs) and returns once it answers.
    pub async fn start(gateways: &[String]) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        // Each server's max_conns is the instance's own max_concurrent, as the file asks.
        let http = reqwest::Client::new();
        let mut addresses = Vec::new();
        for base in gateways {
            let health: Value = http
                .get(format!("{base}/health"))
                .send()
                .await
                .expect("the gateway answers /health")
                .json()
                .await
                .expect("JSON health");
            let max = health["max_concurrent"].as_u64().expect("max_concurrent");
            addresses.push((base.trim_start_matches("http://").to_owned(), max));
        }
        let listen = format!("127.0.0.1:{}", free_port());
        std::fs::write(
            dir.path().join("captcha-gateway.conf"),
            shipped_with(&addresses, &listen),
        )
        .unwrap();
        // The main context a distribution's nginx.conf would give: two workers (so the shared
        // zone matters), temp paths inside the prefix, the shipped file included in `http`.
        std::fs::write(
            dir.path().join("nginx.conf"),
            format!(
                "worker_processes 2;\nevents {{ worker_connections 1024; }}\nhttp {{\n\
                 access_log off;\nclient_body_temp_path {d}/body;\nproxy_temp_path {d}/proxy;\n\
                 fastcgi_temp_path {d}/fastcgi;\nuwsgi_temp_path {d}/uwsgi;\nscgi_temp_path {d}/scgi;\n\
                 include {d}/captcha-gateway.conf;\n}}\n"
            ),
        )
        .unwrap();
        let child = Command::new("/usr/sbin/nginx")
            .arg("-p")
            .arg(format!("{d}/"))
            .arg("-c")
            .arg(format!("{d}/nginx.conf"))
            .args(["-e", "stderr", "-g"])
            .arg(format!(
                "daemon off; pid {d}/nginx.pid; error_log stderr warn;"
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("nginx starts (scripts/test installs the Debian package)");
        let nginx = Nginx {
            child,
            base: format!("http://{listen}"),
            _dir: dir,
        };
        let url = format!("{}/livez", nginx.base);
        eventually(Duration::from_secs(20), "nginx to answer", || {
            let (http, url) = (http.clone(), url.clone());
            async move { matches!(http.get(url).send().await, Ok(r) if r.status() == 200) }
        })
        .await;
        nginx
    }
}

impl Drop for Nginx {
    /// SIGTERM: the master stops its workers before it exits (SIGKILL would leave them running).
    fn drop(&mut self) {
        let _ = Command::new("sh")
            .args(["-c", &format!("kill -TERM {}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// The outcome of one call through NGINX.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: Value,
}

impl Outcome {
    pub fn token(&self) -> Option<&str> {
        (self.status == 200)
            .then(|| self.body["token"].as_str())
            .flatten()
    }
}

/// One native `POST /v1/solve` for a target of its own (`n`): no call can be served by another's
/// solve, so upstream submits must equal calls. A transport error is status 0.
pub async fn solve(http: &reqwest::Client, base: &str, n: usize) -> Outcome {
    let body = json!({
        "kind": "recaptcha_v2",
        "sitekey": format!("6Le-nginx-{n}"),
        "pageurl": "https://example.com/login",
    });
    let res = http
        .post(format!("{base}/v1/solve"))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await;
    match res {
        Err(e) => Outcome {
            status: 0,
            retry_after: None,
            body: json!({"transport": e.to_string()}),
        },
        Ok(res) => Outcome {
            status: res.status().as_u16(),
            retry_after: res
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: res.json().await.unwrap_or(Value::Null),
        },
    }
}

/// `callers` concurrent callers taking call numbers `first..first + calls` from a shared
/// counter; `done` counts finished calls as they finish.
pub async fn run_calls(
    http: &reqwest::Client,
    base: &str,
    first: usize,
    calls: usize,
    callers: usize,
    done: Arc<AtomicUsize>,
) -> Vec<Outcome> {
    let next = Arc::new(AtomicUsize::new(first));
    let tasks = (0..callers).map(|_| {
        let (http, base, next, done) = (http.clone(), base.to_owned(), next.clone(), done.clone());
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::AcqRel);
                if n >= first + calls {
                    return outcomes;
                }
                outcomes.push(solve(&http, &base, n).await);
                done.fetch_add(1, Ordering::AcqRel);
            }
        })
    });
    let mut all = Vec::new();
    for task in futures::future::join_all(tasks).await {
        all.extend(task.unwrap());
    }
    all
}

/// Solves a gateway has finished, from its own `/metrics`.
pub async fn solves_at(http: &reqwest::Client, base: &str) -> u64 {
    crate::support::metric_sum(http, base, "captcha_gateway_answers_total").await
        + crate::support::metric_sum(http, base, "captcha_gateway_solve_errors_total").await
}

#[test]
fn the_test_changes_only_the_lines_marked_address() {
    let gateways = [
        ("127.0.0.1:1".to_owned(), 10),
        ("127.0.0.1:2".to_owned(), 20),
        ("127.0.0.1:3".to_owned(), 30),
    ];
    let edited = shipped_with(&gateways, "127.0.0.1:9");
    let (shipped, edited): (Vec<&str>, Vec<&str>) =
        (SHIPPED.lines().collect(), edited.lines().collect());
    assert_eq!(shipped.len(), edited.len());
    let changed: Vec<(&&str, &&str)> = shipped
        .iter()
        .zip(&edited)
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(
        changed.len(),
        4,
        "three servers and one listen: {changed:?}"
    );
    for (was, now) in changed {
        assert!(was.ends_with(MARK) && now.ends_with(MARK), "{was} -> {now}");
    }
    assert!(
        edited.iter().any(|l| l.trim()
            == "server 127.0.0.1:2 max_fails=3 fail_timeout=10s max_conns=20;  # address")
    );
    assert!(
        edited
            .iter()
            .any(|l| l.trim() == "listen 127.0.0.1:9;  # address")
    );
}
