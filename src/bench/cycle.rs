//! `cycle`: predictive against reactive `auto` pools on days of demand with a daily cycle, in
//! virtual time (a week runs in about a second). Each day is quiet (0.02 callers a second)
//! but for a rush from 09:00 to 17:00 (2 a second) that starts at full rate; on the sixth day a
//! campaign nobody has seen before adds an hour of rush at 20:00. Both pools meet the same
//! callers. The pool is the real sizer (`pools::AutoSizer`, resized every 5 s as the refiller
//! does) of a reCAPTCHA target: refills take 7.5-22.5 s (15 s on average), answers keep 110 s.
//!
//! The figures are taken from the second day on (the first is the predictive pool's to learn):
//! the hit rate in the first 10 minutes of each rush, over the whole day, and in the first 10
//! minutes of the surprise campaign, and the answers that expired unused a day. A run is five
//! weeks of different callers (one in `--quick`), its figures their sums: one campaign's first
//! minutes are a thousand callers, and how soon a pool grows then depends on when it last saw
//! an answer expire (its waste ceiling).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::report::{Goal, RunResult};
use super::{BenchError, Opts};
use crate::pools::{AutoSizer, SizingSettings};

const DAY_S: f64 = 86_400.0;
const QUIET: f64 = 0.02;
const RUSH: f64 = 2.0;
const RUSH_FROM_H: f64 = 9.0;
const RUSH_TO_H: f64 = 17.0;
/// The unannounced campaign: on this day (0-based), from this hour, for an hour.
const SURPRISE_DAY: u64 = 5;
const SURPRISE_H: f64 = 20.0;
/// reCAPTCHA's mean solve, and its answers' shelf life (120 s less 10 s `min_remaining`).
const LEAD_S: f64 = 15.0;
const SHELF_S: f64 = 110.0;
const FIRST_MINUTES_S: f64 = 600.0;
/// Midnight of a day, in ms since the epoch: the wall clock the shape is learned on.
const EPOCH_MS: u64 = 20_000 * 86_400_000;

pub async fn run(opts: &Opts) -> Result<RunResult, BenchError> {
    let (days, weeks) = if opts.quick { (3, 1) } else { (7, 5) };
    let (mut reactive, mut predictive) = (Figures::default(), Figures::default());
    for week in 0..weeks {
        let arrivals = arrivals(days, 17 + week);
        reactive.add(simulate(&arrivals, days, false, 23 + week));
        predictive.add(simulate(&arrivals, days, true, 23 + week));
    }
    let mut result = RunResult::default();
    result.info("days", days as f64, "days");
    result.info("weeks", weeks as f64, "runs");
    for (mode, f) in [("reactive", &reactive), ("predictive", &predictive)] {
        let rise = f.rise.rate();
        let (day, surprise) = (f.day.rate(), f.surprise.rate());
        match mode {
            "reactive" => {
                result.info("rise_hit_rate_reactive", rise, "share");
                result.info("day_hit_rate_reactive", day, "share");
                result.info("surprise_hit_rate_reactive", surprise, "share");
                result.info("waste_per_day_reactive", f.waste_per_day(), "answers");
                result.info("solves_per_day_reactive", f.solves_per_day(), "solves");
            }
            _ => {
                let reactive_rise = reactive.rise.rate();
                result.goal(
                    "rise_hit_rate_predictive",
                    rise,
                    "share",
                    Goal::AtLeast(reactive_rise),
                );
                result.info("day_hit_rate_predictive", day, "share");
                result.info("surprise_hit_rate_predictive", surprise, "share");
                result.info("waste_per_day_predictive", f.waste_per_day(), "answers");
                result.info("solves_per_day_predictive", f.solves_per_day(), "solves");
            }
        }
    }
    if days > SURPRISE_DAY && predictive.surprise.rate() + 0.05 < reactive.surprise.rate() {
        result.fail(format!(
            "the predictive pool served the unseen campaign worse ({:.3}) than the reactive one ({:.3})",
            predictive.surprise.rate(),
            reactive.surprise.rate()
        ));
    }
    Ok(result)
}

/// The callers a second at `t` seconds into the run.
fn rate(t: f64) -> f64 {
    let day = (t / DAY_S) as u64;
    let hour = (t % DAY_S) / 3600.0;
    let surprise = day == SURPRISE_DAY && (SURPRISE_H..SURPRISE_H + 1.0).contains(&hour);
    if (RUSH_FROM_H..RUSH_TO_H).contains(&hour) || surprise {
        RUSH
    } else {
        QUIET
    }
}

/// Poisson arrivals at `rate(t)` over `days`, by thinning one at the rush rate.
fn arrivals(days: u64, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut t, end, mut out) = (0.0, days as f64 * DAY_S, Vec::new());
    loop {
        t += -(1.0 - rng.random::<f64>()).ln() / RUSH;
        if t >= end {
            return out;
        }
        if rng.random::<f64>() < rate(t) / RUSH {
            out.push(t);
        }
    }
}

#[derive(Default)]
struct Share {
    callers: u64,
    hits: u64,
}

impl Share {
    fn add(&mut self, other: &Share) {
        self.callers += other.callers;
        self.hits += other.hits;
    }

    fn count(&mut self, hit: bool) {
        self.callers += 1;
        self.hits += u64::from(hit);
    }

    fn rate(&self) -> f64 {
        self.hits as f64 / self.callers.max(1) as f64
    }
}

#[derive(Default)]
struct Figures {
    rise: Share,
    day: Share,
    surprise: Share,
    wasted: u64,
    solves: u64,
    days_counted: u64,
}

impl Figures {
    fn add(&mut self, other: Figures) {
        self.rise.add(&other.rise);
        self.day.add(&other.day);
        self.surprise.add(&other.surprise);
        self.wasted += other.wasted;
        self.solves += other.solves;
        self.days_counted += other.days_counted;
    }

    fn waste_per_day(&self) -> f64 {
        self.wasted as f64 / self.days_counted.max(1) as f64
    }

    fn solves_per_day(&self) -> f64 {
        self.solves as f64 / self.days_counted.max(1) as f64
    }
}

/// A refill finishing at a time (seconds), ordered for a min-heap.
struct Done(f64);
impl PartialEq for Done {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0).is_eq()
    }
}
impl Eq for Done {}
impl PartialOrd for Done {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Done {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The pool through the run: callers take its oldest ready answer, a 1 s check expires old
/// answers and tops it up to its size, the sizer resizes it every 5 s.
fn simulate(arrivals: &[f64], days: u64, predict: bool, seed: u64) -> Figures {
    let sizer = AutoSizer::new(
        0,
        100,
        Duration::from_secs_f64(LEAD_S),
        Duration::from_secs_f64(SHELF_S),
        SizingSettings::default(),
    );
    let mut sizer = if predict { sizer.predictive() } else { sizer };
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut ready, mut refills) = (VecDeque::<f64>::new(), BinaryHeap::<Reverse<Done>>::new());
    let (mut size, mut arrived, mut expired) = (0u32, 0u64, 0u64);
    let mut f = Figures {
        days_counted: days.saturating_sub(1),
        ..Figures::default()
    };
    let counted = |t: f64| t >= DAY_S;
    let mut next = arrivals.iter().copied().peekable();
    let end = days as f64 * DAY_S;
    let mut check = 1.0;
    while check <= end {
        // Everything before the next check, in time order: refills landing, callers coming.
        loop {
            let refill = refills.peek().map(|Reverse(Done(t))| *t);
            let caller = next.peek().copied();
            match (refill, caller) {
                (Some(r), c) if r <= check && c.is_none_or(|c| r <= c) => {
                    refills.pop();
                    ready.push_back(r);
                }
                (_, Some(c)) if c <= check => {
                    next.next();
                    arrived += 1;
                    expire(&mut ready, c, &mut expired, &mut f, counted(c));
                    let hit = ready.pop_front().is_some();
                    if !hit && counted(c) {
                        f.solves += 1;
                    }
                    if counted(c) {
                        let in_day = c % DAY_S;
                        let rush = RUSH_FROM_H * 3600.0;
                        f.day.count(hit);
                        if (rush..rush + FIRST_MINUTES_S).contains(&in_day) {
                            f.rise.count(hit);
                        }
                        let surprise = SURPRISE_DAY as f64 * DAY_S + SURPRISE_H * 3600.0;
                        if (surprise..surprise + FIRST_MINUTES_S).contains(&c) {
                            f.surprise.count(hit);
                        }
                    }
                }
                _ => break,
            }
        }
        expire(&mut ready, check, &mut expired, &mut f, counted(check));
        if (check as u64) % 5 == 0 {
            let wall = EPOCH_MS + (check * 1000.0) as u64;
            size = sizer.tick_at(Duration::from_secs_f64(check), Some(wall), arrived, expired);
        }
        while ready.len() + refills.len() < size as usize {
            let took = LEAD_S * rng.random_range(0.5..1.5);
            sizer.observe_solve(Duration::from_secs_f64(took));
            refills.push(Reverse(Done(check + took)));
            if counted(check) {
                f.solves += 1;
            }
        }
        check += 1.0;
    }
    f
}

/// Drops the answers past their shelf life at `now`.
fn expire(ready: &mut VecDeque<f64>, now: f64, expired: &mut u64, f: &mut Figures, count: bool) {
    while ready.front().is_some_and(|t| t + SHELF_S <= now) {
        ready.pop_front();
        *expired += 1;
        if count {
            f.wasted += 1;
        }
    }
}
