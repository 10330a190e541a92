//! The cluster port until the Kubernetes adapter is wired in: it sees no nodes, no
//! headroom Deployment and no demand of its own (demand then comes only from the
//! forwarder's events), and refuses cluster changes rather than pretend to make them.

use std::time::Duration;

use async_trait::async_trait;
use ballast_core::config::PoolConfig;
use ballast_core::model::{Demand, NodeState};
use ballast_core::ports::{Cluster, DrainReport, ErrorKind, PortError};
use chrono::{DateTime, Utc};

#[derive(Debug, Clone, Default)]
pub struct DetachedCluster;

fn refused(operation: &str) -> PortError {
    PortError::new(ErrorKind::Permanent, operation, "no Kubernetes adapter in this build: the cluster is not changed")
}

#[async_trait]
impl Cluster for DetachedCluster {
    async fn pool_nodes(&self, _pool: &PoolConfig) -> Result<Vec<NodeState>, PortError> {
        Ok(Vec::new())
    }

    async fn headroom_replicas(&self, _pool: &PoolConfig) -> Result<Option<u32>, PortError> {
        Ok(None)
    }

    async fn set_headroom_replicas(&self, _pool: &PoolConfig, _replicas: u32) -> Result<(), PortError> {
        Err(refused("set_headroom_replicas"))
    }

    async fn pool_demand(&self, _pool: &PoolConfig, _now: DateTime<Utc>) -> Result<Option<Demand>, PortError> {
        Ok(None)
    }

    async fn cordon(&self, _node: &str) -> Result<(), PortError> {
        Err(refused("cordon"))
    }

    async fn drain(&self, _node: &str, _timeout: Duration) -> Result<DrainReport, PortError> {
        Err(refused("drain"))
    }
}
