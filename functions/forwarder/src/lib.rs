//! Ballast's in-cluster forwarder: watches pods and nodes, keeps compact per-pool
//! totals, and publishes Pool Demand Changed, Pods Unschedulable and Node Lifecycle
//! events to EventBridge.

pub mod bus;
pub mod follow;
pub mod health;
pub mod metrics;
pub mod process;
pub mod publisher;
pub mod room;
pub mod run;
pub mod settings;
pub mod shapes;
pub mod slim;
pub mod state;

#[cfg(test)]
mod with_room_tests;

use ballast_core::config::Config;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot read the config {path}: {source}")]
    ReadConfig {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] ballast_core::config::ConfigErrors),
    #[error("cannot reach the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot serve health on {addr}: {source}")]
    Health {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

pub fn load_config(path: &std::path::Path) -> Result<Config, StartError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| StartError::ReadConfig { path: path.display().to_string(), source })?;
    Ok(Config::from_yaml(&text)?)
}
