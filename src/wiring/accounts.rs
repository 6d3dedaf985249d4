//! Builds the provider accounts from [`Settings`]: the `[[accounts]]` tables, or the one
//! account of the command-line flags (docs/CONFIGURATION.md "Accounts").

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::{CALIBRATE_EVERY, StartError, open_budget, sim_key, start_simulator};
use crate::config::{AccountProvider, AccountSpec, Settings};
use crate::provider::{
    Account, AccountSettings, InPhpProvider, Protocol, Provider, TaskApiProvider,
};
use crate::shutdown::Shutdown;
use crate::sim::Simulator;
use crate::upstream::{Member, Upstream, spawn_spend_guard};

/// Upstream concurrency for a provider billed per solve (2captcha, anti-captcha, CapSolver)
/// when `threads` is not given.
const PER_SOLVE_THREADS: u32 = 50;

pub(super) struct Built {
    pub upstream: Arc<Upstream>,
    /// The in-process simulator, when an account uses it.
    pub simulator: Option<(Arc<Simulator>, SocketAddr)>,
    /// Plan threads over every account, for the start-up log line.
    pub threads: u32,
}

/// The account the flags describe (`--provider`, `--provider-url`, the key, `--threads`).
fn shortcut(settings: &Settings) -> AccountSpec {
    let provider = settings.provider;
    AccountSpec {
        name: provider.as_str().to_owned(),
        provider,
        // The in-process simulator picks its own port: the URL flag is for real providers.
        base_url: settings
            .provider_url
            .clone()
            .filter(|_| provider != AccountProvider::Sim),
        key: settings.provider_key.clone(),
        threads: settings.threads,
        weight: 1,
        kinds: Vec::new(),
    }
}

pub(super) async fn build(settings: &Settings, shutdown: &Shutdown) -> Result<Built, StartError> {
    let specs = if settings.accounts.is_empty() {
        vec![shortcut(settings)]
    } else {
        settings.accounts.clone()
    };
    let needs_local_sim = specs
        .iter()
        .any(|s| s.provider == AccountProvider::Sim && s.base_url.is_none());
    let simulator = if needs_local_sim {
        Some(start_simulator(settings.sim.clone(), shutdown).await?)
    } else {
        None
    };
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| StartError::Provider(e.without_url().to_string()))?;
    let several = specs.len() > 1;
    let mut members = Vec::with_capacity(specs.len());
    let mut total_threads = 0u32;
    for spec in specs {
        let local_sim = simulator
            .as_ref()
            .filter(|_| spec.provider == AccountProvider::Sim && spec.base_url.is_none());
        let provider = provider_for(&spec, local_sim, http.clone());
        let threads = match (spec.threads, local_sim) {
            (Some(t), _) => t,
            (None, Some((sim, _))) => sim.settings().threads,
            // 2captcha, anti-captcha and CapSolver sell solves, not threads, and have no
            // `threadsinfo`: a concurrency their queues take comfortably; their "no slot"
            // errors are retried as backpressure.
            (None, None) if !spec.provider.sells_threads() => PER_SOLVE_THREADS,
            (None, None) => provider
                .threads_info()
                .await
                .map_err(|e| StartError::Provider(format!("account {}: {e}", spec.name)))?
                .threads
                .max(1),
        };
        total_threads = total_threads.saturating_add(threads);
        // Only providers that sell threads have `threadsinfo` to calibrate the cap with.
        let calibrates = spec.provider.sells_threads();
        let mut account_settings = AccountSettings {
            name: spec.name.clone(),
            threads,
            poll: settings.poll.clone(),
            calibrate_every: calibrates.then_some(CALIBRATE_EVERY),
            ..settings.account.clone()
        };
        if several {
            // With other accounts to try, a transient failure moves the task on at once
            // instead of waiting out the same account's backoff (upstream::Upstream::solve).
            account_settings.transient_retries = 0;
        }
        let budget = open_budget(settings, &spec.name, threads, shutdown).await?;
        let account = Account::start(provider, account_settings, budget, shutdown);
        members.push(Member::new(
            account,
            spec.provider,
            spec.weight,
            spec.kinds,
            settings.upstream.breaker.clone(),
        ));
    }
    let upstream = Arc::new(Upstream::new(members).with_passthrough(settings.upstream.passthrough));
    spawn_spend_guard(
        upstream.clone(),
        settings.upstream.balance_every,
        shutdown.token.clone(),
    );
    Ok(Built {
        upstream,
        simulator,
        threads: total_threads,
    })
}

/// The client of the account's protocol: `in.php`/`res.php` for CaptchaAI, 2captcha and the
/// simulator, `createTask`/`getTaskResult` for anti-captcha and CapSolver.
fn provider_for(
    spec: &AccountSpec,
    local_sim: Option<&(Arc<Simulator>, SocketAddr)>,
    http: reqwest::Client,
) -> Arc<dyn Provider> {
    let key = match &spec.key {
        Some(k) => k.0.clone(),
        // Only the simulator goes without (config refuses it elsewhere); any key will do.
        None => sim_key(),
    };
    match spec.provider.protocol() {
        Protocol::TaskApi(dialect) => {
            let url = spec
                .base_url
                .clone()
                .unwrap_or_else(|| dialect.default_base_url());
            Arc::new(TaskApiProvider::new(
                dialect,
                url,
                key,
                spec.name.clone(),
                http,
            ))
        }
        Protocol::InPhp(dialect) => {
            let url = match (&spec.base_url, local_sim) {
                (Some(url), _) => url.clone(),
                (None, Some((_, addr))) => url::Url::parse(&format!("http://{addr}"))
                    .expect("a socket address makes a valid URL"),
                (None, None) => dialect.default_base_url(),
            };
            Arc::new(InPhpProvider::new(
                dialect,
                url,
                key,
                spec.name.clone(),
                http,
            ))
        }
    }
}
