//! Spot instances being replaced (interruption warnings, rebalance recommendations,
//! scheduled changes), and the disruptions the interruption rate is counted from.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::is_zero;
use crate::event::InstanceAction;

/// One instance being replaced because EC2 warned, recommended or scheduled its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interruption {
    /// The EC2 instance id.
    pub instance_id: String,
    /// The ASG that holds the instance.
    pub asg: String,
    /// What EC2 said about the instance.
    pub cause: InterruptionCause,
    /// The time of the event that told of it.
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

/// Why an instance is being replaced, serialised with its name under `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InterruptionCause {
    /// An EC2 Spot Instance interruption warning: EC2 reclaims the instance in two minutes.
    SpotWarning {
        /// What EC2 will do to the instance: terminate, stop or hibernate it.
        action: InstanceAction,
    },
    /// An EC2 Instance Rebalance Recommendation: the instance is at elevated risk of
    /// interruption; no deadline is given.
    Rebalance,
    /// An AWS Health scheduled change for the instance (a retirement or maintenance).
    ScheduledChange {
        /// AWS Health's event type code, such as `AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED`.
        event_type_code: String,
        /// When the change starts; `None` when AWS Health does not say.
        start_time: Option<DateTime<Utc>>,
    },
}

/// Where an interrupted instance's replacement was launched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Surge {
    /// The ASG raised by one for the replacement.
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

/// Where a surge's slot was before a fallback moved it (see [`Surge::moved`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SurgeMove {
    /// The spot ASG the slot was in.
    pub from: String,
    /// The number of the plan that moved it (its journal's `seq`).
    pub plan: u64,
    /// The surge's `holds_at` in `from`, back with it if the move does not land.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holds_at: Option<u32>,
}

/// One disruption of a spot instance, counted in the interruption rate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disruption {
    /// The EC2 instance id.
    pub instance_id: String,
    /// The spot ASG that held it.
    pub asg: String,
    /// The time of the event that told of it.
    pub at: DateTime<Utc>,
    /// Whether EC2 warned first.
    pub kind: DisruptionKind,
}

/// How a spot instance was disrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisruptionKind {
    /// EC2 sent a Spot Instance interruption warning for it.
    InterruptionWarning,
    /// Stopped or terminated without a warning.
    UnplannedLoss,
}
