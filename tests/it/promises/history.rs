//! The check every scenario ends with: each handout in the history, each token verified once
//! at the simulator, and the figures the issue note quotes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use captcha_gateway::model::{Kind, Reuse};
use serde_json::Value;

use super::harness::{Fleet, HTTP_SLACK, Handout, MIN_REMAINING_S, Outcome, POOLED_TASKS};
use crate::support::verify_at;

const MIN_REMAINING_MS: u64 = MIN_REMAINING_S * 1000;
/// What an answer may age between its hand-out and its caller reading the reply (the check
/// measures at the caller's end): loopback HTTP on a loaded machine, generously.
const REPLY_TRIP_MS: u64 = 500;

/// What a scenario allows beyond the promises.
pub struct Rules {
    /// Gateways the scenario stopped or killed: their own callers that ended after the signal
    /// may get a clear error or a dropped connection (a client retries elsewhere); everyone
    /// else's callers, and theirs before it, get answers.
    pub stopped: HashSet<usize>,
    /// Upstream tasks allowed beyond one per caller, and why (besides the pools' restocks of
    /// answers that outlived their short usable life, which `check` adds).
    pub extra_tasks: u64,
    pub extra_why: &'static str,
    /// A token handed out twice is the exposure this scenario shows on purpose (a setting that
    /// is off, docs/REDIS.md), counted but not a broken promise.
    pub twice_expected: bool,
}

impl Rules {
    /// The rules of a fault that stops no gateway.
    pub fn allowing(extra_tasks: u64, extra_why: &'static str) -> Rules {
        Rules {
            stopped: HashSet::new(),
            extra_tasks,
            extra_why,
            twice_expected: false,
        }
    }
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
    /// Answers the gateways gave up because a failover lost their finish's outcome.
    pub given_up: u64,
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
             extra_tasks={} (bound {}, {} answers given up) worst_delay={:.1}s tokens_twice={} short_lived={} late={}",
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
            self.given_up,
            self.worst_delay.as_secs_f64(),
            self.twice,
            self.short_lived,
            self.late,
        )
    }
}

/// Whether `h`'s error is allowed: its gateway was stopped or killed by the scenario, and the
/// caller ended after the signal.
fn excused(fleet: &Fleet, rules: &Rules, h: &Handout) -> bool {
    let signalled = fleet.signalled.lock().unwrap().get(&h.gateway).copied();
    rules.stopped.contains(&h.gateway) && signalled.is_some_and(|at| h.ended_ms >= at)
}

/// Tasks the configured pools may have started to replace answers nobody took within their
/// usable life (its lifetime less `MIN_REMAINING_S`): the whole stock once per usable life since the
/// fleet started.
fn restocks(fleet: &Fleet) -> u64 {
    if !fleet.pools {
        return 0;
    }
    let usable = (fleet.lifetime_s - MIN_REMAINING_S) as f64;
    POOLED_TASKS * (fleet.started.elapsed().as_secs_f64() / usable).ceil() as u64
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
                }
                if single_use && *count == 2 && !rules.twice_expected {
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
                let expires = v["solved_at"].as_u64().unwrap_or(0) + fleet.lifetime_s * 1000;
                let left = expires.saturating_sub(h.ended_ms);
                if left + REPLY_TRIP_MS < MIN_REMAINING_MS {
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
                if !excused(fleet, &rules, h) {
                    broken.push(format!(
                        "caller {} on gateway {} got {status} {code} before any signal",
                        h.caller, h.gateway
                    ));
                }
            }
            Outcome::Dropped { detail } => {
                figures.errors += 1;
                *figures.error_codes.entry("dropped".into()).or_default() += 1;
                if !excused(fleet, &rules, h) {
                    broken.push(format!(
                        "caller {} on gateway {} lost its connection before any signal: {detail}",
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
    let restocks = restocks(fleet);
    // The price of never handing a token out twice: an answer whose finish was lost with a
    // replaced master is given up (docs/REDIS.md "When a reply is lost"), each one an operation
    // whose reply was lost, and each one counted where an operator sees it.
    figures.given_up = fleet
        .metric("captcha_gateway_store_answers_given_up_total", &[])
        .await;
    let unknown = fleet
        .metric("captcha_gateway_store_operations_unknown_total", &[])
        .await;
    if figures.given_up > unknown {
        broken.push(format!(
            "{} answers given up for {unknown} operations whose reply was lost",
            figures.given_up
        ));
    }
    figures.extra_bound = rules.extra_tasks + restocks + figures.given_up;
    if figures.upstream_tasks > history.len() as u64 + figures.extra_bound {
        broken.push(format!(
            "{} upstream tasks for {} callers: more than the {} extra allowed ({}, {restocks} \
             restocks of pooled answers that outlived their usable life, and {} answers given up \
             when a failover lost their finish)",
            figures.upstream_tasks,
            history.len(),
            figures.extra_bound,
            rules.extra_why,
            figures.given_up
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
