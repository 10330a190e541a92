//! The planner's output: actions, each with the reason a human would give.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::record::PoolRecord;
use crate::units::HumanDuration;

/// What one reconcile decided for one pool: the actions in the order they are
/// applied, and the record they leave behind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The pool's name from the config.
    pub pool: String,
    /// The time the plan was made for (the clock's `now`, never read inside the planner).
    pub now: DateTime<Utc>,
    /// A dry-run plan is logged and never applied.
    pub dry_run: bool,
    /// What to do, in order; [`ActionKind::RecordState`] comes before any action it records.
    pub actions: Vec<Action>,
    /// What was noticed but needs no action (reported launch errors, ignored signals).
    pub notes: Vec<String>,
    /// The pool record as it stands once the plan is applied.
    pub record: PoolRecord,
    /// How the pause pods were sized, whether or not their count changed; `None` while
    /// no demand is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headroom: Option<HeadroomDecision>,
    /// Instances this plan leaves to cluster-autoscaler's scale-down as possible surplus,
    /// per ASG (doubts settled toward surplus; each is also said in a note). Counted, so
    /// a metric and a test can hold Ballast to what it named.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub surplus: BTreeMap<String, u32>,
    /// Slots of Ballast's own raises another writer undid without removing an instance,
    /// raised again by this plan, per ASG (each said in a note; counted for a metric).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub remade: BTreeMap<String, u32>,
}

/// The headroom the pool's percent asks for and what `headroom.min`/`max` let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadroomDecision {
    /// The headroom percent in force (schedule, default or override, interruption boost
    /// included), as a percent of the pool's demand.
    pub percent: u32,
    /// Pause pods the percent alone (or the learned size) asks for, before the clamp.
    pub wanted: u32,
    /// After clamping to `[min, max]`.
    pub replicas: u32,
    /// `wanted` is the wait target's learned size, not the percent's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learned: bool,
}

impl HeadroomDecision {
    /// `Less` when `headroom.max` held the pause pods down, `Greater` when `headroom.min`
    /// held them up.
    pub fn clamped(&self) -> std::cmp::Ordering {
        self.replicas.cmp(&self.wanted)
    }
}

/// Most actions and notes one log line carries; beyond them, counts.
pub const LOG_ITEMS: usize = 40;
/// Longest reason or note kept in a log line.
const LOG_TEXT: usize = 400;

impl Plan {
    /// Instances named as possible surplus, all ASGs together.
    pub fn surplus_named(&self) -> u32 {
        self.surplus.values().sum()
    }

    /// Slots made again after another writer undid Ballast's raise, all ASGs together.
    pub fn raises_remade(&self) -> u32 {
        self.remade.values().sum()
    }

    /// The actions that change something outside Ballast's own record.
    pub fn effects(&self) -> impl Iterator<Item = &Action> {
        self.actions.iter().filter(|a| !matches!(a.kind, ActionKind::RecordState))
    }

    /// The plan as one bounded JSON log line: the first actions and notes in full,
    /// the rest counted by kind, the record summed up (it is in the state table). A
    /// storm of thousands of interruptions stays far within CloudWatch's 256 KB.
    pub fn log_line(&self) -> String {
        let clip = |text: &str| -> String {
            if text.len() <= LOG_TEXT {
                return text.to_string();
            }
            let mut end = LOG_TEXT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}...", &text[..end])
        };
        let actions: Vec<serde_json::Value> = self
            .actions
            .iter()
            .take(LOG_ITEMS)
            .map(|a| {
                let mut v = serde_json::to_value(a).unwrap_or_default();
                if let Some(reason) = v.get_mut("reason") {
                    *reason = serde_json::Value::String(clip(&a.reason));
                }
                v
            })
            .collect();
        let mut more: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
        for action in self.actions.iter().skip(LOG_ITEMS) {
            let kind = serde_json::to_value(&action.kind)
                .ok()
                .and_then(|v| v.get("action").and_then(|a| a.as_str()).map(str::to_string))
                .unwrap_or_default();
            *more.entry(kind).or_default() += 1;
        }
        let record = &self.record;
        serde_json::json!({
            "pool": self.pool,
            "now": self.now,
            "dry_run": self.dry_run,
            "actions": actions,
            "more_actions": more,
            "notes": self.notes.iter().take(LOG_ITEMS).map(|n| clip(n)).collect::<Vec<_>>(),
            "more_notes": self.notes.len().saturating_sub(LOG_ITEMS),
            // Never clipped: the notes that say why may be.
            "surplus": self.surplus,
            "headroom": self.headroom,
            "record": {
                "fallback_units": record.fallback_units,
                "unavailable": record.unavailable.keys().collect::<Vec<_>>(),
                "interruptions": record.interruptions.len(),
                "disruptions": record.disruptions.len(),
                "failback": record.failback.as_ref().map(|f| (&f.spot_asg, f.count, f.victims.len())),
                "journal_calls": record.journal.as_ref().map_or(0, |j| j.calls.len()),
            },
        })
        .to_string()
    }
}

/// One step of a plan, with the reason a human would give for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Action {
    /// What to do.
    #[serde(flatten)]
    pub kind: ActionKind,
    /// Why, in a sentence for the log and the operator.
    pub reason: String,
}

/// One kind of step, serialised with its name under `action`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ActionKind {
    /// Write the pool record (version-checked) before acting: a re-run sees the intent.
    RecordState,
    /// Set an ASG's desired capacity. What is applied is the change `to - from`, to the
    /// size the ASG has when the call is made, within its min and max (another writer's
    /// change is kept).
    SetDesiredCapacity {
        /// The ASG's name.
        asg: String,
        /// Desired capacity as observed when the plan was made.
        from: u32,
        /// Desired capacity the plan asks for.
        to: u32,
    },
    /// Mark a Kubernetes node unschedulable so no new pod lands on it.
    CordonNode {
        /// The Kubernetes node's name.
        node: String,
        /// The EC2 instance behind the node.
        instance_id: String,
    },
    /// Undo a cordon Ballast made (a failback step past its deadline).
    UncordonNode {
        /// The Kubernetes node's name.
        node: String,
        /// The EC2 instance behind the node.
        instance_id: String,
    },
    /// Evict the node's pods (through the Eviction API, so PodDisruptionBudgets hold),
    /// waiting at most `timeout`.
    DrainNode {
        /// The Kubernetes node's name.
        node: String,
        /// The EC2 instance behind the node.
        instance_id: String,
        /// How long the drain may take; the run's deadline may shorten it.
        timeout: HumanDuration,
        /// Heartbeat this lifecycle action while the drain runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lifecycle: Option<LifecycleRef>,
    },
    /// Terminate one instance through Auto Scaling (TerminateInstanceInAutoScalingGroup).
    TerminateInstance {
        /// The ASG that holds the instance.
        asg: String,
        /// The EC2 instance id.
        instance_id: String,
        /// Lower the ASG's desired capacity by one with it (`ShouldDecrementDesiredCapacity`);
        /// `false` lets Auto Scaling launch a replacement.
        decrement: bool,
        /// Skip when the drain before it was incomplete (failback never overrides a
        /// PodDisruptionBudget; an interrupted instance goes anyway).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        only_if_drained: bool,
        /// Withdraws a replacement no longer needed (made again if it does not land).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        withdraws: bool,
    },
    /// Tell Auto Scaling the instance's lifecycle action is still being worked on
    /// (RecordLifecycleHeartbeat), which restarts the hook's timeout.
    RecordLifecycleHeartbeat(LifecycleRef),
    /// Let the instance's lifecycle action go on (CompleteLifecycleAction with `CONTINUE`).
    CompleteLifecycleAction(LifecycleRef),
    /// Set the replicas and shape of one of the pool's pause-pod Deployments.
    SetHeadroomReplicas {
        /// The Kubernetes namespace of the Deployment.
        namespace: String,
        /// Which of the pool's Deployments (`shape::deployment_name`).
        #[serde(default)]
        slot: usize,
        /// The pause pods' requests (no default: a plan without them is not applied
        /// with pods that request nothing).
        shape: crate::shape::PodShape,
        /// Replicas as observed; `None` when the Deployment did not exist.
        from: Option<u32>,
        /// Replicas the plan asks for.
        to: u32,
    },
}

/// One pending lifecycle action of an Auto Scaling lifecycle hook: what a heartbeat
/// or a completion names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleRef {
    /// The ASG's name.
    pub asg: String,
    /// The lifecycle hook's name.
    pub hook: String,
    /// The lifecycle action token Auto Scaling gave with the hook's notification.
    pub token: String,
    /// The EC2 instance the lifecycle action holds.
    pub instance_id: String,
}
