//! A failback step: spot capacity surged to replace on-demand instances added by
//! fallback, which are drained once the spot nodes are Ready.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{is_zero, is_zero_u32};

/// One failback step: spot capacity raised by `count` in `spot_asg`, then as many
/// on-demand fallback instances drained and terminated once the new spot nodes are Ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailbackStep {
    /// The spot ASG raised for the step.
    pub spot_asg: String,
    /// How many spot instances the step adds, as many on-demand instances as it retires;
    /// lowered when one of its new instances is lost (`asked` keeps the first count).
    pub count: u32,
    /// When the step was planned.
    pub started_at: DateTime<Utc>,
    /// The plan that started it (its journal's `seq`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub plan: u64,
    /// The spot ASG's desired size before the surge: a withdrawal never goes below it.
    #[serde(default)]
    pub desired_before: u32,
    /// The spot ASG's desired size once the surge is made (0 in records from before it
    /// was kept: `desired_before + count`). Not moved by an interruption's decrement,
    /// which `desired_before` follows: what rises above it is another writer's.
    #[serde(default)]
    pub raised_to: u32,
    /// Ready nodes of the spot ASG before the surge.
    pub ready_before: u32,
    /// The spot ASG's live instances before the surge (booting ones too): only a node of
    /// an instance launched since can be the step's. None in records from before it was
    /// kept: counted from `ready_before`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances_before: Option<Vec<String>>,
    /// Slots the spot ASG had asked for and not yet filled before the surge (another
    /// writer's, launching): their instances, new since, are not the step's.
    #[serde(default)]
    pub unfilled_before: u32,
    /// On-demand instances being drained and removed once the spot nodes are Ready.
    #[serde(default)]
    pub victims: Vec<String>,
    /// When the victims were chosen: past `drain_deadline` they are uncordoned and the
    /// step ends.
    #[serde(default)]
    pub victims_since: Option<DateTime<Utc>>,
    /// Live instances above `desired_before` when the step began (replacements Auto
    /// Scaling launched before the instances they replace left, this plan's decrements
    /// not yet made): as many old instances' leaving is replaced by nothing new.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub over_before: u32,
    /// The count the step began with (0 in records from before it was kept: `count`):
    /// one that ends with fewer, its nodes lost meanwhile, ended short.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub asked: u32,
    /// Instances launched in the ASG since the step began, as last seen: one of them gone
    /// since, and not by Ballast's terminate, was removed by another writer (with a
    /// decrement or not, none can tell) and is no longer what the step expects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seen_new: Vec<String>,
    /// Interrupted instances whose terminate with decrement moved the step's sizes: a run
    /// that plans the same terminate again (a takeover, a retry) moves them once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub floor_lowered_for: Vec<String>,
}

impl FailbackStep {
    /// The spot ASG's size once the surge is made (`raised_to`, or in records from before
    /// it was kept, `desired_before + count`).
    pub fn raised(&self) -> u32 {
        if self.raised_to > 0 {
            self.raised_to
        } else {
            self.desired_before + self.count
        }
    }

    /// An instance launched since the step began (the step's, or another writer's: none
    /// can tell) left its ASG: what the step raised it to and expects are one less.
    pub fn expect_one_less(&mut self) {
        if self.asked == 0 {
            self.asked = self.count;
        }
        self.raised_to = self.raised().saturating_sub(1).max(self.desired_before);
        self.count = self.count.saturating_sub(1);
    }
}
