//! The `/metrics` exposition: counters and histograms the request path feeds, then gauges read
//! at scrape time from their owners (admission, upstream accounts, the bounded per-target report).
//! Owns the metric names and label sets; does not own the figures it reads. Every series is
//! unique: per-target rows come already grouped by label, with `other` for the rest.

use std::fmt::Write as _;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::compat::Reply;
use crate::engine::EngineMetrics;
use crate::http::Admission;
use crate::model::Kind;
use crate::pools::PoolView;
use crate::upstream::Upstream;

/// The one prefix of every family (docs/API.md "Metrics").
pub const PREFIX: &str = "captcha_gateway";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    api: &'static str,
    endpoint: &'static str,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
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

/// Counters and histograms fed by the request path; gauges for pools, admission and upstream
/// accounts are read at scrape time from their owners.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests by API (compat, native, worker), endpoint and outcome (the compatible code, or the error code or ok)",
            requests.clone(),
        );
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
        Self { registry, requests }
    }

    /// One request of `api` (`compat`, `native`, `worker`) at `endpoint`, ended with `outcome`.
    pub fn request(&self, api: &'static str, endpoint: &'static str, outcome: &str) {
        self.requests
            .get_or_create(&RequestLabels {
                api,
                endpoint,
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    pub fn compat_request(&self, endpoint: &'static str, reply: &Reply) {
        self.request("compat", endpoint, reply.outcome());
    }

    /// The OpenMetrics text: registered metrics plus gauges read now. `targets` must hold one
    /// row per label (`pools::bound` with `GroupBy::Label`), so every series is unique.
    pub fn render(
        &self,
        admission: &Admission,
        upstream: &Upstream,
        targets: &[PoolView],
        store: StoreUp,
        engine: &EngineMetrics,
    ) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        // `encode` ends with `# EOF`; the gauges below go before it.
        if let Some(stripped) = out.strip_suffix("# EOF\n") {
            out.truncate(stripped.len());
        }
        encode_families(&mut out, |r| engine.register(r));
        gauge(
            &mut out,
            "captcha_gateway_active_solves",
            "Solves and tasks this process holds",
            &[(String::new(), admission.active())],
        );
        gauge(
            &mut out,
            "captcha_gateway_max_concurrent",
            "Admission limit of this process",
            &[(String::new(), admission.max())],
        );
        gauge(
            &mut out,
            "captcha_gateway_running_limit",
            "Solves that may run now: below the admission limit while warming up (warmup_s)",
            &[(String::new(), admission.limit_now())],
        );
        gauge(
            &mut out,
            "captcha_gateway_store_up",
            "1 while the store answers (memory: always), 0 while it is unreachable",
            &[(format!("store=\"{}\"", store.store), u64::from(store.up))],
        );
        upstream.write_metrics(&mut out);
        gauge(
            &mut out,
            "captcha_gateway_targets",
            "Targets with live state (configured pools included); idle ones are retired",
            &[(
                String::new(),
                targets.iter().map(|v| v.targets.unwrap_or(1)).sum(),
            )],
        );
        let label = |f: &PoolView| format!("target=\"{}\"", escape(&f.figures.label));
        let per_target = |pick: fn(&PoolView) -> u64| {
            targets
                .iter()
                .map(|f| (label(f), pick(f)))
                .collect::<Vec<_>>()
        };
        gauge(
            &mut out,
            "captcha_gateway_pool_ready",
            "Ready answers pooled per target",
            &per_target(|f| f.figures.pooled),
        );
        let sizes: Vec<_> = targets
            .iter()
            .filter_map(|f| Some((label(f), u64::from(f.target_size?))))
            .collect();
        gauge(
            &mut out,
            "captcha_gateway_pool_target",
            "Size a configured pool is kept at (fixed, or auto from demand)",
            &sizes,
        );
        gauge(
            &mut out,
            "captcha_gateway_target_in_flight",
            "Upstream tasks in flight per target",
            &per_target(|f| f.figures.in_flight),
        );
        gauge(
            &mut out,
            "captcha_gateway_target_waiting",
            "Callers waiting per target",
            &per_target(|f| f.figures.waiting),
        );
        counter(
            &mut out,
            "captcha_gateway_pool_hits",
            "Callers served from the pool",
            &per_target(|f| f.figures.pool_hits),
        );
        counter(
            &mut out,
            "captcha_gateway_waits_served",
            "Callers served by an already running task",
            &per_target(|f| f.figures.waits_served),
        );
        counter(
            &mut out,
            "captcha_gateway_new_tasks",
            "Upstream tasks started (for callers, or refills)",
            &per_target(|f| f.figures.new_tasks),
        );
        counter(
            &mut out,
            "captcha_gateway_refills",
            "Upstream tasks started to fill a pool (part of new tasks)",
            &per_target(|f| f.figures.refills),
        );
        counter(
            &mut out,
            "captcha_gateway_target_arrivals",
            "Callers per target (pool hits + waits served + new tasks - refills)",
            &per_target(|f| f.arrivals),
        );
        counter(
            &mut out,
            "captcha_gateway_imported",
            "Answers imported into pools through this instance",
            &per_target(|f| f.imported),
        );
        counter(
            &mut out,
            "captcha_gateway_pool_expired_unused",
            "Answers that expired before anyone took them (waste)",
            &per_target(|f| f.figures.expired_unused),
        );
        out.push_str("# EOF\n");
        out
    }
}

/// Appends the families `register` registers, as OpenMetrics text without `# EOF`.
pub(crate) fn encode_families(out: &mut String, register: impl FnOnce(&mut Registry)) {
    let mut registry = Registry::with_prefix(PREFIX);
    register(&mut registry);
    let mut text = String::new();
    if encode(&mut text, &registry).is_ok() {
        out.push_str(text.strip_suffix("# EOF\n").unwrap_or(&text));
    }
}

/// The store's availability for `captcha_gateway_store_up`.
#[derive(Debug, Clone, Copy)]
pub struct StoreUp {
    /// `memory` or `redis`.
    pub store: &'static str,
    pub up: bool,
}

/// Writes one gauge family of real numbers; `samples` are (label set without braces, value).
pub(crate) fn gauge_f64(out: &mut String, name: &str, help: &str, samples: &[(String, f64)]) {
    if samples.is_empty() {
        return;
    }
    let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} gauge");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// Writes one gauge family; `samples` are (label set without braces, value).
pub(crate) fn gauge(out: &mut String, name: &str, help: &str, samples: &[(String, u64)]) {
    family(out, name, help, "gauge", "", samples);
}

/// Writes one counter family (OpenMetrics: the samples carry `_total`).
pub(crate) fn counter(out: &mut String, name: &str, help: &str, samples: &[(String, u64)]) {
    family(out, name, help, "counter", "_total", samples);
}

fn family(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    suffix: &str,
    samples: &[(String, u64)],
) {
    if samples.is_empty() {
        return;
    }
    let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name}{suffix} {value}");
        } else {
            let _ = writeln!(out, "{name}{suffix}{{{labels}}} {value}");
        }
    }
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
