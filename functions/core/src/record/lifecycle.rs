//! Lifecycle actions waiting for Ballast to drain their instance and complete them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A termination lifecycle action Auto Scaling holds open until Ballast drains the
/// instance and completes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingLifecycleAction {
    /// The ASG terminating the instance.
    pub asg: String,
    /// The lifecycle hook's name.
    pub hook: String,
    /// The lifecycle action token from the hook's notification.
    pub token: String,
    /// The EC2 instance being terminated.
    pub instance_id: String,
    /// The time of the event that brought the action.
    pub received_at: DateTime<Utc>,
    /// A run has planned its drain and completion (see `planned_by`, `planned_until`).
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
