//! The live status: the dashboard at `/` rendered by a real headless Chromium under
//! load and checked against `/metrics`; `GET /v1/status` adding up a Redis fleet; the
//! `captcha-gateway status` command.

mod browser;
mod cli;
mod fleet;
mod workers;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use captcha_gateway::model::TargetPolicy;
use captcha_gateway::pools::{PoolSpec, PoolTable, specs};
use serde_json::{Value, json};

use crate::support::{TestGateway, solve};

/// The configured pool's label and size.
pub const POOL_LABEL: &str = "recaptcha_v2:example.com";
pub const POOL_SIZE: u64 = 4;

pub fn pool() -> Vec<PoolSpec> {
    #[derive(serde::Deserialize)]
    struct File {
        pools: Vec<PoolTable>,
    }
    let file: File = toml::from_str(&format!(
        r#"[[pools]]
           kind = "recaptcha_v2"
           sitekey = "6Le-dash"
           pageurl = "https://example.com/login"
           size = {POOL_SIZE}"#
    ))
    .expect("test TOML parses");
    specs(&file.pools, TargetPolicy::default()).expect("test pool is valid")
}

/// Callers solving until stopped: the pooled target (pool hits), turnstile sites (solved), one
/// text question asked again and again (shared), and one caller whose deadline always passes.
pub struct Load {
    stop: Arc<AtomicBool>,
    /// Answers the callers got (their errors are the rest).
    pub answers: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub fn start(gw: &TestGateway, callers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(AtomicU64::new(0));
        let tasks = (0..callers)
            .map(|i| {
                let (stop, answers) = (stop.clone(), answers.clone());
                let (http, base) = (gw.http.clone(), gw.url(""));
                tokio::spawn(async move {
                    // The caller that always times out and the one served from the cache at
                    // once are paced (ten a second), so neither swamps the figures; the others
                    // go flat out.
                    let mut pace = tokio::time::interval(std::time::Duration::from_millis(100));
                    while !stop.load(Ordering::Relaxed) {
                        if i == 1 || i == 3 {
                            pace.tick().await;
                        }
                        let body = if i == 3 {
                            // A reusable answer: after the first solve, callers share it.
                            json!({"kind": "text", "text": "What is 2 + 2?"})
                        } else if i == 1 {
                            // A caller whose deadline no solve can meet: caller errors.
                            json!({"kind": "turnstile", "sitekey": "0x4AAA",
                                   "pageurl": "https://slow.example/", "timeout_s": 0.01})
                        } else if i % 2 == 0 {
                            json!({"kind": "recaptcha_v2", "sitekey": "6Le-dash",
                                   "pageurl": "https://example.com/login"})
                        } else {
                            json!({"kind": "turnstile", "sitekey": "0x4AAA",
                                   "pageurl": format!("https://shop{}.example/", i % 4)})
                        };
                        let (code, _) = solve(&http, &base, body).await;
                        if code == 200 {
                            answers.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            answers,
            tasks,
        }
    }

    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.expect("a caller task ends");
        }
    }
}

/// The operations key the browser test's gateway asks for; sent by every read here (a gateway
/// without one ignores it).
pub const OPS_KEY: &str = "ops-DashboardKey-0123456789";

pub async fn status(gw: &TestGateway) -> Value {
    ops_json(gw, "/v1/status").await
}

/// `GET /v1/advice` over the day the dashboard shows.
pub async fn advice(gw: &TestGateway) -> Value {
    ops_json(gw, "/v1/advice?window_s=86400").await
}

async fn ops_json(gw: &TestGateway, path: &str) -> Value {
    let res = gw
        .http
        .get(gw.url(path))
        .bearer_auth(OPS_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

/// One scrape of `/metrics`, kept as text.
pub struct Scrape(pub String);

impl Scrape {
    pub async fn take(gw: &TestGateway) -> Scrape {
        let res = gw
            .http
            .get(gw.url("/metrics"))
            .bearer_auth(OPS_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        Scrape(res.text().await.unwrap())
    }

    /// Sum of `name` over every label set whose labels contain `with` (`""`: all).
    pub fn sum(&self, name: &str, with: &str) -> u64 {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                let rest = &l[l.len().min(name.len())..];
                l.starts_with(name) && (rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter(|l| l.contains(with))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum()
    }
}
