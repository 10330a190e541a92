//! One wrapper for every port that lets a test fail or watch any call, or act on the
//! world just before it: [`Faulty`] passes each call to the port it wraps, asking its
//! [`Fault`] first. A test writes only what its fault does, not the port's other
//! methods again. A double that must change a successful answer or wait across other
//! runs (a drain that takes its whole timeout while another run acts) is written as a
//! port of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::config::PoolConfig;
use crate::observe::{AsgSize, Demand, LaunchedBy, NodeState, ObservedAsg};
use crate::plan::LifecycleRef;
use crate::ports::{Autoscaling, Cluster, DrainReport, PortError, StateStore, Urgency, Versioned};
use crate::record::PoolRecord;

/// A call to a port, with what it is about. Each variant is the port method of the
/// same name ([`Autoscaling`], [`Cluster`], [`StateStore`]); its fields are the
/// arguments a fault matches on, documented there (the record a save writes, a
/// lease's time to live and the like are left out).
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortCall<'a> {
    DescribePool { pool: &'a str },
    AsgsOfInstances { instance_ids: &'a [String] },
    LaunchedBy { instance_ids: &'a [String] },
    AsgTags { asgs: &'a [String] },
    AsgSize { asg: &'a str },
    AsgBounds { asg: &'a str },
    SetDesiredCapacity { asg: &'a str, desired: u32 },
    TerminateInstance { instance_id: &'a str, decrement: bool },
    RecordLifecycleHeartbeat { action: &'a LifecycleRef },
    CompleteLifecycleAction { action: &'a LifecycleRef },
    PoolNodes { pool: &'a str },
    HeadroomReplicas { pool: &'a str },
    SetHeadroomReplicas { pool: &'a str, slot: usize, replicas: u32 },
    PoolDemand { pool: &'a str },
    Cordon { node: &'a str },
    Uncordon { node: &'a str },
    Drain { node: &'a str, timeout: Duration },
    Load { pool: &'a str },
    Save { pool: &'a str, expected: u64 },
    AcquireLease { pool: &'a str, owner: &'a str, now: DateTime<Utc> },
    ReleaseLease { pool: &'a str, owner: &'a str },
    Seen { event_ids: &'a [String] },
    MarkSeen { event_ids: &'a [String] },
}

impl PortCall<'_> {
    /// The port method's name (for the errors a fault makes).
    pub fn method(&self) -> &'static str {
        match self {
            PortCall::DescribePool { .. } => "describe_pool",
            PortCall::AsgsOfInstances { .. } => "asgs_of_instances",
            PortCall::LaunchedBy { .. } => "launched_by",
            PortCall::AsgTags { .. } => "asg_tags",
            PortCall::AsgSize { .. } => "asg_size",
            PortCall::AsgBounds { .. } => "asg_bounds",
            PortCall::SetDesiredCapacity { .. } => "set_desired_capacity",
            PortCall::TerminateInstance { .. } => "terminate_instance",
            PortCall::RecordLifecycleHeartbeat { .. } => "record_lifecycle_heartbeat",
            PortCall::CompleteLifecycleAction { .. } => "complete_lifecycle_action",
            PortCall::PoolNodes { .. } => "pool_nodes",
            PortCall::HeadroomReplicas { .. } => "headroom_replicas",
            PortCall::SetHeadroomReplicas { .. } => "set_headroom_replicas",
            PortCall::PoolDemand { .. } => "pool_demand",
            PortCall::Cordon { .. } => "cordon",
            PortCall::Uncordon { .. } => "uncordon",
            PortCall::Drain { .. } => "drain",
            PortCall::Load { .. } => "load",
            PortCall::Save { .. } => "save",
            PortCall::AcquireLease { .. } => "acquire_lease",
            PortCall::ReleaseLease { .. } => "release_lease",
            PortCall::Seen { .. } => "seen",
            PortCall::MarkSeen { .. } => "mark_seen",
        }
    }

    /// Whether the call changes the world (the record included), rather than reading it.
    pub fn is_mutating(&self) -> bool {
        !matches!(
            self,
            PortCall::DescribePool { .. }
                | PortCall::AsgsOfInstances { .. }
                | PortCall::LaunchedBy { .. }
                | PortCall::AsgTags { .. }
                | PortCall::AsgSize { .. }
                | PortCall::AsgBounds { .. }
                | PortCall::PoolNodes { .. }
                | PortCall::HeadroomReplicas { .. }
                | PortCall::PoolDemand { .. }
                | PortCall::Load { .. }
                | PortCall::Seen { .. }
        )
    }
}

/// What happens to a port's calls.
pub trait Fault: Send + Sync {
    /// Before the call reaches the port. `Err`: the call fails with no effect.
    /// `Ok(Some(error))`: the call takes effect, and its answer is `error` (an answer
    /// lost on the way back). `Ok(None)`: the call goes through as it would.
    fn before(&self, call: &PortCall<'_>) -> Result<Option<PortError>, PortError>;

    /// After the port carried the call out (whatever answer the fault gives it): for a
    /// fault that keeps its own account of what happened.
    fn after(&self, _call: &PortCall<'_>) {}
}

/// A closure is a fault that fails calls before they reach the port.
impl<F> Fault for F
where
    F: Fn(&PortCall<'_>) -> Result<(), PortError> + Send + Sync,
{
    fn before(&self, call: &PortCall<'_>) -> Result<Option<PortError>, PortError> {
        self(call).map(|()| None)
    }
}

/// `port`, its calls first put to `fault`.
#[derive(Debug, Clone)]
pub struct Faulty<P, F> {
    /// The port the calls reach.
    pub port: P,
    /// What is asked before and told after each call (tests read its account here).
    pub fault: F,
}

impl<P, F: Fault> Faulty<P, F> {
    /// `port` behind `fault`.
    pub fn new(port: P, fault: F) -> Self {
        Faulty { port, fault }
    }

    async fn through<T>(
        &self,
        call: PortCall<'_>,
        made: impl Future<Output = Result<T, PortError>>,
    ) -> Result<T, PortError> {
        let lost_answer = self.fault.before(&call)?;
        let answer = made.await?;
        self.fault.after(&call);
        match lost_answer {
            Some(error) => Err(error),
            None => Ok(answer),
        }
    }
}

#[async_trait]
impl<P: Autoscaling, F: Fault> Autoscaling for Faulty<P, F> {
    async fn describe_pool(&self, pool: &PoolConfig) -> Result<(Vec<ObservedAsg>, Option<ObservedAsg>), PortError> {
        self.through(PortCall::DescribePool { pool: &pool.name }, self.port.describe_pool(pool)).await
    }
    async fn asgs_of_instances(&self, instance_ids: &[String]) -> Result<BTreeMap<String, String>, PortError> {
        self.through(PortCall::AsgsOfInstances { instance_ids }, self.port.asgs_of_instances(instance_ids)).await
    }
    async fn launched_by(&self, instance_ids: &[String]) -> Result<BTreeMap<String, LaunchedBy>, PortError> {
        self.through(PortCall::LaunchedBy { instance_ids }, self.port.launched_by(instance_ids)).await
    }
    async fn asg_tags(&self, asgs: &[String]) -> Result<BTreeMap<String, BTreeMap<String, String>>, PortError> {
        self.through(PortCall::AsgTags { asgs }, self.port.asg_tags(asgs)).await
    }
    async fn asg_size(&self, asg: &str) -> Result<AsgSize, PortError> {
        self.through(PortCall::AsgSize { asg }, self.port.asg_size(asg)).await
    }
    async fn asg_bounds(&self, asg: &str) -> Result<AsgSize, PortError> {
        self.through(PortCall::AsgBounds { asg }, self.port.asg_bounds(asg)).await
    }
    async fn set_desired_capacity(&self, asg: &str, desired: u32) -> Result<(), PortError> {
        self.through(PortCall::SetDesiredCapacity { asg, desired }, self.port.set_desired_capacity(asg, desired)).await
    }
    async fn terminate_instance(&self, instance_id: &str, decrement: bool) -> Result<(), PortError> {
        let call = PortCall::TerminateInstance { instance_id, decrement };
        self.through(call, self.port.terminate_instance(instance_id, decrement)).await
    }
    async fn record_lifecycle_heartbeat(&self, action: &LifecycleRef) -> Result<(), PortError> {
        self.through(PortCall::RecordLifecycleHeartbeat { action }, self.port.record_lifecycle_heartbeat(action)).await
    }
    async fn complete_lifecycle_action(&self, action: &LifecycleRef) -> Result<(), PortError> {
        self.through(PortCall::CompleteLifecycleAction { action }, self.port.complete_lifecycle_action(action)).await
    }
}

#[async_trait]
impl<P: Cluster, F: Fault> Cluster for Faulty<P, F> {
    async fn pool_nodes(&self, pool: &PoolConfig) -> Result<Vec<NodeState>, PortError> {
        self.through(PortCall::PoolNodes { pool: &pool.name }, self.port.pool_nodes(pool)).await
    }
    async fn headroom(&self, pool: &PoolConfig) -> Result<Vec<crate::shape::SlotState>, PortError> {
        self.through(PortCall::HeadroomReplicas { pool: &pool.name }, self.port.headroom(pool)).await
    }
    async fn set_headroom(
        &self,
        pool: &PoolConfig,
        slot: usize,
        shape: &crate::shape::PodShape,
        replicas: u32,
    ) -> Result<(), PortError> {
        let call = PortCall::SetHeadroomReplicas { pool: &pool.name, slot, replicas };
        self.through(call, self.port.set_headroom(pool, slot, shape, replicas)).await
    }
    async fn pool_demand(&self, pool: &PoolConfig, now: DateTime<Utc>) -> Result<Option<Demand>, PortError> {
        self.through(PortCall::PoolDemand { pool: &pool.name }, self.port.pool_demand(pool, now)).await
    }
    async fn cordon(&self, node: &str) -> Result<(), PortError> {
        self.through(PortCall::Cordon { node }, self.port.cordon(node)).await
    }
    async fn uncordon(&self, node: &str) -> Result<(), PortError> {
        self.through(PortCall::Uncordon { node }, self.port.uncordon(node)).await
    }
    async fn drain(&self, node: &str, timeout: Duration) -> Result<DrainReport, PortError> {
        self.through(PortCall::Drain { node, timeout }, self.port.drain(node, timeout)).await
    }
}

#[async_trait]
impl<P: StateStore, F: Fault> StateStore for Faulty<P, F> {
    async fn load(&self, pool: &str) -> Result<Versioned<PoolRecord>, PortError> {
        self.through(PortCall::Load { pool }, self.port.load(pool)).await
    }
    async fn save(&self, pool: &str, record: &PoolRecord, expected: u64) -> Result<u64, PortError> {
        self.through(PortCall::Save { pool, expected }, self.port.save(pool, record, expected)).await
    }
    async fn acquire_lease(
        &self,
        pool: &str,
        owner: &str,
        now: DateTime<Utc>,
        ttl: Duration,
        urgency: Urgency,
    ) -> Result<bool, PortError> {
        let call = PortCall::AcquireLease { pool, owner, now };
        self.through(call, self.port.acquire_lease(pool, owner, now, ttl, urgency)).await
    }
    async fn release_lease(&self, pool: &str, owner: &str) -> Result<(), PortError> {
        self.through(PortCall::ReleaseLease { pool, owner }, self.port.release_lease(pool, owner)).await
    }
    async fn seen(&self, event_ids: &[String]) -> Result<BTreeSet<String>, PortError> {
        self.through(PortCall::Seen { event_ids }, self.port.seen(event_ids)).await
    }
    async fn mark_seen(&self, event_ids: &[String], expires_at: DateTime<Utc>) -> Result<(), PortError> {
        self.through(PortCall::MarkSeen { event_ids }, self.port.mark_seen(event_ids, expires_at)).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::ports::ErrorKind;
    use crate::testing::{Call, InMemory, World};

    fn world() -> InMemory {
        let asg = ObservedAsg {
            name: "s".into(),
            tags: BTreeMap::new(),
            desired: 1,
            min: 0,
            max: 3,
            instances: Vec::new(),
            activities: Vec::new(),
        };
        InMemory::new(World { asgs: vec![asg], ..World::default() })
    }

    /// Fails writes before or after they take effect, and counts what went through.
    struct Writes {
        lost: bool,
        through: AtomicUsize,
    }

    impl Fault for Writes {
        fn before(&self, call: &PortCall<'_>) -> Result<Option<PortError>, PortError> {
            let error = PortError::new(ErrorKind::Retryable, call.method(), "timed out");
            match (call.is_mutating(), self.lost) {
                (false, _) => Ok(None),
                (true, false) => Err(error),
                (true, true) => Ok(Some(error)),
            }
        }
        fn after(&self, _call: &PortCall<'_>) {
            self.through.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_call_failed_before_has_no_effect_and_one_whose_answer_is_lost_has_one() {
        let memory = world();
        let refused = Faulty::new(memory.clone(), Writes { lost: false, through: AtomicUsize::new(0) });
        assert!(refused.set_desired_capacity("s", 2).await.is_err());
        assert_eq!(refused.asg_size("s").await.unwrap().desired, 1);
        assert_eq!(refused.fault.through.load(Ordering::SeqCst), 1, "the read went through");

        let lost = Faulty::new(memory.clone(), Writes { lost: true, through: AtomicUsize::new(0) });
        let error = lost.set_desired_capacity("s", 2).await.unwrap_err();
        assert_eq!((error.operation.as_str(), error.kind), ("set_desired_capacity", ErrorKind::Retryable));
        assert_eq!(memory.world().calls, vec![Call::SetDesired { asg: "s".into(), desired: 2 }]);
        assert_eq!(lost.fault.through.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_closure_fails_only_the_calls_it_names_and_the_port_refuses_the_rest_as_it_would() {
        let faulty = Faulty::new(world(), |call: &PortCall<'_>| match call {
            PortCall::TerminateInstance { .. } => Err(PortError::new(ErrorKind::Permanent, call.method(), "no")),
            _ => Ok(()),
        });
        assert!(faulty.terminate_instance("i-1", false).await.unwrap_err().message.contains("no"));
        let over_max = faulty.set_desired_capacity("s", 4).await.unwrap_err();
        assert!(over_max.message.contains("outside s's bounds"), "{over_max}");
    }
}
