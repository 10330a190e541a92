//! Ballast's in-cluster forwarder: watches pods and nodes, keeps compact per-pool
//! totals, and publishes Pool Demand Changed, Pods Unschedulable and Node Lifecycle
//! events to EventBridge.

pub mod bus;
pub mod health;
pub mod publisher;
pub mod run;
pub mod settings;
pub mod state;

use std::sync::Arc;
use std::time::Duration;

use ballast_core::config::Config;
use ballast_kube::pools::PoolMatcher;

use crate::health::Health;
use crate::publisher::Timing;
use crate::run::Forwarder;
use crate::state::ClusterState;

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

impl Forwarder {
    /// A forwarder for `config`'s pools with default pacing.
    pub fn new(client: kube::Client, bus: Arc<dyn bus::EventBus>, config: &Config, timing: Timing) -> Forwarder {
        Forwarder {
            client,
            bus,
            state: ClusterState::new(PoolMatcher::new(&config.pools)),
            timing,
            health: Arc::new(Health::default()),
            tick: Duration::from_secs(1),
            retry_backoff: Duration::from_millis(200),
        }
    }
}

pub fn load_config(path: &std::path::Path) -> Result<Config, StartError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| StartError::ReadConfig { path: path.display().to_string(), source })?;
    Ok(Config::from_yaml(&text)?)
}
