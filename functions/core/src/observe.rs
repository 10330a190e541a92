//! What is observed of a pool at the start of a reconcile: its ASGs (instances,
//! scaling activities), its nodes and its demand.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One Auto Scaling group as DescribeAutoScalingGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedAsg {
    /// The ASG's name, its identity in every port call.
    pub name: String,
    /// The ASG's tags, key to value; a pool's selector may match on them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The desired capacity: how many instances the ASG aims to run.
    pub desired: u32,
    /// The ASG's minimum size; desired never goes below it.
    pub min: u32,
    /// The ASG's maximum size; desired never goes above it.
    pub max: u32,
    /// The instances the ASG holds, in any lifecycle state.
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

    /// Slots the ASG wants but has no live instance for yet (desired minus live).
    pub fn shortfall(&self) -> u32 {
        self.desired.saturating_sub(self.live())
    }

    /// The instance with id `id`, if the ASG holds it.
    pub fn instance(&self, id: &str) -> Option<&AsgInstance> {
        self.instances.iter().find(|i| i.id == id)
    }

    /// The sizes, with the live count taken from the instances.
    pub fn size(&self) -> AsgSize {
        AsgSize { desired: self.desired, min: self.min, max: self.max, live: Some(self.live()) }
    }
}

/// An ASG's size as read again just before a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AsgSize {
    /// The desired capacity.
    pub desired: u32,
    /// The minimum size.
    pub min: u32,
    /// The maximum size.
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

/// One instance of an ASG.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsgInstance {
    /// The EC2 instance id (`i-…`).
    pub id: String,
    /// Where the instance is in the ASG's lifecycle.
    pub lifecycle_state: LifecycleState,
    /// The instance's Availability Zone; empty when not read (the simulator leaves it
    /// empty, and no plan depends on it).
    #[serde(default)]
    pub availability_zone: String,
    /// The EC2 instance type (`m6i.large`); empty when not read, as for the zone.
    #[serde(default)]
    pub instance_type: String,
    /// Whether the instance runs as Spot or On-Demand capacity.
    pub market: Market,
}

/// How EC2 bills an instance's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Market {
    /// Spare EC2 capacity at a discount, which EC2 may reclaim with a two-minute warning.
    Spot,
    /// Capacity at the fixed hourly price, not reclaimed by EC2.
    OnDemand,
}

/// ASG lifecycle states, spelled as Auto Scaling spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LifecycleState {
    /// Launching, before any lifecycle hook.
    Pending,
    /// Launching and held by a launch lifecycle hook until it is completed or times out.
    #[serde(rename = "Pending:Wait")]
    PendingWait,
    /// A launch lifecycle hook was completed; the launch goes on.
    #[serde(rename = "Pending:Proceed")]
    PendingProceed,
    /// Running and counted as capacity.
    InService,
    /// Being terminated, before any lifecycle hook.
    Terminating,
    /// Being terminated and held by a termination lifecycle hook.
    #[serde(rename = "Terminating:Wait")]
    TerminatingWait,
    /// A termination lifecycle hook was completed; the termination goes on.
    #[serde(rename = "Terminating:Proceed")]
    TerminatingProceed,
    /// Terminated; no longer capacity.
    Terminated,
    /// Being detached from the ASG (the instance keeps running outside it).
    Detaching,
    /// Detached from the ASG.
    Detached,
    /// Moving into standby, out of the ASG's capacity.
    EnteringStandby,
    /// In standby: still in the ASG but not counted as capacity.
    Standby,
}

impl LifecycleState {
    /// Whether an instance in this state is, or is becoming, capacity (a `Pending*`
    /// state or `InService`).
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

/// One scaling activity of an ASG, as DescribeScalingActivities reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScalingActivity {
    /// Auto Scaling's activity id.
    pub id: String,
    /// How far the activity has got.
    pub status: ActivityStatus,
    /// Auto Scaling's own words: `Launching a new EC2 instance: i-…` names the instance a
    /// launch started (see [`ScalingActivity::launched_instance`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Auto Scaling's reason for the status, such as the error of a failed launch; empty
    /// when it gives none.
    #[serde(default)]
    pub status_message: String,
    /// Auto Scaling's account of why the activity started; empty when it gives none.
    #[serde(default)]
    pub cause: String,
    /// When the activity started.
    pub start: DateTime<Utc>,
    /// When the activity ended; `None` while it is in progress.
    #[serde(default)]
    pub end: Option<DateTime<Utc>>,
}

/// A scaling activity's status, folded to the four outcomes the planner tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActivityStatus {
    /// Not finished: `InProgress` and every waiting or pending status code.
    InProgress,
    /// Finished and did what it set out to do.
    Successful,
    /// Finished without doing it (a launch that found no capacity, for one).
    Failed,
    /// Stopped before it finished.
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

/// One Kubernetes node of a pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeState {
    /// The Kubernetes node's name.
    pub name: String,
    /// The EC2 instance id behind the node, from its `aws:///zone/i-…` provider id.
    pub instance_id: String,
    /// Whether the node's `Ready` condition is `True`.
    pub ready: bool,
    /// Cordoned.
    #[serde(default)]
    pub unschedulable: bool,
    /// What the node offers pods (`status.allocatable`): a pod larger than every node
    /// of the pool never starts, whatever the headroom. `None` where it is not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<crate::shape::PodShape>,
}

/// The pool's workload requests (pause pods, DaemonSets and finished pods excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demand {
    /// The sum of the pods' CPU requests, in millicores.
    pub cpu_millis: u64,
    /// The sum of the pods' memory requests, in bytes.
    pub memory_bytes: u64,
    /// How many pods were counted.
    pub pods: u32,
    /// When the requests were read (by the forwarder or by the reconcile itself).
    pub observed_at: DateTime<Utc>,
}

/// What EC2 says of an instance its ASG no longer lists (EC2 lists one for about an hour
/// after it terminated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchedBy {
    /// The ASG that launched it (its `aws:autoscaling:groupName` tag); `None`: none did.
    pub asg: Option<String>,
    /// The spot market took it back (its state reason is `Server.SpotInstance...`), rather
    /// than its ASG or another caller ending it: its going lowered no ASG.
    pub spot_reclaimed: bool,
}

/// Everything observed about one pool at the start of a reconcile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedPool {
    /// In the pool's preference order.
    pub spot: Vec<ObservedAsg>,
    /// `None` for a spot-only pool.
    #[serde(default)]
    pub on_demand: Option<ObservedAsg>,
    /// The pool's Kubernetes nodes.
    #[serde(default)]
    pub nodes: Vec<NodeState>,
    /// The pool's pause-pod Deployments that exist, by slot.
    #[serde(default)]
    pub headroom: Vec<crate::shape::SlotState>,
    /// Demand the reconcile measured itself (when no fresh forwarder event exists).
    #[serde(default)]
    pub demand: Option<Demand>,
    /// The instances the run's events name that have left the pool's ASGs, as EC2 still
    /// lists them, by id (routing looked them up).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub left: BTreeMap<String, LaunchedBy>,
}

impl ObservedPool {
    /// The ids of the pool's instances that are, or are becoming, capacity.
    pub fn live_instance_ids(&self) -> std::collections::BTreeSet<&str> {
        self.asgs()
            .flat_map(|a| a.instances.iter())
            .filter(|i| i.lifecycle_state.is_live())
            .map(|i| i.id.as_str())
            .collect()
    }

    /// The pool's ASGs: the spot ones in preference order, then the on-demand one.
    pub fn asgs(&self) -> impl Iterator<Item = &ObservedAsg> {
        self.spot.iter().chain(self.on_demand.as_ref())
    }

    /// Whether `asg` names this pool's on-demand ASG.
    pub fn is_on_demand(&self, asg: &str) -> bool {
        self.on_demand.as_ref().is_some_and(|od| od.name == asg)
    }

    /// The pool's ASG named `name`.
    pub fn asg(&self, name: &str) -> Option<&ObservedAsg> {
        self.asgs().find(|a| a.name == name)
    }

    /// The pool's ASG that holds the instance `instance_id`.
    pub fn asg_of_instance(&self, instance_id: &str) -> Option<&ObservedAsg> {
        self.asgs().find(|a| a.instance(instance_id).is_some())
    }

    /// The node that runs on the instance `instance_id`.
    pub fn node_of_instance(&self, instance_id: &str) -> Option<&NodeState> {
        self.nodes.iter().find(|n| n.instance_id == instance_id)
    }

    /// The desired capacity summed over all the pool's ASGs.
    pub fn total_desired(&self) -> u32 {
        self.asgs().map(|a| a.desired).sum()
    }
}
