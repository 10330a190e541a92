//! What the three Lambda functions share. Each `main` is a few lines: JSON logs,
//! settings from the environment, the app built once (config and adapters), run.

pub mod app;
pub mod cluster;
pub mod handlers;
pub mod metrics;
pub mod settings;

pub use app::{App, AwsApp};
pub use settings::{ConfigSource, Settings, SettingsError};

/// JSON logs on stdout (CloudWatch), level from `RUST_LOG` (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().json().with_env_filter(filter).with_current_span(false).with_target(false).init();
}
