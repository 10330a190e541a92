//! The kill switch's stand-down. Once `dry_run` is set again, a live run's open work
//! would otherwise stay as it was until going live: nodes Ballast cordoned stay
//! cordoned, a failback step's victims half drained. A dry run first plans this on the
//! live record and applies it: what Ballast began and can undo is undone (its nodes
//! uncordoned), what AWS is already taking is left (a spot-warned instance, a
//! terminating instance's hook, which lapses to its hook's default result), and nothing
//! new starts: no size changes, no drains, no headroom change.

use super::{PlanInput, Work};
use crate::model::{InterruptionCause, PoolRecord};
use crate::plan::Plan;

/// Whether the live record holds work a stand-down undoes.
pub fn has_open_work(record: &PoolRecord) -> bool {
    record.failback.is_some()
        || !record.uncordon.is_empty()
        || record.interruptions.iter().any(|i| undoable(&i.cause) && !i.terminated)
}

/// Causes whose instance stays in service unless Ballast takes it out: its cordon can be
/// undone. A spot warning's instance goes within two minutes whatever Ballast does.
fn undoable(cause: &InterruptionCause) -> bool {
    !matches!(cause, InterruptionCause::SpotWarning { .. })
}

/// The stand-down plan for the live record (applied, not a dry run).
pub fn stand_down(input: PlanInput<'_>) -> Plan {
    let mut work = Work::new(input);
    work.stand_down();
    let mut plan = work.finish();
    plan.dry_run = false;
    plan
}

impl Work<'_> {
    fn stand_down(&mut self) {
        const WHY: &str = "kill switch (dry_run)";
        if let Some(step) = self.record.failback.take() {
            for id in &step.victims {
                if !self.record.uncordon.contains(id) {
                    self.record.uncordon.push(id.clone());
                }
            }
            if !step.victims.is_empty() {
                let why = format!("{WHY}: failback step stopped, victims {} released", step.victims.join(", "));
                let asg = step.spot_asg.clone();
                self.leave_surplus(&asg, step.victims.len() as u32, &why);
            }
        }
        let (undone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.record.interruptions)
            .into_iter()
            .partition(|i| undoable(&i.cause) && !i.terminated);
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
