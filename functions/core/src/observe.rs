//! What is observed of a pool at the start of a reconcile: its ASGs (instances,
//! scaling activities), its nodes and its demand.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedAsg {
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    pub desired: u32,
    pub min: u32,
    pub max: u32,
    #[serde(default)]
    pub instances: Vec<AsgInstance>,
    /// Recent scaling activities, newest first, as DescribeScalingActivities gives them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub activities: Vec<ScalingActivity>,
}

impl ObservedAsg {
    /// Instances that are, or are becoming, capacity.
    pub fn live(&self) -> u32 {
        self.instances.iter().filter(|i| i.lifecycle_state.is_live()).count() as u32
    }

    pub fn shortfall(&self) -> u32 {
        self.desired.saturating_sub(self.live())
    }

    pub fn instance(&self, id: &str) -> Option<&AsgInstance> {
        self.instances.iter().find(|i| i.id == id)
    }

    pub fn size(&self) -> AsgSize {
        AsgSize { desired: self.desired, min: self.min, max: self.max, live: Some(self.live()) }
    }
}

/// An ASG's size as read again just before a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AsgSize {
    pub desired: u32,
    pub min: u32,
    pub max: u32,
    /// Instances that are, or are becoming, capacity; `None` when read without the
    /// instances ([`crate::ports::Autoscaling::asg_bounds`]), which only a raise may use.
    pub live: Option<u32>,
}

impl AsgSize {
    /// Where a change of `delta` planned against an older reading lands now: the same
    /// change applied to what the ASG holds now (so another writer's change between
    /// observe and apply is kept), within min and max, and never below the live
    /// instances when lowering (a lower removes unfilled slots only; an instance that
    /// must go is terminated by id). Read without the instances, a lower lowers nothing:
    /// which slots are unfilled is unknown.
    pub fn shifted(&self, delta: i64) -> u32 {
        let target = (i64::from(self.desired) + delta).clamp(0, i64::from(u32::MAX)) as u32;
        let live = self.live.unwrap_or(self.desired);
        let floor = if delta < 0 { self.min.max(live.min(self.desired)) } else { self.min };
        target.clamp(floor, self.max.max(floor))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsgInstance {
    pub id: String,
    pub lifecycle_state: LifecycleState,
    #[serde(default)]
    pub availability_zone: String,
    #[serde(default)]
    pub instance_type: String,
    pub market: Market,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Market {
    Spot,
    OnDemand,
}

/// ASG lifecycle states, spelled as Auto Scaling spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LifecycleState {
    Pending,
    #[serde(rename = "Pending:Wait")]
    PendingWait,
    #[serde(rename = "Pending:Proceed")]
    PendingProceed,
    InService,
    Terminating,
    #[serde(rename = "Terminating:Wait")]
    TerminatingWait,
    #[serde(rename = "Terminating:Proceed")]
    TerminatingProceed,
    Terminated,
    Detaching,
    Detached,
    EnteringStandby,
    Standby,
}

impl LifecycleState {
    pub fn is_live(self) -> bool {
        matches!(
            self,
            LifecycleState::Pending
                | LifecycleState::PendingWait
                | LifecycleState::PendingProceed
                | LifecycleState::InService
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScalingActivity {
    pub id: String,
    pub status: ActivityStatus,
    /// Auto Scaling's own words: `Launching a new EC2 instance: i-…` names the instance a
    /// launch started (see [`ScalingActivity::launched_instance`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default)]
    pub status_message: String,
    #[serde(default)]
    pub cause: String,
    pub start: DateTime<Utc>,
    #[serde(default)]
    pub end: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActivityStatus {
    InProgress,
    Successful,
    Failed,
    Cancelled,
}

impl ScalingActivity {
    /// The instance a launch activity started, from its description (`Launching a new EC2
    /// instance: i-0598c7d356eba48d7`, the id followed by nothing, a space or `.  Status
    /// Reason: …`); `None` for any other activity, a launch into a warm pool included.
    pub fn launched_instance(&self) -> Option<&str> {
        let rest = self.description.strip_prefix("Launching a new EC2 instance: ")?;
        let id = &rest[..rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).unwrap_or(rest.len())];
        (id.len() > 2 && id.starts_with("i-")).then_some(id)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeState {
    pub name: String,
    pub instance_id: String,
    pub ready: bool,
    /// Cordoned.
    #[serde(default)]
    pub unschedulable: bool,
}

/// The pool's workload requests (pause pods, DaemonSets and finished pods excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demand {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub pods: u32,
    pub observed_at: DateTime<Utc>,
}

/// Everything observed about one pool at the start of a reconcile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedPool {
    /// In the pool's preference order.
    pub spot: Vec<ObservedAsg>,
    /// `None` for a spot-only pool.
    #[serde(default)]
    pub on_demand: Option<ObservedAsg>,
    #[serde(default)]
    pub nodes: Vec<NodeState>,
    /// The pause-pod Deployment's replicas; `None` when it does not exist yet.
    #[serde(default)]
    pub headroom_replicas: Option<u32>,
    /// Demand the reconcile measured itself (when no fresh forwarder event exists).
    #[serde(default)]
    pub demand: Option<Demand>,
}

impl ObservedPool {
    pub fn asgs(&self) -> impl Iterator<Item = &ObservedAsg> {
        self.spot.iter().chain(self.on_demand.as_ref())
    }

    pub fn is_on_demand(&self, asg: &str) -> bool {
        self.on_demand.as_ref().is_some_and(|od| od.name == asg)
    }

    pub fn asg(&self, name: &str) -> Option<&ObservedAsg> {
        self.asgs().find(|a| a.name == name)
    }

    pub fn asg_of_instance(&self, instance_id: &str) -> Option<&ObservedAsg> {
        self.asgs().find(|a| a.instance(instance_id).is_some())
    }

    pub fn node_of_instance(&self, instance_id: &str) -> Option<&NodeState> {
        self.nodes.iter().find(|n| n.instance_id == instance_id)
    }

    pub fn total_desired(&self) -> u32 {
        self.asgs().map(|a| a.desired).sum()
    }
}
