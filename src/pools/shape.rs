//! The daily and weekly shape of a target's demand, as a predictive `auto` pool learns it
//! (`predict = true`, docs/OPERATIONS.md "Predictive pools"): the callers a second in each
//! 5-minute slot of the day and of the week, each slot an average over the days (weeks) it was
//! seen, the newest weighing half. Pure arithmetic over wall-clock milliseconds, like the sizer.
//!
//! The week's slot speaks once it has been seen (a weekend unlike the weekdays), the day's
//! until then. Bounded: 288 + 2,016 slots a pool, about 37 KB, whatever the traffic.

/// One slot's span.
pub const SLOT_MS: u64 = 5 * 60 * 1000;
const DAY_SLOTS: usize = 288;
const WEEK_SLOTS: usize = 7 * DAY_SLOTS;
/// The newest day's weight in a slot's average: a campaign that stopped is half forgotten the
/// next day and mostly gone in three.
const NEWEST: f64 = 0.5;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Slot {
    rate: f64,
    seen: u32,
}

impl Slot {
    fn fold(&mut self, rate: f64) {
        self.rate = if self.seen == 0 {
            rate
        } else {
            self.rate + NEWEST * (rate - self.rate)
        };
        self.seen = self.seen.saturating_add(1);
    }

    fn rate(self) -> Option<f64> {
        (self.seen > 0).then_some(self.rate)
    }
}

/// The slot being filled: its index in the week, callers and seconds seen in it so far.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Filling {
    week_slot: usize,
    callers: f64,
    seconds: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    day: Vec<Slot>,
    week: Vec<Slot>,
    filling: Option<Filling>,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            day: vec![Slot::default(); DAY_SLOTS],
            week: vec![Slot::default(); WEEK_SLOTS],
            filling: None,
        }
    }
}

fn week_slot(wall_ms: u64) -> usize {
    ((wall_ms / SLOT_MS) % WEEK_SLOTS as u64) as usize
}

impl Shape {
    /// `callers` arrived in the `seconds` up to `wall_ms`; they count in the slot of the
    /// interval's middle. A slot is folded into the averages when the first observation of the
    /// next one comes.
    pub fn observe(&mut self, wall_ms: u64, callers: f64, seconds: f64) {
        let middle = wall_ms.saturating_sub((seconds.max(0.0) * 500.0) as u64);
        let slot = week_slot(middle);
        match &mut self.filling {
            Some(f) if f.week_slot == slot => {
                f.callers += callers;
                f.seconds += seconds;
                return;
            }
            Some(f) if f.seconds > 0.0 => {
                let rate = f.callers / f.seconds;
                self.week[f.week_slot].fold(rate);
                self.day[f.week_slot % DAY_SLOTS].fold(rate);
            }
            _ => {}
        }
        self.filling = Some(Filling {
            week_slot: slot,
            callers,
            seconds,
        });
    }

    /// The callers a second the shape expects at `wall_ms`; `None` where it has not been seen.
    pub fn rate_at(&self, wall_ms: u64) -> Option<f64> {
        let slot = week_slot(wall_ms);
        self.week[slot]
            .rate()
            .or_else(|| self.day[slot % DAY_SLOTS].rate())
    }

    /// The highest rate the shape expects from `from_ms` for `seconds` (the slots it has seen).
    pub fn peak_between(&self, from_ms: u64, seconds: f64) -> Option<f64> {
        let end = from_ms.saturating_add((seconds.max(0.0) * 1000.0) as u64);
        let mut at = from_ms;
        let mut peak = self.rate_at(at);
        while (at / SLOT_MS + 1) * SLOT_MS <= end {
            at = (at / SLOT_MS + 1) * SLOT_MS;
            peak = match (peak, self.rate_at(at)) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
        peak
    }

    /// The callers the shape expects from `from_ms` for `seconds`; `None` if any slot of that
    /// span has not been seen.
    pub fn callers_between(&self, from_ms: u64, seconds: f64) -> Option<f64> {
        let end = from_ms.saturating_add((seconds.max(0.0) * 1000.0) as u64);
        let (mut at, mut callers) = (from_ms, 0.0);
        while at < end {
            let slot_end = (at / SLOT_MS + 1) * SLOT_MS;
            let next = slot_end.min(end);
            callers += self.rate_at(at)? * (next - at) as f64 / 1000.0;
            at = next;
        }
        Some(callers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY_MS: u64 = 24 * 3600 * 1000;

    /// One day of 5 s observations: `rate(h)` callers a second at hour `h` of the day.
    fn live_a_day(shape: &mut Shape, day: u64, rate: impl Fn(f64) -> f64) {
        for i in 0..(DAY_MS / 5000) {
            let wall = day * DAY_MS + (i + 1) * 5000;
            let hour = ((i * 5000) as f64) / 3_600_000.0;
            shape.observe(wall, rate(hour) * 5.0, 5.0);
        }
    }

    #[test]
    fn a_day_seen_once_is_expected_the_next_day() {
        let mut shape = Shape::default();
        assert_eq!(shape.rate_at(9 * 3_600_000), None);
        let office = |h: f64| if (9.0..17.0).contains(&h) { 2.0 } else { 0.1 };
        live_a_day(&mut shape, 0, office);
        let tomorrow = DAY_MS;
        assert_eq!(shape.rate_at(tomorrow + 10 * 3_600_000), Some(2.0));
        assert_eq!(shape.rate_at(tomorrow + 3 * 3_600_000), Some(0.1));
        // The 5 minutes before 9:00 and the first 5 after: 0.1 * 300 + 2 * 300.
        let rise = tomorrow + 9 * 3_600_000 - SLOT_MS;
        let c = shape.callers_between(rise, 600.0).unwrap();
        assert!((c - 630.0).abs() < 1e-6, "{c}");
    }

    #[test]
    fn a_stopped_campaign_fades_and_a_seen_weekday_speaks_for_its_own_slot() {
        let mut shape = Shape::default();
        live_a_day(&mut shape, 0, |h| if h >= 12.0 { 4.0 } else { 0.0 });
        live_a_day(&mut shape, 1, |_| 0.0);
        let noon = 2 * DAY_MS + 13 * 3_600_000;
        // Half forgotten after one quiet day.
        assert!((shape.rate_at(noon).unwrap() - 2.0).abs() < 1e-9);
        // A week on, day 0's own slot (its week slot) speaks: it saw 4 there, the day's
        // average has 2.
        assert!((shape.rate_at(7 * DAY_MS + 13 * 3_600_000).unwrap() - 4.0).abs() < 1e-9);
        assert_eq!(shape.callers_between(noon, 0.0), Some(0.0));
    }
}
