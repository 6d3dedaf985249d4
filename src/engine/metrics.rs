//! What the engine counts about the answers it hands out (docs/API.md "Metrics"): answers by
//! source, solves that ended without one, three delays by kind, and tasks taken over. Every caller of
//! [`Engine::solve_at`](super::Engine::solve_at) counts here (the compatible and native APIs,
//! the worker API, queue workers), once per handout.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{Engine, Handout, SolveError, Store};
use crate::model::{Kind, now_ms};
use crate::telemetry::bounded::BoundedValues;
use crate::telemetry::collect::{Label, counters, gauges};
use crate::telemetry::metrics::KindSeconds;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnswerLabels {
    kind: &'static str,
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SolveErrorLabels {
    kind: &'static str,
    code: String,
}

/// The engine's counters and histograms; clones share them.
#[derive(Clone, Debug, Default)]
pub struct EngineMetrics {
    answers: Family<AnswerLabels, Counter>,
    solve_errors: Family<SolveErrorLabels, Counter>,
    error_codes: Arc<BoundedValues>,
    handout_seconds: KindSeconds,
    ready_to_caller_seconds: KindSeconds,
    /// Tasks of an instance that died or stopped that this one took over.
    pub(super) tasks_taken_over: Counter,
}

impl EngineMetrics {
    /// One solve of `kind` that ended with `result`, `took` after the caller asked.
    pub(super) fn record(&self, kind: Kind, result: &Result<Handout, SolveError>, took: Duration) {
        match result {
            Ok(h) => {
                self.answers
                    .get_or_create(&AnswerLabels {
                        kind: kind.as_str(),
                        source: h.source.as_str(),
                    })
                    .inc();
                self.handout_seconds.observe(kind, took.as_secs_f64());
                // A wall-clock age: `solved_at` may come from another instance through Redis.
                let age_ms = now_ms().saturating_sub(h.answer.solved_at);
                self.ready_to_caller_seconds.observe_ms(kind, age_ms);
            }
            Err(e) => {
                let code = match e {
                    SolveError::Timeout => "timeout".to_owned(),
                    e => self.error_codes.label(e.code()),
                };
                self.solve_errors
                    .get_or_create(&SolveErrorLabels {
                        kind: kind.as_str(),
                        code,
                    })
                    .inc();
            }
        }
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "answers",
            "Answers handed to callers by kind and source (pool, solved, shared)",
            self.answers.clone(),
        );
        registry.register(
            "solve_errors",
            "Solves that ended without an answer, by kind and error code (timeout, the provider's code, ...)",
            self.solve_errors.clone(),
        );
        registry.register(
            "handout_seconds",
            "Time from a caller's request to the answer handed out",
            self.handout_seconds.family(),
        );
        registry.register(
            "tasks_taken_over",
            "Tasks of an instance that died or stopped before their answer came, taken over here",
            self.tasks_taken_over.clone(),
        );
        registry.register(
            "ready_to_caller_seconds",
            "Time from an answer ready upstream to handed to a caller (token age at handout, time in a pool included)",
            self.ready_to_caller_seconds.family(),
        );
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
            "Waiting callers solved alone because their answer could not be handed out durably",
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
        self.metrics.register(registry);
        registry.register_collector(Box::new(StoreUp(self.store.clone())));
    }
}
