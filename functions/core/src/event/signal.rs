//! What an accepted event means for Ballast: the [`Signal`] in its [`Event`], and how a
//! launch failure's message reads as an error.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::detail::{
    InstanceAction, InstanceState, NodeCondition, NodeLifecycleDetail, PodsUnschedulableDetail, PoolDemandDetail,
    PoolWaitsDetail,
};
use super::EventKind;
use crate::units::HumanDuration;

/// Where this deployment's events must come from: [`parse_event`](crate::event::parse_event)
/// refuses an event of another account or region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `None` checks the region only (the config may leave the account out).
    pub account: Option<String>,
    /// The deployment's region; always checked.
    pub region: String,
}

/// One accepted event: its envelope identity and what it means for Ballast.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// The envelope's `id` (a bare Scheduler input's execution id). EventBridge delivers at
    /// least once: a duplicate is known by its id.
    pub id: String,
    /// The envelope's `time`: when the event happened, as its source dates it.
    pub time: DateTime<Utc>,
    /// The envelope's `source` (`aws.ec2`, `ballast.kubernetes`, ...).
    pub source: String,
    /// The envelope's `detail-type` (`EC2 Spot Instance Interruption Warning`, ...).
    pub detail_type: String,
    /// What the event means for Ballast.
    pub signal: Signal,
}

impl Event {
    /// An event of `kind`: its envelope's `source` and `detail-type` are the kind's.
    pub fn new(id: String, time: DateTime<Utc>, kind: EventKind, signal: Signal) -> Event {
        Event { id, time, source: kind.source().into(), detail_type: kind.detail_type().into(), signal }
    }

    /// The kind its `source` and `detail-type` name (`None` for a Scheduler input or a
    /// test's own).
    pub fn kind(&self) -> Option<EventKind> {
        EventKind::of(&self.source, &self.detail_type)
    }
}

/// What an accepted event means for Ballast: one variant per `source` / `detail-type` of
/// EVENTS.md (and per schedule action), serialized with its name as `kind`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Signal {
    /// `aws.ec2` / `EC2 Spot Instance Interruption Warning`: EC2 reclaims the instance in about
    /// two minutes. Ballast surges a replacement, cordons and drains the node, terminates it
    /// with a decrement, boosts headroom, and counts it toward the pool's interruption rate.
    SpotInterruption {
        /// The instance EC2 reclaims; `resources`, when it names one, agrees.
        instance_id: String,
        /// What EC2 does to it (`instance-action`).
        action: InstanceAction,
    },
    /// `aws.ec2` / `EC2 Instance Rebalance Recommendation`: the instance is at raised risk of
    /// interruption, usually 10-20 minutes ahead. Surged early or ignored, per
    /// `interruption.rebalance`.
    RebalanceRecommendation {
        /// The instance at risk.
        instance_id: String,
    },
    /// `aws.ec2` / `EC2 Instance State-change Notification`: keeps pool state true. A spot
    /// instance in service that stops or terminates without a warning is an unplanned loss,
    /// counted toward the pool's interruption rate.
    InstanceStateChange {
        /// The instance whose state changed.
        instance_id: String,
        /// Its new state.
        state: InstanceState,
    },
    /// `aws.autoscaling` / `EC2 Instance Launch Unsuccessful` (`StatusCode` `Failed` or
    /// `Cancelled`): a capacity error on a spot ASG marks it unavailable and fallback moves
    /// on; any other error is reported, never a reason to fall back.
    LaunchUnsuccessful(LaunchFailure),
    /// An instance the ASG launched: when the launch started, to time the pool's lead
    /// from launch to Ready.
    LaunchSuccessful {
        /// The ASG that launched it (`AutoScalingGroupName`).
        asg: String,
        /// The instance launched (`EC2InstanceId`).
        instance_id: String,
        /// When the launch activity started (`StartTime`, required).
        started: DateTime<Utc>,
    },
    /// `aws.autoscaling` / `EC2 Instance-terminate Lifecycle Action` for
    /// `autoscaling:EC2_INSTANCE_TERMINATING`: Ballast drains the node, heartbeats while it
    /// drains, then completes the action.
    TerminateLifecycleAction(LifecycleAction),
    /// `aws.health` / `AWS Health Event` of category `scheduledChange` for EC2, still open,
    /// naming instances: Ballast drains and replaces those of its pools ahead of `start_time`.
    ScheduledChange {
        /// Health's `eventTypeCode` (`AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED`, ...).
        event_type_code: String,
        /// When the change starts; informational. `None` when Health gave none or one that
        /// cannot be read (its times are parsed leniently).
        start_time: Option<DateTime<Utc>>,
        /// When the change ends; informational, as `start_time`.
        end_time: Option<DateTime<Utc>>,
        /// The instances named in `affectedEntities` or `resources`, each once; never empty.
        instance_ids: Vec<String>,
    },
    /// `aws.events` / `Scheduled Event` without a detail, or the schedule input
    /// `{"action": "reconcile"}`: reconcile every pool.
    Reconcile,
    /// The schedule input `{"action": "headroom", "pool": ..., "percent": ..., "for": ...}`:
    /// the pool's headroom is `percent` until `duration` after the event, over schedules and
    /// a learned size.
    HeadroomOverride {
        /// The pool it is for, by name.
        pool: String,
        /// Headroom, as a percentage of the pool's workload requests.
        percent: u32,
        /// How long it lasts (the input's `for`), from the event's time; longer than zero.
        duration: HumanDuration,
    },
    /// `ballast.kubernetes` / `Pool Demand Changed`, from the forwarder: the pool's workload
    /// requests, stored to size headroom.
    PoolDemand(PoolDemandDetail),
    /// `ballast.kubernetes` / `Pods Unschedulable`, from the forwarder: stored, headroom is
    /// recomputed, and a wait target times the first of them.
    PodsUnschedulable(PodsUnschedulableDetail),
    /// `ballast.kubernetes` / `Node Lifecycle`, from the forwarder: keeps pool state true
    /// (failback waits for Ready spot nodes); a Ready ends the launch a wait target times.
    NodeLifecycle(NodeLifecycleDetail),
    /// `ballast.kubernetes` / `Pool Waits Measured`, from the forwarder: what a wait target
    /// learns from; ignored without one.
    PoolWaits(PoolWaitsDetail),
    /// The config's SSM parameter was written (its own `Parameter Store Change` event):
    /// the functions read it again; no pool is reconciled for it.
    ConfigChanged {
        /// The parameter written (`detail.name`).
        parameter: String,
        /// What was done to it (`detail.operation`: `Create`, `Update`, ...).
        operation: String,
    },
    /// A valid event that is not Ballast's to act on (a closed Health event, one that
    /// names only dedicated hosts): noted, never dead-lettered.
    Ignored {
        /// Why the event is not Ballast's, for the log.
        why: String,
        /// Worth an operator's look (logged as a warning), not routine.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        warning: bool,
    },
}

/// A launch that failed, as `EC2 Instance Launch Unsuccessful` reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaunchFailure {
    /// The ASG whose launch failed (`AutoScalingGroupName`).
    pub asg: String,
    /// The scaling activity (`ActivityId`): an error is reported once per activity.
    pub activity_id: String,
    /// The AZ the launch tried (`Details` / `Availability Zone`), when AWS names it.
    pub availability_zone: Option<String>,
    /// The subnet the launch tried (`Details` / `Subnet ID`), when AWS names it.
    pub subnet_id: Option<String>,
    /// AWS's `StatusMessage`: quoted when the error is reported.
    pub status_message: String,
    /// AWS's `Cause`; with `status_message`, what `error` is read from.
    pub cause: String,
    /// What kind of failure, from `status_message` and `cause`.
    pub error: LaunchError,
    /// When the launch ended (`EndTime`, else `StartTime`); `None` when AWS gave neither, and
    /// the event's time stands in.
    pub at: Option<DateTime<Utc>>,
}

/// What kind of launch failure: only capacity errors justify a fallback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "class", content = "code", rename_all = "snake_case")]
pub enum LaunchError {
    /// Not enough capacity for the request: on a spot ASG, a reason to fall back.
    Capacity(CapacityError),
    /// Quota, launch template, IAM, ...: reported, never a reason to fall back.
    Other(Option<String>),
}

/// The capacity errors of a launch, known by AWS's error code or by its plain wording
/// (which ASGs without a mixed-instances policy send).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CapacityError {
    /// `InsufficientInstanceCapacity`: "We currently do not have sufficient ... capacity".
    InsufficientInstanceCapacity,
    /// `NoSpotCapacity`: "There is no Spot capacity available ...".
    NoSpotCapacity,
    /// `capacity-not-available`.
    CapacityNotAvailable,
    /// `MaxSpotInstanceCountExceeded`: "Max spot instance count exceeded".
    MaxSpotInstanceCountExceeded,
    /// `SpotMaxPriceTooLow`: "Your Spot request price of ... is lower than the minimum
    /// required ...".
    SpotMaxPriceTooLow,
    /// `UnfulfillableCapacity`: EC2 cannot fill the request with the capacity it has.
    UnfulfillableCapacity,
}

impl LaunchError {
    /// Classifies from the status message and cause, the only places AWS names it:
    /// by error code (mixed-instances ASGs quote it) or by AWS's plain wording, which
    /// ASGs without a mixed-instances policy send with no code at all. A quota error
    /// (vCPU or instance limit) is never capacity, whatever else it says.
    pub fn classify(status_message: &str, cause: &str) -> LaunchError {
        let text = format!("{status_message}\n{cause}");
        let lower = text.to_ascii_lowercase();
        let quota = ["vcpulimitexceeded", "instancelimitexceeded", "vcpu limit", "your quota allows", "instance limit"];
        if quota.iter().any(|q| lower.contains(q)) {
            return LaunchError::Other(error_code(&text));
        }
        let capacity = [
            ("maxspotinstancecountexceeded", CapacityError::MaxSpotInstanceCountExceeded),
            ("max spot instance count exceeded", CapacityError::MaxSpotInstanceCountExceeded),
            ("spotmaxpricetoolow", CapacityError::SpotMaxPriceTooLow),
            ("lower than the minimum required spot request fulfillment price", CapacityError::SpotMaxPriceTooLow),
            ("no spot capacity", CapacityError::NoSpotCapacity),
            ("capacity-not-available", CapacityError::CapacityNotAvailable),
            ("unfulfillablecapacity", CapacityError::UnfulfillableCapacity),
            ("insufficientinstancecapacity", CapacityError::InsufficientInstanceCapacity),
            ("do not have sufficient", CapacityError::InsufficientInstanceCapacity),
            ("insufficient capacity", CapacityError::InsufficientInstanceCapacity),
        ];
        if let Some((_, kind)) = capacity.iter().find(|(needle, _)| lower.contains(needle)) {
            return LaunchError::Capacity(*kind);
        }
        LaunchError::Other(error_code(&text))
    }

    /// Whether it is a capacity error, the only kind that justifies a fallback.
    pub fn is_capacity(&self) -> bool {
        matches!(self, LaunchError::Capacity(_))
    }
}

/// EC2 errors quoted in ASG messages end with `Error Code: X`; otherwise the first
/// word that reads like an EC2 error code (`VcpuLimitExceeded`, `InvalidParameterValue`).
fn error_code(text: &str) -> Option<String> {
    if let Some((_, rest)) = text.split_once("Error Code: ") {
        let code: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '.').collect();
        if !code.is_empty() {
            return Some(code);
        }
    }
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .find(|w| {
            w.len() > 6
                && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && w.chars().skip(1).any(|c| c.is_ascii_uppercase())
                && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '.')
                && ["Exceeded", "Invalid", "Unauthorized", "NotFound", "Limit", "Denied"].iter().any(|k| w.contains(k))
        })
        .map(str::to_string)
}

/// A terminate lifecycle action Ballast must complete, with what names it to Auto Scaling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LifecycleAction {
    /// The ASG terminating the instance (`AutoScalingGroupName`).
    pub asg: String,
    /// The lifecycle hook holding the instance (`LifecycleHookName`).
    pub hook: String,
    /// The `LifecycleActionToken` the heartbeats and the completion quote; a repeated event
    /// with the same token is the same action.
    pub token: String,
    /// The instance being terminated (`EC2InstanceId`).
    pub instance_id: String,
}

/// What a signal asks of a run, and what it names for routing.
impl Signal {
    /// Whether the signal asks for capacity within seconds (a node going, a launch
    /// failing, an operator's override): its run takes over from one draining the pool
    /// rather than wait for the drain. The rest wait for it, none dropped: ticks, demand
    /// and waits measured, lead times, scale-in hooks, and unschedulable pods (a drain's
    /// own evictions make them, every few seconds: taking over for each, no drain would
    /// end; cluster-autoscaler answers them meanwhile).
    pub fn cannot_wait(&self) -> bool {
        match self {
            Signal::SpotInterruption { .. }
            | Signal::RebalanceRecommendation { .. }
            | Signal::InstanceStateChange { .. }
            | Signal::LaunchUnsuccessful(_)
            | Signal::ScheduledChange { .. }
            | Signal::HeadroomOverride { .. } => true,
            Signal::PodsUnschedulable(_)
            | Signal::LaunchSuccessful { .. }
            | Signal::TerminateLifecycleAction(_)
            | Signal::Reconcile
            | Signal::PoolDemand(_)
            | Signal::NodeLifecycle(_)
            | Signal::PoolWaits(_)
            | Signal::ConfigChanged { .. }
            | Signal::Ignored { .. } => false,
        }
    }

    /// Whether the run holding the pool's lease covers the signal, so that a run for it
    /// that finds the lease held stands down rather than wait and reconcile again: a tick,
    /// and news of a node (every run observes the pool's nodes; the holder's or the next
    /// tick's sees it). Not a Ready a wait target times a launch by (`timed`): only its
    /// own run reads when it came.
    pub fn covered_by_the_lease_holder(&self, timed: bool) -> bool {
        match self {
            Signal::Reconcile => true,
            Signal::NodeLifecycle(n) => !(timed && n.condition == NodeCondition::Ready),
            _ => false,
        }
    }

    /// The instances this signal is about, for routing it to a pool.
    pub fn instance_ids(&self) -> Vec<&str> {
        match self {
            Signal::SpotInterruption { instance_id, .. }
            | Signal::RebalanceRecommendation { instance_id }
            | Signal::InstanceStateChange { instance_id, .. }
            | Signal::LaunchSuccessful { instance_id, .. } => vec![instance_id],
            Signal::TerminateLifecycleAction(a) => vec![&a.instance_id],
            Signal::ScheduledChange { instance_ids, .. } => instance_ids.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// The pool the signal names itself, if any.
    pub fn named_pool(&self) -> Option<&str> {
        match self {
            Signal::HeadroomOverride { pool, .. } => Some(pool),
            Signal::PoolDemand(d) => Some(&d.pool),
            Signal::PodsUnschedulable(d) => Some(&d.pool),
            Signal::NodeLifecycle(d) => Some(&d.pool),
            Signal::PoolWaits(d) => Some(&d.pool),
            _ => None,
        }
    }

    /// The ASG the signal names, if any.
    pub fn named_asg(&self) -> Option<&str> {
        match self {
            Signal::LaunchUnsuccessful(f) => Some(&f.asg),
            Signal::LaunchSuccessful { asg, .. } => Some(asg),
            Signal::TerminateLifecycleAction(a) => Some(&a.asg),
            _ => None,
        }
    }
}
