//! Per-tenant `/metrics` families, labelled with the tenant's name (never a key). One series per
//! configured tenant, `--gateway-key` tenant and the open-mode entry: a set fixed at startup.
//! Read from the tenants' own counters at scrape time.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use super::Tenants;
use crate::telemetry::collect::{Label, counters, gauges};

struct TenantFigures(Arc<Tenants>);

impl fmt::Debug for TenantFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TenantFigures").finish_non_exhaustive()
    }
}

/// Registers the tenant families.
pub fn register(tenants: Arc<Tenants>, registry: &mut Registry) {
    registry.register_collector(Box::new(TenantFigures(tenants)));
}

impl Collector for TenantFigures {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let usage = self.0.all_usage();
        let tenant = |name: &str| -> Label { ("tenant", name.to_owned()) };
        counters(
            &mut encoder,
            "tenant_requests",
            "Solve and task requests per tenant: admitted, or the tenant limit that refused them",
            usage.iter().flat_map(|u| {
                [
                    ("admitted", u.admitted_total),
                    ("kinds", u.refused_total.kinds),
                    ("max_concurrent", u.refused_total.max_concurrent),
                    ("max_solves_per_hour", u.refused_total.max_solves_per_hour),
                ]
                .map(|(result, n)| {
                    let labels: [Label; 2] = [tenant(&u.tenant), ("result", result.to_owned())];
                    (labels, n)
                })
            }),
        )?;
        gauges(
            &mut encoder,
            "tenant_in_flight",
            "Solves and tasks each tenant holds in this process",
            usage.iter().map(|u| ([tenant(&u.tenant)], u.in_flight)),
        )?;
        gauges(
            &mut encoder,
            "tenant_solves_last_hour",
            "Solves each tenant started in this process in the last hour (counted by the minute)",
            usage
                .iter()
                .map(|u| ([tenant(&u.tenant)], u.solves_last_hour)),
        )
    }
}
