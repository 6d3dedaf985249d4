//! The plan advisor's answer on threads, from the demand log (`status::demand`): how many
//! upstream threads the busiest stretch of a window needed, with the figures it comes from
//! (docs/OPERATIONS.md "Plan advice"). `GET /v1/advice` and `captcha-gateway advise` show it.
//!
//! Little's law: the average number of upstream threads in use over a bucket, `L`, is the time
//! its tasks held threads, summed, divided by the bucket's span (arrival rate times mean time
//! held). The time held is measured from taking a thread to giving it back (the submit, the
//! provider's work, the poll that saw the answer, a departed caller's task kept to its horizon),
//! not the shorter submit-to-ready solve time. Where the plan was full, callers waited for a thread: each would have held one, so
//! the bucket's demand is `D = L + the most callers waiting at once`. Arrivals come in bursts,
//! so the plan needs headroom above the busiest bucket's `D`: `D + 2 * sqrt(D)` covers Poisson
//! arrivals 97 % of the time (the rule docs/OPERATIONS.md "Sizing threads" gives for sizing by
//! hand), so callers at that peak neither wait for a thread nor are refused. The most threads
//! the sampler saw in use at once is shown beside it, and the advice is never below it.

mod accounts;
pub mod pools;
pub mod prices;
pub mod replay;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::accounts::{AccountAdvice, AccountNow};
pub use self::pools::{PoolAdvice, PoolNow, PoolPlan};
use self::prices::Prices;
use super::demand::{Bucket, KindDemand};
use crate::model::Kind;

/// The shortest `Retry-After` a refusal carries (`overloaded`; `fleet_busy` sends 5 s).
const MIN_RETRY_AFTER_S: f64 = 1.0;

/// What the advice is asked about: the window, and the plan as it is now.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The log's bucket span, and how far back to look.
    pub bucket: Duration,
    pub window: Duration,
    pub scope: Scope,
    pub now_ms: u64,
    /// The threads every account allows now.
    pub cap: u64,
    /// The accounts configured here.
    pub accounts: Vec<AccountNow>,
    pub prices: Prices,
    /// The pools as they are, and the hit rate to size them for.
    pub pools: PoolPlan,
    /// The wait for a thread 95 % of callers should stay within, if the user states one.
    pub wait_target: Option<Duration>,
    /// When the gateway turns callers away, as configured now (the replay counts them).
    pub limits: replay::Limits,
}

/// Whose demand the advice read.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Every instance on this Redis (each writes its share of every bucket).
    Fleet,
    /// This process only: no Redis, or Redis away.
    Instance,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Advice {
    pub scope: Scope,
    /// The span looked at, and the span of one bucket.
    pub window_s: u64,
    pub bucket_s: f64,
    /// Buckets in the window that had demand (quiet ones are not kept).
    pub buckets: usize,
    pub threads: ThreadAdvice,
    /// Each account: configured here, or with work in the window on another instance.
    pub accounts: Vec<AccountAdvice>,
    /// Every priced account's cost per month, added up; `None` when nothing is priced.
    pub cost: Option<TotalCost>,
    /// With queue workers in the fleet now: how many KEDA should allow.
    #[serde(default)]
    pub queue_workers: Option<WorkerAdvice>,
    /// The hit rate pools are sized for, and each busy poolable target and configured pool.
    #[serde(default)]
    pub pool_hit_rate_goal: f64,
    #[serde(default)]
    pub pools: Vec<PoolAdvice>,
    /// The window's demand replayed under the plan now and the plan recommended; `None`
    /// without demand.
    #[serde(default)]
    pub replay: Option<replay::Replay>,
    /// Each kind with demand in the window.
    pub kinds: Vec<KindFigures>,
}

/// `maxReplicaCount` for the queue workers (docs/DEPLOY.md "Sizing `maxReplicaCount`"): the
/// recommended threads over the entries one worker takes at once. More workers than that hold
/// entries no thread is free for; fewer leave threads idle while the queue waits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorkerAdvice {
    /// Workers publishing to the fleet now.
    pub workers_now: u64,
    /// The largest `--concurrency` among them.
    pub concurrency: u64,
    pub max_replica_count: u64,
    pub how: String,
}

/// The workers' advice from the `--concurrency` of each worker live now; `None` without one.
pub fn queue_workers(concurrencies: &[u64], threads: u64) -> Option<WorkerAdvice> {
    let concurrency = concurrencies.iter().copied().max().filter(|c| *c > 0)?;
    let max_replica_count = threads.div_ceil(concurrency).max(1);
    Some(WorkerAdvice {
        workers_now: concurrencies.len() as u64,
        concurrency,
        max_replica_count,
        how: format!(
            "ceil({threads} recommended threads / {concurrency} entries per worker): more \
             workers would hold entries no thread is free for"
        ),
    })
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TotalCost {
    pub currency: String,
    pub now_per_month: f64,
    /// Each account at its own recommendation.
    pub recommended_per_month: f64,
    /// How the amounts were derived, in one sentence.
    pub how: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ThreadAdvice {
    /// The threads the plan allows now (every account's cap, fleet-wide with Redis).
    pub cap: u64,
    /// The most threads in use at one sample in the window.
    pub observed_peak_in_use: u64,
    /// Upstream threads in use on average over the busiest bucket (Little's law: the time
    /// threads were held, summed, over the bucket's span).
    pub littles_law_at_peak: f64,
    /// The most callers that waited for a thread at once in that bucket.
    pub waiting_at_peak: u64,
    /// Callers refused at once in that bucket (`overloaded`, `fleet_busy`).
    pub refused_at_peak: u64,
    /// Threads wanted at that bucket: in use, waiting, and refused callers' threads.
    pub demand_at_peak: f64,
    /// When that bucket started (ms since the epoch); `None` without any solve in the window.
    pub peak_at_ms: Option<u64>,
    /// Threads above the peak's demand (`littles_law_at_peak + waiting_at_peak`) for bursts:
    /// twice its square root.
    pub headroom: f64,
    /// `max(ceil(demand + headroom), observed_peak_in_use)`.
    pub recommended: u64,
    /// Callers a tenant's own limit (`max_concurrent`, `max_solves_per_hour`) refused in the
    /// window: shown, not sized for, since the operator set those limits.
    #[serde(default)]
    pub tenant_refused: u64,
    /// The derivation in one sentence, with the figures.
    pub how: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KindFigures {
    pub kind: String,
    /// Callers in the window (answered, failed or gone), and the most per second in one
    /// bucket.
    pub callers: u64,
    pub peak_callers_per_s: f64,
    /// Of `callers`, those gone before an answer (hung up).
    #[serde(default)]
    pub departed: u64,
    /// Upstream solves finished, the most per second in one bucket, their mean solve time,
    /// and its median and 95th percentile from the log's histogram (`None` with too few).
    pub solves: u64,
    pub peak_solves_per_s: f64,
    pub mean_solve_s: Option<f64>,
    #[serde(default)]
    pub solve_p50_s: Option<f64>,
    #[serde(default)]
    pub solve_p95_s: Option<f64>,
    /// Seconds threads were held for the kind in the window, summed (what the plan carried).
    pub thread_seconds: f64,
    /// Answers from a pool over answered callers.
    pub pool_hit_rate: Option<f64>,
    pub failed: u64,
}

/// The advice over `buckets` (those of the window, oldest first).
pub fn advise<'a>(buckets: impl IntoIterator<Item = &'a Bucket>, plan: &Plan) -> Advice {
    let buckets: Vec<&Bucket> = buckets.into_iter().collect();
    let (cap_now, span) = (plan.cap, plan.bucket.as_secs_f64().max(1e-3));
    let mut kinds: Vec<(Kind, KindDemand, f64, f64)> = Vec::new();
    let (mut count, mut observed, mut peak_at) = (0, 0, None);
    let (mut peak, mut waiting, mut refused, mut demand) = (0.0_f64, 0, 0, 0.0_f64);
    let tenant_refused: u64 = buckets.iter().map(|b| b.tenant_refused).sum();
    let held = |b: &Bucket| b.kinds.iter().map(|(_, d)| d.threads_held_s()).sum::<f64>();
    let solves = |b: &Bucket| b.kinds.iter().map(|(_, d)| d.solves).sum::<u64>();
    let window_hold = {
        let n = buckets.iter().map(|b| solves(b)).sum::<u64>();
        buckets.iter().map(|b| held(b)).sum::<f64>() / n.max(1) as f64
    };
    for b in buckets.iter().copied() {
        count += 1;
        observed = observed.max(b.threads_peak);
        let in_flight = held(b) / span;
        // A refused caller would have held a thread as long as the bucket's solves did. It
        // counts once per refusal, and a refused caller comes back no sooner than the
        // `Retry-After` it was sent (1 s at the least): so each refusal counts for at most 1 s,
        // and a caller refused again and again for at most one thread (a lower bound for
        // callers that give up after one refusal, an upper one for those that ignore it).
        let hold = match solves(b) {
            0 => window_hold,
            n => held(b) / n as f64,
        }
        .min(MIN_RETRY_AFTER_S);
        let wanted = in_flight + b.waiting_peak as f64 + b.refused as f64 / span * hold;
        if wanted > demand {
            (demand, peak, waiting, refused, peak_at) = (
                wanted,
                in_flight,
                b.waiting_peak,
                b.refused,
                Some(b.start_ms),
            );
        }
        for (kind, d) in &b.kinds {
            let i = match kinds.iter().position(|(k, ..)| k == kind) {
                Some(i) => i,
                None => {
                    kinds.push((*kind, KindDemand::default(), 0.0, 0.0));
                    kinds.len() - 1
                }
            };
            let entry = &mut kinds[i];
            entry.1.add(d);
            entry.2 = entry.2.max(d.callers as f64 / span);
            entry.3 = entry.3.max(d.solves as f64 / span);
        }
    }
    kinds.sort_by_key(|(k, ..)| k.index());
    let headroom = 2.0 * demand.sqrt();
    let needed = (demand + headroom).ceil() as u64;
    let recommended = needed.max(observed);
    let mut waited = if waiting > 0 {
        format!(", and {waiting} callers waited for a thread at once, each wanting one")
    } else {
        String::new()
    };
    if refused > 0 {
        waited.push_str(&format!(
            ", and {refused} callers were refused (each wanting a thread for as long as a solve \
             held one, at most the 1 s until it may retry)"
        ));
    }
    let limited = if tenant_refused > 0 {
        format!(
            "; {tenant_refused} callers in the window were refused by tenant limits, which are \
             yours to set, so not sized for"
        )
    } else {
        String::new()
    };
    let how = format!(
        "Little's law at the busiest {span:.0} s bucket: {peak:.2} upstream threads in use on \
         average (the time threads were held, summed, over the bucket's span){waited}: {demand:.2} wanted; plus 2 * sqrt of that \
         ({headroom:.2}) for bursts, it gives {needed}; the most seen in use at once was \
         {observed}; the plan allows {cap_now} now{limited}"
    );
    // The window's rate of solves, over the part of it the log covers (a gateway started an
    // hour ago has an hour of demand, not a day's).
    let window_s = plan.window.as_secs_f64();
    let covered_s = buckets.first().map_or(window_s, |b| {
        (plan.now_ms.saturating_sub(b.start_ms) as f64 / 1000.0).clamp(span, window_s.max(span))
    });
    let accounts = accounts::advise(&buckets, span, &plan.accounts, &plan.prices, covered_s);
    let priced: Vec<_> = accounts.iter().filter_map(|a| a.cost.as_ref()).collect();
    let cost = (!priced.is_empty()).then(|| TotalCost {
        currency: plan.prices.currency.clone(),
        now_per_month: priced.iter().map(|c| c.now_per_month).sum(),
        recommended_per_month: priced.iter().map(|c| c.recommended_per_month).sum(),
        how: format!(
            "each priced account's threads at its monthly thread price (its cap now, then its \
             own recommendation), plus its solves at its per-1000 prices at the rate of the \
             {} the log covers, over a 30-day month",
            span_text(covered_s)
        ),
    });
    let lead_s = |kind: Kind| {
        kinds
            .iter()
            .find(|(k, ..)| *k == kind)
            .filter(|(_, d, ..)| d.solves > 0)
            .map_or_else(
                || kind.typical_ready().as_secs_f64(),
                |(_, d, ..)| d.threads_held_s() / d.solves as f64,
            )
    };
    let mut pools = pools::advise(&buckets, span, covered_s, &plan.pools, &plan.prices, lead_s);
    let models: Vec<replay::KindModel> = kinds
        .iter()
        .map(|(kind, d, ..)| replay::KindModel {
            kind: *kind,
            lead_s: lead_s(*kind),
            shelf_s: plan.pools.shelf_s(*kind),
            solve_times: d.solve_times,
        })
        .collect();
    let replay = (!buckets.is_empty())
        .then(|| replays(&buckets, span, plan, recommended, &models, &mut pools));
    Advice {
        scope: plan.scope,
        window_s: plan.window.as_secs(),
        bucket_s: span,
        buckets: count,
        threads: ThreadAdvice {
            cap: cap_now,
            observed_peak_in_use: observed,
            littles_law_at_peak: peak,
            waiting_at_peak: waiting,
            refused_at_peak: refused,
            demand_at_peak: demand,
            peak_at_ms: peak_at,
            headroom,
            recommended,
            tenant_refused,
            how,
        },
        accounts,
        cost,
        queue_workers: None,
        pool_hit_rate_goal: plan.pools.hit_rate,
        pools,
        replay,
        kinds: kinds
            .into_iter()
            .map(|(kind, d, peak_callers, peak_solves)| {
                let answered = d.pool + d.solved + d.shared;
                KindFigures {
                    kind: kind.as_str().to_owned(),
                    callers: d.callers,
                    peak_callers_per_s: peak_callers,
                    departed: d.departed,
                    solves: d.solves,
                    peak_solves_per_s: peak_solves,
                    mean_solve_s: (d.solves > 0).then(|| d.solve_seconds / d.solves as f64),
                    solve_p50_s: d.solve_times.quantile(0.5),
                    solve_p95_s: d.solve_times.quantile(0.95),
                    thread_seconds: d.threads_held_s(),
                    pool_hit_rate: (answered > 0).then(|| d.pool as f64 / answered as f64),
                    failed: d.failed,
                }
            })
            .collect(),
    }
}

/// The window replayed under the plan now and the one recommended (threads and pools), with
/// each advised pool's replayed hit rates set on its advice.
fn replays(
    buckets: &[&Bucket],
    span: f64,
    plan: &Plan,
    threads: u64,
    models: &[replay::KindModel],
    pools: &mut [PoolAdvice],
) -> replay::Replay {
    let now = replay::ReplayPlan {
        threads: plan.cap,
        pools: plan
            .pools
            .configured
            .iter()
            .map(|p| replay::ReplayPool {
                id: p.id.clone(),
                kind: p.kind,
                size: p.size,
            })
            .collect(),
        refill_look_s: plan.pools.refill_look_s,
        limits: plan.limits,
    };
    let recommended_plan = replay::ReplayPlan {
        threads,
        pools: pools
            .iter()
            .filter(|p| p.recommended > 0)
            .filter_map(|p| {
                let kind = Kind::ALL.iter().find(|k| k.as_str() == p.kind)?;
                Some(replay::ReplayPool {
                    id: p.id.clone(),
                    kind: *kind,
                    size: p.recommended,
                })
            })
            .collect(),
        refill_look_s: plan.pools.refill_look_s,
        limits: plan.limits,
    };
    // One seed for both: the two plans meet the same callers at the same times.
    let seed = buckets.first().map_or(0, |b| b.start_ms);
    let (now, replayed_s, complete_now) =
        replay::replay(buckets, span, &now, models, &plan.prices, seed);
    let (recommended, _, complete) =
        replay::replay(buckets, span, &recommended_plan, models, &plan.prices, seed);
    let rate = |r: &replay::Replayed, id: &str| {
        r.pools.iter().find(|p| p.id == id).and_then(|p| p.hit_rate)
    };
    for p in pools.iter_mut() {
        p.replayed_hit_rate_now = rate(&now, &p.id);
        p.replayed_hit_rate = rate(&recommended, &p.id);
    }
    let for_wait = plan.wait_target.map(|target| {
        let replayed = |threads: u64| {
            // Nobody turned away: a plan that refused its callers, or let their deadline
            // pass, would keep the wait of the few it served short and look as if it met it.
            let plan_then = replay::ReplayPlan {
                threads,
                limits: replay::Limits::default(),
                ..recommended_plan.clone()
            };
            let (r, ..) = replay::replay(buckets, span, &plan_then, models, &plan.prices, seed);
            r.p95_wait_s
        };
        replay::for_wait(target.as_secs_f64(), threads, replayed)
    });
    replay::Replay {
        replayed_s,
        complete: complete_now && complete,
        how: format!(
            "the last {} of demand replayed in virtual time: each bucket's callers at random \
             times within it, solves holding a thread for the kind's measured time per solve \
             (drawn from the recorded solve times' distribution, else 0.5-1.5 times the mean), \
             callers before refills, pools starting full, refilled at once after a take and \
             at the refiller's next look otherwise, and expiring unused answers at their shelf \
             life",
            span_text(replayed_s)
        ),
        now,
        recommended,
        for_wait,
    }
}

/// `s` seconds as a person reads a span.
fn span_text(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(start_ms: u64, solves: u64, mean: f64, threads_peak: u64) -> Bucket {
        Bucket {
            start_ms,
            kinds: vec![(
                Kind::RecaptchaV2,
                KindDemand {
                    callers: solves,
                    solved: solves,
                    solves,
                    solve_seconds: solves as f64 * mean,
                    ..KindDemand::default()
                },
            )],
            threads_peak,
            threads_cap: 50,
            waiting_peak: 0,
            accounts: Vec::new(),
            refused: 0,
            targets: Vec::new(),
            tenant_refused: 0,
        }
    }

    /// A plan of `cap` threads on one unpriced account, asked an hour after the log began.
    fn plan(bucket_s: u64, window_s: u64, cap: u64) -> Plan {
        Plan {
            bucket: Duration::from_secs(bucket_s),
            window: Duration::from_secs(window_s),
            scope: Scope::Instance,
            now_ms: 3_600_000,
            cap,
            accounts: Vec::new(),
            prices: Prices::default(),
            pools: PoolPlan::default(),
            wait_target: None,
            limits: replay::Limits::default(),
        }
    }

    #[test]
    fn the_busiest_bucket_sets_the_threads_by_littles_law() {
        // 60 s buckets: 1 solve/s of 5 s (5 in flight), then 4 solves/s of 10 s (40 in flight).
        let log = [bucket(0, 60, 5.0, 7), bucket(60_000, 240, 10.0, 38)];
        let a = advise(&log, &plan(60, 3600, 50));
        assert!((a.threads.littles_law_at_peak - 40.0).abs() < 1e-9);
        assert_eq!(a.threads.peak_at_ms, Some(60_000));
        // 40 + 2 * sqrt(40) = 52.6
        assert_eq!(a.threads.recommended, 53);
        assert_eq!(a.threads.observed_peak_in_use, 38);
        let k = &a.kinds[0];
        assert_eq!(
            (k.kind.as_str(), k.callers, k.solves),
            ("recaptcha_v2", 300, 300)
        );
        assert!((k.peak_solves_per_s - 4.0).abs() < 1e-9);
        assert!((k.mean_solve_s.unwrap() - 9.0).abs() < 1e-9);
        assert_eq!(k.pool_hit_rate, Some(0.0));
        assert!(a.threads.how.contains("40.00"), "{}", a.threads.how);
    }

    #[test]
    fn a_wait_target_is_not_met_by_turning_callers_away() {
        // 4 solves a second of 10 s: 40 threads in use. A gateway that lets one caller wait
        // and refuses the rest would keep the served callers' waits short with far fewer.
        let log: Vec<Bucket> = (0..10).map(|i| bucket(i * 60_000, 240, 10.0, 38)).collect();
        let mut p = plan(60, 3600, 50);
        p.wait_target = Some(Duration::from_secs(5));
        p.limits = replay::Limits {
            max_waiting: Some(1),
            deadline_s: Some(30.0),
        };
        let a = advise(&log, &p);
        let replay = a.replay.unwrap();
        assert!(replay.now.refused > 0, "{:?}", replay.now);
        let w = replay.for_wait.unwrap();
        assert!(w.met && w.threads >= 35, "{w:?}");
    }

    #[test]
    fn tenant_limit_refusals_are_shown_and_not_sized_for() {
        let log = [bucket(0, 60, 5.0, 7), bucket(60_000, 240, 10.0, 38)];
        let plain = advise(&log, &plan(60, 3600, 50));
        let mut limited = log.clone();
        limited[1].tenant_refused = 500;
        limited[0].tenant_refused = 20;
        let a = advise(&limited, &plan(60, 3600, 50));
        assert_eq!(a.threads.tenant_refused, 520);
        assert_eq!(a.threads.recommended, plain.threads.recommended);
        assert!(
            a.threads
                .how
                .contains("520 callers in the window were refused by tenant limits"),
            "{}",
            a.threads.how
        );
    }

    #[test]
    fn threads_count_the_time_they_were_held_and_older_shares_their_solve_time() {
        // 60 s buckets, 60 solves of 2 s each; the threads were held 6 s each (polling).
        let mut held = bucket(0, 60, 2.0, 6);
        held.kinds[0].1.thread_seconds = 360.0;
        let a = advise(&[held], &plan(60, 60, 10));
        assert!((a.threads.littles_law_at_peak - 6.0).abs() < 1e-9);
        assert!((a.kinds[0].mean_solve_s.unwrap() - 2.0).abs() < 1e-9);
        assert!((a.kinds[0].thread_seconds - 360.0).abs() < 1e-9);
        // A share written before threads were timed: its solve time stands in.
        let older: Bucket = serde_json::from_value(
            serde_json::to_value(bucket(0, 60, 2.0, 2))
                .map(|mut v| {
                    v["kinds"][0][1]
                        .as_object_mut()
                        .unwrap()
                        .remove("thread_seconds");
                    v
                })
                .unwrap(),
        )
        .unwrap();
        let a = advise(&[older], &plan(60, 60, 10));
        assert!((a.threads.littles_law_at_peak - 2.0).abs() < 1e-9);
    }

    #[test]
    fn callers_waiting_for_a_full_plan_count_as_demand() {
        // A 10-thread plan full for the bucket (10 in flight) with 6 callers waiting: 16 wanted.
        let mut full = bucket(0, 600, 1.0, 10);
        full.waiting_peak = 6;
        let a = advise(&[full], &plan(60, 60, 10));
        assert_eq!(a.threads.waiting_at_peak, 6);
        // 16 + 2 * sqrt(16) = 24
        assert_eq!(a.threads.recommended, 24);
        assert!(
            a.threads.how.contains("6 callers waited"),
            "{}",
            a.threads.how
        );
    }

    #[test]
    fn the_advice_is_never_below_what_was_seen_in_use() {
        let log = [bucket(0, 6, 1.0, 9)];
        let a = advise(&log, &plan(60, 60, 10));
        assert_eq!(a.threads.recommended, 9);
        let none = advise(&[], &plan(60, 60, 10));
        assert_eq!(
            (none.threads.recommended, none.threads.peak_at_ms),
            (0, None)
        );
        assert!(none.kinds.is_empty());
    }

    #[test]
    fn each_account_is_sized_from_its_own_share_and_priced_by_its_provider() {
        use crate::status::demand::AccountDemand;
        use prices::ProviderPrices;
        let account =
            |name: &str, provider: &str, held: f64, waiting: u64, solved: u64| AccountDemand {
                name: name.into(),
                provider: provider.into(),
                thread_seconds: held,
                solved: vec![(Kind::RecaptchaV2, solved)],
                in_use_peak: 3,
                cap: 10,
                waiting_peak: waiting,
            };
        // 60 s buckets. `main` (CaptchaAI, 10 threads) carries 9 on average with 7 waiting at
        // its peak; `spill` (2captcha) carries 1.
        let mut b0 = bucket(0, 60, 1.0, 9);
        b0.accounts = vec![
            account("main", "captchaai", 300.0, 0, 300),
            account("spill", "2captcha", 60.0, 0, 50),
        ];
        let mut b1 = bucket(60_000, 60, 1.0, 10);
        b1.accounts = vec![
            account("main", "captchaai", 540.0, 7, 500),
            account("spill", "2captcha", 30.0, 0, 50),
        ];
        let mut p = plan(60, 3600, 20);
        p.now_ms = 120_000;
        p.accounts = vec![AccountNow {
            name: "main".into(),
            provider: "captchaai".into(),
            cap: 10,
        }];
        p.prices = Prices {
            currency: "USD".into(),
            providers: vec![
                ProviderPrices {
                    provider: "captchaai".into(),
                    thread_month: Some(2.0),
                    per_1000: Vec::new(),
                },
                ProviderPrices {
                    provider: "2captcha".into(),
                    thread_month: None,
                    per_1000: vec![(Kind::RecaptchaV2, 3.0)],
                },
            ],
        };
        let a = advise(&[b0, b1], &p);
        let names: Vec<&str> = a.accounts.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            names,
            ["main", "spill"],
            "configured first, then the fleet's others"
        );
        let main = &a.accounts[0];
        // 9 + 7 = 16 wanted; 16 + 2 * 4 = 24.
        assert!((main.littles_law_at_peak - 9.0).abs() < 1e-9);
        assert_eq!(
            (main.waiting_at_peak, main.recommended, main.solves),
            (7, 24, 800)
        );
        let c = main.cost.as_ref().unwrap();
        assert_eq!((c.now_per_month, c.recommended_per_month), (20.0, 48.0));
        let spill = &a.accounts[1];
        assert_eq!((spill.recommended, spill.cap), (3, 10));
        // 100 solves in the 120 s the log covers: 2,160,000 a month at 3 per 1000.
        let c = spill.cost.as_ref().unwrap();
        assert!((c.solves_per_month.unwrap() - 6480.0).abs() < 1e-6, "{c:?}");
        let total = a.cost.as_ref().unwrap();
        assert!((total.now_per_month - 6500.0).abs() < 1e-6);
        assert!((total.recommended_per_month - 6528.0).abs() < 1e-6);
        assert!(
            total.how.contains("the 2 min the log covers"),
            "{}",
            total.how
        );
        assert_eq!(advise(&[], &plan(60, 60, 1)).cost, None, "nothing priced");
    }

    #[test]
    fn keda_allows_the_recommended_threads_worth_of_workers() {
        let w = queue_workers(&[32, 16], 76).unwrap();
        assert_eq!(
            (w.workers_now, w.concurrency, w.max_replica_count),
            (2, 32, 3)
        );
        assert_eq!(queue_workers(&[8], 0).unwrap().max_replica_count, 1);
        assert_eq!(queue_workers(&[], 76), None);
    }

    #[test]
    fn refused_callers_count_as_threads_for_as_long_as_a_solve_held_one() {
        // 60 s buckets: 6 in use (360 s held over 60 solves of 6 s), and 240 refusals: 4 a
        // second, each counted for 1 s (its caller may retry then), 4 more. 10 + 2 * sqrt(10)
        // = 16.3.
        let mut b = bucket(0, 60, 6.0, 6);
        b.refused = 240;
        let a = advise(&[b], &plan(60, 60, 6));
        assert_eq!(
            (a.threads.refused_at_peak, a.threads.recommended),
            (240, 17)
        );
        assert!((a.threads.demand_at_peak - 10.0).abs() < 1e-9);
        assert!(
            a.threads.how.contains("240 callers were refused"),
            "{}",
            a.threads.how
        );
        // Solves shorter than a second count for their own time.
        let mut b = bucket(0, 60, 0.5, 1);
        b.refused = 240;
        let a = advise(&[b], &plan(60, 60, 6));
        assert!((a.threads.demand_at_peak - 2.5).abs() < 1e-9);
    }
}
