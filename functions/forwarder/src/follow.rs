//! The forwarder's config, read from the functions' own SSM parameter and followed: a new
//! version is looked for every [`LOOK_EVERY`] (the forwarder gets no EventBridge events).
//! A version that changes what the forwarder uses (which pool a pod or node belongs to,
//! which pools have a wait target, and what it is) makes it start its watchers again on it; any other
//! version is only noted (log and `config_version` metric). A version that fails
//! validation is refused once and the forwarder stays on the last good one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ballast_core::config::{Config, Toleration};
use ballast_core::ports::{newest_before, ConfigHome, ConfigText, ErrorKind, PortError};
use tracing::{error, info, warn};

use crate::metrics::Metrics;

/// How often the forwarder asks whether the config changed (the functions, which get the
/// parameter's change event, take it within seconds; at most this much later here).
pub const LOOK_EVERY: Duration = Duration::from_secs(60);
/// How often a forwarder with no usable config yet looks again.
pub const RETRY_EVERY: Duration = Duration::from_secs(10);
/// How many earlier versions a forwarder starting on a refused one judges (as the
/// functions do).
pub const LOOK_BACK_AT_MOST: usize = 20;

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

    async fn earlier(&self, before: i64, at_most: usize) -> Result<Vec<ConfigText>, PortError> {
        let mut versions = Vec::new();
        let mut pages =
            self.client.get_parameter_history().name(&self.name).with_decryption(true).into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| ballast_aws_errors::classify("GetParameterHistory", e))?;
            versions.extend(
                page.parameters().iter().map(|p| ConfigText {
                    text: p.value().unwrap_or_default().to_string(),
                    version: Some(p.version()),
                }),
            );
        }
        Ok(newest_before(versions, before, at_most))
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
    /// The pool's wait target: which pools publish waits, and when a first start is over.
    wait_target: Option<std::time::Duration>,
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
                    wait_target: p.headroom.target.as_ref().map(|t| t.wait_p95.0),
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
    /// The versions before `refused` were all judged, none good.
    history_judged: bool,
}

impl Follow {
    pub fn new(home: Box<dyn ConfigHome>) -> Follow {
        Follow { home, in_force: Arc::default(), version: None, membership: None, refused: None, history_judged: false }
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
        if known {
            return None;
        }
        if read.version.is_some() && read.version == self.refused {
            return self.fall_back(metrics).await;
        }
        let config = match Config::from_yaml(&read.text) {
            Ok(config) => config,
            Err(e) => {
                self.refused = read.version;
                self.history_judged = false;
                metrics.config_refused();
                error!(home = %home, refused_version = ?read.version, config_version = ?self.version, error = %e, "config refused; staying on the last good version");
                return self.fall_back(metrics).await;
            }
        };
        self.take(config, read.version, metrics)
    }

    /// A refused latest version leaves the forwarder on the newest good version before it,
    /// as the functions: found in the history when starting, and when running if one
    /// newer than its own was written in between. Until a good version is written.
    async fn fall_back(&mut self, metrics: &Metrics) -> Option<Config> {
        let refused = self.refused?;
        if self.history_judged {
            return None;
        }
        // Said once per refused version, found or not.
        self.history_judged = true;
        let home = self.home.describe();
        let earlier = match self.home.earlier(refused, LOOK_BACK_AT_MOST).await {
            Ok(earlier) => earlier,
            Err(e) => {
                error!(home = %home, refused_version = refused, error = %e, "cannot read the config's earlier versions");
                return None;
            }
        };
        let in_force = self.version;
        let found = earlier
            .into_iter()
            .take_while(|v| in_force.is_none_or(|f| v.version.is_some_and(|n| n > f)))
            .find_map(|v| Config::from_yaml(&v.text).ok().map(|c| (c, v.version)));
        let Some((config, version)) = found else {
            if self.membership.is_none() {
                error!(home = %home, refused_version = refused, "no earlier config version is good either: write a good one with `ballast config push`");
            }
            return None;
        };
        warn!(home = %home, config_version = ?version, refused_version = refused, previous_version = ?in_force, "running on the newest good config version before the refused one, until a good version is written");
        self.take(config, version, metrics)
    }

    /// Puts a good version in force; returns it when the watchers must start on it.
    fn take(&mut self, config: Config, version: Option<i64>, metrics: &Metrics) -> Option<Config> {
        let membership = Membership::of(&config);
        let changed = self.membership.as_ref() != Some(&membership);
        info!(home = %self.home.describe(), config_version = ?version, previous_version = ?self.version, pools_changed = changed, "config in force");
        self.version = version;
        self.in_force.store(version.unwrap_or(0), Ordering::Relaxed);
        self.membership = Some(membership);
        metrics.config_in_force(version);
        changed.then_some(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn one_pool() -> String {
        ballast_core::testing::minimal_config("    node_selector: { ballast.io/pool: general }\n")
    }

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
        let shelf = Arc::new(Mutex::new((one_pool(), 1)));
        let mut follow = Follow::new(Box::new(Shelf(Arc::clone(&shelf))));
        let metrics = Metrics::new();
        let first = follow.first(&metrics, || {}).await;
        assert_eq!(first.pools.len(), 1);
        assert!(metrics.encode().contains("ballast_forwarder_config_version 1"));

        // Going live changes nothing the forwarder uses: noted, no restart.
        *shelf.lock().unwrap() = (one_pool().replace("dry_run: true", "dry_run: false"), 2);
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
        let moved = one_pool().replace("ballast.io/pool: general }", "ballast.io/pool: general-v2 }");
        *shelf.lock().unwrap() = (moved, 4);
        let config = follow.membership_changed(&metrics).await;
        assert_eq!(config.pools[0].node_selector["ballast.io/pool"], "general-v2");
        assert!(metrics.encode().contains("ballast_forwarder_config_version 4"));
        assert_eq!(follow.in_force.load(Ordering::Relaxed), 4, "what demand events say");
    }

    /// A parameter's history: versions written in turn, the last one read.
    struct History(Arc<Mutex<Vec<(String, i64)>>>);

    #[async_trait]
    impl ConfigHome for History {
        async fn read(&self) -> Result<ConfigText, PortError> {
            let (text, version) = self.0.lock().unwrap().last().cloned().unwrap_or_default();
            Ok(ConfigText { text, version: Some(version) })
        }
        fn describe(&self) -> String {
            "history".into()
        }
        fn changes(&self) -> bool {
            true
        }
        async fn earlier(&self, before: i64, at_most: usize) -> Result<Vec<ConfigText>, PortError> {
            let all: Vec<ConfigText> =
                self.0.lock().unwrap().iter().map(|(t, v)| ConfigText { text: t.clone(), version: Some(*v) }).collect();
            Ok(newest_before(all, before, at_most))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_forwarder_starting_on_a_refused_version_runs_on_the_newest_good_one_before_it() {
        let moved = one_pool().replace("ballast.io/pool: general }", "ballast.io/pool: general-v2 }");
        let versions = vec![(one_pool(), 1), (moved, 2), ("pools: [".to_string(), 3)];
        let history = Arc::new(Mutex::new(versions));
        let mut follow = Follow::new(Box::new(History(Arc::clone(&history))));
        let metrics = Metrics::new();
        let first = tokio::time::timeout(Duration::from_secs(1), follow.first(&metrics, || {})).await;
        let first = first.expect("started on an earlier version, not waiting for a good one");
        assert_eq!(first.pools[0].node_selector["ballast.io/pool"], "general-v2", "the newest good one: 2");
        assert_eq!(follow.in_force.load(Ordering::Relaxed), 2);
        assert!(metrics.encode().contains("ballast_forwarder_config_refused_total 1"));
        history.lock().unwrap().push((one_pool(), 4));
        let config = follow.membership_changed(&metrics).await;
        assert_eq!(config.pools[0].node_selector["ballast.io/pool"], "general", "the next good version is taken");
        assert_eq!(follow.in_force.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn a_new_wait_target_value_restarts_the_watchers() {
        // The state judges first starts against it (`over_with_room`).
        let with = |wait: Option<&str>| {
            let mut config = Config::from_yaml(&one_pool()).unwrap();
            config.pools[0].headroom.target = wait.map(|w| ballast_core::config::WaitTarget {
                wait_p95: w.parse().unwrap(),
                history: "14d".parse().unwrap(),
                floor: true,
                time_zone: "UTC".parse().unwrap(),
            });
            Membership::of(&config)
        };
        assert_ne!(with(None), with(Some("30s")));
        assert_ne!(with(Some("10s")), with(Some("30s")));
        assert_eq!(with(Some("30s")), with(Some("30s")));
    }

    #[test]
    fn demand_events_say_the_config_version() {
        use crate::publisher::Outgoing;
        let demand = Outgoing::PoolDemand(ballast_core::event::PoolDemandDetail {
            shapes: Vec::new(),
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
