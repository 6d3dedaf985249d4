//! Test helpers: the gateway harness (`gateway`: in-process or the real binary), an HTTP
//! client, and readers for the simulator's `/stats` and `/verify` and a gateway's `/metrics`.

use serde_json::Value;

pub use gateway::{TestGateway, fast_settings};

/// A 32-character key, as clients such as the captchaai SDK require.
pub const KEY: &str = "0123456789abcdef0123456789abcdef";

pub mod certs;
pub use captcha_gateway::eventually;
pub mod fault_proxy;
pub mod fleet;
pub mod gateway;
pub mod host_crash;
pub mod redis;

/// An image task of `picture`, with no hints.
pub fn image_request(picture: &[u8]) -> captcha_gateway::model::SolveRequest {
    use base64::Engine as _;
    use captcha_gateway::model::{Kind, SolveRequest, TaskParams};
    let body = base64::engine::general_purpose::STANDARD.encode(picture);
    SolveRequest::new(TaskParams::declared_of(Kind::Image, &[("body", &body)]))
}

/// A simulator's `/verify` answer for `token`; `sim_base` is `http://host:port`.
pub async fn verify_at(http: &reqwest::Client, sim_base: &str, token: &str) -> Value {
    http.get(format!("{sim_base}/verify"))
        .query(&[("token", token)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Sum of one metric over its label sets, from a gateway's `/metrics`.
pub async fn metric_sum(http: &reqwest::Client, base: &str, name: &str) -> u64 {
    metric_sum_where(http, base, name, &[]).await
}

/// Sum of one metric over the label sets that hold every one of `labels` (`key="value"`).
pub async fn metric_sum_where(
    http: &reqwest::Client,
    base: &str,
    name: &str,
    labels: &[&str],
) -> u64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with(name)
                && (l[name.len()..].starts_with('{') || l[name.len()..].starts_with(' '))
        })
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// One native `POST /v1/solve` with the test key: the status and the JSON body (null if none).
pub async fn solve(http: &reqwest::Client, base: &str, body: Value) -> (u16, Value) {
    let res = http
        .post(format!("{base}/v1/solve"))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("the gateway answers /v1/solve: {e}"));
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}
