//! Every per-account family on `/metrics`, in one place (docs/API.md "Metrics"): a collector that
//! reads each account's counters and state at scrape time, one sample per account (labelled
//! with its configured name, never its key), and the submit-to-ready histogram.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use super::{BreakerState, Member, Upstream, lock};
use crate::model::now_ms;
use crate::provider::{AccountStats, Endpoint, RESULTS};
use crate::telemetry::collect::{Label, counters, gauges, gauges_f64, histograms_by_kind};

/// Reads one figure of an account.
type Figure = fn(&Member, &AccountStats) -> u64;

fn account(m: &Member) -> Label {
    ("account", m.name().to_owned())
}

struct Accounts(Arc<Upstream>);

impl fmt::Debug for Accounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Accounts")
            .field(&self.0.members.len())
            .finish()
    }
}

impl Upstream {
    /// Registers the per-account families and `solve_duration_seconds`.
    pub fn register_metrics(self: &Arc<Self>, registry: &mut Registry) {
        registry.register_collector(Box::new(Accounts(self.clone())));
    }
}

impl Collector for Accounts {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let members = &self.0.members;
        let stats: Vec<AccountStats> = members.iter().map(|m| m.account.stats()).collect();
        let now = now_ms();
        let e = &mut encoder;
        let per_account = |pick: Figure| {
            members
                .iter()
                .zip(&stats)
                .map(move |(m, s)| ([account(m)], pick(m, s)))
        };
        let gauges_now: [(&str, &str, Figure); 7] = [
            (
                "upstream_threads",
                "Plan threads of the account (configured)",
                |m, _| m.account.threads().into(),
            ),
            (
                "upstream_threads_cap",
                "Effective cap: threads, lowered to the plan and for a while by capacity errors",
                |m, _| m.account.effective_threads().into(),
            ),
            (
                "upstream_threads_in_use",
                "Threads of the account taken, fleet-wide with Redis (as of the last renewal)",
                |m, _| m.account.in_flight().into(),
            ),
            ("upstream_in_flight", "Upstream tasks in flight", |m, _| {
                m.account.in_flight().into()
            }),
            (
                "upstream_usable",
                "1 while the account is in rotation",
                |m, _| u64::from(m.can_take_work()),
            ),
            (
                "upstream_paused",
                "1 while the spend guard holds the account back (no money)",
                |m, _| u64::from(m.paused()),
            ),
            (
                "upstream_breaker_open",
                "1 while the account's circuit breaker is open (half-open counts as not open)",
                |m, _| u64::from(lock(&m.breaker).state(now_ms()) == BreakerState::Open),
            ),
        ];
        for (name, help, pick) in gauges_now {
            gauges(e, name, help, per_account(pick))?;
        }
        let states = [
            BreakerState::Closed,
            BreakerState::Open,
            BreakerState::HalfOpen,
        ];
        gauges(
            e,
            "upstream_breaker_state",
            "1 for the circuit breaker's current state",
            members.iter().flat_map(|m| {
                let current = lock(&m.breaker).state(now);
                states.map(|s| {
                    let labels: [Label; 2] = [account(m), ("state", s.as_str().to_owned())];
                    (labels, u64::from(current == s))
                })
            }),
        )?;
        gauges_f64(
            e,
            "upstream_balance",
            "Provider balance as the last balance check read it (accounts billed per solve)",
            members
                .iter()
                .filter_map(|m| Some(([account(m)], m.balance()?))),
        )?;
        counters(
            e,
            "upstream_requests",
            "Requests to the provider by endpoint and result class (ok, or the error class)",
            members.iter().zip(&stats).flat_map(|(m, s)| {
                Endpoint::ALL
                    .iter()
                    .zip(s.requests)
                    .flat_map(move |(ep, row)| {
                        RESULTS.iter().zip(row).map(move |(result, v)| {
                            let labels: [Label; 3] = [
                                account(m),
                                ("endpoint", ep.as_str().to_owned()),
                                ("result", (*result).to_owned()),
                            ];
                            (labels, v)
                        })
                    })
            }),
        )?;
        counters(
            e,
            "upstream_tasks",
            "Upstream tasks by how they ended: an answer, an error, or given up at their deadline",
            members.iter().zip(&stats).flat_map(|(m, s)| {
                [
                    ("solved", s.solved),
                    ("failed", s.failed),
                    ("timeout", s.timeouts),
                ]
                .map(|(result, v)| {
                    let labels: [Label; 2] = [account(m), ("result", result.to_owned())];
                    (labels, v)
                })
            }),
        )?;
        counters(
            e,
            "passthrough_tasks",
            "Tasks of types this gateway does not declare, forwarded as sent (kind `other`), by protocol and type: a documented name, else `unlisted`",
            self.0
                .passed
                .rows()
                .into_iter()
                .map(|(protocol, label, n)| {
                    let labels: [Label; 2] = [
                        ("protocol", protocol.to_owned()),
                        ("type", label.to_owned()),
                    ];
                    (labels, n)
                }),
        )?;
        counters(
            e,
            "upstream_tasks_adopted",
            "Provider tasks another instance submitted (it died or stopped) that this one polled instead of submitting again",
            members
                .iter()
                .zip(&stats)
                .map(|(m, s)| ([account(m)], s.adopted)),
        )?;
        counters(
            e,
            "upstream_reports",
            "reportgood / reportbad sent, per account",
            members.iter().flat_map(|m| {
                let (good, bad) = m
                    .reports
                    .rows()
                    .into_iter()
                    .fold((0, 0), |(g, b), (_, good, bad)| (g + good, b + bad));
                [("good", good), ("bad", bad)].map(|(verdict, v)| {
                    let labels: [Label; 2] = [account(m), ("verdict", verdict.to_owned())];
                    (labels, v)
                })
            }),
        )?;
        let counted: [(&str, &str, Figure); 6] = [
            (
                "upstream_breaker_opened",
                "Times the account's circuit breaker opened",
                |m, _| lock(&m.breaker).opened_total,
            ),
            (
                "upstream_capacity_retries",
                "Submits retried after a capacity error",
                |_, s| s.capacity_retries,
            ),
            (
                "upstream_transient_retries",
                "Submits retried after a transient error",
                |_, s| s.transient_retries,
            ),
            (
                "upstream_ids_polled",
                "Task ids asked about (one poll request may ask for many)",
                |_, s| s.ids_polled,
            ),
            (
                "upstream_thread_leases_lost",
                "Thread leases found lapsed while their task ran",
                |m, _| m.account.budget_stats().leases_lost,
            ),
            (
                "upstream_thread_over_admissions",
                "Threads used without the fleet's agreement (lost leases, grants while Redis was unreachable)",
                |m, _| m.account.budget_stats().over_admissions,
            ),
        ];
        for (name, help, pick) in counted {
            counters(e, name, help, per_account(pick))?;
        }
        histograms_by_kind(
            e,
            "solve_duration_seconds",
            "Time from the upstream submit that the provider accepted to the answer ready",
            &self.0.solve_seconds,
        )
    }
}
