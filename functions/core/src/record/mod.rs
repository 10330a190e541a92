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
