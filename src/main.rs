//! The `captcha-gateway` binary: parse flags, load settings, run a subcommand.
//!
//! Exit codes: 0 after a clean shutdown, 1 when a running server fails, 2 for bad
//! configuration or usage (one line naming the setting and the fix).

use std::process::ExitCode;

use clap::Parser;

use captcha_gateway::cli::{Cli, Command};
use captcha_gateway::commands::serve;
use captcha_gateway::wiring::StartError;
use captcha_gateway::{config, shutdown::Shutdown, telemetry};

/// Every process this binary starts (gateway, worker, bench) allocates through mimalloc: the
/// per-request and per-task paths are dominated by small short-lived allocations, where it is
/// measurably cheaper than glibc's allocator (docs/BENCHMARKS.md `queue`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// More runtime threads than this is a typo, not a plan: every one is started at once.
const MAX_RUNTIME_THREADS: u16 = 256;

/// The process's environment, the one place it is read: every command is handed this lookup.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Command::Worker(args) = &cli.command {
        if !(1..=MAX_RUNTIME_THREADS).contains(&args.runtime_threads) {
            eprintln!(
                "error: --runtime-threads must be from 1 to {MAX_RUNTIME_THREADS} (threads of the worker's runtime; 1 is the default)"
            );
            return ExitCode::from(2);
        }
        // A worker's tasks are I/O waits and small Redis/HTTP exchanges: with one runtime thread
        // there are no cross-thread wake-ups or hand-overs, and fleets scale by processes.
        builder.worker_threads(usize::from(args.runtime_threads));
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run(cli))
}

async fn run(cli: Cli) -> ExitCode {
    let shutdown = Shutdown::new();
    tokio::spawn(shutdown.clone().on_signal());
    let result = match cli.command {
        Command::Serve(args) => {
            let settings = match config::load_serve(&args, &env) {
                Ok(s) => s,
                Err(e) => return config_error(&e),
            };
            telemetry::init_logs(&settings.log, &settings.secret_values());
            serve::run(settings, shutdown).await
        }
        Command::Simulate(args) => {
            let settings = match config::load_simulate(&args, None) {
                Ok(s) => s,
                Err(e) => return config_error(&e),
            };
            match log_settings(&args.log) {
                Ok(log) => telemetry::init_logs(&log, &[]),
                Err(code) => return code,
            }
            serve::run_simulator(
                settings,
                args.listen.unwrap_or_else(|| ([127, 0, 0, 1], 8081).into()),
                shutdown,
            )
            .await
        }
        Command::Worker(args) => captcha_gateway::commands::worker::run(args, &env, shutdown).await,
        Command::Bench(args) => {
            // The bench sets up its own quieter logging: warnings only, under the progress bar.
            // Ctrl-C or SIGTERM stops it: dropping the run kills the gateway and redis-server
            // processes it started (they are killed on drop).
            return tokio::select! {
                code = captcha_gateway::bench::run(args, &env) => code,
                () = shutdown.token.cancelled() => {
                    eprintln!("bench: interrupted");
                    ExitCode::from(130)
                }
            };
        }
        Command::Status(args) => return captcha_gateway::commands::status::run(&args).await,
        Command::Advise(args) => return captcha_gateway::commands::advise::run(&args).await,
        Command::Submit(args) => {
            let settings = match config::load_submit(&args) {
                Ok(s) => s,
                Err(e) => return config_error(&e),
            };
            match log_settings(&args.log) {
                Ok(log) => {
                    let url = args.redis_url.as_ref().map(|u| u.0.as_str()).unwrap_or("");
                    let passwords = config::url_passwords(url);
                    let secrets: Vec<&str> = passwords.iter().map(String::as_str).collect();
                    telemetry::init_logs(&log, &secrets);
                }
                Err(code) => return code,
            }
            return captcha_gateway::commands::submit::run(settings, shutdown).await;
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(StartError::Config(e)) => config_error(&e),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The log settings of a command without a config file: its flags and `RUST_LOG`.
fn log_settings(args: &captcha_gateway::cli::LogArgs) -> Result<telemetry::LogSettings, ExitCode> {
    let env = |name: &str| std::env::var(name).ok();
    config::log_settings(args, None, None, &env).map_err(|e| config_error(&e))
}

fn config_error(e: &config::ConfigError) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(2)
}
