//! Reading the owners' figures into samples, this instance's published figures and the report.

use std::time::Duration;

use super::instance::{AccountCounters, InstanceFigures, Sum, Tick};
use super::report::*;
use super::ring::{Reading, Ring, Sample, Start};
use super::{MAX_ACCOUNTS, MAX_ERROR_CLASSES, Role, Sources};
use crate::model::now_ms;
use crate::pools::{GroupBy, PoolView};
use crate::telemetry::histogram::{self, Buckets};

/// The per-target rows as `/metrics` groups them: configured pools, the busiest targets by
/// label, and `other` for the rest (so the report's size is bounded however many targets live).
pub async fn store_rows(sources: &Sources) -> Vec<PoolView> {
    let Some(pools) = &sources.pools else {
        return Vec::new();
    };
    let figures = sources.engine.store().figures().await.unwrap_or_default();
    let top = sources.engine.settings().metrics_top_targets;
    pools.top_views(figures, top, GroupBy::Label)
}

/// This instance's own cumulative counts now.
pub struct Live {
    pub errors: ErrorCounts,
    pub reading: Reading,
    pub accounts: Vec<AccountCounters>,
}

pub fn live_counts(state: &Sources) -> Live {
    let mut engine = state.engine.figures().read();
    // The caller codes become `caller_*` classes below; the reading kept in the ring needs no
    // second copy of them.
    let caller_codes = std::mem::take(&mut engine.errors);
    let reading = Reading {
        engine,
        solve: state.upstream.solve_time_buckets(),
    };
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
            threads_in_use: a.in_flight.into(),
        });
    }
    for (code, n) in &caller_codes {
        *errors.entry(format!("caller_{code}")).or_default() += n;
    }
    Live {
        errors,
        reading,
        accounts,
    }
}

pub fn sample(state: &Sources) -> Sample {
    let live = live_counts(state);
    Sample {
        t_ms: now_ms(),
        threads_in_use: state.upstream.in_flight().into(),
        threads_cap: state.upstream.effective_threads().into(),
        errors: live.errors,
        reading: live.reading,
    }
}

/// The cumulative counts the demand log diffs: per kind, the engine's answers and failures and
/// the accounts' timed solves and held threads, each account's share; the threads from
/// `sample`.
pub fn demand_totals(sources: &Sources, sample: &Sample) -> super::demand::Totals {
    let mut totals = super::demand::Totals {
        threads_in_use: sample.threads_in_use,
        threads_cap: sample.threads_cap,
        threads_waiting: sources.upstream.callers_waiting_for_threads() as u64,
        refused: sources.upstream.thread_refusals()
            + sources.admission.as_ref().map_or(0, |a| a.refused()),
        ..Default::default()
    };
    for (i, callers) in sources.engine.figures().by_kind().into_iter().enumerate() {
        totals.kinds[i].answers = callers.answers;
        totals.kinds[i].failed = callers.failed;
        totals.kinds[i].departed = callers.departed;
    }
    for (kind, times, seconds) in sources.upstream.solve_times_by_kind() {
        let k = &mut totals.kinds[kind.index()];
        k.solves = times.iter().sum();
        k.solve_seconds = seconds;
        k.solve_times = times;
    }
    for (i, held) in sources
        .upstream
        .thread_seconds_by_kind()
        .into_iter()
        .enumerate()
    {
        totals.kinds[i].thread_seconds = held;
    }
    totals.accounts = sources
        .upstream
        .figures()
        .into_iter()
        .map(|a| super::demand::AccountTotals {
            thread_seconds: a.stats.held_ms.iter().sum::<u64>() as f64 / 1000.0,
            solved: a.stats.solved_by_kind,
            in_use: a.in_flight.into(),
            cap: a.cap.into(),
            waiting: a.waiting as u64,
            provider: a.provider.to_owned(),
            name: a.name,
        })
        .collect();
    totals.targets = sources
        .engine
        .figures()
        .take_busy_targets()
        .into_iter()
        .map(|t| super::demand::TargetDemand {
            id: t.id,
            label: t.label,
            kind: t.kind,
            callers: t.callers,
            pool_hits: t.pool_hits,
            expired: 0,
        })
        .collect();
    totals.pool_expired = sources
        .pools
        .as_ref()
        .map(|p| p.expiries())
        .unwrap_or_default()
        .into_iter()
        .map(|(t, expired)| super::demand::PoolExpiries {
            id: t.id,
            label: crate::engine::bounded_label(&t.label),
            kind: t.kind,
            expired,
        })
        .collect();
    totals.tenant_refused = sources
        .tenants
        .as_ref()
        .map_or(0, |t| t.refused_by_limits());
    totals
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

fn since(now: BySource<u64>, then: BySource<u64>) -> BySource<u64> {
    BySource {
        pool: now.pool.saturating_sub(then.pool),
        solved: now.solved.saturating_sub(then.solved),
        shared: now.shared.saturating_sub(then.shared),
    }
}

fn total(errors: &ErrorCounts) -> u64 {
    errors.values().sum()
}

pub fn instance_figures(
    state: &Sources,
    role: Role,
    live: &Live,
    ring: &Ring,
    window: Duration,
) -> InstanceFigures {
    let now = now_ms();
    let empty = Sample::default();
    let window_start = ring.window_start(now.saturating_sub(window.as_millis() as u64));
    let start = match window_start {
        Start::Sample(s) => s,
        Start::Zero(_) => &empty,
    };
    let history = ring
        .iter()
        .zip(ring.iter().skip(1))
        .map(|(a, b)| Tick {
            t_ms: b.t_ms,
            answers: since(b.reading.engine.answers, a.reading.engine.answers),
            errors: total(&b.errors).saturating_sub(total(&a.errors)),
            threads_in_use: b.threads_in_use,
        })
        .collect();
    InstanceFigures {
        instance: state.engine.store().instance().to_owned(),
        role: role.as_str().to_owned(),
        concurrency: match role {
            Role::Worker { concurrency } => Some(concurrency),
            Role::Serve => None,
        },
        at_ms: now,
        admission: state
            .admission
            .as_ref()
            .map(|a| AdmissionRow {
                active: a.active(),
                max_concurrent: a.max(),
                running_limit: a.limit_now(),
            })
            .unwrap_or_default(),
        answers: live.reading.engine.answers,
        errors: live.errors.clone(),
        errors_window: counts_since(&live.errors, &start.errors),
        window_ms: now
            .saturating_sub(window_start.t_ms())
            .min(window.as_millis() as u64),
        accounts: live.accounts.clone(),
        handout: histogram::since(&live.reading.engine.handout, &start.reading.engine.handout)
            .to_vec(),
        solve: histogram::since(&live.reading.solve, &start.reading.solve).to_vec(),
        ready_to_caller: histogram::since(
            &live.reading.engine.ready_to_caller,
            &start.reading.engine.ready_to_caller,
        )
        .to_vec(),
        history,
    }
}

pub struct Inputs<'a> {
    pub sources: &'a Sources,
    pub every: Duration,
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
    let history = history(i.ring, &sum.history);
    StatusReport {
        at_ms: now,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        interval_s: i.every.as_secs_f64(),
        window_s: i.mine.window_ms as f64 / 1000.0,
        fleet: FleetInfo {
            store: i.store.to_owned(),
            instances: sum.instances,
            roles: sum.roles.clone(),
            role: i.mine.role.clone(),
            instance: i.mine.instance.clone(),
        },
        answers: Answers {
            total: sum.answers,
            per_s: last_minute(&history, now),
        },
        history,
        admission: sum.admission.clone(),
        targets: i.rows.iter().map(|v| v.targets.unwrap_or(1)).sum(),
        pools: i.rows.iter().map(pool_row).collect(),
        accounts: accounts(i.sources, &sum),
        queue: queue(i.sources).await,
        latency: Latency {
            handout: percentiles(&sum.handout),
            solve: percentiles(&sum.solve),
            ready_to_caller: percentiles(&sum.ready_to_caller),
        },
        errors: errors(&sum, Duration::from_millis(i.mine.window_ms)),
        redis: i.sources.engine.store().server_report(),
    }
}

/// Rates over the history points of the last minute (less right after start).
fn last_minute(history: &[Point], now: u64) -> BySource<f64> {
    let recent: Vec<&Point> = history.iter().filter(|p| p.t_ms + 60_000 > now).collect();
    let secs: f64 = recent.iter().map(|p| p.secs).sum();
    if secs <= 0.0 {
        return BySource::default();
    }
    let mean =
        |pick: fn(&Point) -> f64| recent.iter().map(|p| pick(p) * p.secs).sum::<f64>() / secs;
    BySource {
        pool: mean(|p| p.pool),
        solved: mean(|p| p.solved),
        shared: mean(|p| p.shared),
    }
}

/// One point per interval of this instance's ring, adding up every instance's tick for it.
/// Instances sample on the same wall-clock marks, so their ticks share an interval end (to the
/// millisecond only when their clocks and timers agree): a tick belongs to the interval whose
/// end it is within half an interval of.
fn history(ring: &Ring, ticks: &[Tick]) -> Vec<Point> {
    let mut ticks: Vec<&Tick> = ticks.iter().collect();
    ticks.sort_by_key(|t| t.t_ms);
    ring.iter()
        .zip(ring.iter().skip(1))
        .map(|(a, b)| {
            let span = b.t_ms.saturating_sub(a.t_ms);
            let secs = (span as f64 / 1000.0).max(0.001);
            let (from, to) = (b.t_ms.saturating_sub(span / 2), b.t_ms + span / 2);
            let start = ticks.partition_point(|t| t.t_ms <= from);
            let mut sum = Tick::default();
            for t in ticks[start..].iter().take_while(|t| t.t_ms <= to) {
                sum.answers.pool += t.answers.pool;
                sum.answers.solved += t.answers.solved;
                sum.answers.shared += t.answers.shared;
                sum.errors += t.errors;
                sum.threads_in_use = sum.threads_in_use.max(t.threads_in_use);
            }
            Point {
                t_ms: b.t_ms,
                secs,
                pool: sum.answers.pool as f64 / secs,
                solved: sum.answers.solved as f64 / secs,
                shared: sum.answers.shared as f64 / secs,
                errors: sum.errors as f64 / secs,
                threads_in_use: b.threads_in_use.max(sum.threads_in_use),
                threads_cap: b.threads_cap,
            }
        })
        .collect()
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

fn accounts(state: &Sources, sum: &Sum) -> Vec<AccountRow> {
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
                threads_in_use: counters
                    .map_or(0, |c| c.threads_in_use)
                    .max(a.in_flight.into()),
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

async fn queue(sources: &Sources) -> Option<QueueRow> {
    let q = sources.queue.as_ref()?;
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
