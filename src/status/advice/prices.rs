//! What the plan costs under the prices a user states (`[prices]`, docs/CONFIGURATION.md
//! "Prices"): a thread-priced provider (CaptchaAI) costs its threads per month, a provider that
//! bills per solve its solves at the window's rate over a 30-day month. Neither the gateway nor
//! the providers' APIs know a plan's price, so nothing is priced unless the user says so.

use serde::{Deserialize, Serialize};

use crate::model::Kind;

/// One month, as the prices are quoted.
pub const MONTH_S: f64 = 30.0 * 24.0 * 3600.0;

/// The prices from the configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    /// Shown beside every amount (`USD` when unset).
    pub currency: String,
    pub providers: Vec<ProviderPrices>,
}

/// One provider's prices.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderPrices {
    /// As the accounts name it (`captchaai`, `2captcha`, ...).
    pub provider: String,
    /// One plan thread for a month.
    pub thread_month: Option<f64>,
    /// A thousand solved tasks, per kind.
    pub per_1000: Vec<(Kind, f64)>,
}

impl Prices {
    pub fn of(&self, provider: &str) -> Option<&ProviderPrices> {
        self.providers.iter().find(|p| p.provider == provider)
    }

    /// The price of a thread a month: the first provider in `[prices]` that names one.
    pub fn thread_month(&self) -> Option<f64> {
        self.providers.iter().find_map(|p| p.thread_month)
    }

    /// The price of a thousand solves of `kind`: the first provider in `[prices]` that names
    /// one (what a wasted answer of that kind costs where it is paid per solve).
    pub fn per_1000(&self, kind: Kind) -> Option<f64> {
        self.providers
            .iter()
            .find_map(|p| p.per_1000.iter().find(|(k, _)| *k == kind).map(|(_, v)| *v))
    }
}

/// One account's cost per month, now and as recommended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Cost {
    pub currency: String,
    /// Its threads at the monthly thread price: the cap now, and the recommendation.
    pub threads_now_per_month: Option<f64>,
    pub threads_recommended_per_month: Option<f64>,
    /// Its solves at the per-1000 prices, at the window's rate, over a month.
    pub solves_per_month: Option<f64>,
    /// Kinds it solved that have no price stated (left out of the sums).
    pub unpriced_kinds: Vec<String>,
    pub now_per_month: f64,
    pub recommended_per_month: f64,
}

/// `solved` (per kind, over `covered_s` seconds) and the threads, priced for a month; `None`
/// when the provider has no price stated.
pub fn cost(
    prices: &Prices,
    provider: &str,
    threads_now: u64,
    threads_recommended: u64,
    solved: &[(Kind, u64)],
    covered_s: f64,
) -> Option<Cost> {
    let p = prices.of(provider)?;
    let threads = |n: u64| p.thread_month.map(|price| price * n as f64);
    let scale = MONTH_S / covered_s.max(1.0);
    let mut unpriced = Vec::new();
    let mut solves: Option<f64> = None;
    for (kind, n) in solved {
        match p.per_1000.iter().find(|(k, _)| k == kind) {
            Some((_, price)) => *solves.get_or_insert(0.0) += *n as f64 * scale * price / 1000.0,
            None if p.thread_month.is_none() => unpriced.push(kind.as_str().to_owned()),
            // A thread plan's solves are paid for by its threads.
            None => {}
        }
    }
    let (now, recommended) = (threads(threads_now), threads(threads_recommended));
    let extra = solves.unwrap_or(0.0);
    Some(Cost {
        currency: prices.currency.clone(),
        threads_now_per_month: now,
        threads_recommended_per_month: recommended,
        solves_per_month: solves,
        unpriced_kinds: unpriced,
        now_per_month: now.unwrap_or(0.0) + extra,
        recommended_per_month: recommended.unwrap_or(0.0) + extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prices() -> Prices {
        Prices {
            currency: "USD".into(),
            providers: vec![
                ProviderPrices {
                    provider: "captchaai".into(),
                    thread_month: Some(1.8),
                    per_1000: Vec::new(),
                },
                ProviderPrices {
                    provider: "2captcha".into(),
                    thread_month: None,
                    per_1000: vec![(Kind::RecaptchaV2, 2.99)],
                },
            ],
        }
    }

    #[test]
    fn threads_cost_their_monthly_price_and_solves_their_rate_over_a_month() {
        let day = 24.0 * 3600.0;
        let c = cost(&prices(), "captchaai", 50, 60, &[(Kind::Turnstile, 9)], day).unwrap();
        assert_eq!((c.now_per_month, c.recommended_per_month), (90.0, 108.0));
        assert!(
            c.unpriced_kinds.is_empty(),
            "a thread plan pays for its solves"
        );
        // 10,000 reCAPTCHA solves in a day: 300,000 a month at 2.99 per 1000.
        let c = cost(
            &prices(),
            "2captcha",
            10,
            20,
            &[(Kind::RecaptchaV2, 10_000), (Kind::Image, 5)],
            day,
        )
        .unwrap();
        assert!((c.solves_per_month.unwrap() - 897.0).abs() < 1e-6);
        assert_eq!(c.now_per_month, c.recommended_per_month);
        assert_eq!(c.unpriced_kinds, ["image"]);
        assert_eq!(cost(&prices(), "capsolver", 1, 1, &[], day), None);
    }
}
