//! The advice on pools: for each busy poolable target in the window (and each configured pool),
//! the fewest answers kept ready that serve a stated share of its callers from the pool, and
//! what that size wastes (docs/OPERATIONS.md "Plan advice").
//!
//! A pool of `s` answers (ready or being refilled) serves an arriving caller when fewer than `s`
//! callers came in the lead time before it (a taken answer is replaced one lead time later).
//! With callers arriving at `lambda` a second and a lead time `W`, those are Poisson with mean
//! `lambda * W`, so a caller is served with probability `P(Poisson(lambda * W) <= s - 1)` (the
//! model `pools::sizing` sizes `auto` pools by). Over a window the hit rate is that, weighted by
//! each bucket's callers; the advice is the smallest `s` whose hit rate reaches the target, so no
//! smaller pool does and no larger one wastes less.
//!
//! An answer keeps for its shelf life (lifetime less `min_remaining`). A pool of `s` kept full
//! while callers take `lambda` a second lets `s / shelf - lambda` a second expire unused, when
//! that is above 0: the waste, added over the window (quiet time wastes the whole pool every
//! shelf life) and given per day. Below one caller per shelf life at the busiest bucket, a pool
//! would mostly expire: the advice is none.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::prices::Prices;
use crate::model::Kind;
use crate::pools::MAX_POOL_SIZE;
use crate::status::demand::Bucket;

/// Targets the advice sizes, busiest first (configured pools are added to them).
pub const ADVISED: usize = 8;
/// The hit rate a pool is sized for when the request names none.
pub const DEFAULT_HIT_RATE: f64 = 0.95;

/// A pool configured here now.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolNow {
    pub id: String,
    pub label: String,
    pub kind: Kind,
    /// Its size (`fixed`), or its `max` (`auto`).
    pub size: u32,
    pub mode: &'static str,
}

/// What the pool advice needs to know of the gateway as it is.
#[derive(Debug, Clone, Default)]
pub struct PoolPlan {
    /// The share of a target's callers its pool should serve.
    pub hit_rate: f64,
    /// Each poolable kind's shelf life in seconds.
    pub shelf_s: Vec<(Kind, f64)>,
    pub configured: Vec<PoolNow>,
    /// How often the pool refiller looks at its pools unprompted, in seconds (the replay's
    /// replacements of expired answers wait for it; a take or a claimed refill prompts it).
    pub refill_look_s: f64,
}

impl PoolPlan {
    pub fn shelf_s(&self, kind: Kind) -> f64 {
        self.shelf_s
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or_else(|| kind.default_lifetime().as_secs_f64(), |(_, s)| *s)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoolAdvice {
    /// The target's id (as `GET /v1/pools` lists it), its `kind:host` label and kind.
    pub id: String,
    pub label: String,
    pub kind: String,
    /// Its callers in the window, and the most per second in one bucket.
    pub callers: u64,
    pub peak_callers_per_s: f64,
    /// Seconds from an answer leaving the pool (taken, or its refill claimed: either wakes the
    /// refiller) to its replacement's answer: the kind's thread time per solve.
    pub lead_s: f64,
    pub shelf_life_s: f64,
    /// The pool configured for it now (`fixed` size or `auto` max), if any.
    pub size_now: Option<u32>,
    pub mode_now: Option<String>,
    /// The share of its callers a pool of `size_now` (0 for none) serves by the model.
    pub hit_rate_now: f64,
    pub recommended: u32,
    /// The share a pool of `recommended` serves by the model.
    pub hit_rate: f64,
    /// Answers a fixed pool of `recommended` lets expire a day at the window's demand, the
    /// threads they hold on average, and their price where the kind is priced per solve.
    pub waste_per_day: f64,
    pub waste_threads: f64,
    pub waste_cost_per_month: Option<f64>,
    /// The hit rate the replay of the window (`Advice::replay`) saw now and as recommended.
    pub replayed_hit_rate_now: Option<f64>,
    pub replayed_hit_rate: Option<f64>,
    /// What the log saw in the window: callers served from a pool, their share of `callers`,
    /// and answers the pool let expire unused (absent where an older instance wrote the log).
    #[serde(default)]
    pub seen_pool_hits: u64,
    #[serde(default)]
    pub seen_hit_rate: Option<f64>,
    #[serde(default)]
    pub seen_expired: u64,
    pub how: String,
}

/// One target's demand over the window.
struct Seen {
    label: String,
    kind: Kind,
    callers: u64,
    pool_hits: u64,
    expired: u64,
    /// Buckets by their callers: how many buckets had that many.
    by_callers: BTreeMap<u64, u32>,
}

/// The pool advice over `buckets`; `lead_s(kind)` is the kind's refill time.
pub fn advise(
    buckets: &[&Bucket],
    span: f64,
    covered_s: f64,
    plan: &PoolPlan,
    prices: &Prices,
    lead_s: impl Fn(Kind) -> f64,
) -> Vec<PoolAdvice> {
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    for b in buckets {
        for t in &b.targets {
            let s = seen.entry(t.id.clone()).or_insert_with(|| Seen {
                label: t.label.clone(),
                kind: t.kind,
                callers: 0,
                pool_hits: 0,
                expired: 0,
                by_callers: BTreeMap::new(),
            });
            s.label.clone_from(&t.label);
            s.callers += t.callers;
            s.pool_hits += t.pool_hits;
            s.expired += t.expired;
            // A bucket where its pool only expired answers had no callers to size for.
            if t.callers > 0 {
                *s.by_callers.entry(t.callers).or_default() += 1;
            }
        }
    }
    let mut busiest: Vec<(String, Seen)> = seen.into_iter().collect();
    busiest.sort_by(|a, b| b.1.callers.cmp(&a.1.callers).then_with(|| a.0.cmp(&b.0)));
    busiest.truncate(ADVISED);
    for pool in &plan.configured {
        if !busiest.iter().any(|(id, _)| *id == pool.id) {
            let seen = Seen {
                label: pool.label.clone(),
                kind: pool.kind,
                callers: 0,
                pool_hits: 0,
                expired: 0,
                by_callers: BTreeMap::new(),
            };
            busiest.push((pool.id.clone(), seen));
        }
    }
    busiest
        .into_iter()
        .map(|(id, seen)| {
            let now = plan.configured.iter().find(|p| p.id == id);
            let target = Target {
                span,
                covered_s,
                lead_s: lead_s(seen.kind),
                shelf_s: plan.shelf_s(seen.kind),
                seen: &seen,
            };
            target.advice(id, now, plan.hit_rate, prices)
        })
        .collect()
}

struct Target<'a> {
    span: f64,
    covered_s: f64,
    lead_s: f64,
    shelf_s: f64,
    seen: &'a Seen,
}

impl Target<'_> {
    fn advice(&self, id: String, now: Option<&PoolNow>, goal: f64, prices: &Prices) -> PoolAdvice {
        let seen = self.seen;
        let peak = seen.by_callers.keys().next_back().copied().unwrap_or(0) as f64 / self.span;
        let size_now = now.map(|p| p.size);
        let (recommended, why) = if peak * self.shelf_s < 1.0 {
            (
                0,
                format!(
                    "fewer than one caller per {:.0} s shelf life at the busiest bucket \
                     ({peak:.3}/s): a pool would mostly expire",
                    self.shelf_s
                ),
            )
        } else {
            let s = self.smallest_reaching(goal);
            (
                s,
                format!(
                    "the smallest pool that serves {:.0} % of the window's callers when the \
                     callers within one {:.1} s lead time are Poisson at each bucket's rate \
                     (busiest {peak:.2}/s, {:.2} per lead time)",
                    goal * 100.0,
                    self.lead_s,
                    peak * self.lead_s
                ),
            )
        };
        let waste = self.waste_per_day(recommended);
        let price = prices.per_1000(seen.kind);
        let seen_hit_rate = (seen.callers > 0)
            .then(|| seen.pool_hits.min(seen.callers) as f64 / seen.callers as f64);
        let seen_text = match seen_hit_rate {
            Some(rate) => format!(
                "; in the window {} of its {} {} served from a pool ({:.0} %) and {} \
                 answers expired unused",
                seen.pool_hits,
                seen.callers,
                if seen.callers == 1 {
                    "caller was"
                } else {
                    "callers were"
                },
                rate * 100.0,
                seen.expired
            ),
            None if seen.expired > 0 => format!(
                "; in the window it had no caller and {} \
                 answers expired unused",
                seen.expired
            ),
            None => String::new(),
        };
        PoolAdvice {
            id,
            label: seen.label.clone(),
            kind: seen.kind.as_str().to_owned(),
            callers: seen.callers,
            peak_callers_per_s: peak,
            lead_s: self.lead_s,
            shelf_life_s: self.shelf_s,
            size_now,
            mode_now: now.map(|p| p.mode.to_owned()),
            hit_rate_now: self.hit_rate(size_now.unwrap_or(0)),
            recommended,
            hit_rate: self.hit_rate(recommended),
            waste_per_day: waste,
            waste_threads: waste * self.lead_s / 86_400.0,
            waste_cost_per_month: price.map(|p| waste * 30.0 * p / 1000.0),
            replayed_hit_rate_now: None,
            replayed_hit_rate: None,
            seen_pool_hits: seen.pool_hits,
            seen_hit_rate,
            seen_expired: seen.expired,
            how: format!(
                "{why}; kept full, it lets {waste:.0} answers a day expire at this demand (an \
                 `auto` pool with max = {recommended} shrinks when quiet){seen_text}"
            ),
        }
    }

    /// The share of the window's callers a pool of `size` serves by the model.
    fn hit_rate(&self, size: u32) -> f64 {
        if self.seen.callers == 0 {
            return 0.0;
        }
        let served: f64 = self
            .seen
            .by_callers
            .iter()
            .map(|(&callers, &buckets)| {
                let m = callers as f64 / self.span * self.lead_s;
                f64::from(buckets) * callers as f64 * poisson_cdf(size, m)
            })
            .sum();
        served / self.seen.callers as f64
    }

    /// The smallest size whose hit rate reaches `goal` (below 1): the hit rate grows with the
    /// size, so a binary search, up to where even the busiest bucket's callers are served
    /// all but never (its mean per lead time plus ten standard deviations).
    fn smallest_reaching(&self, goal: f64) -> u32 {
        let peak = self
            .seen
            .by_callers
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0) as f64;
        let m = peak / self.span * self.lead_s;
        let most = (m + 10.0 * m.sqrt() + 10.0)
            .ceil()
            .min(f64::from(MAX_POOL_SIZE)) as u32;
        let (mut lo, mut hi) = (1, most);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.hit_rate(mid) >= goal {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// Answers a pool kept at `size` lets expire a day at the window's demand.
    fn waste_per_day(&self, size: u32) -> f64 {
        if size == 0 {
            return 0.0;
        }
        let per_s = f64::from(size) / self.shelf_s;
        let busy_buckets: u32 = self.seen.by_callers.values().sum();
        let busy: f64 = self
            .seen
            .by_callers
            .iter()
            .map(|(&callers, &n)| f64::from(n) * (per_s - callers as f64 / self.span).max(0.0))
            .sum::<f64>()
            * self.span;
        let quiet_s = (self.covered_s - f64::from(busy_buckets) * self.span).max(0.0);
        (busy + quiet_s * per_s) * 86_400.0 / self.covered_s.max(self.span)
    }
}

/// `P(Poisson(m) <= size - 1)`: an arriving caller finds one of `size` answers left. Summed in
/// log space, so a mean in the thousands does not underflow `exp(-m)`.
pub fn poisson_cdf(size: u32, m: f64) -> f64 {
    if size == 0 {
        return 0.0;
    }
    if m <= 0.0 {
        return 1.0;
    }
    let (ln_m, mut log_p, mut sum) = (m.ln(), -m, 0.0);
    for k in 0..size {
        if k > 0 {
            log_p += ln_m - f64::from(k).ln();
        }
        sum += log_p.exp();
    }
    sum.min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::demand::TargetDemand;

    fn bucket(start_ms: u64, callers: u64) -> Bucket {
        Bucket {
            targets: vec![TargetDemand {
                id: "t1".into(),
                label: "recaptcha_v2:shop.example".into(),
                kind: Kind::RecaptchaV2,
                callers,
                pool_hits: 0,
                expired: 0,
            }],
            ..Bucket::empty(start_ms)
        }
    }

    fn plan(hit_rate: f64) -> PoolPlan {
        PoolPlan {
            hit_rate,
            shelf_s: vec![(Kind::RecaptchaV2, 110.0)],
            configured: Vec::new(),
            refill_look_s: 0.0,
        }
    }

    #[test]
    fn poisson_cdf_matches_known_values() {
        // P(Poisson(15) <= 22) = 0.9673, P(Poisson(2) <= 0) = e^-2.
        assert!((poisson_cdf(23, 15.0) - 0.9673).abs() < 1e-4);
        assert!((poisson_cdf(1, 2.0) - (-2.0f64).exp()).abs() < 1e-12);
        assert!(poisson_cdf(1200, 1000.0) > 0.999_99);
        assert_eq!((poisson_cdf(0, 3.0), poisson_cdf(4, 0.0)), (0.0, 1.0));
    }

    #[test]
    fn a_steady_target_gets_the_poisson_quantile_and_its_waste() {
        // 60 s buckets of 120 callers (2/s) for an hour, 10 s lead: 20 per lead time. The
        // smallest s with P(Poisson(20) <= s - 1) >= 0.95 is 28 (P(<= 27) = 0.9475 < 0.95 <=
        // P(<= 28) = 0.9657, so s - 1 = 28, s = 29).
        let log: Vec<Bucket> = (0..60).map(|i| bucket(i * 60_000, 120)).collect();
        let refs: Vec<&Bucket> = log.iter().collect();
        let a = advise(&refs, 60.0, 3600.0, &plan(0.95), &Prices::default(), |_| {
            10.0
        });
        assert_eq!(a.len(), 1);
        let p = &a[0];
        assert_eq!((p.callers, p.recommended), (7200, 29));
        assert!(p.hit_rate >= 0.95 && p.hit_rate < 0.97, "{p:?}");
        assert_eq!((p.size_now, p.hit_rate_now), (None, 0.0));
        // 29 answers last 110 s; 2/s take 220 per shelf life: nothing expires.
        assert_eq!(p.waste_per_day, 0.0);
        assert!(p.how.contains("95 %"), "{}", p.how);
    }

    #[test]
    fn a_quiet_target_gets_no_pool_and_a_configured_one_shows_its_waste() {
        // One caller per 5 min bucket: fewer than one per 110 s shelf life.
        let log = [bucket(0, 1), bucket(300_000, 1)];
        let refs: Vec<&Bucket> = log.iter().collect();
        let mut p = plan(0.95);
        p.configured.push(PoolNow {
            id: "t1".into(),
            label: "recaptcha_v2:shop.example".into(),
            kind: Kind::RecaptchaV2,
            size: 4,
            mode: "fixed",
        });
        let a = advise(&refs, 300.0, 600.0, &p, &Prices::default(), |_| 10.0);
        assert_eq!((a[0].recommended, a[0].size_now), (0, Some(4)));
        assert!(a[0].hit_rate_now > 0.99);
        assert!(a[0].how.contains("mostly expire"), "{}", a[0].how);
        // A configured pool no caller asked for is advised too.
        p.configured[0].id = "t2".into();
        let a = advise(&refs, 300.0, 600.0, &p, &Prices::default(), |_| 10.0);
        assert_eq!(a.len(), 2);
        assert_eq!((a[1].id.as_str(), a[1].callers), ("t2", 0));
    }

    #[test]
    fn a_fixed_pool_wastes_what_quiet_hours_do_not_take() {
        // A busy hour (2/s) in a day otherwise quiet: a pool of 29 kept full expires 29 answers
        // per 110 s shelf life for the other 23 hours.
        let log: Vec<Bucket> = (0..60).map(|i| bucket(i * 60_000, 120)).collect();
        let refs: Vec<&Bucket> = log.iter().collect();
        let a = advise(
            &refs,
            60.0,
            86_400.0,
            &plan(0.95),
            &Prices::default(),
            |_| 10.0,
        );
        let expected = 29.0 / 110.0 * 23.0 * 3600.0;
        assert!((a[0].waste_per_day - expected).abs() < 1e-6, "{:?}", a[0]);
        assert!((a[0].waste_threads - expected * 10.0 / 86_400.0).abs() < 1e-9);
    }
}
