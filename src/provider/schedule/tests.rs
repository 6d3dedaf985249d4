//! The learned schedule as pure functions: plans from histograms, ticks, arrival rates. Time is
//! passed in, so "a minute later" is an addition, not a wait.

use proptest::prelude::*;

use super::*;

const BUDGET: u32 = 20;
const PATIENCE: Duration = Duration::from_secs(160);

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// A spread of solve times over `lo..hi` that visits the whole range (golden-ratio steps).
fn solve_time(i: u32, lo: f64, hi: f64) -> Duration {
    let frac = (f64::from(i) * 0.618_033_988_75).fract();
    secs(lo + frac * (hi - lo))
}

/// What the poller would learn from one task that became ready `ready` after submit and was
/// checked at `plan`: the interval between the last check before it and the first at or after
/// it. Returns the wait from ready to that check, `None` if the plan never saw it ready.
fn check_one(
    times: &mut SolveTimes,
    now: Instant,
    plan: &[Duration],
    ready: Duration,
) -> Option<Duration> {
    let i = plan.iter().position(|t| *t >= ready)?;
    let after = if i == 0 { Duration::ZERO } else { plan[i - 1] };
    times.observe(now, after, plan[i]);
    Some(plan[i] - ready)
}

fn assert_valid(plan: &[Duration], budget: u32, patience: Duration) {
    assert!(
        !plan.is_empty() && plan.len() <= budget as usize,
        "{plan:?}"
    );
    assert!(plan.windows(2).all(|w| w[0] < w[1]), "{plan:?}");
    let last = *plan.last().unwrap();
    assert!(
        last.abs_diff(patience) <= Duration::from_millis(1),
        "{plan:?}"
    );
}

/// The promise of the issue: starting from nothing, the first check moves toward the solve times
/// the checks measure, and no plan ever has more checks than the budget.
#[test]
fn the_first_check_moves_toward_measured_solve_times_within_the_budget() {
    let mut times = SolveTimes::default();
    let mut now = Instant::now();
    let cold = plan(&times, now, BUDGET, PATIENCE, false);
    assert_valid(&cold, BUDGET, PATIENCE);
    assert_eq!(cold[0], EXPLORE_FIRST, "nothing learned: explore from 1 s");
    let mut late_waits = Vec::new();
    for i in 0..400 {
        let p = plan(&times, now, BUDGET, PATIENCE, false);
        assert_valid(&p, BUDGET, PATIENCE);
        let wait = check_one(&mut times, now, &p, solve_time(i, 3.0, 6.0)).unwrap();
        if i >= 300 {
            late_waits.push(wait);
        }
        now += Duration::from_millis(500);
    }
    let learned = plan(&times, now, BUDGET, PATIENCE, false);
    assert!(
        learned[0] >= secs(2.7) && learned[0] <= secs(3.5),
        "first check {:?} should sit at the fastest solves (3 s)",
        learned[0]
    );
    let main: Vec<_> = learned.iter().filter(|t| **t <= secs(6.5)).collect();
    assert!(main.len() >= 12, "most checks cover 3-6 s: {learned:?}");
    late_waits.sort();
    let median = late_waits[late_waits.len() / 2];
    assert!(median <= secs(0.2), "median wait {median:?}: {learned:?}");
}

#[test]
fn a_provider_that_gets_slower_is_followed_within_minutes() {
    let mut times = SolveTimes::default();
    let mut now = Instant::now();
    for i in 0..300 {
        let p = plan(&times, now, BUDGET, PATIENCE, false);
        check_one(&mut times, now, &p, solve_time(i, 3.0, 6.0));
        now += Duration::from_millis(500);
    }
    let fast_first = plan(&times, now, BUDGET, PATIENCE, false)[0];
    // Now every solve takes 15-30 s; one task every half second for three minutes.
    let mut waits = Vec::new();
    for i in 0..360 {
        let p = plan(&times, now, BUDGET, PATIENCE, false);
        assert_valid(&p, BUDGET, PATIENCE);
        let wait = check_one(&mut times, now, &p, solve_time(i, 15.0, 30.0))
            .expect("the reserve reaches patience");
        waits.push(wait);
        now += Duration::from_millis(500);
    }
    let slow = plan(&times, now, BUDGET, PATIENCE, false);
    assert!(fast_first < secs(4.0), "{fast_first:?}");
    let median = times.quantile(0.5).unwrap();
    assert!(median >= secs(15.0) && median <= secs(30.0), "{median:?}");
    let covering = slow
        .iter()
        .filter(|t| **t >= secs(14.0) && **t <= secs(31.0));
    assert!(covering.count() >= 12, "{slow:?}");
    let late = &mut waits[300..];
    late.sort();
    assert!(late[late.len() / 2] <= secs(1.0), "{late:?}");
}

#[test]
fn a_faster_provider_is_found_by_the_checks_that_look_below() {
    let mut times = SolveTimes::default();
    let mut now = Instant::now();
    for i in 0..300 {
        let p = plan(&times, now, BUDGET, PATIENCE, i % 8 == 0);
        check_one(&mut times, now, &p, solve_time(i, 6.0, 8.0));
        now += Duration::from_millis(500);
    }
    assert!(plan(&times, now, BUDGET, PATIENCE, false)[0] > secs(5.5));
    // Now every solve takes 1-2 s, for three minutes.
    for i in 0..360 {
        let p = plan(&times, now, BUDGET, PATIENCE, i % 8 == 0);
        assert_valid(&p, BUDGET, PATIENCE);
        check_one(&mut times, now, &p, solve_time(i, 1.0, 2.0));
        now += Duration::from_millis(500);
    }
    let first = plan(&times, now, BUDGET, PATIENCE, false)[0];
    assert!(first <= secs(1.5), "{first:?}");
}

#[test]
fn a_quiet_spell_takes_the_plan_back_to_exploring() {
    let mut times = SolveTimes::default();
    let now = Instant::now();
    for i in 0..50 {
        times.observe(now, secs(19.5), solve_time(i, 20.0, 25.0));
    }
    assert!(plan(&times, now, BUDGET, PATIENCE, false)[0] > secs(10.0));
    let later = now + HALF_LIFE * 10;
    assert!(times.evidence(later) < MIN_EVIDENCE);
    assert_eq!(
        plan(&times, later, BUDGET, PATIENCE, false)[0],
        EXPLORE_FIRST
    );
}

#[test]
fn quantiles_follow_the_intervals_observed() {
    let mut times = SolveTimes::default();
    let now = Instant::now();
    assert_eq!(times.quantile(0.5), None);
    // Every answer somewhere in (10 s, 12 s]: the median is near 11 s.
    for _ in 0..20 {
        times.observe(now, secs(10.0), secs(12.0));
    }
    let median = times.quantile(0.5).unwrap();
    assert!(median > secs(10.5) && median < secs(11.5), "{median:?}");
    assert!(times.quantile(0.0).unwrap() >= secs(9.5));
    assert!(times.quantile(1.0).unwrap() <= secs(12.7));
}

#[test]
fn ticks_round_up_and_ticks_stay_put() {
    let epoch = Instant::now();
    let grid = Grid {
        epoch,
        step: Duration::from_millis(300),
    };
    assert_eq!(grid.align(epoch), epoch);
    assert_eq!(
        grid.align(epoch + Duration::from_millis(1)),
        epoch + Duration::from_millis(300)
    );
    let tick = epoch + Duration::from_millis(900);
    assert_eq!(grid.align(tick), tick);
}

#[test]
fn the_arrival_rate_reads_the_load() {
    let mut rate = ArrivalRate::default();
    let start = Instant::now();
    assert_eq!(rate.per_second(start), 0.0);
    let mut now = start;
    for _ in 0..1200 {
        rate.add(now);
        now += Duration::from_millis(100);
    }
    let r = rate.per_second(now);
    assert!(r > 9.0 && r <= 10.0, "{r}");
    // After two quiet minutes it reads little.
    assert!(rate.per_second(now + Duration::from_secs(120)) < 0.5);
}

#[test]
fn a_changed_plan_skips_early_checks_to_keep_the_budget() {
    let start = Instant::now();
    let grid = Grid {
        epoch: start,
        step: Duration::from_millis(1),
    };
    let plan: Vec<Duration> = (1..=10).map(Duration::from_secs).collect();
    // Three checks left, ten planned ahead: the last three are kept.
    assert_eq!(
        next_check(&plan, start, start, 3, &grid),
        Some(start + Duration::from_secs(8))
    );
    assert_eq!(next_check(&plan, start, start, 0, &grid), None);
    assert_eq!(
        next_check(&plan, start, start + Duration::from_secs(11), 5, &grid),
        None
    );
}

proptest! {
    /// Whatever the answers taught (any intervals, any order), a plan has at most `budget`
    /// strictly increasing checks, the last at `patience`.
    #[test]
    fn plans_never_exceed_the_budget(
        observations in prop::collection::vec((0.0f64..900.0, 0.0f64..900.0), 0..80),
        budget in prop_oneof![1u32..80, Just(u32::MAX)],
        patience_ms in prop_oneof![1u64..1_000_000, Just(u64::MAX)],
        idle_s in 0u64..600,
        look_below: bool,
    ) {
        let mut times = SolveTimes::default();
        let now = Instant::now();
        for (a, b) in observations {
            times.observe(now, secs(a), secs(b));
        }
        let patience = if patience_ms == u64::MAX { Duration::MAX } else { Duration::from_millis(patience_ms) };
        let p = plan(&times, now + Duration::from_secs(idle_s), budget, patience, look_below);
        prop_assert!(!p.is_empty() && p.len() <= budget.min(1000) as usize, "{:?}", p.len());
        prop_assert!(p.windows(2).all(|w| w[0] < w[1]), "{:?}", p);
        let end = patience.min(Duration::from_secs(1_000_000_000));
        let off = p.last().unwrap().abs_diff(end).as_secs_f64();
        prop_assert!(off <= 1e-3_f64.max(end.as_secs_f64() * 1e-12), "{:?}", p.last());
    }

    /// Following `next_check` from submit to the end spends at most the budget, always moves
    /// forward, and ends within one tick of the plan's end.
    #[test]
    fn following_a_plan_spends_at_most_the_budget(
        offsets_ms in prop::collection::btree_set(1u64..200_000, 1..60),
        budget in 1u32..40,
        step_ms in 1u64..5_000,
        submitted_after_ms in 0u64..10_000,
    ) {
        let plan: Vec<Duration> = offsets_ms.iter().map(|ms| Duration::from_millis(*ms)).collect();
        let epoch = Instant::now();
        let grid = Grid { epoch, step: Duration::from_millis(step_ms) };
        let submitted = epoch + Duration::from_millis(submitted_after_ms);
        let (mut now, mut checks) = (submitted, 0u32);
        while let Some(at) = next_check(&plan, submitted, now, budget - checks, &grid) {
            prop_assert!(at > now);
            now = at;
            checks += 1;
            prop_assert!(checks <= budget);
        }
        prop_assert!(checks >= 1);
        let end = submitted + *plan.last().unwrap();
        prop_assert!(now >= end && now < end + grid.step + Duration::from_millis(1));
    }
}
