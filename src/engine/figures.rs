//! What the engine counts about the answers it hands out (docs/API.md "Metrics"): answers by kind
//! and source, solves that ended without one by kind and code, two delays by kind, and tasks
//! taken over. Every caller of [`Engine::solve_at`](super::Engine::solve_at) (the compatible and
//! native APIs, the worker API, queue workers) counts here once per handout, and everyone who
//! shows these figures reads them here: `/metrics` at scrape time and the status page through
//! [`EngineFigures::read`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use super::busy::{BusyCounts, TargetCount};
use super::{Engine, Handout, SolveError, Store};
use crate::model::{BySource, Kind, Source, Target, now_ms};
use crate::telemetry::bounded::BoundedValues;
use crate::telemetry::collect::{Label, counters, gauges, histograms_by_kind};
use crate::telemetry::histogram::{Buckets, KindHistograms};

/// The engine's figures; shared by the engine's clones and its collector.
#[derive(Debug, Default)]
pub struct EngineFigures {
    /// Answers by kind, then source (pool, solved, shared).
    answers: [[AtomicU64; 3]; Kind::ALL.len()],
    /// Solves without an answer, by kind and code; codes beyond the bound count as `other`.
    errors: Mutex<BTreeMap<(Kind, String), u64>>,
    error_codes: BoundedValues,
    /// Request to answer.
    handout: KindHistograms,
    /// Answer ready upstream to handed to the caller (its age at handout, pool time included).
    ready_to_caller: KindHistograms,
    /// Tasks of an instance that died or stopped that this one took over.
    tasks_taken_over: AtomicU64,
    /// Callers per poolable target since the demand log's last reading.
    busy: BusyCounts,
    /// Callers gone before their call ended (the future dropped: a client that hung up), by
    /// kind.
    departed: [AtomicU64; Kind::ALL.len()],
}

/// One kind's callers so far, cumulative: what the demand log (`status::demand`) counts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KindCallers {
    pub answers: BySource<u64>,
    /// Calls that ended without an answer (any code).
    pub failed: u64,
    /// Callers gone before their call ended.
    pub departed: u64,
}

/// One caller of [`Engine::solve_at`](super::Engine::solve_at), counted once when its call
/// ends: [`CallerCount::ended`] with the result, or, dropped before that (the caller hung up and
/// its future went with it), as departed.
pub(super) struct CallerCount<'a> {
    figures: &'a EngineFigures,
    target: &'a Target,
    poolable: bool,
    asked: std::time::Instant,
    ended: bool,
}

impl CallerCount<'_> {
    pub fn ended(mut self, result: &Result<Handout, SolveError>) {
        self.ended = true;
        let kind = self.target.kind;
        self.figures.record(kind, result, self.asked.elapsed());
        if self.poolable {
            let hit = matches!(result, Ok(h) if h.source == Source::Pool);
            self.figures.busy.counted(self.target, hit);
        }
    }
}

impl Drop for CallerCount<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        self.figures.departed[self.target.kind.index()].fetch_add(1, Ordering::Relaxed);
        if self.poolable {
            self.figures.busy.counted(self.target, false);
        }
    }
}

/// A cumulative reading of [`EngineFigures`], every kind added up: what the status page shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineReading {
    pub answers: BySource<u64>,
    /// Caller error codes (`timeout`, a provider's code, ...), counted over every kind.
    pub errors: BTreeMap<String, u64>,
    pub handout: Buckets,
    pub ready_to_caller: Buckets,
}

fn source_index(source: Source) -> usize {
    match source {
        Source::Pool => 0,
        Source::Solved => 1,
        Source::Shared => 2,
    }
}

const SOURCES: [Source; 3] = [Source::Pool, Source::Solved, Source::Shared];

impl EngineFigures {
    /// One solve of `kind` that ended with `result`, `took` after the caller asked.
    pub(super) fn record(&self, kind: Kind, result: &Result<Handout, SolveError>, took: Duration) {
        match result {
            Ok(h) => {
                self.answers[kind.index()][source_index(h.source)].fetch_add(1, Ordering::Relaxed);
                self.handout.observe(kind, took.as_secs_f64());
                // A wall-clock age: `solved_at` may come from another instance through Redis.
                let age_ms = now_ms().saturating_sub(h.answer.solved_at);
                self.ready_to_caller.observe_ms(kind, age_ms);
            }
            Err(e) => {
                let code = match e {
                    SolveError::Timeout => "timeout".to_owned(),
                    e => self.error_codes.label(e.code()),
                };
                let mut errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
                *errors.entry((kind, code)).or_default() += 1;
            }
        }
    }

    /// A caller of `target` asked now; `poolable` targets are counted per target too.
    pub(super) fn caller<'a>(&'a self, target: &'a Target, poolable: bool) -> CallerCount<'a> {
        CallerCount {
            figures: self,
            target,
            poolable,
            asked: std::time::Instant::now(),
            ended: false,
        }
    }

    /// The busiest poolable targets' callers since the last call, busiest first: the demand
    /// log's per-target figures (one reader, the status sampler).
    pub fn take_busy_targets(&self) -> Vec<TargetCount> {
        self.busy.take()
    }

    pub(super) fn task_taken_over(&self) {
        self.tasks_taken_over.fetch_add(1, Ordering::Relaxed);
    }

    /// Each kind's callers so far (by `Kind::index`).
    pub fn by_kind(&self) -> [KindCallers; Kind::ALL.len()] {
        let mut out = [KindCallers::default(); Kind::ALL.len()];
        for (i, by_source) in self.answers.iter().enumerate() {
            out[i].answers = BySource {
                pool: by_source[0].load(Ordering::Relaxed),
                solved: by_source[1].load(Ordering::Relaxed),
                shared: by_source[2].load(Ordering::Relaxed),
            };
            out[i].departed = self.departed[i].load(Ordering::Relaxed);
        }
        for ((kind, _), n) in self
            .errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            out[kind.index()].failed += n;
        }
        out
    }

    pub fn read(&self) -> EngineReading {
        let mut answers = BySource::<u64>::default();
        for by_source in &self.answers {
            answers.pool += by_source[0].load(Ordering::Relaxed);
            answers.solved += by_source[1].load(Ordering::Relaxed);
            answers.shared += by_source[2].load(Ordering::Relaxed);
        }
        let mut errors = BTreeMap::<String, u64>::new();
        for ((_, code), n) in self
            .errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            *errors.entry(code.clone()).or_default() += n;
        }
        EngineReading {
            answers,
            errors,
            handout: self.handout.total(),
            ready_to_caller: self.ready_to_caller.total(),
        }
    }
}

/// `/metrics` families of [`EngineFigures`], read at scrape time.
#[derive(Debug)]
struct FiguresCollector(Arc<EngineFigures>);

impl Collector for FiguresCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let f = &self.0;
        let answers = Kind::ALL.iter().flat_map(|kind| {
            SOURCES.iter().filter_map(move |source| {
                let n = f.answers[kind.index()][source_index(*source)].load(Ordering::Relaxed);
                let labels: [Label; 2] = [
                    ("kind", kind.as_str().to_owned()),
                    ("source", source.as_str().to_owned()),
                ];
                (n > 0).then_some((labels, n))
            })
        });
        counters(
            &mut encoder,
            "answers",
            "Answers handed to callers by kind and source (pool, solved, shared)",
            answers,
        )?;
        let errors: Vec<([Label; 2], u64)> = f
            .errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|((kind, code), n)| {
                (
                    [("kind", kind.as_str().to_owned()), ("code", code.clone())],
                    *n,
                )
            })
            .collect();
        counters(
            &mut encoder,
            "solve_errors",
            "Solves that ended without an answer, by kind and error code (timeout, the provider's code, ...)",
            errors,
        )?;
        histograms_by_kind(
            &mut encoder,
            "handout_seconds",
            "Time from a caller's request to the answer handed out",
            &f.handout,
        )?;
        let none: [Label; 0] = [];
        counters(
            &mut encoder,
            "tasks_taken_over",
            "Tasks of an instance that died or stopped before their answer came, taken over here",
            [(none, f.tasks_taken_over.load(Ordering::Relaxed))],
        )?;
        histograms_by_kind(
            &mut encoder,
            "ready_to_caller_seconds",
            "Time from an answer ready upstream to handed to a caller (token age at handout, time in a pool included)",
            &f.ready_to_caller,
        )
    }
}

/// `captcha_gateway_store_up`, read at scrape time.
struct StoreUp(Arc<dyn Store>);

impl fmt::Debug for StoreUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StoreUp").field(&self.0.backend()).finish()
    }
}

impl Collector for StoreUp {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let row: [Label; 1] = [("store", self.0.backend().to_owned())];
        gauges(
            &mut encoder,
            "store_up",
            "1 while the store answers (the embedded store always), 0 while it is unreachable",
            [(row, u64::from(!self.0.degraded()))],
        )?;
        let Some(r) = self.0.server_report() else {
            return Ok(());
        };
        let none: [Label; 0] = [];
        counters(
            &mut encoder,
            "store_operations_unknown",
            "Store operations whose reply was lost (they may or may not have run)",
            [(none.clone(), r.operations_unknown)],
        )?;
        counters(
            &mut encoder,
            "store_operations_retried",
            "Store operations sent again after their reply was lost",
            [(none.clone(), r.operations_retried)],
        )?;
        counters(
            &mut encoder,
            "store_operations_refused_retried",
            "Store operations sent again after Redis refused them during a failover (they had not run)",
            [(none.clone(), r.operations_refused_retried)],
        )?;
        counters(
            &mut encoder,
            "store_answers_given_up",
            "Answers given up because their finish's outcome was lost as a Redis master was replaced or restarted (waste, never a second hand-out)",
            [(none.clone(), r.answers_given_up)],
        )?;
        counters(
            &mut encoder,
            "store_operations_expired",
            "Store operations refused by Redis because their record may have expired (not run again)",
            [(none.clone(), r.operations_expired)],
        )?;
        counters(
            &mut encoder,
            "store_handouts_withheld",
            "Answers not handed out because Redis did not confirm the hand-out durable in time",
            [(none.clone(), r.handouts_withheld)],
        )?;
        counters(
            &mut encoder,
            "store_callers_released",
            "Waiting callers solved alone because their answer could not be handed out durably, or Redis had passed their mail on",
            [(none.clone(), r.callers_released)],
        )?;
        counters(
            &mut encoder,
            "store_leases_restored",
            "Waiters and claims a renewal put back after Redis forgot them (away past a lease, or restarted empty)",
            [(none.clone(), r.leases_restored)],
        )?;
        gauges(
            &mut encoder,
            "store_handouts_confirmed",
            "1 while hand-outs are confirmed durable as configured (always 1 with it off)",
            [(none, u64::from(r.handouts_confirmed))],
        )
    }
}

impl Engine {
    /// Registers what the engine owns: answers, solve errors, delays, the store's availability.
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(FiguresCollector(self.figures.clone())));
        registry.register_collector(Box::new(StoreUp(self.store.clone())));
    }
}
