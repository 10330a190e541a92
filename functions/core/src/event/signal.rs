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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `None` checks the region only (the config may leave the account out).
    pub account: Option<String>,
    pub region: String,
}

/// One accepted event: its envelope identity and what it means for Ballast.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub id: String,
    pub time: DateTime<Utc>,
    pub source: String,
    pub detail_type: String,
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

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Signal {
    SpotInterruption {
        instance_id: String,
        action: InstanceAction,
    },
    RebalanceRecommendation {
        instance_id: String,
    },
    InstanceStateChange {
        instance_id: String,
        state: InstanceState,
    },
    LaunchUnsuccessful(LaunchFailure),
    /// An instance the ASG launched: when the launch started, to time the pool's lead
    /// from launch to Ready.
    LaunchSuccessful {
        asg: String,
        instance_id: String,
        started: DateTime<Utc>,
    },
    TerminateLifecycleAction(LifecycleAction),
    ScheduledChange {
        event_type_code: String,
        start_time: Option<DateTime<Utc>>,
        end_time: Option<DateTime<Utc>>,
        instance_ids: Vec<String>,
    },
    Reconcile,
    HeadroomOverride {
        pool: String,
        percent: u32,
        duration: HumanDuration,
    },
    PoolDemand(PoolDemandDetail),
    PodsUnschedulable(PodsUnschedulableDetail),
    NodeLifecycle(NodeLifecycleDetail),
    PoolWaits(PoolWaitsDetail),
    /// The config's SSM parameter was written (its own `Parameter Store Change` event):
    /// the functions read it again; no pool is reconciled for it.
    ConfigChanged {
        parameter: String,
        operation: String,
    },
    /// A valid event that is not Ballast's to act on (a closed Health event, one that
    /// names only dedicated hosts): noted, never dead-lettered.
    Ignored {
        why: String,
        /// Worth an operator's look (logged as a warning), not routine.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        warning: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaunchFailure {
    pub asg: String,
    pub activity_id: String,
    pub availability_zone: Option<String>,
    pub subnet_id: Option<String>,
    pub status_message: String,
    pub cause: String,
    pub error: LaunchError,
    pub at: Option<DateTime<Utc>>,
}

/// What kind of launch failure: only capacity errors justify a fallback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "class", content = "code", rename_all = "snake_case")]
pub enum LaunchError {
    Capacity(CapacityError),
    /// Quota, launch template, IAM, ...: reported, never a reason to fall back.
    Other(Option<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CapacityError {
    InsufficientInstanceCapacity,
    NoSpotCapacity,
    CapacityNotAvailable,
    MaxSpotInstanceCountExceeded,
    SpotMaxPriceTooLow,
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LifecycleAction {
    pub asg: String,
    pub hook: String,
    pub token: String,
    pub instance_id: String,
}

/// Why an event was refused. None of these gets better on retry.
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
