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

    pub fn size(&self) -> AsgSize {
        AsgSize { desired: self.desired, min: self.min, max: self.max, live: self.live() }
    }
}

/// An ASG's size as read again just before a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AsgSize {
    pub desired: u32,
    pub min: u32,
    pub max: u32,
    /// Instances that are, or are becoming, capacity.
    pub live: u32,
}

impl AsgSize {
    /// Where a change of `delta` planned against an older reading lands now: the same
    /// change applied to what the ASG holds now (so another writer's change between
    /// observe and apply is kept), within min and max, and never below the live
    /// instances when lowering (a lower removes unfilled slots only; an instance that
    /// must go is terminated by id).
    pub fn shifted(&self, delta: i64) -> u32 {
        let target = (i64::from(self.desired) + delta).clamp(0, i64::from(u32::MAX)) as u32;
        let floor = if delta < 0 { self.min.max(self.live.min(self.desired)) } else { self.min };
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
    /// The capacity calls of the last plan not yet known to have landed.
    pub journal: Option<Journal>,
    /// Journals written so far: each plan's own number, so what a plan promised is told
    /// apart from another plan's made at the same instant.
    #[serde(skip_serializing_if = "is_zero")]
    pub plans: u64,
    /// Instances whose nodes Ballast cordoned and has released: uncordoned every
    /// reconcile until seen schedulable (or gone), so a run that dies before its
    /// uncordon leaves no node cordoned.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub uncordon: Vec<String>,
    /// What a wait target's headroom is learned from (see `learn`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned: Option<crate::learn::History>,
    /// A run draining nodes without the lease (so that an event arriving meanwhile is
    /// acted on at once): scheduled ticks stand down until it is done or `until`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draining: Option<Draining>,
    /// Ballast's own raises that landed, per ASG, kept while another writer may still
    /// undo them from a size read before them (see `planner::remake`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub raised: BTreeMap<String, OwnRaise>,
}

/// A raise of Ballast's that landed: what it left the ASG at, and what could explain a
/// lower since other than its being undone (an instance then live, gone now).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnRaise {
    /// The size the write left the ASG at (less decrements of ours landed after it).
    pub to: u32,
    /// How much of it the write added.
    pub by: u32,
    /// When the plan that made it was made.
    pub at: DateTime<Utc>,
    /// The ASG's live instances when that plan looked: each one gone since explains a
    /// lower of one (a terminate-with-decrement, the ASG killing one to meet a lower).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live: Vec<String>,
    /// The write made this raise again after another writer had undone it: undone once
    /// more, it is not made a third time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remade: bool,
}

/// See [`PoolRecord::draining`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Draining {
    /// The run's lease owner.
    pub owner: String,
    /// When its drains end at the latest (and a run that died in them is taken as dead).
    pub until: DateTime<Utc>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// The capacity calls of one plan, in apply order (raises, lowers, terminations),
/// written before the first and marked `done` after each that succeeds. What is not
/// done after a crash or a failed call is judged against what is observed next time:
/// the first call not done may have landed (its answer was lost) if apply had reached
/// it; the rest were never made, since apply stops at the first failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    pub planned_at: DateTime<Utc>,
    /// The plan's number (`PoolRecord::plans`); 0 in records written before it was kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seq: u64,
    /// Fallback units the plan added to the on-demand ASG (taken back if its raise did
    /// not land).
    #[serde(default)]
    pub units_added: u32,
    pub calls: Vec<CapacityCall>,
    /// How many calls, from the first, apply may have started: written before each run
    /// of consecutive calls, so a call after a failed cordon or drain is known unmade.
    #[serde(default)]
    pub attempted: usize,
    /// Parts of this plan's lowers that are owed whatever its own raises do: finishing
    /// a move of an earlier plan whose raise landed, or withdrawing a replacement no
    /// longer needed. Kept (and made later) even if a raise of this plan does not land.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owed: Vec<OwedLower>,
    /// The plan's moves (a fallback's: raise `to`, then lower `from`, by `n`), so that a
    /// move split over several receivers whose raises did not all land is finished for
    /// those that did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<Move>,
    /// The live instances, when the plan looked, of each ASG it raises (see [`OwnRaise`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub live: BTreeMap<String, Vec<String>>,
    /// ASGs whose raise in this plan makes again one another writer undid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remakes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub from: String,
    pub to: String,
    pub n: u32,
}

/// A lower owed: how much, and the raises it answers (ASG, size before, size after),
/// from which as much is withdrawn if the lower can no longer be made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwedLower {
    pub asg: String,
    pub by: u32,
    pub raised: Vec<(String, u32, u32)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum CapacityCall {
    /// `from` is the size read just before the call.
    SetDesired {
        asg: String,
        from: u32,
        to: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        done: bool,
    },
    Terminate {
        asg: String,
        instance_id: String,
        decrement: bool,
        /// A replacement no longer needed, withdrawn: withdrawn again if not made.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        withdraws: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        done: bool,
    },
}

impl CapacityCall {
    pub fn done(&self) -> bool {
        match self {
            CapacityCall::SetDesired { done, .. } | CapacityCall::Terminate { done, .. } => *done,
        }
    }
}

impl Journal {
    /// What the calls known to have landed did to `asg`: the size the last write left it
    /// at (less the decrements landed after it; `None` without a write), and their net
    /// change; `None` if none landed there.
    pub fn landed_on(&self, asg: &str) -> Option<(Option<u32>, i64)> {
        let mut landed: Option<(Option<u32>, i64)> = None;
        for call in self.calls.iter().filter(|c| c.done()) {
            match call {
                CapacityCall::SetDesired { asg: a, from, to, .. } if a == asg => {
                    let (left_at, change) = landed.get_or_insert((None, 0));
                    *left_at = Some(*to);
                    *change += i64::from(*to) - i64::from(*from);
                }
                CapacityCall::Terminate { asg: a, decrement: true, .. } if a == asg => {
                    let (left_at, change) = landed.get_or_insert((None, 0));
                    *left_at = left_at.map(|n| n.saturating_sub(1));
                    *change -= 1;
                }
                _ => {}
            }
        }
        landed
    }
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
    /// Where the replacement went (absent: no replacement launched).
    #[serde(default)]
    pub surge: Option<Surge>,
    /// Ballast asked Auto Scaling to terminate the instance (with decrement when a
    /// surge replaced it): its leaving is not an unplanned loss of the surge.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminated: bool,
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
    /// The plan that raised it (its journal tells whether the raise landed).
    pub planned_at: DateTime<Utc>,
    /// That plan's number (its journal's `seq`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub plan: u64,
    /// A fallback moved the surge's unfilled slot out of a failing spot ASG into `asg`:
    /// where it was before, and the plan that moved it (undone if that plan's raise of
    /// `asg` did not land).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<SurgeMove>,
    /// The size Ballast's own calls leave `asg` at while the surge waits for its
    /// instance's terminate: the size before the plan that made (or moved) it, then what
    /// that plan's landed calls left, moved on by every later plan's (absent in older
    /// records). Below it, another writer took slots there, perhaps this one, and the
    /// instance must not go with decrement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holds_at: Option<u32>,
    /// It counts in `fallback_units` (on-demand for a spot instance): given back if it is
    /// dropped once its ASG has left the pool (false in older records).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fallback_unit: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SurgeMove {
    pub from: String,
    pub plan: u64,
    /// The surge's `holds_at` in `from`, back with it if the move does not land.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holds_at: Option<u32>,
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
    /// The plan that started it (its journal's `seq`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub plan: u64,
    /// The spot ASG's desired size before the surge: a withdrawal never goes below it.
    #[serde(default)]
    pub desired_before: u32,
    /// The spot ASG's desired size once the surge is made (0 in records from before it
    /// was kept: `desired_before + count`). Not moved by an interruption's decrement,
    /// which `desired_before` follows: what rises above it is another writer's.
    #[serde(default)]
    pub raised_to: u32,
    /// Ready nodes of the spot ASG before the surge.
    pub ready_before: u32,
    /// The spot ASG's live instances before the surge (booting ones too): only a node of
    /// an instance launched since can be the step's. None in records from before it was
    /// kept: counted from `ready_before`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances_before: Option<Vec<String>>,
    /// Slots the spot ASG had asked for and not yet filled before the surge (another
    /// writer's, launching): their instances, new since, are not the step's.
    #[serde(default)]
    pub unfilled_before: u32,
    /// On-demand instances being drained and removed once the spot nodes are Ready.
    #[serde(default)]
    pub victims: Vec<String>,
    /// When the victims were chosen: past `drain_deadline` they are uncordoned and the
    /// step ends.
    #[serde(default)]
    pub victims_since: Option<DateTime<Utc>>,
    /// Live instances above `desired_before` when the step began (replacements Auto
    /// Scaling launched before the instances they replace left, this plan's decrements
    /// not yet made): as many old instances' leaving is replaced by nothing new.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub over_before: u32,
    /// The count the step began with (0 in records from before it was kept: `count`):
    /// one that ends with fewer, its nodes lost meanwhile, ended short.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub asked: u32,
    /// Instances launched in the ASG since the step began, as last seen: one of them gone
    /// since, and not by Ballast's terminate, was removed by another writer (with a
    /// decrement or not, none can tell) and is no longer what the step expects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seen_new: Vec<String>,
    /// Interrupted instances whose terminate with decrement moved the step's sizes: a run
    /// that plans the same terminate again (a takeover, a retry) moves them once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub floor_lowered_for: Vec<String>,
}

impl FailbackStep {
    /// The spot ASG's size once the surge is made (`raised_to`, or in records from before
    /// it was kept, `desired_before + count`).
    pub fn raised(&self) -> u32 {
        if self.raised_to > 0 {
            self.raised_to
        } else {
            self.desired_before + self.count
        }
    }

    /// An instance launched since the step began (the step's, or another writer's: none
    /// can tell) left its ASG: what the step raised it to and expects are one less.
    pub fn expect_one_less(&mut self) {
        if self.asked == 0 {
            self.asked = self.count;
        }
        self.raised_to = self.raised().saturating_sub(1).max(self.desired_before);
        self.count = self.count.saturating_sub(1);
    }
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
    /// The run (its lease owner) that planned it last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_by: Option<String>,
    /// When that run's drain and completion are over at the latest: past it, an action
    /// still waiting (its instance in `Terminating:Wait`) was left by a run that died and
    /// is planned again. Absent in a record written before runs were named: the next plan
    /// gives whichever run holds it a whole window from then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_until: Option<DateTime<Utc>>,
    /// When its drain ends at the latest, whichever run drains it: `drain_timeout` after
    /// it was first planned. A run whose deadline cuts the drain short hands the action on
    /// to the next run, which drains for what is left; once it has passed, the action is
    /// completed drained or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_until: Option<DateTime<Utc>>,
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
