//! Logging set-up: human-readable by default, JSON with `--log-format json`.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Install the global subscriber. `RUST_LOG` overrides the default level (info).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube_runtime::controller=warn,tower=warn,hyper=warn"));
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        // Colours only on a terminal: `kubectl logs` and log collectors get plain text.
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_target(false)
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            )
            .init(),
        LogFormat::Json => registry.with(fmt::layer().json().flatten_event(true).with_writer(std::io::stderr)).init(),
    }
}
