//! Reading the owners' figures into samples, this instance's published figures and the report.

use std::collections::BTreeMap;
use std::time::Duration;

use super::histogram::{self, Buckets};
use super::instance::{AccountCounters, InstanceFigures, Sum};
use super::recorder::{Reading, Recorder};
use super::report::*;
use super::ring::{Ring, Sample};
use super::{MAX_ACCOUNTS, MAX_ERROR_CLASSES};
use crate::http::{AppState, Intake};
use crate::model::now_ms;
use crate::pools::{GroupBy, PoolView};

/// The per-target rows as `/metrics` groups them: configured pools, the busiest targets by
/// label, and `other` for the rest (so the report's size is bounded however many targets live).
pub async fn store_rows(state: &AppState) -> Vec<PoolView> {
    let figures = state.engine.store().figures().await.unwrap_or_default();
    let top = state.engine.settings().metrics_top_targets;
    state.pools.top_views(figures, top, GroupBy::Label)
}

/// Callers by how they were served, summed over the rows (the `other` row keeps the sums).
fn by_source(rows: &[PoolView]) -> BySource<u64> {
    let mut s = BySource::default();
    for v in rows {
        s.pool += v.figures.pool_hits;
        s.shared += v.figures.waits_served;
        s.solved += v.figures.new_tasks.saturating_sub(v.figures.refills);
    }
    s
}

/// This instance's own cumulative counts now.
pub struct Live {
    pub errors: ErrorCounts,
    pub reading: Reading,
    pub accounts: Vec<AccountCounters>,
}

pub fn live_counts(state: &AppState, recorder: &Recorder) -> Live {
    let reading = recorder.read();
    let mut errors = ErrorCounts::new();
    let mut accounts = Vec::new();
    for a in state.upstream.figures().into_iter().take(MAX_ACCOUNTS) {
        let s = &a.stats;
        for (class, n) in [
            ("upstream_capacity", s.submit_errors_capacity),
            ("upstream_transient", s.submit_errors_transient),
            ("upstream_permanent", s.submit_errors_permanent),
            ("upstream_account", s.submit_errors_account),
            ("task_failed", s.failed),
            ("task_timeout", s.timeouts),
        ] {
            *errors.entry(class.to_owned()).or_default() += n;
        }
        accounts.push(AccountCounters {
            name: a.name,
            submits: s.submits,
            solved: s.solved,
            failed: s.failed,
            timeouts: s.timeouts,
        });
    }
    for (code, n) in &reading.errors {
        *errors.entry(format!("caller_{code}")).or_default() += n;
    }
    Live {
        errors,
        reading,
        accounts,
    }
}

pub async fn sample(state: &AppState, recorder: &Recorder) -> Sample {
    let rows = store_rows(state).await;
    let live = live_counts(state, recorder);
    Sample {
        t_ms: now_ms(),
        store: by_source(&rows),
        threads_in_use: state.upstream.in_flight().into(),
        threads_cap: state.upstream.effective_threads().into(),
        errors: live.errors,
        reading: live.reading,
    }
}

fn counts_since(now: &ErrorCounts, then: &ErrorCounts) -> ErrorCounts {
    now.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(then.get(k).copied().unwrap_or(0)),
            )
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}

fn total(errors: &ErrorCounts) -> u64 {
    errors.values().sum()
}

pub fn instance_figures(
    state: &AppState,
    live: &Live,
    ring: &Ring,
    window: Duration,
) -> InstanceFigures {
    let now = now_ms();
    let empty = Sample::default();
    let start = ring
        .since(now.saturating_sub(window.as_millis() as u64))
        .unwrap_or(&empty);
    let history = ring
        .iter()
        .zip(ring.iter().skip(1))
        .map(|(a, b)| (b.t_ms, total(&b.errors).saturating_sub(total(&a.errors))))
        .collect();
    InstanceFigures {
        instance: state.engine.store().instance().to_owned(),
        at_ms: now,
        admission: AdmissionRow {
            active: state.admission.active(),
            max_concurrent: state.admission.max(),
            running_limit: state.admission.limit_now(),
        },
        errors: live.errors.clone(),
        errors_window: counts_since(&live.errors, &start.errors),
        window_ms: now
            .saturating_sub(start.t_ms)
            .min(window.as_millis() as u64),
        accounts: live.accounts.clone(),
        handout: histogram::since(&live.reading.handout, &start.reading.handout).to_vec(),
        solve: histogram::since(&live.reading.solved, &start.reading.solved).to_vec(),
        ready_to_caller: histogram::since(
            &live.reading.ready_to_caller,
            &start.reading.ready_to_caller,
        )
        .to_vec(),
        history,
    }
}

pub struct Inputs<'a> {
    pub state: &'a AppState,
    pub every: Duration,
    pub window: Duration,
    pub ring: &'a Ring,
    pub rows: Vec<PoolView>,
    pub mine: InstanceFigures,
    pub others: Vec<InstanceFigures>,
    pub store: &'static str,
}

pub async fn report(i: Inputs<'_>) -> StatusReport {
    let now = now_ms();
    let mut sum = Sum::default();
    sum.add(&i.mine);
    for other in i.others.iter().filter(|o| o.instance != i.mine.instance) {
        sum.add(other);
    }
    let totals = by_source(&i.rows);
    StatusReport {
        at_ms: now,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        interval_s: i.every.as_secs_f64(),
        window_s: i.window.as_secs_f64(),
        fleet: FleetInfo {
            store: i.store.to_owned(),
            instances: sum.instances,
            instance: i.mine.instance.clone(),
        },
        answers: Answers {
            total: totals,
            per_s: last_minute(i.ring, totals, now),
        },
        history: history(i.ring, &sum.history),
        admission: sum.admission.clone(),
        targets: i.rows.iter().map(|v| v.targets.unwrap_or(1)).sum(),
        pools: i.rows.iter().map(pool_row).collect(),
        accounts: accounts(i.state, &sum),
        queue: queue(i.state).await,
        latency: Latency {
            handout: percentiles(&sum.handout),
            solve: percentiles(&sum.solve),
            ready_to_caller: percentiles(&sum.ready_to_caller),
        },
        errors: errors(&sum, Duration::from_millis(i.mine.window_ms)),
    }
}

/// Rates over the last minute of history, up to now.
fn last_minute(ring: &Ring, now_totals: BySource<u64>, now: u64) -> BySource<f64> {
    let Some(start) = ring.since(now.saturating_sub(60_000)) else {
        return BySource::default();
    };
    let secs = now.saturating_sub(start.t_ms) as f64 / 1000.0;
    if secs <= 0.0 {
        return BySource::default();
    }
    let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
    BySource {
        pool: rate(now_totals.pool, start.store.pool),
        solved: rate(now_totals.solved, start.store.solved),
        shared: rate(now_totals.shared, start.store.shared),
    }
}

/// One point per pair of neighbouring samples. The store's counters are already fleet-wide;
/// errors are this instance's plus the others' published per-interval counts.
fn history(ring: &Ring, fleet_errors: &BTreeMap<u64, u64>) -> Vec<Point> {
    ring.iter()
        .zip(ring.iter().skip(1))
        .map(|(a, b)| {
            let secs = (b.t_ms.saturating_sub(a.t_ms) as f64 / 1000.0).max(0.001);
            let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
            Point {
                t_ms: b.t_ms,
                pool: rate(b.store.pool, a.store.pool),
                solved: rate(b.store.solved, a.store.solved),
                shared: rate(b.store.shared, a.store.shared),
                threads_in_use: b.threads_in_use,
                threads_cap: b.threads_cap,
                // Instances sample on the same wall-clock marks, so their points share `t_ms`
                // (to the millisecond only when their clocks and timers agree): match within
                // half an interval.
                errors: fleet_errors
                    .range(b.t_ms.saturating_sub(a_half(a, b))..=b.t_ms + a_half(a, b))
                    .map(|(_, n)| *n)
                    .sum::<u64>() as f64
                    / secs,
            }
        })
        .collect()
}

fn a_half(a: &Sample, b: &Sample) -> u64 {
    b.t_ms.saturating_sub(a.t_ms) / 2
}

fn pool_row(v: &PoolView) -> PoolRow {
    PoolRow {
        target: v.figures.label.clone(),
        ready: v.figures.pooled,
        target_size: v.target_size,
        mode: v.mode.map(str::to_owned),
        in_flight: v.figures.in_flight,
        waiting: v.figures.waiting,
        arrivals: v.arrivals,
        pool_hits: v.figures.pool_hits,
        expired_unused: v.figures.expired_unused,
        hit_rate: v.hit_rate,
        waste_rate: v.waste_rate,
        targets: v.targets,
    }
}

fn accounts(state: &AppState, sum: &Sum) -> Vec<AccountRow> {
    state
        .upstream
        .figures()
        .into_iter()
        .take(MAX_ACCOUNTS)
        .map(|a| {
            let counters = sum.accounts.iter().find(|c| c.name == a.name);
            AccountRow {
                provider: a.provider.to_owned(),
                state: a.state.to_owned(),
                threads_in_use: a.in_flight.into(),
                threads_cap: a.cap.into(),
                threads: a.threads.into(),
                submits: counters.map_or(0, |c| c.submits),
                solved: counters.map_or(0, |c| c.solved),
                failed: counters.map_or(0, |c| c.failed),
                timeouts: counters.map_or(0, |c| c.timeouts),
                name: a.name,
            }
        })
        .collect()
}

async fn queue(state: &AppState) -> Option<QueueRow> {
    let Intake::Queued(q) = &state.intake else {
        return None;
    };
    let lag = q.lag().await.ok().flatten();
    let dead: Option<u64> = redis::cmd("XLEN")
        .arg(q.keys().dead())
        .query_async(&mut q.conn())
        .await
        .ok();
    Some(QueueRow {
        name: q.settings().name.clone(),
        lag,
        dead_letters: dead,
    })
}

fn percentiles(b: &Buckets) -> Percentiles {
    Percentiles {
        count: b.iter().sum(),
        p50: histogram::quantile(b, 0.5),
        p90: histogram::quantile(b, 0.9),
        p99: histogram::quantile(b, 0.99),
    }
}

fn errors(sum: &Sum, window: Duration) -> Vec<ErrorRow> {
    // Right after start the window is short; a rate over nothing is no rate.
    let minutes = (window.as_secs_f64() / 60.0).max(1.0 / 60.0);
    sum.errors
        .iter()
        .take(MAX_ERROR_CLASSES)
        .map(|(class, total)| ErrorRow {
            class: class.clone(),
            total: *total,
            per_min: sum.errors_window.get(class).copied().unwrap_or(0) as f64 / minutes,
        })
        .collect()
}
