//! The gateway in the test's own process, with its simulator, on free loopback ports.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use captcha_gateway::cli::ServeArgs;
use captcha_gateway::commands::serve::Gateway;
use captcha_gateway::config::{self, Settings};
use captcha_gateway::model::Kind;
use captcha_gateway::provider::AccountProvider;
use captcha_gateway::shutdown::Shutdown;
use captcha_gateway::sim::LatencyRange;
use serde_json::Value;

use crate::support::{KEY, verify_at};

/// Settings for a fast gateway on `--provider sim`: solves take 50-150 ms and the poller checks
/// every 25 ms, so a test's solves finish in well under a second.
pub fn fast_settings() -> Settings {
    let args = ServeArgs {
        listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        provider: Some(AccountProvider::Sim),
        ..ServeArgs::default()
    };
    let mut settings = config::load_serve(&args, &|_| None).expect("test settings are valid");
    for kind in Kind::ALL {
        settings.sim.latency.insert(
            kind,
            LatencyRange {
                min: Duration::from_millis(50),
                max: Duration::from_millis(150),
            },
        );
    }
    settings.poll.first_check = Some(Duration::from_millis(25));
    settings.poll.interval = Duration::from_millis(25);
    settings.poll.max_requests_per_second = 1000.0;
    // Tests measure behaviour, not a fresh process's slow start (tests/it/nginx covers that).
    settings.warmup = Duration::ZERO;
    settings
}

/// A gateway started in this process on `--provider sim`, and a client for it.
pub struct TestGateway {
    /// The running gateway: its address, its simulator, its engine.
    pub gateway: Gateway,
    /// A client for the test's requests to it.
    pub http: reqwest::Client,
}

impl TestGateway {
    /// A gateway on [`fast_settings`].
    pub async fn start() -> Self {
        Self::with(fast_settings()).await
    }

    /// A gateway on `settings`.
    pub async fn with(settings: Settings) -> Self {
        let gateway = Gateway::start(settings, Shutdown::new())
            .await
            .expect("gateway starts");
        Self {
            gateway,
            http: reqwest::Client::new(),
        }
    }

    /// `path` on the gateway (`""` for its base URL).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.gateway.addr, path)
    }

    /// `path` on its simulator's own listener.
    pub fn sim_url(&self, path: &str) -> String {
        let (_, addr) = self
            .gateway
            .simulator
            .as_ref()
            .expect("tests run on --provider sim");
        format!("http://{addr}{path}")
    }

    /// A GET: status and body.
    pub async fn get_text(&self, path_and_query: &str) -> (u16, String) {
        let res = self
            .http
            .get(self.url(path_and_query))
            .send()
            .await
            .expect("gateway answers");
        (res.status().as_u16(), res.text().await.expect("a body"))
    }

    /// A form POST: status and body.
    pub async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> (u16, String) {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let res = self
            .http
            .post(self.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .expect("gateway answers");
        (res.status().as_u16(), res.text().await.expect("a body"))
    }

    /// A JSON POST (the `createTask` family): the reply, which that family always sends as
    /// JSON.
    pub async fn post_json(&self, path: &str, body: &Value) -> Value {
        let res = self.http.post(self.url(path)).json(body).send().await;
        let res = res.expect("gateway answers");
        res.json().await.expect("a JSON reply")
    }

    /// The simulator's `/stats`.
    pub async fn sim_stats(&self) -> HashMap<String, Value> {
        self.http
            .get(self.sim_url("/stats"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// One figure of the simulator's `/stats`.
    pub async fn stat(&self, name: &str) -> u64 {
        self.sim_stats()
            .await
            .get(name)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("simulator stat {name}"))
    }

    /// The simulator's verdict on a token: `Ok(())` when valid now and never used before.
    pub async fn verify(&self, token: &str) -> Result<(), String> {
        let v = self.verify_json(token).await;
        if v["success"] == Value::Bool(true) {
            Ok(())
        } else {
            Err(v["error-codes"].to_string())
        }
    }

    /// The simulator's whole `/verify` answer (kind, solved_at, age_ms).
    pub async fn verify_json(&self, token: &str) -> Value {
        verify_at(&self.http, &self.sim_url(""), token).await
    }

    /// Submits through `in.php` (JSON mode), waits for the task to end, reads `res.php`.
    pub async fn solve_compat(&self, form: &[(&str, &str)]) -> Value {
        let mut form = form.to_vec();
        form.push(("json", "1"));
        form.push(("key", KEY));
        let (_, body) = self.post_form("/in.php", &form).await;
        let submitted: Value = serde_json::from_str(&body).expect("in.php answers JSON");
        assert_eq!(submitted["status"], 1, "submit failed: {body}");
        let id = submitted["request"].as_str().expect("string id").to_owned();
        self.wait_task(&id).await;
        let (_, body) = self
            .get_text(&format!("/res.php?key={KEY}&action=get&json=1&id={id}"))
            .await;
        serde_json::from_str(&body).expect("res.php answers JSON")
    }

    /// Blocks on the native long-poll until task `id` (of tenant `KEY`) has ended.
    pub async fn wait_task(&self, id: &str) -> Value {
        let v: Value = self
            .http
            .get(self.url(&format!("/v1/tasks/{id}?wait=60")))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_ne!(
            v["status"], "pending",
            "task {id} still pending after the long-poll: {v}"
        );
        v
    }
}
