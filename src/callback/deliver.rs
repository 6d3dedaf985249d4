//! Sending one callback: an HTTP client whose every connection goes through a resolver that
//! drops addresses a callback may not reach, so the address checked is the address connected to.
//! Attempts are bounded in time, number and concurrency.

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde_json::Value;

use super::{CallbackSettings, CallbackUrl, Callbacks, address};

/// What a callback carries, in the caller's protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// `application/x-www-form-urlencoded` pairs (2captcha pingback: `id`, `code`).
    Form(Vec<(String, String)>),
    /// A JSON document (native API: the task as `GET /v1/tasks/{id}` shows it).
    Json(Value),
}

/// Why a delivery did not happen. Never carries the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    #[error("{0} resolves to no address a callback may reach")]
    Refused(String),
    #[error("the receiver answered HTTP {0}")]
    Status(u16),
    #[error("delivery failed: {0}")]
    Transport(String),
    #[error("the HTTP client could not be built: {0}")]
    Client(String),
}

impl DeliveryError {
    /// Whether another attempt could succeed: a refused address or a receiver that says the
    /// request is wrong will say so again.
    fn retryable(&self) -> bool {
        match self {
            DeliveryError::Transport(_) => true,
            DeliveryError::Status(s) => *s >= 500 || *s == 408 || *s == 429,
            DeliveryError::Refused(_) | DeliveryError::Client(_) => false,
        }
    }
}

/// The resolver refusal, found again in reqwest's error chain.
#[derive(Debug)]
struct NoDeliverableAddress(String);

impl std::fmt::Display for NoDeliverableAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} resolves to no deliverable address", self.0)
    }
}

impl StdError for NoDeliverableAddress {}

/// Resolves with the system resolver, then keeps only the deliverable addresses.
struct CheckedResolver {
    allowed: Arc<Vec<IpNet>>,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allowed = self.allowed.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| address::deliverable(a.ip(), &allowed))
                .collect();
            if kept.is_empty() {
                return Err(Box::new(NoDeliverableAddress(host)) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// The delivery client: checked resolution, no redirects (a redirect could point anywhere), no
/// proxy from the environment, no idle connections kept, a whole-attempt timeout.
pub(super) fn client(settings: &CallbackSettings) -> Result<reqwest::Client, DeliveryError> {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(CheckedResolver {
            allowed: Arc::new(settings.allow_networks.clone()),
        }))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .pool_max_idle_per_host(0)
        .connect_timeout(settings.timeout)
        .timeout(settings.timeout)
        .user_agent(concat!("captcha-gateway/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| DeliveryError::Client(e.without_url().to_string()))
}

/// Wait before attempt `n + 1` (n from 1): 1 s, 2 s, 4 s, ... at most 30 s.
fn backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.saturating_sub(1).min(5)).min(Duration::from_secs(30))
}

impl Callbacks {
    /// Delivers `payload` to `url`: up to `attempts` tries, each within `timeout`, at most
    /// `max_concurrent` deliveries sending at once. Gives up early on shutdown.
    pub async fn deliver(&self, url: &CallbackUrl, payload: &Payload) -> Result<(), DeliveryError> {
        let attempts = self.settings.attempts.max(1);
        let mut last = DeliveryError::Transport("not attempted".into());
        for attempt in 1..=attempts {
            if attempt > 1 {
                tokio::select! {
                    _ = self.shutdown.cancelled() => return Err(last),
                    _ = tokio::time::sleep(backoff(attempt - 1)) => {}
                }
            }
            let result = {
                let Ok(_permit) = self.permits.acquire().await else {
                    return Err(last);
                };
                self.send_once(url, payload).await
            };
            match result {
                Ok(()) => return Ok(()),
                Err(e) if e.retryable() => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    async fn send_once(&self, url: &CallbackUrl, payload: &Payload) -> Result<(), DeliveryError> {
        // The resolver is not asked about IP literals: check them here.
        let literal = match url.url.host() {
            Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
            _ => None,
        };
        if let Some(ip) = literal {
            if !address::deliverable(ip, &self.settings.allow_networks) {
                return Err(DeliveryError::Refused(ip.to_string()));
            }
        }
        let request = self.client.post(url.url.clone());
        let request = match payload {
            Payload::Form(pairs) => request.form(pairs),
            Payload::Json(v) => request.json(v),
        };
        let response = request.send().await.map_err(|e| {
            let mut source: Option<&(dyn StdError + 'static)> = Some(&e);
            while let Some(err) = source {
                if let Some(refused) = err.downcast_ref::<NoDeliverableAddress>() {
                    return DeliveryError::Refused(refused.0.clone());
                }
                source = err.source();
            }
            DeliveryError::Transport(e.without_url().to_string())
        })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(DeliveryError::Status(status.as_u16()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn only_transient_failures_are_retried() {
        assert!(DeliveryError::Transport("reset".into()).retryable());
        assert!(DeliveryError::Status(503).retryable());
        assert!(DeliveryError::Status(429).retryable());
        assert!(!DeliveryError::Status(404).retryable());
        assert!(!DeliveryError::Refused("localhost".into()).retryable());
    }
}
