//! What the three Lambda functions share. Each `main` is a few lines: logs as the
//! Lambda log level and format ask, settings from the environment, the app built once
//! (config and adapters), run.

pub mod app;
pub mod cluster;
pub mod handlers;
pub mod live;
pub mod metrics;
pub mod settings;

pub use app::{App, AwsApp, AwsLiveApp, LiveApp};
pub use ballast_core::function::Function;
pub use settings::{ConfigSource, Settings, SettingsError};

/// Logs as Lambda's advanced logging controls ask, through the runtime's own subscriber:
/// the format from `AWS_LAMBDA_LOG_FORMAT` (`JSON` in both templates' `LoggingConfig`) and
/// the level from `AWS_LAMBDA_LOG_LEVEL` (their `ApplicationLogLevel`), else `RUST_LOG`,
/// else `INFO`.
pub fn init_tracing() {
    lambda_runtime::tracing::init_default_subscriber();
}
