//! The planner's output: actions, each with the reason a human would give.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::record::PoolRecord;
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
        /// Withdraws a replacement no longer needed (made again if it does not land).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        withdraws: bool,
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
