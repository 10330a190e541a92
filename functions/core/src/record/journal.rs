//! The journal: the capacity calls of the last plan, so that what a crash or a failed
//! call left is judged against what is observed next, and the raises of Ballast's that
//! landed.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{is_zero, is_zero_u32};

/// The capacity calls of one plan, in apply order (raises, lowers, terminations),
/// written before the first and marked `done` after each that succeeds. What is not
/// done after a crash or a failed call is judged against what is observed next time:
/// the first call not done may have landed (its answer was lost) if apply had reached
/// it; the rest were never made, since apply stops at the first failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// When the plan was made (its `now`).
    pub planned_at: DateTime<Utc>,
    /// The plan's number (`PoolRecord::plans`); 0 in records written before it was kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seq: u64,
    /// Fallback units the plan added to the on-demand ASG (taken back if its raise did
    /// not land).
    #[serde(default)]
    pub units_added: u32,
    /// The calls, in apply order.
    pub calls: Vec<CapacityCall>,
    /// How many calls, from the first, apply may have started: written before each run
    /// of consecutive calls, so a call after a failed cordon or drain is known unmade.
    #[serde(default)]
    pub attempted: usize,
    /// Parts of this plan's lowers that are owed whatever its own raises do: finishing
    /// a move of an earlier plan whose raise landed, or withdrawing a replacement no
    /// longer needed. Kept (and made later) even if a raise of this plan does not land.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owed: Vec<OwedLower>,
    /// The plan's moves (a fallback's: raise `to`, then lower `from`, by `n`), so that a
    /// move split over several receivers whose raises did not all land is finished for
    /// those that did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<Move>,
    /// The live instances, when the plan looked, of each ASG it raises (see [`OwnRaise`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub live: BTreeMap<String, Vec<String>>,
    /// The desired size, when the plan looked, of each ASG it raises: a write rebased
    /// below it came after another writer lowered the ASG (see [`OwnRaise::gone_before`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub looked_at: BTreeMap<String, u32>,
    /// ASGs with a raise another writer undid that this plan makes again, there or (kept
    /// off) moved on at once to another ASG.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remakes: Vec<String>,
}

/// One fallback move: capacity taken out of one ASG and put into another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The ASG lowered (the failing spot ASG).
    pub from: String,
    /// The ASG raised in its place.
    pub to: String,
    /// How many slots move.
    pub n: u32,
}

/// A lower owed: how much, and the raises it answers (ASG, size before, size after),
/// from which as much is withdrawn if the lower can no longer be made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwedLower {
    /// The ASG to lower.
    pub asg: String,
    /// How many slots to lower it by.
    pub by: u32,
    /// The raises the lower answers, as `(ASG, desired before, desired after)`.
    pub raised: Vec<(String, u32, u32)>,
}

/// One capacity call of a plan, serialised with its name under `call`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum CapacityCall {
    /// `from` is the size read just before the call.
    SetDesired {
        /// The ASG's name.
        asg: String,
        /// Desired capacity before the call.
        from: u32,
        /// Desired capacity the call sets.
        to: u32,
        /// How much the plan meant the call to lower the ASG by, kept when apply rebases
        /// it (`from`, `to`) on a size another writer moved: a lower found already made
        /// (a failed scale-up's unfilled slots deleted first) took none of Ballast's raise.
        #[serde(default, skip_serializing_if = "is_zero_u32")]
        planned_lower: u32,
        /// The call is known to have landed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        done: bool,
    },
    /// TerminateInstanceInAutoScalingGroup for one instance.
    Terminate {
        /// The ASG that holds the instance.
        asg: String,
        /// The EC2 instance id.
        instance_id: String,
        /// The call lowers the ASG's desired capacity by one (`ShouldDecrementDesiredCapacity`).
        decrement: bool,
        /// A replacement no longer needed, withdrawn: withdrawn again if not made.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        withdraws: bool,
        /// The call is known to have landed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        done: bool,
    },
}

impl CapacityCall {
    /// Whether the call is known to have landed.
    pub fn done(&self) -> bool {
        match self {
            CapacityCall::SetDesired { done, .. } | CapacityCall::Terminate { done, .. } => *done,
        }
    }
}

impl Journal {
    /// What the calls known to have landed did to `asg`: the size the last write left it
    /// at (less the decrements landed after it; `None` without a write), and their net
    /// change; `None` if none landed there.
    pub fn landed_on(&self, asg: &str) -> Option<(Option<u32>, i64)> {
        let mut landed: Option<(Option<u32>, i64)> = None;
        for call in self.calls.iter().filter(|c| c.done()) {
            match call {
                CapacityCall::SetDesired { asg: a, from, to, .. } if a == asg => {
                    let (left_at, change) = landed.get_or_insert((None, 0));
                    *left_at = Some(*to);
                    *change += i64::from(*to) - i64::from(*from);
                }
                CapacityCall::Terminate { asg: a, decrement: true, .. } if a == asg => {
                    let (left_at, change) = landed.get_or_insert((None, 0));
                    *left_at = left_at.map(|n| n.saturating_sub(1));
                    *change -= 1;
                }
                _ => {}
            }
        }
        landed
    }
}

/// A raise of Ballast's that landed: what it left the ASG at, and what could explain a
/// lower since other than its being undone (an instance then live, gone now).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnRaise {
    /// The size the write left the ASG at (less decrements of ours landed after it).
    pub to: u32,
    /// How much of it the write added.
    pub by: u32,
    /// When the plan that made it was made.
    pub at: DateTime<Utc>,
    /// The ASG's live instances when that plan looked: each one gone since explains a
    /// lower of one (a terminate-with-decrement, the ASG killing one to meet a lower).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live: Vec<String>,
    /// Of `live`, how many had left before the write: it was rebased on a size another
    /// writer (a scale-in) lowered by as much since the look, so their going explains no
    /// lower since.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub gone_before: u32,
    /// Instances a later look saw launched into the ASG. Gone since, one a look past the
    /// stale-write window saw explains a lower of one (its scale-in); one seen only
    /// before may have been killed to meet a stale write: made again, named surplus.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seen: Vec<String>,
    /// Of `seen`, those a look past the stale-write window saw.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seen_late: Vec<String>,
    /// The write made this raise again after another writer had undone it: undone once
    /// more, it is not made a third time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remade: bool,
}
