//! The forwarder's config, read from the functions' own SSM parameter and followed: a new
//! version is looked for every [`LOOK_EVERY`] (the forwarder gets no EventBridge events).
//! A version that changes what the forwarder uses (which pool a pod or node belongs to,
//! which pools have a wait target) makes it start its watchers again on it; any other
//! version is only noted (log and `config_version` metric). A version that fails
//! validation is refused once and the forwarder stays on the last good one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ballast_core::config::{Config, Toleration};
use ballast_core::ports::{ConfigHome, ConfigText, ErrorKind, PortError};
use tracing::{error, info, warn};

use crate::metrics::Metrics;

/// How often the forwarder asks whether the config changed (the functions, which get the
/// parameter's change event, take it within seconds; at most this much later here).
pub const LOOK_EVERY: Duration = Duration::from_secs(60);
/// How often a forwarder with no usable config yet looks again.
pub const RETRY_EVERY: Duration = Duration::from_secs(10);

/// The SSM parameter `name` (the forwarder's Pod Identity role may read that one only).
pub struct ParameterHome {
    pub client: aws_sdk_ssm::Client,
    pub name: String,
}

#[async_trait]
impl ConfigHome for ParameterHome {
    async fn read(&self) -> Result<ConfigText, PortError> {
        let out = self
            .client
            .get_parameter()
            .name(&self.name)
            .with_decryption(true)
            .send()
            .await
            .map_err(|e| ballast_aws_errors::classify("GetParameter", e))?;
        let p = out.parameter().ok_or_else(|| {
            PortError::new(
                ErrorKind::Retryable,
                "GetParameter",
                format!("no parameter in the answer for {}", self.name),
            )
        })?;
        Ok(ConfigText { text: p.value().unwrap_or_default().to_string(), version: Some(p.version()) })
    }

    fn describe(&self) -> String {
        format!("SSM parameter {}", self.name)
    }

    fn changes(&self) -> bool {
        true
    }
}

/// A config file, read once (local runs).
pub struct FileHome(pub std::path::PathBuf);

#[async_trait]
impl ConfigHome for FileHome {
    async fn read(&self) -> Result<ConfigText, PortError> {
        let text = std::fs::read_to_string(&self.0)
            .map_err(|e| PortError::new(ErrorKind::Permanent, "read config", format!("{}: {e}", self.0.display())))?;
        Ok(ConfigText { text, version: None })
    }

    fn describe(&self) -> String {
        format!("file {}", self.0.display())
    }

    fn changes(&self) -> bool {
        false
    }
}

/// What of a pool's config the forwarder's state is built on.
#[derive(Debug, Clone, PartialEq)]
struct PoolMembership {
    name: String,
    node_selector: BTreeMap<String, String>,
    tolerations: Vec<Toleration>,
    wait_target: bool,
}

/// What of a config the forwarder's state is built on, pool by pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Membership(Vec<PoolMembership>);

impl Membership {
    pub fn of(config: &Config) -> Membership {
        Membership(
            config
                .pools
                .iter()
                .map(|p| PoolMembership {
                    name: p.name.clone(),
                    node_selector: p.node_selector.clone(),
                    tolerations: p.tolerations.clone(),
                    wait_target: p.headroom.target.is_some(),
                })
                .collect(),
        )
    }
}

/// The config followed in its home.
pub struct Follow {
    home: Box<dyn ConfigHome>,
    /// The version in force (0: none, or a file), for the bus to say in demand events.
    pub in_force: Arc<AtomicI64>,
    version: Option<i64>,
    membership: Option<Membership>,
    refused: Option<i64>,
}

impl Follow {
    pub fn new(home: Box<dyn ConfigHome>) -> Follow {
        Follow { home, in_force: Arc::default(), version: None, membership: None, refused: None }
    }

    /// The first good config, waiting (and saying why) until there is one.
    pub async fn first(&mut self, metrics: &Metrics, waiting: impl Fn()) -> Config {
        loop {
            waiting();
            if let Some(config) = self.look(metrics).await {
                return config;
            }
            tokio::time::sleep(RETRY_EVERY).await;
        }
    }

    /// Waits for a good version that changes the forwarder's membership and returns it;
    /// never returns for a home that does not change.
    pub async fn membership_changed(&mut self, metrics: &Metrics) -> Config {
        loop {
            tokio::time::sleep(LOOK_EVERY).await;
            if !self.home.changes() {
                continue;
            }
            if let Some(config) = self.look(metrics).await {
                return config;
            }
        }
    }

    /// Reads the home; a good version whose membership differs from the one in force (or
    /// the first) is returned, and any good version is noted as in force.
    async fn look(&mut self, metrics: &Metrics) -> Option<Config> {
        let home = self.home.describe();
        let read = match self.home.read().await {
            Ok(read) => read,
            Err(e) => {
                match self.version {
                    Some(v) => {
                        warn!(home = %home, error = %e, config_version = v, "cannot read the config; staying on the version in force")
                    }
                    None if self.membership.is_some() => {
                        warn!(home = %home, error = %e, "cannot read the config; staying on the one in force")
                    }
                    None => {
                        error!(home = %home, error = %e, "cannot read the config (write it with `ballast config push`)")
                    }
                }
                return None;
            }
        };
        let known = self.membership.is_some() && read.version == self.version;
        if known || (read.version.is_some() && read.version == self.refused) {
            return None;
        }
        let config = match Config::from_yaml(&read.text) {
            Ok(config) => config,
            Err(e) => {
                self.refused = read.version;
                metrics.config_refused();
                error!(home = %home, refused_version = ?read.version, config_version = ?self.version, error = %e, "config refused; staying on the last good version");
                return None;
            }
        };
        let membership = Membership::of(&config);
        let changed = self.membership.as_ref() != Some(&membership);
        info!(home = %home, config_version = ?read.version, previous_version = ?self.version, pools_changed = changed, "config in force");
        self.version = read.version;
        self.in_force.store(read.version.unwrap_or(0), Ordering::Relaxed);
        self.membership = Some(membership);
        metrics.config_in_force(read.version);
        changed.then_some(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    const ONE_POOL: &str = "cluster: c\nregion: eu-west-1\nstate_table: ballast-state\ndry_run: true\npools:\n  - name: general\n    spot_asgs: [s]\n    on_demand_asg: od\n    node_selector: { ballast.io/pool: general }\n";

    struct Shelf(Arc<Mutex<(String, i64)>>);

    #[async_trait]
    impl ConfigHome for Shelf {
        async fn read(&self) -> Result<ConfigText, PortError> {
            let (text, version) = self.0.lock().unwrap().clone();
            Ok(ConfigText { text, version: Some(version) })
        }
        fn describe(&self) -> String {
            "shelf".into()
        }
        fn changes(&self) -> bool {
            true
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_version_that_moves_pods_between_pools_restarts_the_watchers() {
        let shelf = Arc::new(Mutex::new((ONE_POOL.to_string(), 1)));
        let mut follow = Follow::new(Box::new(Shelf(Arc::clone(&shelf))));
        let metrics = Metrics::new();
        let first = follow.first(&metrics, || {}).await;
        assert_eq!(first.pools.len(), 1);
        assert!(metrics.encode().contains("ballast_forwarder_config_version 1"));

        // Going live changes nothing the forwarder uses: noted, no restart.
        *shelf.lock().unwrap() = (ONE_POOL.replace("dry_run: true", "dry_run: false"), 2);
        // A bad version: refused once, the last good one stays.
        let second_look = tokio::time::timeout(LOOK_EVERY * 2 + Duration::from_secs(1), async {
            follow.membership_changed(&metrics).await
        });
        assert!(second_look.await.is_err(), "no restart for a dry_run change");
        assert!(metrics.encode().contains("ballast_forwarder_config_version 2"));
        *shelf.lock().unwrap() = ("pools: [".into(), 3);
        let bad = tokio::time::timeout(LOOK_EVERY * 3 + Duration::from_secs(1), follow.membership_changed(&metrics));
        assert!(bad.await.is_err());
        assert!(metrics.encode().contains("ballast_forwarder_config_refused_total 1"), "refused once");
        assert!(metrics.encode().contains("ballast_forwarder_config_version 2"));

        // A new node selector moves pods: the watchers start again on it.
        let moved = ONE_POOL.replace("ballast.io/pool: general }", "ballast.io/pool: general-v2 }");
        *shelf.lock().unwrap() = (moved, 4);
        let config = follow.membership_changed(&metrics).await;
        assert_eq!(config.pools[0].node_selector["ballast.io/pool"], "general-v2");
        assert!(metrics.encode().contains("ballast_forwarder_config_version 4"));
        assert_eq!(follow.in_force.load(Ordering::Relaxed), 4, "what demand events say");
    }

    #[test]
    fn demand_events_say_the_config_version() {
        use crate::publisher::Outgoing;
        let demand = Outgoing::PoolDemand(ballast_core::event::PoolDemandDetail {
            pool: "general".into(),
            cpu_millis: 1000,
            memory_bytes: 1 << 30,
            pods: 2,
            nodes: 1,
            observed_at: chrono::DateTime::from_timestamp(1_795_000_000, 0).unwrap(),
        });
        let detail: serde_json::Value = serde_json::from_str(&crate::bus::detail_with_version(&demand, 7)).unwrap();
        assert_eq!(detail["config_version"], 7);
        assert_eq!(detail["pool"], "general");
        let none: serde_json::Value = serde_json::from_str(&crate::bus::detail_with_version(&demand, 0)).unwrap();
        assert!(none.get("config_version").is_none(), "a file has no version to say");
    }
}
