//! The functions' cluster port: the Kubernetes adapter, or — with
//! `BALLAST_CLUSTER_ACCESS=none` — a detached one that sees no nodes, no headroom
//! Deployment and no demand of its own (demand then comes only from the forwarder's
//! events), and refuses cluster changes rather than pretend to make them.

use std::time::Duration;

use async_trait::async_trait;
use ballast_core::config::PoolConfig;
use ballast_core::observe::{Demand, NodeState};
use ballast_core::ports::{Cluster, DrainReport, ErrorKind, PortError};
use ballast_core::shape::{PodShape, SlotState};
use ballast_kube::KubeCluster;
use chrono::{DateTime, Utc};
use tracing::warn;

#[derive(Debug, Clone, Default)]
pub struct DetachedCluster;

fn refused(operation: &str) -> PortError {
    PortError::new(
        ErrorKind::Permanent,
        operation,
        "BALLAST_CLUSTER_ACCESS=none: the cluster is not changed (set it to eks to let Ballast manage headroom and drain)",
    )
}

#[async_trait]
impl Cluster for DetachedCluster {
    async fn pool_nodes(&self, _pool: &PoolConfig) -> Result<Vec<NodeState>, PortError> {
        Ok(Vec::new())
    }

    async fn headroom(&self, _pool: &PoolConfig) -> Result<Vec<SlotState>, PortError> {
        Ok(Vec::new())
    }

    async fn set_headroom(
        &self,
        _pool: &PoolConfig,
        _slot: usize,
        _shape: &PodShape,
        _replicas: u32,
    ) -> Result<(), PortError> {
        Err(refused("set_headroom"))
    }

    async fn pool_demand(&self, _pool: &PoolConfig, _now: DateTime<Utc>) -> Result<Option<Demand>, PortError> {
        Ok(None)
    }

    async fn cordon(&self, _node: &str) -> Result<(), PortError> {
        Err(refused("cordon"))
    }

    async fn uncordon(&self, _node: &str) -> Result<(), PortError> {
        Err(refused("uncordon"))
    }

    async fn drain(&self, _node: &str, _timeout: Duration) -> Result<DrainReport, PortError> {
        Err(refused("drain"))
    }
}

/// What a function talks to, chosen once per config version.
pub enum FunctionCluster {
    Kube(Box<KubeCluster>, Option<WaitForAccess>),
    Detached(DetachedCluster),
}

/// A dry run's patience with a cluster that does not let the function in yet (day one:
/// the stack is deployed before the cluster side). Live runs have none: a planner that
/// saw no nodes would complete hooks and withdraw instances undrained.
#[derive(Debug, Clone, Copy)]
pub struct WaitForAccess {
    pub function: &'static str,
    /// Where the `WaitingForClusterAccess` count goes (an EMF sink).
    pub metrics: fn(&serde_json::Value),
}

impl FunctionCluster {
    fn port(&self) -> &dyn Cluster {
        match self {
            FunctionCluster::Kube(k, _) => k.as_ref(),
            FunctionCluster::Detached(d) => d,
        }
    }

    /// In a dry run, a read the cluster refused because the function is not let in yet
    /// (no access entry: 401; no RBAC: 403) is answered as a detached cluster would, so
    /// that the plans go on being logged and the event is not failed while someone applies
    /// the cluster side. Changes are still refused, and a live run fails as before.
    fn or_waiting<T>(&self, read: Result<T, PortError>, detached: impl FnOnce() -> T) -> Result<T, PortError> {
        match (read, self) {
            (Err(e), FunctionCluster::Kube(_, Some(wait))) if ballast_kube::cluster::access_refused(&e) => {
                warn!(function = wait.function, error = %e, "waiting for cluster access: apply infra/k8s (the functions' \
                    RBAC) and give the functions' roles their access entries (group ballast:functions)");
                (wait.metrics)(&crate::metrics::emf_count(
                    wait.function,
                    "WaitingForClusterAccess",
                    Utc::now().timestamp_millis(),
                ));
                Ok(detached())
            }
            (read, _) => read,
        }
    }
}

#[async_trait]
impl Cluster for FunctionCluster {
    async fn pool_nodes(&self, pool: &PoolConfig) -> Result<Vec<NodeState>, PortError> {
        self.or_waiting(self.port().pool_nodes(pool).await, Vec::new)
    }

    async fn headroom(&self, pool: &PoolConfig) -> Result<Vec<SlotState>, PortError> {
        self.or_waiting(self.port().headroom(pool).await, Vec::new)
    }

    async fn set_headroom(
        &self,
        pool: &PoolConfig,
        slot: usize,
        shape: &PodShape,
        replicas: u32,
    ) -> Result<(), PortError> {
        self.port().set_headroom(pool, slot, shape, replicas).await
    }

    async fn pool_demand(&self, pool: &PoolConfig, now: DateTime<Utc>) -> Result<Option<Demand>, PortError> {
        self.or_waiting(self.port().pool_demand(pool, now).await, || None)
    }

    async fn cordon(&self, node: &str) -> Result<(), PortError> {
        self.port().cordon(node).await
    }

    async fn uncordon(&self, node: &str) -> Result<(), PortError> {
        self.port().uncordon(node).await
    }

    async fn drain(&self, node: &str, timeout: Duration) -> Result<DrainReport, PortError> {
        self.port().drain(node, timeout).await
    }
}
