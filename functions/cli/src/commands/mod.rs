#[cfg(feature = "aws")]
pub mod aws;
pub mod config;
pub mod events;
pub mod plan;
pub mod simulate;

use std::path::Path;

use anyhow::Context;
use ballast_core::config::Config;

/// Reads and validates a config file, printing every problem when it is invalid.
pub fn load_config(path: &Path) -> anyhow::Result<Result<Config, Vec<String>>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Config::from_yaml(&text).map_err(|errors| errors.0.iter().map(ToString::to_string).collect()))
}
