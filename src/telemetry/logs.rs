use tracing_subscriber::EnvFilter;

/// Logs to stderr, filtered by `RUST_LOG` (default `info`), as text or JSON lines.
pub fn init_logs(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests calling serve twice in one process) is harmless: keep the first.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
