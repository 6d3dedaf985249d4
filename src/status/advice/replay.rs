//! "What would this plan have done?": the window's recorded demand replayed in virtual time
//! against a plan (threads, and a pool size per target), so the advice shows the plan as it is
//! and the plan it recommends side by side: callers who waited for a thread and how long, pool
//! hits, answers expired unused, solves, cost (docs/OPERATIONS.md "Plan advice").
//!
//! The replay is a discrete-event model of what the gateway does with a plan, not a clock: a
//! day of history runs in well under a second. Each bucket's callers of each kind arrive at
//! random (uniform) times within it, the busiest targets' callers on their own streams. A
//! solve holds a thread for a time drawn from the kind's recorded solve times (the demand log's
//! histogram), scaled so their mean is the measured thread time per solve; without a histogram
//! (an older log), uniformly from half to one and a half times that mean. Callers
//! take threads before pool refills (refill priority), in arrival order. A pooled target's
//! caller takes its oldest ready answer; finding none, it claims a refill in flight, or starts
//! its own solve. Only a refill that holds a thread can be claimed: one still waiting for a
//! thread waits at refill priority, behind every caller, so a caller that joined it could wait
//! without end on a plan its callers keep full. A pool refills whatever leaves it (taken,
//! claimed, expired) at once, starts full, and its answers expire unused at the kind's shelf
//! life. Threads never fail and
//! callers never give up: the replay measures the plan, not the provider.
//!
//! Bounded: the replay takes the newest buckets holding at most [`MAX_CALLERS`] callers, and
//! stops after [`MAX_EVENTS`] events (`complete` is then false).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::prices::{MONTH_S, Prices};
use crate::model::Kind;
use crate::status::demand::{Bucket, SolveTimes};

/// Callers the replay takes at most (the newest buckets that hold them).
pub const MAX_CALLERS: u64 = 2_000_000;
/// Events the replay handles at most (a pool refilled every shelf life for days is many).
pub const MAX_EVENTS: u64 = 20_000_000;

/// When the gateway turns a caller away rather than let it wait for a thread.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Callers that may wait for a thread before the next is refused (`fleet_busy`): the
    /// fleet's instances' `max_thread_waiters` added up; `None` for no such refusal.
    pub max_waiting: Option<u64>,
    /// How long a caller waits for its answer (`default_solve_timeout`) before it is told no
    /// (504); `None` for no deadline.
    pub deadline_s: Option<f64>,
}

/// A plan to replay: the threads, and the pools.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayPlan {
    pub threads: u64,
    pub pools: Vec<ReplayPool>,
    pub limits: Limits,
    /// How often the gateway's pool refiller looks at its pools unprompted, in seconds
    /// (`RefillSettings::check_every`): an expired answer is replaced then; a take, or a caller
    /// claiming a refill, prompts it at once. 0: at once always.
    pub refill_look_s: f64,
}

/// A pool for a target (by its id), of a kind, kept at a size.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayPool {
    pub id: String,
    pub kind: Kind,
    pub size: u32,
}

/// What the replay needs to know of each kind.
pub struct KindModel {
    pub kind: Kind,
    /// Mean thread time per solve, and the shelf life of an answer, in seconds.
    pub lead_s: f64,
    pub shelf_s: f64,
    /// The window's solve times: the shape thread times are drawn in (scaled to `lead_s`);
    /// empty for a uniform 0.5-1.5 times `lead_s`.
    pub solve_times: SolveTimes,
}

impl KindModel {
    /// One solve's thread time: drawn from the recorded solve times' shape, scaled so their
    /// mean is the measured thread time per solve (a thread is held from the submit to the
    /// poll that saw the answer, longer than the solve by the poll's lag).
    fn draw(&self, rng: &mut StdRng) -> f64 {
        let (u, v) = (rng.random::<f64>(), rng.random::<f64>());
        match (self.solve_times.draw(u, v), self.solve_times.draw_mean()) {
            (Some(t), Some(mean)) if mean > 0.0 => self.lead_s * t / mean,
            _ => self.lead_s * (0.5 + u),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Replayed {
    pub threads: u64,
    pub callers: u64,
    /// Callers refused at once, the plan's threads all taken and `max_thread_waiters` already
    /// waiting (429 `fleet_busy`), and callers whose deadline passed while they waited for a
    /// thread (504): demand the plan turned away.
    #[serde(default)]
    pub refused: u64,
    #[serde(default)]
    pub timed_out: u64,
    /// Callers that waited for a thread at all, and their wait (every caller that needed a
    /// thread counted, at 0 when one was free; one that timed out, for its whole deadline).
    pub waited: u64,
    pub mean_wait_s: f64,
    pub p95_wait_s: f64,
    pub max_wait_s: f64,
    /// Callers of pooled targets, and those served from the pool.
    pub pool_callers: u64,
    pub pool_hits: u64,
    pub pool_hit_rate: Option<f64>,
    /// Answers that expired unused, and solves started (callers' and refills').
    pub wasted: u64,
    pub solves: u64,
    /// The threads and the solves at the replay's rate, priced for a month; `None` when nothing
    /// is priced.
    pub cost_per_month: Option<f64>,
    pub pools: Vec<ReplayedPool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReplayedPool {
    pub id: String,
    pub size: u32,
    pub callers: u64,
    pub hits: u64,
    pub hit_rate: Option<f64>,
    pub wasted: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Replay {
    /// Seconds of history replayed (from the first replayed bucket to the last one's end), and
    /// whether the whole of it was (see [`MAX_EVENTS`]).
    pub replayed_s: f64,
    pub complete: bool,
    pub now: Replayed,
    pub recommended: Replayed,
    pub how: String,
    /// With a stated wait target (`?wait_s=`): the fewest threads whose replay keeps 95 % of
    /// callers' waits for a thread within it, with the recommended pools.
    #[serde(default)]
    pub for_wait: Option<ForWait>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ForWait {
    pub wait_target_s: f64,
    pub threads: u64,
    /// The replayed 95th percentile of the wait with that many threads, and with one fewer
    /// (`None` at one thread).
    pub p95_wait_s: f64,
    pub p95_wait_one_fewer_s: Option<f64>,
    /// Whether a plan of at most [`MAX_SEARCHED`] times the recommendation met the target.
    pub met: bool,
}

/// How far above the recommendation the search for a wait target goes.
pub const MAX_SEARCHED: u64 = 8;

/// The fewest threads whose replayed p95 wait (`p95(threads)`, growing as threads shrink) is
/// within `target_s`: a bisection from one thread to the recommendation `start` (doubled while
/// it misses, up to [`MAX_SEARCHED`] times it), so about a dozen replays. Replays of nearby
/// plans draw their solve times in a different order, so the wait is not strictly monotone:
/// the answer steps down while one fewer thread still meets the target.
pub fn for_wait(target_s: f64, start: u64, p95: impl Fn(u64) -> f64) -> ForWait {
    let mut hi = start.max(1);
    let mut at_hi = p95(hi);
    while at_hi > target_s && hi < start.max(1) * MAX_SEARCHED {
        hi *= 2;
        at_hi = p95(hi);
    }
    let met = at_hi <= target_s;
    let mut lo = 1;
    while met && lo < hi {
        let mid = lo + (hi - lo) / 2;
        let at_mid = p95(mid);
        if at_mid <= target_s {
            (hi, at_hi) = (mid, at_mid);
        } else {
            lo = mid + 1;
        }
    }
    let mut fewer = (hi > 1).then(|| p95(hi - 1));
    while let Some(wait) = fewer.filter(|w| met && *w <= target_s) {
        (hi, at_hi) = (hi - 1, wait);
        fewer = (hi > 1).then(|| p95(hi - 1));
    }
    ForWait {
        wait_target_s: target_s,
        threads: hi,
        p95_wait_s: at_hi,
        p95_wait_one_fewer_s: fewer,
        met,
    }
}

/// Replays `buckets` (oldest first) under `plan`, with `seed` for the arrival times and
/// solve times (the same seed gives the same replay, so two plans meet the same callers).
pub fn replay(
    buckets: &[&Bucket],
    span: f64,
    plan: &ReplayPlan,
    kinds: &[KindModel],
    prices: &Prices,
    seed: u64,
) -> (Replayed, f64, bool) {
    let buckets = newest(buckets);
    let mut sim = Sim::new(plan, kinds, seed);
    let first = buckets.first().map_or(0, |b| b.start_ms);
    let end = buckets
        .last()
        .map_or(0.0, |b| (b.start_ms - first) as f64 / 1000.0 + span);
    for b in &buckets {
        let start = (b.start_ms - first) as f64 / 1000.0;
        sim.run_until(start);
        sim.arrivals(b, start, span);
    }
    sim.run_until(end);
    let complete = sim.events < MAX_EVENTS;
    (sim.outcome(plan, prices, end), end, complete)
}

/// The newest buckets that hold at most [`MAX_CALLERS`] callers.
fn newest<'a>(buckets: &[&'a Bucket]) -> Vec<&'a Bucket> {
    let mut total = 0;
    let mut out: Vec<&Bucket> = buckets
        .iter()
        .rev()
        .take_while(|b| {
            total += b.kinds.iter().map(|(_, d)| d.callers).sum::<u64>();
            total <= MAX_CALLERS
        })
        .copied()
        .collect();
    out.reverse();
    out
}

#[derive(Debug, Clone, Copy)]
enum Job {
    /// A caller's own solve (`since` it arrived), of a kind, for a pooled target or not.
    Caller {
        since: f64,
        kind: usize,
    },
    Refill {
        pool: usize,
    },
}

#[derive(Debug, Clone, Copy)]
enum Event {
    /// A caller of `kind`, for `pool` if its target is pooled.
    Arrive { kind: usize, pool: Option<usize> },
    /// A solve ended: a caller's (its thread goes back) or a refill's for `pool`.
    Solved { pool: Option<usize> },
    /// Answer number `answer` of `pool` reaches its shelf life.
    Expire { pool: usize, answer: u64 },
    /// The refiller's timer: it tops `pool` up.
    Look { pool: usize },
}

/// An event at a time, ordered by time then by the order it was scheduled in.
struct At(f64, u64, Event);

impl PartialEq for At {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0).is_eq() && self.1 == other.1
    }
}
impl Eq for At {}
impl PartialOrd for At {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for At {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

struct PoolState {
    id: String,
    kind: usize,
    size: u32,
    /// Ready answers, oldest first: their number and when they became ready.
    ready: VecDeque<(u64, f64)>,
    /// Refills started or waiting for a thread; of them, those holding a thread; and callers
    /// that claimed one of those.
    refills: u32,
    running: u32,
    claimants: u32,
    next_answer: u64,
    callers: u64,
    hits: u64,
    wasted: u64,
    /// The refiller's timer will look at this pool.
    look_pending: bool,
}

struct Sim<'k> {
    now: f64,
    seq: u64,
    events: u64,
    heap: BinaryHeap<Reverse<At>>,
    rng: StdRng,
    kinds: &'k [KindModel],
    look_s: f64,
    limits: Limits,
    refused: u64,
    timed_out: u64,
    free: u64,
    callers_waiting: VecDeque<Job>,
    refills_waiting: VecDeque<Job>,
    pools: Vec<PoolState>,
    callers: u64,
    waits: Vec<f32>,
    solves: Vec<u64>,
    /// Per kind: tracked callers not yet matched by the kind's answered callers.
    owed: Vec<u64>,
}

impl<'k> Sim<'k> {
    fn new(plan: &ReplayPlan, kinds: &'k [KindModel], seed: u64) -> Sim<'k> {
        let mut sim = Sim {
            now: 0.0,
            seq: 0,
            events: 0,
            heap: BinaryHeap::new(),
            rng: StdRng::seed_from_u64(seed),
            kinds,
            look_s: plan.refill_look_s,
            limits: plan.limits,
            refused: 0,
            timed_out: 0,
            free: plan.threads,
            callers_waiting: VecDeque::new(),
            refills_waiting: VecDeque::new(),
            pools: Vec::new(),
            callers: 0,
            waits: Vec::new(),
            solves: vec![0; kinds.len()],
            owed: vec![0; kinds.len()],
        };
        for pool in &plan.pools {
            // A pool of a kind without demand in the window meets no caller.
            let Some(kind) = kinds.iter().position(|m| m.kind == pool.kind) else {
                continue;
            };
            sim.pools.push(PoolState {
                id: pool.id.clone(),
                kind,
                size: pool.size,
                ready: VecDeque::new(),
                refills: 0,
                running: 0,
                claimants: 0,
                next_answer: 0,
                callers: 0,
                hits: 0,
                wasted: 0,
                look_pending: false,
            });
        }
        // Pools start full.
        for p in 0..sim.pools.len() {
            for _ in 0..sim.pools[p].size {
                sim.ready(p);
            }
        }
        sim
    }

    fn at(&mut self, t: f64, event: Event) {
        self.seq += 1;
        self.heap.push(Reverse(At(t, self.seq, event)));
    }

    fn run_until(&mut self, t: f64) {
        while let Some(Reverse(At(when, ..))) = self.heap.peek() {
            if *when > t || self.events >= MAX_EVENTS {
                break;
            }
            let Some(Reverse(At(when, _, event))) = self.heap.pop() else {
                break;
            };
            self.now = when;
            self.events += 1;
            self.handle(event);
        }
        self.now = self.now.max(t);
    }

    /// Schedules the bucket's callers: each tracked target's on its own stream, the rest of
    /// each kind's callers (less those a shared answer served) on the kind's. Targets count
    /// callers as they arrive, kinds as they are answered, so a bucket's targets may hold more
    /// than its kind: the excess is owed by the kind's next buckets, and no caller is replayed
    /// twice.
    fn arrivals(&mut self, b: &Bucket, start: f64, span: f64) {
        for (k, model) in self.kinds.iter().enumerate() {
            let answered = b
                .kind(model.kind)
                .map_or(0, |d| d.callers - d.shared.min(d.callers));
            let mut tracked = 0;
            for t in b.targets.iter().filter(|t| t.kind == model.kind) {
                let pool = self.pools.iter().position(|p| p.id == t.id);
                tracked += t.callers;
                self.spread(t.callers, start, span, Event::Arrive { kind: k, pool });
            }
            let owed = self.owed[k] + tracked;
            let others = answered.saturating_sub(owed);
            self.owed[k] = owed.saturating_sub(answered);
            self.spread(
                others,
                start,
                span,
                Event::Arrive {
                    kind: k,
                    pool: None,
                },
            );
        }
    }

    fn spread(&mut self, n: u64, start: f64, span: f64, event: Event) {
        for _ in 0..n {
            let t = start + self.rng.random::<f64>() * span;
            self.at(t, event);
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Arrive { kind, pool } => {
                self.callers += 1;
                match pool {
                    Some(p) => self.pooled_caller(p, kind),
                    None => self.need_thread(Job::Caller {
                        since: self.now,
                        kind,
                    }),
                }
            }
            Event::Solved { pool } => {
                self.release();
                if let Some(p) = pool {
                    self.pools[p].refills -= 1;
                    self.pools[p].running -= 1;
                    if self.pools[p].claimants > 0 {
                        self.pools[p].claimants -= 1;
                    } else {
                        self.ready(p);
                    }
                }
            }
            Event::Expire { pool, answer } => {
                let pool_state = &mut self.pools[pool];
                // Answers leave oldest first, so an expiring one still here is the oldest.
                if pool_state.ready.front().is_some_and(|(n, _)| *n == answer) {
                    pool_state.ready.pop_front();
                    pool_state.wasted += 1;
                    self.look_later(pool);
                }
            }
            Event::Look { pool } => {
                self.pools[pool].look_pending = false;
                self.top_up(pool);
            }
        }
    }

    /// Pool `p` lacks an answer nothing announced (one expired): the refiller tops it up at its
    /// next look.
    fn look_later(&mut self, p: usize) {
        if self.look_s <= 0.0 {
            self.top_up(p);
        } else if !self.pools[p].look_pending {
            self.pools[p].look_pending = true;
            let next = ((self.now / self.look_s).floor() + 1.0) * self.look_s;
            self.at(next, Event::Look { pool: p });
        }
    }

    fn pooled_caller(&mut self, p: usize, kind: usize) {
        self.pools[p].callers += 1;
        if self.pools[p].ready.pop_front().is_some() {
            self.pools[p].hits += 1;
            // A take prompts the refiller at once, as a claimed refill does below.
            self.top_up(p);
            return;
        }
        if self.pools[p].running > self.pools[p].claimants {
            self.pools[p].claimants += 1;
            self.top_up(p);
        } else {
            self.need_thread(Job::Caller {
                since: self.now,
                kind,
            });
        }
    }

    /// An answer for pool `p` is ready now: kept until its shelf life.
    fn ready(&mut self, p: usize) {
        let pool = &mut self.pools[p];
        let answer = pool.next_answer;
        pool.next_answer += 1;
        pool.ready.push_back((answer, self.now));
        let expires = self.now + self.kinds[pool.kind].shelf_s;
        self.at(expires, Event::Expire { pool: p, answer });
    }

    /// Starts refills until pool `p` holds its size (ready, or coming and not claimed).
    fn top_up(&mut self, p: usize) {
        loop {
            let pool = &self.pools[p];
            let holds = pool.ready.len() as u64 + u64::from(pool.refills - pool.claimants);
            if holds >= u64::from(pool.size) {
                return;
            }
            self.pools[p].refills += 1;
            self.need_thread(Job::Refill { pool: p });
        }
    }

    fn need_thread(&mut self, job: Job) {
        if self.free > 0 {
            self.free -= 1;
            self.start(job);
            return;
        }
        match job {
            Job::Caller { .. } => {
                let full = self
                    .limits
                    .max_waiting
                    .is_some_and(|m| self.callers_waiting.len() as u64 >= m);
                if full {
                    self.refused += 1;
                } else {
                    self.callers_waiting.push_back(job);
                }
            }
            Job::Refill { .. } => self.refills_waiting.push_back(job),
        }
    }

    /// A thread is free: the oldest caller still within its deadline takes it, else a refill.
    /// Callers whose deadline passed were told no then, and leave the queue now.
    fn release(&mut self) {
        while let Some(Job::Caller { since, .. }) = self.callers_waiting.front().copied() {
            let Some(deadline) = self.limits.deadline_s.filter(|d| self.now - since > *d) else {
                break;
            };
            self.callers_waiting.pop_front();
            self.timed_out += 1;
            self.waits.push(deadline as f32);
        }
        match self
            .callers_waiting
            .pop_front()
            .or_else(|| self.refills_waiting.pop_front())
        {
            Some(job) => self.start(job),
            None => self.free += 1,
        }
    }

    fn start(&mut self, job: Job) {
        let (kind, pool) = match job {
            Job::Caller { since, kind } => {
                self.waits.push((self.now - since) as f32);
                (kind, None)
            }
            Job::Refill { pool } => {
                self.pools[pool].running += 1;
                (self.pools[pool].kind, Some(pool))
            }
        };
        self.solves[kind] += 1;
        let lead = self.kinds[kind].draw(&mut self.rng);
        self.at(self.now + lead, Event::Solved { pool });
    }

    fn outcome(mut self, plan: &ReplayPlan, prices: &Prices, span_s: f64) -> Replayed {
        // Callers still waiting at the end have waited at least until then (and those past
        // their deadline were told no).
        for job in std::mem::take(&mut self.callers_waiting) {
            if let Job::Caller { since, .. } = job {
                let waited = span_s - since;
                match self.limits.deadline_s.filter(|d| waited > *d) {
                    Some(deadline) => {
                        self.timed_out += 1;
                        self.waits.push(deadline as f32);
                    }
                    None => self.waits.push(waited as f32),
                }
            }
        }
        self.waits.sort_by(f32::total_cmp);
        let n = self.waits.len();
        let waited = self.waits.iter().filter(|w| **w > 0.0).count() as u64;
        let mean = match n {
            0 => 0.0,
            n => self.waits.iter().map(|w| f64::from(*w)).sum::<f64>() / n as f64,
        };
        let quantile = |q: f64| match n {
            0 => 0.0,
            n => f64::from(self.waits[((n - 1) as f64 * q).round() as usize]),
        };
        let pool_callers: u64 = self.pools.iter().map(|p| p.callers).sum();
        let pool_hits: u64 = self.pools.iter().map(|p| p.hits).sum();
        let scale = MONTH_S / span_s.max(1.0);
        let solve_cost: Option<f64> = self
            .kinds
            .iter()
            .zip(&self.solves)
            .filter_map(|(m, n)| {
                prices
                    .per_1000(m.kind)
                    .map(|p| *n as f64 * scale * p / 1000.0)
            })
            .reduce(|a, b| a + b);
        let thread_cost = prices.thread_month().map(|p| p * plan.threads as f64);
        let cost_per_month = match (thread_cost, solve_cost) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        Replayed {
            threads: plan.threads,
            callers: self.callers,
            refused: self.refused,
            timed_out: self.timed_out,
            waited,
            mean_wait_s: mean,
            p95_wait_s: quantile(0.95),
            max_wait_s: self.waits.last().map_or(0.0, |w| f64::from(*w)),
            pool_callers,
            pool_hits,
            pool_hit_rate: (pool_callers > 0).then(|| pool_hits as f64 / pool_callers as f64),
            wasted: self.pools.iter().map(|p| p.wasted).sum(),
            solves: self.solves.iter().sum(),
            cost_per_month,
            pools: self
                .pools
                .into_iter()
                .map(|p| ReplayedPool {
                    hit_rate: (p.callers > 0).then(|| p.hits as f64 / p.callers as f64),
                    id: p.id,
                    size: p.size,
                    callers: p.callers,
                    hits: p.hits,
                    wasted: p.wasted,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::demand::{KindDemand, TargetDemand};

    /// `n` buckets of 60 s, each with `per_bucket` reCAPTCHA callers all for target `t1`.
    fn steady(n: u64, per_bucket: u64) -> Vec<Bucket> {
        (0..n)
            .map(|i| Bucket {
                kinds: vec![(
                    Kind::RecaptchaV2,
                    KindDemand {
                        callers: per_bucket,
                        solved: per_bucket,
                        ..KindDemand::default()
                    },
                )],
                targets: vec![TargetDemand {
                    id: "t1".into(),
                    label: "recaptcha_v2:shop.example".into(),
                    kind: Kind::RecaptchaV2,
                    callers: per_bucket,
                    pool_hits: 0,
                    expired: 0,
                }],
                ..Bucket::empty(i * 60_000)
            })
            .collect()
    }

    const MODEL: [KindModel; 1] = [KindModel {
        kind: Kind::RecaptchaV2,
        lead_s: 10.0,
        shelf_s: 110.0,
        solve_times: SolveTimes::EMPTY,
    }];

    fn run(log: &[Bucket], threads: u64, pool: u32) -> Replayed {
        let refs: Vec<&Bucket> = log.iter().collect();
        let plan = ReplayPlan {
            threads,
            pools: (pool > 0)
                .then(|| ReplayPool {
                    id: "t1".into(),
                    kind: Kind::RecaptchaV2,
                    size: pool,
                })
                .into_iter()
                .collect(),
            refill_look_s: 0.0,
            limits: Limits::default(),
        };
        let (r, replayed_s, complete) = replay(&refs, 60.0, &plan, &MODEL, &Prices::default(), 7);
        assert!(complete);
        assert_eq!(replayed_s, log.len() as f64 * 60.0);
        r
    }

    #[test]
    fn threads_below_littles_law_make_callers_wait_and_enough_do_not() {
        // 2 callers a second for an hour, 10 s solves: 20 threads in use on average.
        let log = steady(60, 120);
        let short = run(&log, 15, 0);
        let enough = run(&log, 29, 0);
        assert_eq!((short.callers, enough.callers), (7200, 7200));
        // 15 threads serve 1.5 a second (5,400 solves in the hour): the queue grows all hour.
        assert!((5200..=5600).contains(&short.solves), "{short:?}");
        assert!(short.waited > 6000, "{short:?}");
        assert!(short.mean_wait_s > 300.0, "{short:?}");
        // 20 + 2 * sqrt(20) = 29: few wait, and not for long.
        assert!(enough.waited < 720, "{enough:?}");
        assert!(enough.p95_wait_s < 5.0, "{enough:?}");
        assert_eq!(enough.pool_hit_rate, None);
    }

    #[test]
    fn a_pool_of_the_poisson_quantile_serves_its_share_and_none_serves_none() {
        let log = steady(60, 120);
        // The pool advice's 29 for 95 % at 2/s and 10 s lead (`pools` tests); 60 threads so
        // refills never wait for one.
        let pooled = run(&log, 60, 29);
        let rate = pooled.pool_hit_rate.unwrap();
        assert!(rate >= 0.95, "{pooled:?}");
        assert_eq!(pooled.pools[0].callers, 7200);
        // Every hit is replaced: a solve per caller, whatever the pool.
        assert!(
            pooled.solves >= 7200 && pooled.solves <= 7200 + 29,
            "{pooled:?}"
        );
        let small = run(&log, 60, 10);
        assert!(small.pool_hit_rate.unwrap() < rate);
        // The same seed meets the same callers: the replay is repeatable.
        assert_eq!(run(&log, 60, 29), pooled);
    }

    #[test]
    fn a_pool_nobody_takes_from_expires_every_shelf_life() {
        // One caller a minute for an hour; a pool of 4 answers lasting 110 s.
        let log = steady(60, 1);
        let r = run(&log, 10, 4);
        // About 4 answers per 110 s: 131 in the hour, less the 60 taken.
        assert!((50..=131).contains(&r.wasted), "{r:?}");
        assert_eq!(r.pools[0].callers, 60);
        assert_eq!(r.pool_hit_rate, Some(1.0));
    }

    #[test]
    fn a_pool_starved_of_refill_threads_serves_few_and_its_callers_wait() {
        // 2 callers a second of 10 s solves need 20 threads; 5 are kept busy by callers alone,
        // so refills never get one: the pool serves its first fill and no more, and callers
        // that find it empty wait for a thread rather than for a refill that never starts.
        let log = steady(60, 120);
        let starved = run(&log, 5, 29);
        assert!(starved.pools[0].hits <= 29 + 5, "{starved:?}");
        assert!(starved.p95_wait_s > 600.0, "{starved:?}");
        // The wait target then asks for the threads Little's law implies, pool or not.
        let p95 = |threads: u64| run(&log, threads, 29).p95_wait_s;
        let w = for_wait(5.0, 29, p95);
        assert!(w.met && w.threads >= 20, "{w:?}");
    }

    #[test]
    fn thread_times_follow_the_recorded_solve_times_and_keep_the_measured_mean() {
        // Three solves in four take about a second, one about 16 s.
        let h = crate::telemetry::histogram::Histogram::default();
        for i in 0..400 {
            h.observe(if i % 4 == 0 { 16.0 } else { 1.1 });
        }
        let model = KindModel {
            kind: Kind::RecaptchaV2,
            lead_s: 6.0,
            shelf_s: 110.0,
            solve_times: SolveTimes::between(&h.read(), &Default::default()),
        };
        let mut rng = StdRng::seed_from_u64(3);
        let draws: Vec<f64> = (0..20_000).map(|_| model.draw(&mut rng)).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 6.0).abs() < 0.25, "{mean}");
        // The slow quarter stays a quarter, far above the mean, as no uniform range has it.
        let slow = draws.iter().filter(|d| **d > 2.0 * 6.0).count() as f64 / 20_000.0;
        assert!((0.2..=0.3).contains(&slow), "{slow}");
        let uniform = KindModel {
            solve_times: SolveTimes::EMPTY,
            ..model
        };
        assert!((0..1000).all(|_| (3.0..9.0).contains(&uniform.draw(&mut rng))));
    }

    #[test]
    fn a_claimed_refill_is_replaced_at_once_and_an_expired_answer_at_the_refillers_look() {
        let hit_rate = |log: &[Bucket], model: &KindModel, size: u32, look: f64| {
            let refs: Vec<&Bucket> = log.iter().collect();
            let plan = ReplayPlan {
                threads: 100,
                pools: vec![ReplayPool {
                    id: "t1".into(),
                    kind: Kind::RecaptchaV2,
                    size,
                }],
                refill_look_s: look,
                limits: Limits::default(),
            };
            let (r, ..) = replay(
                &refs,
                60.0,
                &plan,
                std::slice::from_ref(model),
                &Prices::default(),
                5,
            );
            r.pool_hit_rate.unwrap()
        };
        // 8 callers a second of 1.25 s solves for a pool of 11: about 10 callers per lead time,
        // P(Poisson(10) <= 10) = 0.58, however seldom the refiller looks on its own.
        let busy = steady(20, 480);
        let model = KindModel {
            lead_s: 1.25,
            ..MODEL[0]
        };
        let (at_once, each_second) = (
            hit_rate(&busy, &model, 11, 0.0),
            hit_rate(&busy, &model, 11, 1.0),
        );
        assert!((0.5..=0.66).contains(&at_once), "{at_once}");
        assert!(
            (each_second - at_once).abs() < 0.03,
            "{each_second} against {at_once}"
        );
        // One caller a minute for a pool of one whose answers keep 1 s of shelf: an answer is
        // there 1 s of every 2.25 replaced at once, of every 7.25 when its replacement waits for
        // a look every 10 s (5 s on average).
        let sparse = steady(600, 1);
        let short = KindModel {
            lead_s: 1.25,
            shelf_s: 1.0,
            ..MODEL[0]
        };
        let (at_once, each_ten) = (
            hit_rate(&sparse, &short, 1, 0.0),
            hit_rate(&sparse, &short, 1, 10.0),
        );
        assert!((0.3..=0.6).contains(&at_once), "{at_once}");
        assert!((0.05..=0.25).contains(&each_ten), "{each_ten}");
    }

    #[test]
    fn a_plan_too_small_turns_callers_away_as_the_gateway_is_configured_to() {
        // 2 callers a second of 10 s solves want 20 threads; 10 serve about half of them.
        let log = steady(60, 120);
        let refs: Vec<&Bucket> = log.iter().collect();
        let run_with = |limits: Limits| {
            let plan = ReplayPlan {
                threads: 10,
                pools: Vec::new(),
                refill_look_s: 0.0,
                limits,
            };
            replay(&refs, 60.0, &plan, &MODEL, &Prices::default(), 7).0
        };
        // At most 5 waiting: the rest are refused at once, and every caller is either.
        let bounded = run_with(Limits {
            max_waiting: Some(5),
            deadline_s: None,
        });
        assert!((3000..=4000).contains(&bounded.refused), "{bounded:?}");
        assert_eq!(bounded.timed_out, 0);
        assert!(
            bounded.solves + bounded.refused <= 7200 && bounded.solves + bounded.refused >= 7195
        );
        // A 30 s deadline: those it passes while they wait are told no, after 30 s.
        let deadline = run_with(Limits {
            max_waiting: None,
            deadline_s: Some(30.0),
        });
        assert!((3000..=4000).contains(&deadline.timed_out), "{deadline:?}");
        assert_eq!(deadline.refused, 0);
        assert!(deadline.max_wait_s <= 30.0, "{deadline:?}");
        // No limits: nobody is turned away, and the queue grows all hour.
        let unbounded = run_with(Limits::default());
        assert_eq!((unbounded.refused, unbounded.timed_out), (0, 0));
        assert!(unbounded.max_wait_s > 1000.0, "{unbounded:?}");
    }

    #[test]
    fn the_replay_takes_the_newest_buckets_up_to_its_bound() {
        let log = steady(3, MAX_CALLERS / 2);
        let refs: Vec<&Bucket> = log.iter().collect();
        let kept = newest(&refs);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].start_ms, 60_000);
    }

    #[test]
    fn the_fewest_threads_for_a_wait_target_are_found_by_replay() {
        // 2 callers a second of 10 s solves: 20 threads in use on average.
        let log = steady(60, 120);
        let p95 = |threads: u64| run(&log, threads, 0).p95_wait_s;
        let w = for_wait(5.0, 29, p95);
        assert!(w.met);
        assert!(w.p95_wait_s <= 5.0, "{w:?}");
        assert!(w.p95_wait_one_fewer_s.unwrap() > 5.0, "{w:?}");
        assert!((20..=29).contains(&w.threads), "{w:?}");
        assert_eq!(p95(w.threads), w.p95_wait_s, "the replay is repeatable");
        // A target no plan below 8 x the start meets (a wait of nothing at all, here).
        let never = for_wait(-1.0, 2, |_| 0.5);
        assert!(!never.met && never.threads == 16, "{never:?}");
    }

    #[test]
    fn prices_make_a_monthly_cost() {
        use crate::status::advice::prices::ProviderPrices;
        let log = steady(60, 120);
        let refs: Vec<&Bucket> = log.iter().collect();
        let prices = Prices {
            currency: "USD".into(),
            providers: vec![ProviderPrices {
                provider: "captchaai".into(),
                thread_month: Some(2.0),
                per_1000: vec![(Kind::RecaptchaV2, 1.0)],
            }],
        };
        let plan = ReplayPlan {
            threads: 30,
            pools: Vec::new(),
            refill_look_s: 0.0,
            limits: Limits::default(),
        };
        let (r, ..) = replay(&refs, 60.0, &plan, &MODEL, &prices, 1);
        // 30 threads at 2, and 7200 solves an hour (5,184,000 a month) at 1 per 1000.
        assert!(
            (r.cost_per_month.unwrap() - (60.0 + 5184.0)).abs() < 1e-6,
            "{r:?}"
        );
    }
}
