//! The kill switch's stand-down. Once `dry_run` is set again, a live run's open work
//! would otherwise stay as it was until going live: nodes Ballast cordoned stay
//! cordoned, a failback step's victims half drained. A dry run first plans this on the
//! live record and applies it: what Ballast began and can undo is undone (the nodes of
//! instances still in service uncordoned), what is already leaving is left (a spot-warned
//! or retiring instance, one being terminated, a terminating instance's hook, which
//! lapses to its hook's default result), and nothing new starts: no size changes, no
//! drains, no headroom change. The journal is kept for when the pool goes live again.

use super::{PlanInput, Work};
use crate::observe::ObservedPool;
use crate::plan::Plan;
use crate::record::{InterruptionCause, PoolRecord};

/// Whether the live record holds work a stand-down undoes.
pub fn has_open_work(record: &PoolRecord) -> bool {
    record.failback.is_some() || !record.uncordon.is_empty() || record.interruptions.iter().any(|i| undoable(&i.cause))
}

/// Causes whose instance stays in service unless Ballast takes it out. A spot warning's
/// instance goes within two minutes, a scheduled change's (a retirement) at AWS's time.
fn undoable(cause: &InterruptionCause) -> bool {
    matches!(cause, InterruptionCause::Rebalance)
}

/// Whether the instance is still in service in its ASG (not being terminated): only its
/// node is worth uncordoning. Judged from what is observed, not from the record, whose
/// terminations are recorded when planned.
fn in_service(observed: &ObservedPool, asg: Option<&str>, id: &str) -> bool {
    let mut asgs = observed.asgs().filter(|a| asg.is_none_or(|name| a.name == name));
    asgs.any(|a| a.instance(id).is_some_and(|i| i.lifecycle_state.is_live()))
}

/// The stand-down plan for the live record (applied, not a dry run). With no nodes
/// observed (the cluster not reachable), nothing can be judged: the record is left as it
/// is for the next run.
pub fn stand_down(input: PlanInput<'_>) -> Plan {
    let mut work = Work::new(input);
    if !input.observed.nodes.is_empty() {
        work.stand_down();
    }
    let mut plan = work.finish();
    // No capacity call is made: what the live run's journal waits to judge stays.
    plan.record.journal = input.record.journal.clone();
    plan.record.surged_over = input.record.surged_over.clone();
    plan.record.plans = input.record.plans;
    plan.dry_run = false;
    plan
}

impl Work<'_> {
    fn stand_down(&mut self) {
        const WHY: &str = "kill switch (dry_run)";
        if let Some(step) = self.record.failback.take() {
            let (keep, gone): (Vec<String>, Vec<String>) =
                step.victims.iter().cloned().partition(|id| in_service(self.observed, None, id));
            for id in &keep {
                if !self.record.uncordon.contains(id) {
                    self.record.uncordon.push(id.clone());
                }
            }
            let asg = step.spot_asg.clone();
            let why = format!(
                "{WHY}: failback step stopped{}{}",
                if keep.is_empty() { String::new() } else { format!(", victims {} kept in service", keep.join(", ")) },
                if gone.is_empty() { String::new() } else { format!(", {} already leaving", gone.join(", ")) }
            );
            // What the step launched stays: as many as the victims it no longer removes.
            let surplus = if step.victims.is_empty() { step.count } else { keep.len() as u32 };
            if surplus > 0 {
                self.leave_surplus(&asg, surplus, &why);
            } else {
                self.note(why);
            }
        }
        let (undone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.record.interruptions)
            .into_iter()
            .partition(|i| undoable(&i.cause) && in_service(self.observed, Some(&i.asg), &i.instance_id));
        self.record.interruptions = kept;
        for interruption in undone {
            let id = &interruption.instance_id;
            if !self.record.uncordon.contains(id) {
                self.record.uncordon.push(id.clone());
            }
            match &interruption.surge {
                Some(surge) => {
                    let why = format!("{WHY}: replacement of {id} stopped, {id} kept in service");
                    let asg = surge.asg.clone();
                    self.leave_surplus(&asg, 1, &why);
                }
                None => self.note(format!("{WHY}: replacement of {id} stopped before it began; {id} kept in service")),
            }
        }
        if !self.record.lifecycle_actions.is_empty() {
            self.note(format!(
                "{WHY}: {} lifecycle action(s) left to their hooks' timeout and default result",
                self.record.lifecycle_actions.len()
            ));
        }
        self.uncordon_released();
    }
}
