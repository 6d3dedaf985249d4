//! The provider side of `serve`'s settings: the one account of the shortcut flags (provider
//! URL, key, threads) or the `[[accounts]]` tables, and how their tasks are polled.

use std::time::Duration;

use super::accounts::{self, AccountSpec};
use super::{AccountProvider, FileConfig, Secret, one_account_settings_unused, secs_up_to};
use crate::cli::ServeArgs;
use crate::model::Kind;
use crate::provider::PollSettings;
use crate::setting::{ConfigError, bad};
use crate::sim::SimSettings;

/// The most checks of one task a setting may ask for.
const MAX_POLLS_PER_TASK: u32 = 1000;

/// The accounts `serve` solves with.
pub(super) struct Upstream {
    pub provider_url: Option<url::Url>,
    pub provider_key: Option<Secret>,
    pub accounts: Vec<AccountSpec>,
    pub threads: Option<u32>,
}

/// The shortcut's account, or the `[[accounts]]` tables (then the shortcut's settings must be
/// unset); a real provider needs its key.
pub(super) fn upstream(
    args: &ServeArgs,
    file: &FileConfig,
    provider: AccountProvider,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Upstream, ConfigError> {
    let provider_url = match args.provider_url.clone().or(file.provider_url.clone()) {
        None => None,
        Some(raw) => Some(
            url::Url::parse(&raw)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https"))
                .ok_or_else(|| {
                    bad(
                        "--provider-url",
                        format!("`{raw}` is not an http(s) URL"),
                        "pass a base URL such as http://127.0.0.1:8081",
                    )
                })?,
        ),
    };

    let key_file = args
        .provider_key_file
        .clone()
        .or(file.provider_key_file.clone());
    let provider_key = match key_file {
        Some(path) => {
            let key = std::fs::read_to_string(&path).map_err(|e| {
                bad(
                    "--provider-key-file",
                    format!("cannot read {}: {e}", path.display()),
                    "point it at a readable file holding the key",
                )
            })?;
            Some(Secret(key.trim().to_owned()))
        }
        None => match provider {
            AccountProvider::TwoCaptcha => env("TWOCAPTCHA_API_KEY"),
            _ => env("CAPTCHAAI_API_KEY").or_else(|| env("CAPTCHAAI_KEY")),
        }
        .map(|k| Secret(k.trim().to_owned())),
    }
    .filter(|k| !k.0.is_empty());
    let accounts = accounts::specs(&file.accounts, env)?;
    if !accounts.is_empty() {
        one_account_settings_unused(args, file)?;
    }
    if accounts.is_empty() && provider != AccountProvider::Sim && provider_key.is_none() {
        return Err(bad(
            "CAPTCHAAI_API_KEY",
            "no provider key is set",
            "export CAPTCHAAI_API_KEY=<your key> (TWOCAPTCHA_API_KEY for 2captcha), pass --provider-key-file FILE, or use --provider sim",
        ));
    }

    let threads = args.threads.or(file.threads);
    if threads == Some(0) {
        return Err(bad(
            "--threads",
            "must be at least 1",
            "set it to your plan's thread count, e.g. --threads 15",
        ));
    }
    Ok(Upstream {
        provider_url,
        provider_key,
        accounts,
        threads,
    })
}

/// How tasks are polled: defaults fitted to the simulator's latencies when every account is the
/// in-process simulator, a real provider's otherwise, then the `[poll]` table.
pub(super) fn poll_settings(
    file: &FileConfig,
    provider: AccountProvider,
    accounts: &[AccountSpec],
    sim: &SimSettings,
) -> Result<PollSettings, ConfigError> {
    // Only the in-process simulator's latencies are known here; a `simulate` server at a
    // `base_url` is polled as a real provider would be, learning its solve times.
    let all_sim = if accounts.is_empty() {
        provider == AccountProvider::Sim
    } else {
        accounts
            .iter()
            .all(|a| a.provider == AccountProvider::Sim && a.base_url.is_none())
    };
    let mut poll = if all_sim {
        sim_poll_defaults(sim)
    } else {
        PollSettings::default()
    };
    if let Some(adaptive) = file.poll.adaptive {
        poll.adaptive = adaptive;
    }
    // Bounded so a task's last check (first check + interval x checks) stays a sane time away:
    // an hour and ten minutes are far past any provider's answer, and a provider blocks an
    // account long before a thousand checks of one task.
    if let Some(s) = file.poll.first_check_s {
        poll.first_check = Some(secs_up_to("poll.first_check_s", s, 3600.0)?);
    }
    if let Some(s) = file.poll.interval_s {
        poll = poll.with_interval(secs_up_to("poll.interval_s", s, 600.0)?);
    }
    if let Some(n) = file.poll.max_polls_per_task {
        if !(1..=MAX_POLLS_PER_TASK).contains(&n) {
            return Err(bad(
                "poll.max_polls_per_task",
                format!("{n} is not from 1 to {MAX_POLLS_PER_TASK}"),
                "e.g. 20 (2captcha blocks accounts past about 20 checks per task)",
            ));
        }
        poll.max_polls_per_task = n;
    }
    if let Some(n) = file.poll.batch_size {
        poll.batch_size = n.clamp(1, 100);
    }
    if let Some(r) = file.poll.max_requests_per_second {
        if !(r.is_finite() && r > 0.0) {
            return Err(bad(
                "poll.max_requests_per_second",
                "must be a positive number",
                "e.g. 10",
            ));
        }
        poll.max_requests_per_second = r;
    }
    Ok(poll)
}

/// The simulator answers in seconds, so the gateway polls it sooner and more often than a real
/// provider (which asks for 5 s between polls), but never so often that the per-task check
/// budget runs out before the slowest simulated solve: the budget's checks (half at the interval,
/// half at twice it) must span the longest latency.
pub(super) fn sim_poll_defaults(sim: &SimSettings) -> PollSettings {
    let defaults = PollSettings::default();
    let ranges = Kind::ALL.map(|k| sim.latency_for(k));
    let fastest = ranges.iter().map(|r| r.min).min().unwrap_or_default();
    let slowest = ranges.iter().map(|r| r.max).max().unwrap_or_default();
    let checks = f64::from(defaults.max_polls_per_task.max(2));
    // half the checks at `interval`, half at `2 * interval`: 1.5 * checks * interval in all.
    let spanning = slowest.mul_f64(1.25 / (1.5 * checks));
    PollSettings {
        first_check: Some(fastest.max(Duration::from_millis(100))),
        ..defaults
    }
    .with_interval(spanning.max(Duration::from_millis(250)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::SimulateArgs;
    use crate::config::{SimFile, sim_settings};

    #[test]
    fn simulated_solves_of_any_length_fit_in_the_poll_budget() {
        for slow in ["5s..8s", "20s..40s", "1m..2m"] {
            let mut file = SimFile::default();
            file.latency.insert("recaptcha_v2".into(), slow.into());
            let sim = sim_settings(&file, &SimulateArgs::default()).unwrap();
            let poll = sim_poll_defaults(&sim);
            let longest = sim.latency_for(Kind::RecaptchaV2).max;
            assert!(
                poll.horizon(Kind::RecaptchaV2) >= longest,
                "{slow}: {:?} < {longest:?}",
                poll.horizon(Kind::RecaptchaV2)
            );
        }
        let quick = sim_poll_defaults(&SimSettings::default());
        assert_eq!(
            quick.interval,
            Duration::from_millis(250),
            "the default simulator is polled briskly"
        );
        assert_eq!(
            quick.coalesce,
            Duration::from_millis(50),
            "checks run at most a fifth of an interval early"
        );
    }
}
