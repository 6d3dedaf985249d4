//! A real Prometheus server (the Debian `prometheus` package's binary, next to promtool) that
//! scrapes test processes and evaluates the shipped alert rules every second, so the
//! dashboard's queries and the rules run on the server they are written for. Scrapes every 5 s
//! with a 5 s timeout: with Redis gone a gateway's `/metrics` takes its Redis timeouts (about
//! 1.6 s measured) to answer, and a shorter timeout would count it as down instead.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::support::eventually::eventually;
use crate::support::redis::free_port;

pub struct Prometheus {
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
    pub base: String,
    http: reqwest::Client,
}

impl Prometheus {
    /// Scrapes `jobs` (job name, `host:port` targets) and loads `rules`; with `ops_key`, every
    /// scrape sends it as `Authorization: Bearer`, read from a file as deploy/prometheus does.
    pub async fn start(
        jobs: &[(&str, Vec<String>)],
        rules: &Path,
        ops_key: Option<&str>,
    ) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let authorization = match ops_key {
            Some(key) => {
                let file = dir.path().join("ops-key");
                std::fs::write(&file, format!("{key}\n")).unwrap();
                format!(
                    "    authorization:\n      credentials_file: {}\n",
                    file.display()
                )
            }
            None => String::new(),
        };
        std::fs::copy(rules, dir.path().join("alerts.yml")).unwrap();
        let mut config = String::from(
            "global:\n  scrape_interval: 5s\n  scrape_timeout: 5s\n  evaluation_interval: 1s\n\
             rule_files:\n  - alerts.yml\nscrape_configs:\n",
        );
        for (job, targets) in jobs {
            let targets = serde_json::to_string(targets).unwrap();
            config.push_str(&format!(
                "  - job_name: {job}\n{authorization}    static_configs:\n      - targets: {targets}\n"
            ));
        }
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let port = free_port();
        let child = tokio::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("prometheus on PATH (scripts/test installs the prometheus package)");
        let prometheus = Prometheus {
            _child: child,
            _dir: dir,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        eventually(Duration::from_secs(30), "prometheus ready", || async {
            let ready = prometheus
                .http
                .get(format!("{}/-/ready", prometheus.base))
                .send()
                .await;
            ready.is_ok_and(|r| r.status().is_success())
        })
        .await;
        prometheus
    }

    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let res: Value = self
            .http
            .get(format!("{}/api/v1/{path}", self.base))
            .query(query)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(res["status"], "success", "{path} {query:?}: {res}");
        res["data"].clone()
    }

    /// The series an instant query returns now.
    pub async fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api("query", &[("query", expr)]).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// The values of `label` on series matching `selector` (what Grafana's `label_values` asks).
    pub async fn label_values(&self, selector: &str, label: &str) -> Vec<Value> {
        let data = self
            .api(&format!("label/{label}/values"), &[("match[]", selector)])
            .await;
        data.as_array().cloned().unwrap_or_default()
    }

    /// Active alerts (pending or firing): their labels.
    pub async fn alerts(&self) -> Vec<Value> {
        let data = self.api("alerts", &[]).await;
        let alerts = data["alerts"].as_array().cloned().unwrap_or_default();
        alerts.into_iter().map(|a| a["labels"].clone()).collect()
    }

    /// Every loaded rule: (name, health, lastError).
    pub async fn rules(&self) -> Vec<(String, String, String)> {
        let data = self.api("rules", &[]).await;
        let mut out = Vec::new();
        for group in data["groups"].as_array().cloned().unwrap_or_default() {
            for rule in group["rules"].as_array().cloned().unwrap_or_default() {
                let text = |f: &str| rule[f].as_str().unwrap_or_default().to_owned();
                out.push((text("name"), text("health"), text("lastError")));
            }
        }
        out
    }
}
