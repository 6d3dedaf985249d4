//! The `/metrics` exposition: counters and histograms the request path feeds, then gauges read
//! at scrape time from their owners (admission, upstream accounts, the bounded per-target report).
//! Owns the metric names and label sets; does not own the figures it reads. Every series is
//! unique: per-target rows come already grouped by label, with `other` for the rest.

use std::fmt::Write as _;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::compat::Reply;
use crate::engine::{Handout, SolveError};
use crate::http::Admission;
use crate::model::Kind;
use crate::pools::PoolView;
use crate::upstream::Upstream;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CompatLabels {
    endpoint: &'static str,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SolveLabels {
    kind: &'static str,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// Counters and histograms fed by the request path; gauges for pools, admission and upstream
/// accounts are read at scrape time from their owners.
pub struct Metrics {
    registry: Registry,
    compat_requests: Family<CompatLabels, Counter>,
    solves: Family<SolveLabels, Counter>,
    solve_seconds: Family<KindLabels, Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("gateway");
        let compat_requests = Family::<CompatLabels, Counter>::default();
        registry.register(
            "compat_requests",
            "Compatible-API requests by endpoint and outcome code",
            compat_requests.clone(),
        );
        let solves = Family::<SolveLabels, Counter>::default();
        registry.register(
            "solves",
            "Synchronous solves by kind and outcome (pool, solved, shared, or an error code)",
            solves.clone(),
        );
        let solve_seconds = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            // 5 ms (pool hit) to ~5 min (slow reCAPTCHA).
            Histogram::new(exponential_buckets(0.005, 2.5, 14))
        });
        registry.register(
            "solve_duration_seconds",
            "Time from request to answer for synchronous solves",
            solve_seconds.clone(),
        );
        Self {
            registry,
            compat_requests,
            solves,
            solve_seconds,
        }
    }

    pub fn compat_request(&self, endpoint: &'static str, reply: &Reply) {
        self.compat_requests
            .get_or_create(&CompatLabels {
                endpoint,
                outcome: reply.outcome().to_owned(),
            })
            .inc();
    }

    pub fn solve_finished(&self, kind: Kind, result: &Result<Handout, SolveError>, took: Duration) {
        let outcome = match result {
            Ok(h) => h.source.as_str().to_owned(),
            Err(SolveError::Timeout) => "timeout".to_owned(),
            Err(e) => e.code().to_owned(),
        };
        self.solves
            .get_or_create(&SolveLabels {
                kind: kind.as_str(),
                outcome,
            })
            .inc();
        if result.is_ok() {
            self.solve_seconds
                .get_or_create(&KindLabels {
                    kind: kind.as_str(),
                })
                .observe(took.as_secs_f64());
        }
    }

    /// The OpenMetrics text: registered metrics plus gauges read now. `targets` must hold one
    /// row per label (`pools::bound` with `GroupBy::Label`), so every series is unique.
    pub fn render(
        &self,
        admission: &Admission,
        upstream: &Upstream,
        targets: &[PoolView],
    ) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        // `encode` ends with `# EOF`; the gauges below go before it.
        if let Some(stripped) = out.strip_suffix("# EOF\n") {
            out.truncate(stripped.len());
        }
        gauge(
            &mut out,
            "gateway_active_solves",
            "Solves and tasks this process holds",
            &[(String::new(), admission.active())],
        );
        gauge(
            &mut out,
            "gateway_max_concurrent",
            "Admission limit of this process",
            &[(String::new(), admission.max())],
        );
        gauge(
            &mut out,
            "gateway_running_limit",
            "Solves that may run now: below the admission limit while warming up (warmup_s)",
            &[(String::new(), admission.limit_now())],
        );
        upstream.write_metrics(&mut out);
        gauge(
            &mut out,
            "gateway_targets",
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
            "gateway_pool_size",
            "Ready answers pooled per target",
            &per_target(|f| f.figures.pooled),
        );
        let sizes: Vec<_> = targets
            .iter()
            .filter_map(|f| Some((label(f), u64::from(f.target_size?))))
            .collect();
        gauge(
            &mut out,
            "gateway_pool_target_size",
            "Size a configured pool is kept at (fixed, or auto from demand)",
            &sizes,
        );
        gauge(
            &mut out,
            "gateway_target_in_flight",
            "Upstream tasks in flight per target",
            &per_target(|f| f.figures.in_flight),
        );
        gauge(
            &mut out,
            "gateway_target_waiting",
            "Callers waiting per target",
            &per_target(|f| f.figures.waiting),
        );
        counter(
            &mut out,
            "gateway_pool_hits",
            "Callers served from the pool",
            &per_target(|f| f.figures.pool_hits),
        );
        counter(
            &mut out,
            "gateway_waits_served",
            "Callers served by an already running task",
            &per_target(|f| f.figures.waits_served),
        );
        counter(
            &mut out,
            "gateway_new_tasks",
            "Upstream tasks started (for callers, or refills)",
            &per_target(|f| f.figures.new_tasks),
        );
        counter(
            &mut out,
            "gateway_refills",
            "Upstream tasks started to fill a pool (part of new tasks)",
            &per_target(|f| f.figures.refills),
        );
        counter(
            &mut out,
            "gateway_target_arrivals",
            "Callers per target (pool hits + waits served + new tasks - refills)",
            &per_target(|f| f.arrivals),
        );
        counter(
            &mut out,
            "gateway_imported",
            "Answers imported into pools through this instance",
            &per_target(|f| f.imported),
        );
        counter(
            &mut out,
            "gateway_expired_unused",
            "Answers that expired before anyone took them (waste)",
            &per_target(|f| f.figures.expired_unused),
        );
        out.push_str("# EOF\n");
        out
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
