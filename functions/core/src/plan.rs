//! The planner's output: actions, each with the reason a human would give.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::model::PoolRecord;
use crate::units::HumanDuration;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub pool: String,
    pub now: DateTime<Utc>,
    /// A dry-run plan is logged and never applied.
    pub dry_run: bool,
    pub actions: Vec<Action>,
    /// What was noticed but needs no action (reported launch errors, ignored signals).
    pub notes: Vec<String>,
    /// The pool record as it stands once the plan is applied.
    pub record: PoolRecord,
}

impl Plan {
    /// The actions that change something outside Ballast's own record.
    pub fn effects(&self) -> impl Iterator<Item = &Action> {
        self.actions.iter().filter(|a| !matches!(a.kind, ActionKind::RecordState))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Action {
    #[serde(flatten)]
    pub kind: ActionKind,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ActionKind {
    /// Write the pool record (version-checked) before acting: a re-run sees the intent.
    RecordState,
    SetDesiredCapacity {
        asg: String,
        from: u32,
        to: u32,
    },
    CordonNode {
        node: String,
        instance_id: String,
    },
    /// Undo a cordon Ballast made (a failback step past its deadline).
    UncordonNode {
        node: String,
        instance_id: String,
    },
    DrainNode {
        node: String,
        instance_id: String,
        timeout: HumanDuration,
        /// Heartbeat this lifecycle action while the drain runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lifecycle: Option<LifecycleRef>,
    },
    TerminateInstance {
        asg: String,
        instance_id: String,
        decrement: bool,
        /// Skip when the drain before it was incomplete (failback never overrides a
        /// PodDisruptionBudget; an interrupted instance goes anyway).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        only_if_drained: bool,
    },
    RecordLifecycleHeartbeat(LifecycleRef),
    CompleteLifecycleAction(LifecycleRef),
    SetHeadroomReplicas {
        namespace: String,
        from: Option<u32>,
        to: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleRef {
    pub asg: String,
    pub hook: String,
    pub token: String,
    pub instance_id: String,
}
