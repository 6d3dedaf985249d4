//! `[prices]`: what the user pays, for the plan advisor's costs (docs/CONFIGURATION.md
//! "Prices"). Read by hand from the table, so each wrong entry is named by its full path.

use crate::model::Kind;
use crate::provider::AccountProvider;
use crate::setting::{ConfigError, bad};
use crate::status::advice::prices::{Prices, ProviderPrices};

/// No plan thread or thousand solves costs this much; a larger figure is a typo.
const MAX_PRICE: f64 = 1_000_000.0;

/// The validated prices; without a `[prices]` table, none (nothing is priced).
pub fn prices(table: Option<&toml::Table>) -> Result<Prices, ConfigError> {
    let mut out = Prices {
        currency: "USD".to_owned(),
        providers: Vec::new(),
    };
    let Some(table) = table else {
        return Ok(out);
    };
    for (key, value) in table {
        if key == "currency" {
            out.currency = currency(value)?;
            continue;
        }
        let setting = format!("prices.{}", shown(key));
        let provider: AccountProvider =
            toml::Value::String(key.clone()).try_into().map_err(|_| {
                bad(
                    &setting,
                    "is not a provider",
                    "name a provider: captchaai, 2captcha, anticaptcha, capsolver or sim",
                )
            })?;
        let Some(entries) = value.as_table() else {
            return Err(bad(
                &setting,
                "is not a table",
                "write it as [prices.<provider>] with thread_month or per_1000",
            ));
        };
        out.providers
            .push(provider_prices(&setting, provider.as_str(), entries)?);
    }
    Ok(out)
}

fn provider_prices(
    setting: &str,
    provider: &str,
    entries: &toml::Table,
) -> Result<ProviderPrices, ConfigError> {
    let mut p = ProviderPrices {
        provider: provider.to_owned(),
        ..ProviderPrices::default()
    };
    for (key, value) in entries {
        let at = format!("{setting}.{}", shown(key));
        match key.as_str() {
            "thread_month" => p.thread_month = Some(price(&at, value)?),
            "per_1000" => {
                let Some(kinds) = value.as_table() else {
                    return Err(bad(
                        &at,
                        "is not a table",
                        "write it as per_1000 = { recaptcha_v2 = 2.99, turnstile = 1.45 }",
                    ));
                };
                for (name, value) in kinds {
                    let at = format!("{at}.{}", shown(name));
                    let kind: Kind = name
                        .parse()
                        .map_err(|e: String| bad(&at, e, "use one of the kind names above"))?;
                    p.per_1000.push((kind, price(&at, value)?));
                }
            }
            _ => {
                return Err(bad(
                    &at,
                    "is not a price setting",
                    "use thread_month (one plan thread for a month) or per_1000 (per kind)",
                ));
            }
        }
    }
    Ok(p)
}

fn price(setting: &str, value: &toml::Value) -> Result<f64, ConfigError> {
    let v = match value {
        toml::Value::Float(f) => *f,
        toml::Value::Integer(i) => *i as f64,
        _ => f64::NAN,
    };
    if v.is_finite() && (0.0..=MAX_PRICE).contains(&v) {
        Ok(v)
    } else {
        Err(bad(
            setting,
            "is not a price",
            format!("write an amount from 0 to {MAX_PRICE}, e.g. 1.8"),
        ))
    }
}

fn currency(value: &toml::Value) -> Result<String, ConfigError> {
    match value.as_str() {
        Some(c)
            if (1..=8).contains(&c.chars().count())
                && c.chars().all(|ch| !ch.is_control() && !ch.is_whitespace()) =>
        {
            Ok(c.to_owned())
        }
        _ => Err(bad(
            "prices.currency",
            "is not a currency",
            "write a short name such as \"USD\"",
        )),
    }
}

/// A key as it may appear in an error line: short, and only printable ASCII.
fn shown(key: &str) -> String {
    let clean: String = key
        .chars()
        .take(32)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect();
    clean
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Prices, ConfigError> {
        let table: toml::Table = toml::from_str(text).unwrap();
        prices(table.get("prices").and_then(|v| v.as_table()))
    }

    #[test]
    fn each_provider_gets_its_thread_and_solve_prices() {
        let p = read(
            "[prices]\ncurrency = \"EUR\"\n[prices.captchaai]\nthread_month = 1.8\n\
             [prices.2captcha]\nper_1000 = { recaptcha_v2 = 2.99, turnstile = 1 }\n",
        )
        .unwrap();
        assert_eq!(p.currency, "EUR");
        assert_eq!(p.of("captchaai").unwrap().thread_month, Some(1.8));
        let two = p.of("2captcha").unwrap();
        assert_eq!(two.thread_month, None);
        assert!(two.per_1000.contains(&(Kind::Turnstile, 1.0)));
        assert_eq!(read("").unwrap().providers, []);
    }

    #[test]
    fn every_wrong_entry_is_named_by_its_path() {
        for (text, setting) in [
            ("[prices.captchaa]\nthread_month = 1", "prices.captchaa"),
            (
                "[prices.captchaai]\nthread_mont = 1",
                "prices.captchaai.thread_mont",
            ),
            (
                "[prices.captchaai]\nthread_month = -1",
                "prices.captchaai.thread_month",
            ),
            (
                "[prices.captchaai]\nthread_month = nan",
                "prices.captchaai.thread_month",
            ),
            (
                "[prices.captchaai]\nthread_month = 1e300",
                "prices.captchaai.thread_month",
            ),
            (
                "[prices.captchaai]\nthread_month = \"1.8\"",
                "prices.captchaai.thread_month",
            ),
            (
                "[prices.2captcha]\nper_1000 = 3",
                "prices.2captcha.per_1000",
            ),
            (
                "[prices.2captcha]\nper_1000 = { recaptcha = 3 }",
                "prices.2captcha.per_1000.recaptcha",
            ),
            ("[prices]\ncurrency = \"US DOLLARS\"", "prices.currency"),
            ("[prices]\ncapsolver = 3", "prices.capsolver"),
        ] {
            let e = read(text).unwrap_err();
            assert_eq!(e.setting, setting, "{text}: {e}");
        }
    }
}
