//! One instance's own figures, as it publishes them for the fleet (`fleet.rs`) and as the report
//! adds them up. Fleet-wide figures (the store's per-target counters, threads taken per account)
//! are not here: every instance reads the same ones from Redis. Upstream threads taken are a
//! fleet-wide count each instance reads from Redis as of its last answer (docs/REDIS.md "Thread
//! budget"), so the report takes the highest reading, not a sum.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::report::{AdmissionRow, BySource, ErrorCounts};
use crate::telemetry::histogram::{self, Buckets};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceFigures {
    pub instance: String,
    /// `serve` or `worker` ([`super::Role`]); a snapshot without one is from a `serve` that
    /// predates roles.
    #[serde(default = "serve_role")]
    pub role: String,
    /// A worker's `--concurrency`: the queue entries it solves at once.
    #[serde(default)]
    pub concurrency: Option<u64>,
    pub at_ms: u64,
    pub admission: AdmissionRow,
    /// Answers handed out by this instance since it started, by source.
    pub answers: BySource<u64>,
    /// Error counts by class since this instance started.
    pub errors: ErrorCounts,
    /// Error counts by class over the report window.
    pub errors_window: ErrorCounts,
    /// How much of the window this instance's history covers (less right after start).
    pub window_ms: u64,
    /// This instance's upstream counters per configured account.
    pub accounts: Vec<AccountCounters>,
    /// Latency buckets (`histogram::BOUNDS`) over the report window.
    pub handout: Vec<u64>,
    pub solve: Vec<u64>,
    pub ready_to_caller: Vec<u64>,
    /// One per interval, oldest first.
    pub history: Vec<Tick>,
}

fn serve_role() -> String {
    super::Role::Serve.as_str().to_owned()
}

/// A published role as the report counts it: a known one, else `other` (so a hostile snapshot
/// cannot add entries).
fn known_role(role: &str) -> &'static str {
    match role {
        "serve" => "serve",
        "worker" => "worker",
        _ => "other",
    }
}

/// What one instance handed out and failed in one interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Tick {
    /// End of the interval (Unix ms).
    pub t_ms: u64,
    pub answers: BySource<u64>,
    pub errors: u64,
    /// Upstream threads taken at the end of the interval, as this instance read them.
    #[serde(default)]
    pub threads_in_use: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountCounters {
    pub name: String,
    pub submits: u64,
    pub solved: u64,
    pub failed: u64,
    pub timeouts: u64,
    /// Threads taken on this account, fleet-wide as this instance last read them.
    #[serde(default)]
    pub threads_in_use: u64,
}

/// The fleet's sum of per-instance figures.
#[derive(Debug, Clone, Default)]
pub struct Sum {
    pub instances: u64,
    /// Instances by role (`serve`, `worker`, `other`).
    pub roles: BTreeMap<String, u64>,
    pub admission: AdmissionRow,
    pub answers: BySource<u64>,
    pub errors: ErrorCounts,
    pub errors_window: ErrorCounts,
    pub accounts: Vec<AccountCounters>,
    pub handout: Buckets,
    pub solve: Buckets,
    pub ready_to_caller: Buckets,
    /// Every instance's ticks, by interval end.
    pub history: Vec<Tick>,
}

impl Sum {
    pub fn add(&mut self, f: &InstanceFigures) {
        self.instances += 1;
        *self
            .roles
            .entry(known_role(&f.role).to_owned())
            .or_default() += 1;
        self.admission.active += f.admission.active;
        self.admission.max_concurrent += f.admission.max_concurrent;
        self.admission.running_limit += f.admission.running_limit;
        self.answers.pool += f.answers.pool;
        self.answers.solved += f.answers.solved;
        self.answers.shared += f.answers.shared;
        add_counts(&mut self.errors, &f.errors);
        add_counts(&mut self.errors_window, &f.errors_window);
        for a in &f.accounts {
            if let Some(x) = self.accounts.iter_mut().find(|x| x.name == a.name) {
                x.submits += a.submits;
                x.solved += a.solved;
                x.failed += a.failed;
                x.timeouts += a.timeouts;
                x.threads_in_use = x.threads_in_use.max(a.threads_in_use);
            } else if self.accounts.len() < super::MAX_ACCOUNTS {
                // Instances share one configuration; a name only one of them has (a rollout
                // in progress) is shown too, within the cap that bounds the list.
                self.accounts.push(a.clone());
            }
        }
        histogram::add(&mut self.handout, &f.handout);
        histogram::add(&mut self.solve, &f.solve);
        histogram::add(&mut self.ready_to_caller, &f.ready_to_caller);
        // A snapshot holds at most one ring's worth (`MAX_SNAPSHOT_BYTES` bounds what is read).
        self.history.extend(f.history.iter().take(super::HISTORY));
    }
}

fn add_counts(into: &mut ErrorCounts, from: &ErrorCounts) {
    for (class, n) in from {
        // Classes are a fixed set plus the engine's bounded caller codes per instance; a hostile
        // snapshot cannot add more than the bound.
        if into.contains_key(class) || into.len() < super::MAX_ERROR_CLASSES {
            *into.entry(class.clone()).or_default() += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(name: &str, active: u64, errors: &[(&str, u64)]) -> InstanceFigures {
        InstanceFigures {
            instance: name.into(),
            role: "serve".into(),
            admission: AdmissionRow {
                active,
                max_concurrent: 10,
                running_limit: 10,
            },
            errors: errors.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            accounts: vec![AccountCounters {
                name: "main".into(),
                submits: active,
                ..AccountCounters::default()
            }],
            handout: vec![1; 15],
            answers: BySource {
                pool: 1,
                solved: 2,
                shared: 3,
            },
            history: vec![Tick {
                t_ms: 5_000,
                errors: 1,
                ..Tick::default()
            }],
            ..InstanceFigures::default()
        }
    }

    #[test]
    fn instances_add_up_by_class_account_bucket_and_interval() {
        let mut sum = Sum::default();
        sum.add(&figures("a", 3, &[("task_failed", 2)]));
        sum.add(&figures(
            "b",
            4,
            &[("task_failed", 1), ("caller_timeout", 5)],
        ));
        assert_eq!(sum.instances, 2);
        assert_eq!(sum.admission.active, 7);
        assert_eq!(sum.admission.max_concurrent, 20);
        assert_eq!(sum.errors["task_failed"], 3);
        assert_eq!(sum.errors["caller_timeout"], 5);
        assert_eq!(sum.accounts.len(), 1);
        assert_eq!(sum.accounts[0].submits, 7);
        assert_eq!(sum.handout.iter().sum::<u64>(), 30);
        assert_eq!(sum.answers.shared, 6);
        assert_eq!(sum.history.len(), 2);
    }

    #[test]
    fn workers_are_counted_by_role_and_threads_taken_are_not_summed() {
        // A snapshot from before roles were published is a `serve` one.
        let old = r#"{"instance":"old","at_ms":0,"admission":{"active":0,"max_concurrent":0,
            "running_limit":0},"answers":{"pool":0,"solved":0,"shared":0},"errors":{},
            "errors_window":{},"window_ms":0,"accounts":[],"handout":[],"solve":[],
            "ready_to_caller":[],"history":[]}"#;
        let old: InstanceFigures = serde_json::from_str(old).expect("an old snapshot reads");
        assert_eq!(old.role, "serve");
        let mut worker = figures("w", 0, &[]);
        worker.role = "worker".into();
        worker.accounts[0].threads_in_use = 7;
        let mut front = figures("f", 0, &[]);
        front.accounts[0].threads_in_use = 5;
        let mut sum = Sum::default();
        sum.add(&old);
        sum.add(&front);
        sum.add(&worker);
        assert_eq!(sum.roles["serve"], 2);
        assert_eq!(sum.roles["worker"], 1);
        // Each read the one fleet-wide count; the highest reading is the freshest under load.
        assert_eq!(sum.accounts[0].threads_in_use, 7);
    }

    #[test]
    fn a_snapshot_cannot_grow_the_report_past_its_bounds() {
        let classes: Vec<(String, u64)> = (0..1000).map(|i| (format!("c{i}"), 1)).collect();
        let mut hostile = figures("x", 1, &[]);
        hostile.errors = classes.into_iter().collect();
        hostile.accounts = (0..1000)
            .map(|i| AccountCounters {
                name: format!("a{i}"),
                ..AccountCounters::default()
            })
            .collect();
        let mut sum = Sum::default();
        sum.add(&hostile);
        assert_eq!(sum.errors.len(), crate::status::MAX_ERROR_CLASSES);
        // A role this version does not know is counted as `other`, never as a new entry.
        for i in 0..100 {
            let mut odd = figures(&format!("r{i}"), 1, &[]);
            odd.role = format!("role{i}");
            sum.add(&odd);
        }
        assert_eq!(sum.roles.len(), 2, "{:?}", sum.roles);
        assert_eq!(sum.roles["other"], 100);
        assert_eq!(sum.accounts.len(), crate::status::MAX_ACCOUNTS);
    }
}
