//! The `/metrics` registry (docs/API.md "Metrics"). Owns the prefix, the exposition and the
//! shared shapes (delays by kind); owns no figure. Each owner (admission, engine, pools,
//! upstream accounts, queue, tenants) registers its own families and collectors at startup, so
//! this module depends on none of them. Figures that need an async read (the store's per-target
//! counters, the queue's depth in Redis) are read by their owner's [`Refresh`] just before the
//! registry is encoded.

use std::sync::Arc;

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::model::Kind;

/// The one prefix of every family.
pub const PREFIX: &str = "captcha_gateway";

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: &'static str,
}

/// Buckets for every delay by kind: 5 ms (a pool hit) to ~12 min (a slow reCAPTCHA).
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.5, 14))
}

/// A histogram of seconds per kind, shared by whoever observes it and the registry.
#[derive(Clone, Debug)]
pub struct KindSeconds(Family<KindLabels, Histogram>);

impl Default for KindSeconds {
    fn default() -> Self {
        Self(Family::new_with_constructor(seconds_histogram))
    }
}

impl KindSeconds {
    pub fn observe(&self, kind: Kind, seconds: f64) {
        self.0
            .get_or_create(&KindLabels {
                kind: kind.as_str(),
            })
            .observe(seconds);
    }

    /// Observes a duration given in milliseconds.
    pub fn observe_ms(&self, kind: Kind, ms: u64) {
        // Milliseconds to seconds: exact enough for any delay a token lives through.
        #[allow(clippy::cast_precision_loss)]
        self.observe(kind, ms as f64 / 1000.0);
    }

    pub fn family(&self) -> Family<KindLabels, Histogram> {
        self.0.clone()
    }
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
