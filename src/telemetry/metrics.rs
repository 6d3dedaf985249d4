//! The `/metrics` registry (docs/API.md "Metrics"). Owns the prefix and the exposition; owns no
//! figure. Each owner (admission, engine, pools, upstream accounts, queue, tenants) registers its
//! own families and collectors at startup, so this module depends on none of them. Figures that need an async read (the store's per-target
//! counters, the queue's depth in Redis) are read by their owner's [`Refresh`] just before the
//! registry is encoded.

use std::sync::Arc;

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The one prefix of every family.
pub const PREFIX: &str = "captcha_gateway";

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: &'static str,
}

/// Reads figures that need I/O into its collector's cache, before each scrape.
#[async_trait]
pub trait Refresh: Send + Sync + 'static {
    async fn refresh(&self);
}

/// The registry every owner registers with, and the scrape that encodes it.
pub struct Metrics {
    registry: Registry,
    refreshers: Vec<Arc<dyn Refresh>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let build_info = Family::<VersionLabels, Gauge>::default();
        build_info
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "build_info",
            "Always 1, labelled with the running version",
            build_info,
        );
        Self {
            registry,
            refreshers: Vec::new(),
        }
    }

    /// Where owners register their families and collectors (at startup).
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// `refresh` runs before every scrape.
    pub fn refresh_before_scrape(&mut self, refresh: Arc<dyn Refresh>) {
        self.refreshers.push(refresh);
    }

    /// The OpenMetrics text of everything registered, figures read now.
    pub async fn render(&self) -> String {
        futures::future::join_all(self.refreshers.iter().map(|r| r.refresh())).await;
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            // Only a writer error fails, and a String never does; never serve half a scrape.
            out = "# EOF\n".to_owned();
        }
        out
    }
}
