//! What the HTTP side owns on `/metrics` (docs/API.md "Metrics"): requests by API, endpoint and
//! outcome, and the admission gauges read at scrape time.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::engine::Admission;
use crate::telemetry::bounded::BoundedValues;
use crate::telemetry::collect::gauge;
use crate::wire::inphp::Reply;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    api: &'static str,
    endpoint: &'static str,
    outcome: String,
}

/// `captcha_gateway_requests_total`; clones share it.
#[derive(Clone, Debug, Default)]
pub struct RequestMetrics {
    requests: Family<RequestLabels, Counter>,
    outcomes: Arc<BoundedValues>,
}

impl RequestMetrics {
    /// One request of `api` (`compat`, `native`, `worker`) at `endpoint`, ended with `outcome`.
    pub fn request(&self, api: &'static str, endpoint: &'static str, outcome: &str) {
        self.requests
            .get_or_create(&RequestLabels {
                api,
                endpoint,
                outcome: self.outcomes.label(outcome),
            })
            .inc();
    }

    pub fn compat_request(&self, endpoint: &'static str, reply: &Reply) {
        self.request("compat", endpoint, reply.outcome());
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "requests",
            "Requests by API (compat, native, worker), endpoint and outcome (the compatible code, or the error code or ok)",
            self.requests.clone(),
        );
    }
}

/// The admission gauges, read at scrape time.
#[derive(Debug)]
pub struct AdmissionFigures(pub Arc<Admission>);

impl Collector for AdmissionFigures {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let a = &self.0;
        gauge(
            &mut encoder,
            "active_solves",
            "Solves and tasks this process holds",
            a.active(),
        )?;
        gauge(
            &mut encoder,
            "max_concurrent",
            "Admission limit of this process",
            a.max(),
        )?;
        gauge(
            &mut encoder,
            "running_limit",
            "Solves that may run now: below the admission limit while warming up (warmup_s)",
            a.limit_now(),
        )
    }
}
