//! Per-tenant `/metrics` families, labelled with the tenant's name (never a key). One series per
//! configured tenant, `--gateway-key` tenant and the open-mode entry: a set fixed at startup.
//!
//! Built from the tenants' own counters at scrape time and spliced into the gateway's exposition
//! before its `# EOF`, so the families live here rather than in `telemetry`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Tenants;

const EOF: &str = "# EOF\n";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    tenant: String,
    /// `admitted`, or the limit that refused: `kinds`, `max_concurrent`, `max_solves_per_hour`.
    result: &'static str,
}

/// The tenant families as OpenMetrics text, without the closing `# EOF`.
pub fn render(tenants: &Tenants) -> String {
    let mut registry = Registry::with_prefix(crate::telemetry::metrics::PREFIX);
    let requests = Family::<OutcomeLabels, Counter>::default();
    let in_flight = Family::<TenantLabels, Gauge>::default();
    let last_hour = Family::<TenantLabels, Gauge>::default();
    for usage in tenants.all_usage() {
        let tenant = || TenantLabels {
            tenant: usage.tenant.clone(),
        };
        let outcomes = [
            ("admitted", usage.admitted_total),
            ("kinds", usage.refused_total.kinds),
            ("max_concurrent", usage.refused_total.max_concurrent),
            (
                "max_solves_per_hour",
                usage.refused_total.max_solves_per_hour,
            ),
        ];
        for (result, n) in outcomes {
            requests
                .get_or_create(&OutcomeLabels {
                    tenant: usage.tenant.clone(),
                    result,
                })
                .inc_by(n);
        }
        in_flight
            .get_or_create(&tenant())
            .set(i64::try_from(usage.in_flight).unwrap_or(i64::MAX));
        last_hour
            .get_or_create(&tenant())
            .set(i64::try_from(usage.solves_last_hour).unwrap_or(i64::MAX));
    }
    registry.register(
        "tenant_requests",
        "Solve and task requests per tenant: admitted, or the tenant limit that refused them",
        requests,
    );
    registry.register(
        "tenant_in_flight",
        "Solves and tasks each tenant holds in this process",
        in_flight,
    );
    registry.register(
        "tenant_solves_last_hour",
        "Solves each tenant started in this process in the last hour (counted by the minute)",
        last_hour,
    );
    let mut out = String::new();
    if encode(&mut out, &registry).is_err() {
        return String::new();
    }
    out.strip_suffix(EOF).map(str::to_owned).unwrap_or(out)
}

/// `exposition` (ending in `# EOF`) with the tenant families inserted before its end.
pub fn splice(mut exposition: String, tenants: &Tenants) -> String {
    if exposition.ends_with(EOF) {
        exposition.truncate(exposition.len() - EOF.len());
    }
    exposition.push_str(&render(tenants));
    exposition.push_str(EOF);
    exposition
}
