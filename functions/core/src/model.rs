//! What the planner sees: the observed pool (ASGs, instances, nodes, demand,
//! headroom) and the pool record, Ballast's own edge memory kept in the state store.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::event::InstanceAction;

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
pub struct ScalingActivity {
    pub id: String,
    pub status: ActivityStatus,
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

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    pub on_demand: ObservedAsg,
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
        self.spot.iter().chain(std::iter::once(&self.on_demand))
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

/// Ballast's memory of one pool, written with a version condition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolRecord {
    /// On-demand instances added by fallback (recomputed against the ASG each reconcile).
    pub fallback_units: u32,
    pub fallback_since: Option<DateTime<Utc>>,
    /// Spot ASGs kept off after capacity errors or a high interruption rate.
    pub unavailable: BTreeMap<String, Unavailable>,
    /// When each spot ASG was first seen below its desired size (cleared once whole).
    pub short_since: BTreeMap<String, DateTime<Utc>>,
    /// Since when each spot ASG has been healthy (not failing).
    pub healthy_since: BTreeMap<String, DateTime<Utc>>,
    pub headroom_override: Option<HeadroomOverride>,
    /// Instances being replaced (interruption, rebalance, scheduled change).
    pub interruptions: Vec<Interruption>,
    /// Recent disruptions of spot instances: the interruption rate and the boost.
    pub disruptions: Vec<Disruption>,
    pub failback: Option<FailbackStep>,
    /// No failback step starts before this (after a failed one).
    pub retry_after: Option<DateTime<Utc>>,
    pub lifecycle_actions: Vec<PendingLifecycleAction>,
    /// The latest demand from the forwarder.
    pub demand: Option<Demand>,
    pub unschedulable: Option<UnschedulableSeen>,
    /// Non-capacity launch failures already reported (by activity id).
    pub reported_launch_errors: Vec<ReportedLaunchError>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    pub until: DateTime<Utc>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadroomOverride {
    pub percent: u32,
    pub until: DateTime<Utc>,
    /// The event time that set it: a late, older override never replaces a newer one.
    pub set_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interruption {
    pub instance_id: String,
    pub asg: String,
    pub cause: InterruptionCause,
    pub noticed_at: DateTime<Utc>,
    /// When the replacement and drain were planned (absent: not yet).
    #[serde(default)]
    pub planned_at: Option<DateTime<Utc>>,
    /// Where the replacement went and the desired size that includes it.
    #[serde(default)]
    pub surge: Option<Surge>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InterruptionCause {
    SpotWarning { action: InstanceAction },
    Rebalance,
    ScheduledChange { event_type_code: String, start_time: Option<DateTime<Utc>> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Surge {
    pub asg: String,
    pub to: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disruption {
    pub instance_id: String,
    pub asg: String,
    pub at: DateTime<Utc>,
    pub kind: DisruptionKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisruptionKind {
    InterruptionWarning,
    /// Stopped or terminated without a warning.
    UnplannedLoss,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailbackStep {
    pub spot_asg: String,
    pub count: u32,
    pub started_at: DateTime<Utc>,
    /// The spot ASG's desired size before the surge: a withdrawal never goes below it.
    #[serde(default)]
    pub desired_before: u32,
    /// Ready nodes of the spot ASG before the surge.
    pub ready_before: u32,
    /// On-demand instances being drained and removed once the spot nodes are Ready.
    #[serde(default)]
    pub victims: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingLifecycleAction {
    pub asg: String,
    pub hook: String,
    pub token: String,
    pub instance_id: String,
    pub received_at: DateTime<Utc>,
    #[serde(default)]
    pub planned: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnschedulableSeen {
    pub count: u32,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub oldest_pending_since: DateTime<Utc>,
    pub observed_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedLaunchError {
    pub activity_id: String,
    pub asg: String,
    pub at: DateTime<Utc>,
}
