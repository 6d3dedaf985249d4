//! The check every scenario ends with: each handout in the history, each token verified once
//! at the simulator, and the figures the issue note quotes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use captcha_gateway::model::{Kind, Reuse};
use serde_json::Value;

use super::harness::{Fleet, HTTP_SLACK, Handout, Outcome};
use crate::support::verify_at;

/// `min_remaining_s`'s default: life an answer must have left when handed out.
const MIN_REMAINING_MS: u64 = 10_000;

/// What a scenario allows beyond the promises.
pub struct Rules {
    /// Gateways the scenario stopped or killed: their own callers may get a clear error or a
    /// dropped connection (a client retries elsewhere); everyone else's callers get answers.
    pub stopped: HashSet<usize>,
    /// Upstream tasks allowed beyond one per caller, and why.
    pub extra_tasks: u64,
    pub extra_why: &'static str,
}

/// A scenario's figures, printed as one `FIGURES` line for the issue note.
#[derive(Debug, Default)]
pub struct Figures {
    pub scenario: String,
    pub callers: usize,
    pub answered: usize,
    /// Of the answered, how many came from a pool.
    pub from_pool: usize,
    pub errors: usize,
    /// Errors by status and code (`dropped` for a lost connection).
    pub error_codes: BTreeMap<String, usize>,
    pub timed_out: usize,
    pub upstream_tasks: u64,
    pub extra_tasks: i64,
    pub extra_bound: u64,
    pub worst_delay: Duration,
    pub twice: usize,
    pub short_lived: usize,
    pub late: usize,
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FIGURES {} callers={} answered={} (pool {}) errors={} {:?} unanswered={} upstream_tasks={} \
             extra_tasks={} (bound {}) worst_delay={:.1}s tokens_twice={} short_lived={} late={}",
            self.scenario,
            self.callers,
            self.answered,
            self.from_pool,
            self.errors,
            self.error_codes,
            self.timed_out,
            self.upstream_tasks,
            self.extra_tasks,
            self.extra_bound,
            self.worst_delay.as_secs_f64(),
            self.twice,
            self.short_lived,
            self.late,
        )
    }
}

/// Checks the history of `scenario`: prints its figures, then fails naming every broken promise.
pub async fn check(fleet: &Fleet, scenario: &str, history: &[Handout], rules: Rules) -> Figures {
    let mut figures = Figures {
        scenario: scenario.to_owned(),
        callers: history.len(),
        extra_bound: rules.extra_tasks,
        ..Figures::default()
    };
    let mut broken: Vec<String> = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut verdicts: HashMap<&str, Value> = HashMap::new();
    let sim_base = format!("http://{}", fleet.sim.addr);

    for h in history {
        figures.worst_delay = figures.worst_delay.max(h.took);
        if h.took > Duration::from_secs_f64(h.timeout_s) + HTTP_SLACK {
            figures.late += 1;
            broken.push(format!(
                "caller {} (gateway {}) ended after {:?}, past its {} s deadline",
                h.caller, h.gateway, h.took, h.timeout_s
            ));
        }
        match &h.outcome {
            Outcome::Answered { token, source } => {
                figures.answered += 1;
                figures.from_pool += usize::from(source == "pool");
                let kind: Kind = h.kind.parse().expect("a kind the test asked for");
                let single_use = matches!(kind.reuse(), Reuse::SingleUse { .. });
                let count = seen.entry(token.as_str()).or_default();
                *count += 1;
                if single_use && *count == 2 {
                    figures.twice += 1;
                    broken.push(format!(
                        "single-use token handed out twice (caller {}, {source})",
                        h.caller
                    ));
                }
                if !verdicts.contains_key(token.as_str()) {
                    let v = verify_at(&fleet.http, &sim_base, token).await;
                    verdicts.insert(token.as_str(), v);
                }
                let v = &verdicts[token.as_str()];
                if v["success"] != true && *count == 1 {
                    figures.twice += usize::from(v["error-codes"].to_string().contains("dup"));
                    broken.push(format!(
                        "caller {}'s token ({source}) fails verification: {}",
                        h.caller, v["error-codes"]
                    ));
                }
                let expires = v["solved_at"].as_u64().unwrap_or(0)
                    + kind.default_lifetime().as_millis() as u64;
                let left = expires.saturating_sub(h.ended_ms);
                if left < MIN_REMAINING_MS {
                    figures.short_lived += 1;
                    broken.push(format!(
                        "caller {} got an answer ({source}) with {left} ms left",
                        h.caller
                    ));
                }
            }
            Outcome::Error { status, code } => {
                figures.errors += 1;
                *figures
                    .error_codes
                    .entry(format!("{status} {code}"))
                    .or_default() += 1;
                if !rules.stopped.contains(&h.gateway) {
                    broken.push(format!(
                        "caller {} on healthy gateway {} got {status} {code}",
                        h.caller, h.gateway
                    ));
                }
            }
            Outcome::Dropped { detail } => {
                figures.errors += 1;
                *figures.error_codes.entry("dropped".into()).or_default() += 1;
                if !rules.stopped.contains(&h.gateway) {
                    broken.push(format!(
                        "caller {} on healthy gateway {} lost its connection: {detail}",
                        h.caller, h.gateway
                    ));
                }
            }
            Outcome::TimedOut { detail } => {
                figures.timed_out += 1;
                broken.push(format!(
                    "caller {} on gateway {} unanswered: {detail}",
                    h.caller, h.gateway
                ));
            }
        }
    }

    figures.upstream_tasks = fleet.submits();
    figures.extra_tasks = figures.upstream_tasks as i64 - history.len() as i64;
    if figures.upstream_tasks > history.len() as u64 + rules.extra_tasks {
        broken.push(format!(
            "{} upstream tasks for {} callers: more than the {} extra allowed ({})",
            figures.upstream_tasks,
            history.len(),
            rules.extra_tasks,
            rules.extra_why
        ));
    }
    println!("{figures}");
    if !broken.is_empty() {
        let shown: Vec<&String> = broken.iter().take(15).collect();
        panic!(
            "{scenario}: {} broken promises ({}); first ones:\n{}\n{}",
            broken.len(),
            figures,
            shown
                .iter()
                .map(|s| format!("  {s}"))
                .collect::<Vec<_>>()
                .join("\n"),
            fleet.log_tails(20)
        );
    }
    figures
}
