//! Every per-account metric line, in one place: one family per metric, one sample per account
//! (docs/API.md "Metrics").

use std::sync::Arc;

use super::{BreakerState, Member, lock};
use crate::model::now_ms;
use crate::provider::AccountStats;
use crate::telemetry::metrics::{counter, escape, gauge};

/// Reads one counter out of an account's stats.
type Figure = fn(&AccountStats) -> u64;

fn label(m: &Member) -> String {
    format!("account=\"{}\"", escape(m.name()))
}

/// One sample per account of `value`.
fn per_account(members: &[Arc<Member>], value: impl Fn(&Member) -> u64) -> Vec<(String, u64)> {
    members.iter().map(|m| (label(m), value(m))).collect()
}

pub(super) fn write(members: &[Arc<Member>], out: &mut String) {
    let stats: Vec<AccountStats> = members.iter().map(|m| m.account.stats()).collect();
    let stat = |pick: Figure| -> Vec<(String, u64)> {
        members
            .iter()
            .zip(&stats)
            .map(|(m, s)| (label(m), pick(s)))
            .collect()
    };
    gauge(
        out,
        "upstream_threads",
        "Plan threads of the account",
        &per_account(members, |m| m.account.threads().into()),
    );
    gauge(
        out,
        "upstream_in_flight",
        "Upstream tasks in flight",
        &per_account(members, |m| m.account.in_flight().into()),
    );
    gauge(
        out,
        "upstream_threads_in_use",
        "Threads of the account taken, fleet-wide with Redis (as of the last renewal)",
        &per_account(members, |m| m.account.in_flight().into()),
    );
    gauge(
        out,
        "upstream_threads_cap",
        "Effective cap: threads, lowered to the plan and for a while by capacity errors",
        &per_account(members, |m| m.account.effective_threads().into()),
    );
    counter(
        out,
        "upstream_thread_leases_lost",
        "Thread leases found lapsed while their task ran",
        &per_account(members, |m| m.account.budget_stats().leases_lost),
    );
    counter(
        out,
        "upstream_thread_over_admissions",
        "Threads used without the fleet's agreement (lost leases, grants while Redis was unreachable)",
        &per_account(members, |m| m.account.budget_stats().over_admissions),
    );
    gauge(
        out,
        "upstream_usable",
        "1 while the account is in rotation",
        &per_account(members, |m| u64::from(m.can_take_work())),
    );
    gauge(
        out,
        "upstream_paused",
        "1 while the spend guard holds the account back (no money)",
        &per_account(members, |m| u64::from(m.paused())),
    );
    let now = now_ms();
    let states = [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
    ];
    let breaker: Vec<(String, u64)> = members
        .iter()
        .flat_map(|m| {
            let current = lock(&m.breaker).state(now);
            states.map(|s| {
                (
                    format!("{},state=\"{}\"", label(m), s.as_str()),
                    u64::from(current == s),
                )
            })
        })
        .collect();
    gauge(
        out,
        "upstream_breaker_state",
        "1 for the circuit breaker's current state",
        &breaker,
    );
    counter(
        out,
        "upstream_breaker_opened",
        "Times the account's circuit breaker opened",
        &per_account(members, |m| lock(&m.breaker).opened_total),
    );
    counter(
        out,
        "upstream_submits",
        "Tasks submitted upstream",
        &stat(|s| s.submits),
    );
    let by_class: Vec<(String, u64)> = members
        .iter()
        .zip(&stats)
        .flat_map(|(m, s)| {
            [
                ("capacity", s.submit_errors_capacity),
                ("transient", s.submit_errors_transient),
                ("permanent", s.submit_errors_permanent),
                ("account", s.submit_errors_account),
            ]
            .map(|(class, v)| (format!("{},class=\"{class}\"", label(m)), v))
        })
        .collect();
    counter(
        out,
        "upstream_submit_errors",
        "Submit errors by class",
        &by_class,
    );
    let figures: [(&str, &str, Figure); 7] = [
        (
            "upstream_capacity_retries",
            "Submits retried after a capacity error",
            |s| s.capacity_retries,
        ),
        (
            "upstream_transient_retries",
            "Submits retried after a transient error",
            |s| s.transient_retries,
        ),
        (
            "upstream_poll_requests",
            "res.php requests (one may ask for many ids)",
            |s| s.poll_requests,
        ),
        ("upstream_ids_polled", "Task ids asked about", |s| {
            s.ids_polled
        }),
        (
            "upstream_solved",
            "Upstream tasks that ended with an answer",
            |s| s.solved,
        ),
        (
            "upstream_failed",
            "Upstream tasks that ended with an error",
            |s| s.failed,
        ),
        (
            "upstream_timeouts",
            "Upstream tasks given up at their deadline",
            |s| s.timeouts,
        ),
    ];
    for (name, help, pick) in figures {
        counter(out, name, help, &stat(pick));
    }
    let reports: Vec<(String, u64)> = members
        .iter()
        .flat_map(|m| {
            m.reports
                .rows()
                .into_iter()
                .flat_map(move |(kind, good, bad)| {
                    [("good", good), ("bad", bad)].map(|(verdict, v)| {
                        (
                            format!("{},kind=\"{kind}\",verdict=\"{verdict}\"", label(m)),
                            v,
                        )
                    })
                })
        })
        .collect();
    counter(
        out,
        "upstream_reports",
        "reportgood / reportbad sent, per account and kind",
        &reports,
    );
}
