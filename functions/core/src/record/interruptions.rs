//! Spot instances being replaced (interruption warnings, rebalance recommendations,
//! scheduled changes), and the disruptions the interruption rate is counted from.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::is_zero;
use crate::event::InstanceAction;

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
