//! Every per-account metric line, in one place: one family per metric, one sample per account
//! (docs/API.md "Metrics").

use std::sync::Arc;

use super::{BreakerState, Member, lock};
use crate::model::now_ms;
use crate::provider::{AccountStats, Endpoint, RESULTS};
use crate::telemetry::metrics::{KindSeconds, counter, encode_families, escape, gauge, gauge_f64};

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
        "captcha_gateway_upstream_threads",
        "Plan threads of the account",
        &per_account(members, |m| m.account.threads().into()),
    );
    gauge(
        out,
        "captcha_gateway_upstream_in_flight",
        "Upstream tasks in flight",
        &per_account(members, |m| m.account.in_flight().into()),
    );
    gauge(
        out,
        "captcha_gateway_upstream_threads_in_use",
        "Threads of the account taken, fleet-wide with Redis (as of the last renewal)",
        &per_account(members, |m| m.account.in_flight().into()),
    );
    gauge(
        out,
        "captcha_gateway_upstream_threads_cap",
        "Effective cap: threads, lowered to the plan and for a while by capacity errors",
        &per_account(members, |m| m.account.effective_threads().into()),
    );
    counter(
        out,
        "captcha_gateway_upstream_thread_leases_lost",
        "Thread leases found lapsed while their task ran",
        &per_account(members, |m| m.account.budget_stats().leases_lost),
    );
    counter(
        out,
        "captcha_gateway_upstream_thread_over_admissions",
        "Threads used without the fleet's agreement (lost leases, grants while Redis was unreachable)",
        &per_account(members, |m| m.account.budget_stats().over_admissions),
    );
    gauge(
        out,
        "captcha_gateway_upstream_usable",
        "1 while the account is in rotation",
        &per_account(members, |m| u64::from(m.can_take_work())),
    );
    gauge(
        out,
        "captcha_gateway_upstream_paused",
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
        "captcha_gateway_upstream_breaker_state",
        "1 for the circuit breaker's current state",
        &breaker,
    );
    gauge(
        out,
        "captcha_gateway_upstream_breaker_open",
        "1 while the account's circuit breaker is open (half-open counts as not open)",
        &per_account(members, |m| {
            u64::from(lock(&m.breaker).state(now) == BreakerState::Open)
        }),
    );
    counter(
        out,
        "captcha_gateway_upstream_breaker_opened",
        "Times the account's circuit breaker opened",
        &per_account(members, |m| lock(&m.breaker).opened_total),
    );
    let requests: Vec<(String, u64)> = members
        .iter()
        .zip(&stats)
        .flat_map(|(m, s)| {
            Endpoint::ALL
                .iter()
                .zip(&s.requests)
                .flat_map(move |(e, row)| {
                    RESULTS.iter().zip(row).map(move |(result, v)| {
                        (
                            format!(
                                "{},endpoint=\"{}\",result=\"{result}\"",
                                label(m),
                                e.as_str()
                            ),
                            *v,
                        )
                    })
                })
        })
        .collect();
    counter(
        out,
        "captcha_gateway_upstream_requests",
        "Requests to the provider by endpoint and result class (ok, or the error class)",
        &requests,
    );
    let tasks: Vec<(String, u64)> = members
        .iter()
        .zip(&stats)
        .flat_map(|(m, s)| {
            [
                ("solved", s.solved),
                ("failed", s.failed),
                ("timeout", s.timeouts),
            ]
            .map(|(result, v)| (format!("{},result=\"{result}\"", label(m)), v))
        })
        .collect();
    counter(
        out,
        "captcha_gateway_upstream_tasks",
        "Upstream tasks by how they ended: an answer, an error, or given up at their deadline",
        &tasks,
    );
    let figures: [(&str, &str, Figure); 3] = [
        (
            "captcha_gateway_upstream_capacity_retries",
            "Submits retried after a capacity error",
            |s| s.capacity_retries,
        ),
        (
            "captcha_gateway_upstream_transient_retries",
            "Submits retried after a transient error",
            |s| s.transient_retries,
        ),
        (
            "captcha_gateway_upstream_ids_polled",
            "Task ids asked about (one poll request may ask for many)",
            |s| s.ids_polled,
        ),
    ];
    for (name, help, pick) in figures {
        counter(out, name, help, &stat(pick));
    }
    let balances: Vec<(String, f64)> = members
        .iter()
        .filter_map(|m| Some((label(m), m.balance()?)))
        .collect();
    gauge_f64(
        out,
        "captcha_gateway_upstream_balance",
        "Provider balance as the last balance check read it (accounts billed per solve)",
        &balances,
    );
    let reports: Vec<(String, u64)> = members
        .iter()
        .flat_map(|m| {
            let (good, bad) = m
                .reports
                .rows()
                .into_iter()
                .fold((0, 0), |(g, b), (_, good, bad)| (g + good, b + bad));
            [("good", good), ("bad", bad)]
                .map(|(verdict, v)| (format!("{},verdict=\"{verdict}\"", label(m)), v))
        })
        .collect();
    counter(
        out,
        "captcha_gateway_upstream_reports",
        "reportgood / reportbad sent, per account",
        &reports,
    );
}

/// `captcha_gateway_solve_duration_seconds`: upstream submit to answer ready, by kind.
pub(super) fn write_solve_seconds(seconds: &KindSeconds, out: &mut String) {
    encode_families(out, |registry| {
        registry.register(
            "solve_duration_seconds",
            "Time from the upstream submit that the provider accepted to the answer ready",
            seconds.family(),
        );
    });
}
