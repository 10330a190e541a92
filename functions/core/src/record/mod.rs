//! The pool record: Ballast's own memory of one pool, kept in the state store and
//! written with a version condition. One file per job: the journal of capacity calls,
//! the failback step, interruptions and disruptions, lifecycle actions; what a wait
//! target's headroom learns is [`crate::learn::History`].

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::learn::History;
use crate::observe::Demand;

mod failback;
mod interruptions;
mod journal;
mod lifecycle;

pub use failback::FailbackStep;
pub use interruptions::{Disruption, DisruptionKind, Interruption, InterruptionCause, Surge, SurgeMove};
pub use journal::{CapacityCall, Journal, Move, OwedLower, OwnRaise};
pub use lifecycle::PendingLifecycleAction;

/// Ballast's memory of one pool, written with a version condition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolRecord {
    /// On-demand instances added by fallback (recomputed against the ASG each reconcile).
    pub fallback_units: u32,
    /// Since when the pool has held fallback units: set by the plan that first adds
    /// some, `None` once they are back to 0. The planner decides nothing by it; it is
    /// there for whoever reads the record.
    pub fallback_since: Option<DateTime<Utc>>,
    /// Spot ASGs kept off after capacity errors or a high interruption rate.
    pub unavailable: BTreeMap<String, Unavailable>,
    /// When each spot ASG was first seen below its desired size (cleared once whole).
    pub short_since: BTreeMap<String, DateTime<Utc>>,
    /// Since when each spot ASG has been healthy (not failing).
    pub healthy_since: BTreeMap<String, DateTime<Utc>>,
    /// An operator's headroom percent from a headroom-override event, in force until it
    /// expires.
    pub headroom_override: Option<HeadroomOverride>,
    /// Instances being replaced (interruption, rebalance, scheduled change).
    pub interruptions: Vec<Interruption>,
    /// Recent disruptions of spot instances: the interruption rate and the boost.
    pub disruptions: Vec<Disruption>,
    /// The failback step under way, if any (at most one per pool at a time).
    pub failback: Option<FailbackStep>,
    /// No failback step starts before this (after a failed one).
    pub retry_after: Option<DateTime<Utc>>,
    /// Termination lifecycle actions received and not yet completed.
    pub lifecycle_actions: Vec<PendingLifecycleAction>,
    /// The latest demand from the forwarder.
    pub demand: Option<Demand>,
    /// The shapes of the pods that arrive, from the forwarder's demand reports: where
    /// headroom is placed.
    #[serde(default, skip_serializing_if = "crate::record::mix_is_empty")]
    pub shapes: crate::shape::ShapeMix,
    /// The latest Pods Unschedulable report from the forwarder (the newest by event
    /// time). Kept for whoever reads the record: no rule reads it back.
    pub unschedulable: Option<UnschedulableSeen>,
    /// Non-capacity launch failures already reported (by activity id).
    pub reported_launch_errors: Vec<ReportedLaunchError>,
    /// The capacity calls of the last plan not yet known to have landed.
    pub journal: Option<Journal>,
    /// The journal a surge made ahead of the full plan found not yet settled, every call
    /// of it landed: settled before `journal` (which then holds the surge), each against
    /// what is observed next.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub surged_over: Option<Journal>,
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
    pub learned: Option<History>,
    /// A run draining nodes without the lease (so that an event arriving meanwhile is
    /// acted on at once): scheduled ticks stand down until it is done or `until`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draining: Option<Draining>,
    /// Ballast's own raises that landed, per ASG, kept while another writer may still
    /// undo them from a size read before them (see `planner::remake`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub raised: BTreeMap<String, OwnRaise>,
}

impl PoolRecord {
    /// Disruptions of `asg`'s spot instances after `since`: the interruption rate.
    pub fn disruptions_since(&self, asg: &str, since: DateTime<Utc>) -> u32 {
        self.disruptions.iter().filter(|d| d.asg == asg && d.at > since).count() as u32
    }
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

/// Why and until when a spot ASG is kept off (see [`PoolRecord::unavailable`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    /// When the ASG may be tried again.
    pub until: DateTime<Utc>,
    /// What made it unavailable, for the log and the operator.
    pub reason: String,
    /// What keeps it off (a record written before this was kept reads as a capacity
    /// error: the cautious reading).
    #[serde(default, skip_serializing_if = "KeptOffBy::is_capacity")]
    pub by: KeptOffBy,
}

/// What keeps a spot ASG off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeptOffBy {
    /// A launch failed for want of capacity: the ASG cannot launch now.
    #[default]
    Capacity,
    /// Its instances are interrupted too often: it still launches.
    InterruptionRate,
}

impl KeptOffBy {
    fn is_capacity(&self) -> bool {
        *self == KeptOffBy::Capacity
    }
}

/// An operator's headroom percent, set by a headroom-override event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadroomOverride {
    /// The headroom percent in force instead of the schedule's, as a percent of demand.
    pub percent: u32,
    /// When the override expires and the schedule or default is back in force.
    pub until: DateTime<Utc>,
    /// The event time that set it: a late, older override never replaces a newer one.
    pub set_at: DateTime<Utc>,
}

/// The pool's unschedulable pods as the forwarder last reported them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnschedulableSeen {
    /// How many pods were unschedulable.
    pub count: u32,
    /// The sum of their CPU requests, in millicores.
    pub cpu_millis: u64,
    /// The sum of their memory requests, in bytes.
    pub memory_bytes: u64,
    /// When the longest-waiting of them became unschedulable.
    pub oldest_pending_since: DateTime<Utc>,
    /// The report's event time.
    pub observed_at: DateTime<Utc>,
}

/// A launch failure that is not a spot capacity error, reported once in a note; kept a
/// while so a scaling activity and its event are not reported twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedLaunchError {
    /// Auto Scaling's activity id of the failed launch.
    pub activity_id: String,
    /// The ASG whose launch failed.
    pub asg: String,
    /// When the failure happened; entries are dropped some hours after it.
    pub at: DateTime<Utc>,
}

fn mix_is_empty(mix: &crate::shape::ShapeMix) -> bool {
    mix.entries.is_empty()
        && mix.reported_at.is_none()
        && mix.unfit_reported_at.is_none()
        && mix.forbidden_reported_at.is_none()
}
