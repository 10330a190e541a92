//! What the last plan's capacity calls did, judged against what is observed now.
//!
//! Apply stops at the first failure and marks each call done as it succeeds, so of
//! the calls not marked done only the first may have been carried out (its answer was
//! lost, or the run died right after), and only if apply had reached it (`attempted`).
//! That one is judged from the ASG: a raise
//! landed if the ASG is above the size read just before the call; a termination
//! landed if the instance is no longer live. A call that landed is never repeated.

use super::{is_live, Work};
use crate::model::{CapacityCall, Journal};

impl Work<'_> {
    pub(super) fn settle_journal(&mut self) {
        let Some(journal) = self.record.journal.take() else { return };
        let mut first_open = true;
        let mut raise_missed = false;
        let mut lowers_left: Vec<(String, u32)> = Vec::new();
        for (index, call) in journal.calls.iter().enumerate() {
            if call.done() {
                if let CapacityCall::Terminate { instance_id, decrement: false, .. } = call {
                    // Terminated without decrement (the ASG was at its minimum by then):
                    // the ASG replaces it, so a surge made for it is surplus.
                    self.surge_orphaned_by(instance_id);
                }
                continue;
            }
            let may_have_landed = std::mem::replace(&mut first_open, false) && index < journal.attempted;
            match call {
                CapacityCall::SetDesired { asg, from, to, .. } => {
                    let Some(observed) = self.observed.asg(asg) else { continue };
                    let raise = to > from;
                    let landed =
                        may_have_landed && if raise { observed.desired > *from } else { observed.desired < *from };
                    if landed {
                        self.note(format!(
                            "{asg} {from}->{to} (planned {}) was carried out though its answer was lost: not repeated",
                            journal.planned_at.to_rfc3339()
                        ));
                    } else if raise {
                        raise_missed = true;
                        if may_have_landed {
                            // Not landed, or landed and as much removed since (a scale-in):
                            // taken as not landed, since the other way could lose capacity.
                            self.note(format!(
                                "{asg} is back at {from}: its raise may have landed before a scale-in; \
                                 raised again, and cluster-autoscaler removes the surplus if unneeded"
                            ));
                        }
                        self.raise_never_landed(asg, *from, *to, &journal);
                    } else if !raise_missed {
                        lowers_left.push((asg.clone(), from - to));
                    }
                }
                CapacityCall::Terminate { instance_id, .. } => {
                    let landed = may_have_landed && !is_live(self.observed, instance_id);
                    if !landed {
                        self.termination_never_made(instance_id);
                    }
                }
            }
        }
        // Every raise of that plan landed: finish its lowers (a move is raise, then
        // lower), within what no instance fills, so a lower never kills a live node.
        for (asg_name, by) in lowers_left {
            let Some(asg) = self.observed.asg(&asg_name) else { continue };
            let n = by.min(self.unfilled(asg)).min(self.room_down(asg));
            if n > 0 {
                self.adjust(
                    &asg_name,
                    -i64::from(n),
                    format!("finish the move planned {}: its raise landed", journal.planned_at.to_rfc3339()),
                );
            } else {
                self.note(format!(
                    "the lower of {asg_name} planned {} is no longer needed: nothing unfilled to remove",
                    journal.planned_at.to_rfc3339()
                ));
            }
        }
    }

    /// A raise that never landed: take back what the plan built on it, so the rules
    /// below decide afresh (a surge is made again, a fallback moved again).
    fn raise_never_landed(&mut self, asg: &str, from: u32, to: u32, journal: &Journal) {
        self.note(format!(
            "{asg} {from}->{to} (planned {}) did not land: re-planned from what is observed",
            journal.planned_at.to_rfc3339()
        ));
        for interruption in &mut self.record.interruptions {
            if interruption.surge.as_ref().is_some_and(|s| s.asg == asg && s.planned_at == journal.planned_at) {
                interruption.surge = None;
                interruption.planned_at = None;
                interruption.terminated = false;
            }
        }
        if asg == self.observed.on_demand.name {
            self.record.fallback_units = self.record.fallback_units.saturating_sub(journal.units_added);
            if self.record.fallback_units == 0 {
                self.record.fallback_since = None;
            }
        }
        if self.record.failback.as_ref().is_some_and(|f| f.spot_asg == asg && f.started_at == journal.planned_at) {
            self.record.failback = None;
        }
    }

    /// A termination never made: whoever planned it plans it again.
    fn termination_never_made(&mut self, instance_id: &str) {
        if let Some(i) = self.record.interruptions.iter_mut().find(|i| i.instance_id == instance_id) {
            i.planned_at = None;
            i.terminated = false;
        }
    }

    fn surge_orphaned_by(&mut self, instance_id: &str) {
        if let Some(i) = self.record.interruptions.iter_mut().find(|i| i.instance_id == instance_id) {
            i.terminated = false;
        }
    }

    /// An interrupted instance that left (AWS reclaimed it, cluster-autoscaler scaled
    /// it in) before Ballast terminated it with decrement: its ASG replaces it or no
    /// longer wants it, so the surge made for it is withdrawn.
    pub(super) fn withdraw_orphaned_surges(&mut self) {
        for index in 0..self.record.interruptions.len() {
            let interruption = self.record.interruptions[index].clone();
            if interruption.terminated || is_live(self.observed, &interruption.instance_id) {
                continue;
            }
            let Some(surge) = interruption.surge else { continue };
            let reason =
                format!("{} left before Ballast removed it; its replacement is surplus", interruption.instance_id);
            let left = self.withdraw(&surge.asg, 1, 0, &reason);
            if left > 0 {
                self.note(format!(
                    "{reason}: every instance of {} is a Ready node; cluster-autoscaler removes one if unneeded",
                    surge.asg
                ));
            }
            if surge.asg == self.observed.on_demand.name {
                self.record.fallback_units = self.record.fallback_units.saturating_sub(1);
            }
            let entry = &mut self.record.interruptions[index];
            entry.surge = None;
            entry.terminated = true;
        }
    }
}
