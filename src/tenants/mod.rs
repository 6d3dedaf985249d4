//! Tenants (`[[tenants]]`): who may ask for which kinds, how much at once and per hour, whether
//! their targets are shared with other tenants, and what each has used.
//!
//! Owns: the checked tenant settings ([`spec`]), the per-tenant limits and usage counters kept in
//! this process, and their `/metrics` families ([`metrics`]). Does not own: recognising a key
//! (`http::auth` maps keys to tenant names) or answering in a protocol (`http::usage`).
//!
//! Limits are per gateway process: a fleet of N instances behind a balancer lets a tenant hold up
//! to N times its limits (docs/CONFIGURATION.md says so). Each `--gateway-key` key is a tenant of
//! its own without limits; callers of a gateway without keys share one unlimited entry, so the
//! number of entries is fixed at startup and never grows with traffic.

pub mod metrics;
pub mod spec;
mod window;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

pub use spec::{KeyDigest, PoolMode, TenantSpec, TenantTable, specs};
use window::HourWindow;

use crate::model::{Kind, SolveRequest};

/// The usage entry of callers of a gateway without keys (open mode, loopback only).
pub const OPEN_TENANT: &str = "open";

/// Why a tenant's request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    KindNotAllowed { kind: Kind, allowed: Vec<Kind> },
    MaxConcurrent { limit: u64 },
    MaxSolvesPerHour { limit: u64, retry_after_s: u64 },
}

impl Refusal {
    /// The `[[tenants]]` setting that refused, as a metric label and an error code stem.
    pub fn limit_name(&self) -> &'static str {
        match self {
            Refusal::KindNotAllowed { .. } => "kinds",
            Refusal::MaxConcurrent { .. } => "max_concurrent",
            Refusal::MaxSolvesPerHour { .. } => "max_solves_per_hour",
        }
    }

    /// One sentence naming the limit, for callers.
    pub fn message(&self) -> String {
        match self {
            Refusal::KindNotAllowed { kind, allowed } => {
                let allowed: Vec<&str> = allowed.iter().map(|k| k.as_str()).collect();
                format!(
                    "kind `{kind}` is not allowed for this key (allowed: {})",
                    allowed.join(", ")
                )
            }
            Refusal::MaxConcurrent { limit } => format!(
                "tenant limit max_concurrent reached: {limit} solves already running for this key; retry when one ends"
            ),
            Refusal::MaxSolvesPerHour {
                limit,
                retry_after_s,
            } => format!(
                "tenant limit max_solves_per_hour reached: {limit} solves in the last hour for this key; retry in {retry_after_s} s"
            ),
        }
    }
}

/// Counters of one tenant in this process.
#[derive(Debug, Default)]
struct Counters {
    admitted: AtomicU64,
    refused_kind: AtomicU64,
    refused_concurrent: AtomicU64,
    refused_hourly: AtomicU64,
}

/// One tenant's limits and usage.
#[derive(Debug)]
struct Entry {
    name: String,
    /// `None` for `--gateway-key` tenants and open mode: no limits.
    spec: Option<TenantSpec>,
    in_flight: AtomicU64,
    hour: Mutex<HourWindow>,
    counters: Counters,
}

impl Entry {
    fn new(name: String, spec: Option<TenantSpec>) -> Arc<Self> {
        Arc::new(Self {
            name,
            spec,
            in_flight: AtomicU64::new(0),
            hour: Mutex::default(),
            counters: Counters::default(),
        })
    }

    fn hour(&self) -> std::sync::MutexGuard<'_, HourWindow> {
        // The window is plain data: a panic elsewhere cannot leave it half-updated.
        self.hour.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Held while an admitted solve or task runs; counts it in the tenant's in-flight figure.
#[derive(Debug)]
pub struct TenantPass {
    entry: Arc<Entry>,
}

impl Drop for TenantPass {
    fn drop(&mut self) {
        self.entry.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Every tenant's limits and usage, fixed at startup.
#[derive(Debug)]
pub struct Tenants {
    by_name: HashMap<String, Arc<Entry>>,
    /// Keyless callers and any name not configured (none, once keys are set).
    open: Arc<Entry>,
}

/// A tenant's figures, for `GET /v1/usage`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Usage {
    pub tenant: String,
    /// `None` when the tenant has no limits (a `--gateway-key` key, or open mode).
    pub limits: Option<UsageLimits>,
    pub pools: &'static str,
    pub in_flight: u64,
    pub solves_last_hour: u64,
    pub admitted_total: u64,
    pub refused_total: RefusedTotals,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct UsageLimits {
    pub max_concurrent: Option<u64>,
    pub max_solves_per_hour: Option<u64>,
    /// `None`: every kind.
    pub kinds: Option<BTreeSet<Kind>>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RefusedTotals {
    pub kinds: u64,
    pub max_concurrent: u64,
    pub max_solves_per_hour: u64,
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Tenants {
    /// `gateway_tenants` are the names `http::auth` gives the `--gateway-key` keys.
    pub fn new(specs: &[TenantSpec], gateway_tenants: impl IntoIterator<Item = String>) -> Self {
        let mut by_name: HashMap<String, Arc<Entry>> = gateway_tenants
            .into_iter()
            .map(|name| (name.clone(), Entry::new(name, None)))
            .collect();
        for spec in specs {
            by_name.insert(
                spec.name.clone(),
                Entry::new(spec.name.clone(), Some(spec.clone())),
            );
        }
        Self {
            by_name,
            open: Entry::new(OPEN_TENANT.to_owned(), None),
        }
    }

    fn entry(&self, tenant: &str) -> &Arc<Entry> {
        self.by_name.get(tenant).unwrap_or(&self.open)
    }

    /// Admits one solve or task of `tenant` under its limits, at the current time. An isolated
    /// tenant's request is marked as its own, so its target is its own.
    pub fn admit(&self, tenant: &str, req: &mut SolveRequest) -> Result<TenantPass, Refusal> {
        self.admit_at(tenant, req, now_s())
    }

    fn admit_at(
        &self,
        tenant: &str,
        req: &mut SolveRequest,
        now_s: u64,
    ) -> Result<TenantPass, Refusal> {
        let entry = self.entry(tenant);
        let counters = &entry.counters;
        let spec = entry.spec.as_ref();
        let kind = req.kind();
        if let Some(allowed) = spec.and_then(|s| s.kinds.as_ref()) {
            if !allowed.contains(&kind) {
                counters.refused_kind.fetch_add(1, Ordering::Relaxed);
                return Err(Refusal::KindNotAllowed {
                    kind,
                    allowed: allowed.iter().copied().collect(),
                });
            }
        }
        // Raised before it is compared, so two racing requests cannot both take the last slot;
        // and taken before the hour's budget, so a refusal here costs none of it.
        let pass = TenantPass {
            entry: entry.clone(),
        };
        let running = entry.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(limit) = spec.and_then(|s| s.max_concurrent) {
            if running > limit {
                drop(pass);
                counters.refused_concurrent.fetch_add(1, Ordering::Relaxed);
                return Err(Refusal::MaxConcurrent { limit });
            }
        }
        // Unlimited tenants are counted too, for their usage figures.
        let hourly = spec.and_then(|s| s.max_solves_per_hour);
        if let Err(retry_after_s) = entry.hour().try_take(now_s, hourly.unwrap_or(u64::MAX)) {
            drop(pass);
            counters.refused_hourly.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal::MaxSolvesPerHour {
                limit: hourly.unwrap_or(u64::MAX),
                retry_after_s,
            });
        }
        if let Some(spec) = spec.filter(|s| s.pools == PoolMode::Isolated) {
            req.partition = Some(spec.name.clone());
        }
        counters.admitted.fetch_add(1, Ordering::Relaxed);
        Ok(pass)
    }

    /// `(max_concurrent, in flight)` of a tenant with a concurrency limit.
    pub fn concurrency(&self, tenant: &str) -> Option<(u64, u64)> {
        let entry = self.entry(tenant);
        let limit = entry.spec.as_ref()?.max_concurrent?;
        Some((limit, entry.in_flight.load(Ordering::Acquire)))
    }

    /// The figures of `tenant` as of now.
    pub fn usage(&self, tenant: &str) -> Usage {
        Self::usage_of(self.entry(tenant), now_s())
    }

    fn usage_of(entry: &Entry, now_s: u64) -> Usage {
        let c = &entry.counters;
        let refused = RefusedTotals {
            kinds: c.refused_kind.load(Ordering::Relaxed),
            max_concurrent: c.refused_concurrent.load(Ordering::Relaxed),
            max_solves_per_hour: c.refused_hourly.load(Ordering::Relaxed),
        };
        Usage {
            tenant: entry.name.clone(),
            limits: entry.spec.as_ref().map(|s| UsageLimits {
                max_concurrent: s.max_concurrent,
                max_solves_per_hour: s.max_solves_per_hour,
                kinds: s.kinds.clone(),
            }),
            pools: entry
                .spec
                .as_ref()
                .map_or(PoolMode::Shared, |s| s.pools)
                .as_str(),
            in_flight: entry.in_flight.load(Ordering::Acquire),
            solves_last_hour: entry.hour().count(now_s),
            admitted_total: c.admitted.load(Ordering::Relaxed),
            refused_total: refused,
        }
    }

    /// Callers refused by a limit on how much a tenant may use (`max_concurrent`,
    /// `max_solves_per_hour`) since start, over every tenant: demand its operator chose not to
    /// serve (a kind not allowed is no demand for the plan).
    pub fn refused_by_limits(&self) -> u64 {
        self.by_name
            .values()
            .chain(std::iter::once(&self.open))
            .map(|e| {
                e.counters.refused_concurrent.load(Ordering::Relaxed)
                    + e.counters.refused_hourly.load(Ordering::Relaxed)
            })
            .sum()
    }

    /// Every entry's figures, sorted by name (configured, `--gateway-key`, and `open`).
    pub fn all_usage(&self) -> Vec<Usage> {
        let now = now_s();
        let mut all: Vec<Usage> = self
            .by_name
            .values()
            .chain(std::iter::once(&self.open))
            .map(|e| Self::usage_of(e, now))
            .collect();
        all.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        all
    }
}

#[cfg(test)]
mod tests;
