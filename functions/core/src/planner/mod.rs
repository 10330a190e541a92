//! The planner: a pure function from configuration, the pool record, the observed
//! pool, the pool's signals and `now` to a [`Plan`]. No clock, no I/O.
//!
//! Rules, in the order they run (see DESIGN.md, "The planner, in short"):
//! 1. forget what expired; take in the signals (idempotent: keyed by instance,
//!    activity, token or event time) and the capacity errors in scaling activities;
//! 2. recompute fallback units from the on-demand ASG;
//! 3. judge each spot ASG (capacity errors, launch grace, interruption rate);
//! 4. advance or abandon a failback step in progress;
//! 5. fall back: move each failing spot ASG's shortfall to healthy spot, then on-demand;
//! 6. replace interrupted instances: surge, cordon, drain, terminate with decrement;
//! 7. start a failback step when spot has been healthy for `failback_after`;
//! 8. drain and complete terminate lifecycle actions;
//! 9. size the headroom;
//! 10. guards: every desired size within the ASG's min and max, one write per ASG.

mod capacity;
mod headroom;
mod replace;
mod signals;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::config::PoolConfig;
use crate::event::Event;
use crate::model::{ObservedAsg, ObservedPool, PoolRecord};
use crate::plan::{Action, ActionKind, Plan};

pub use headroom::{headroom_percent, headroom_replicas, PercentSource};

/// Everything the planner needs, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    pub pool: &'a PoolConfig,
    pub dry_run: bool,
    pub record: &'a PoolRecord,
    pub observed: &'a ObservedPool,
    /// This pool's signals not yet seen, in any order, possibly repeated.
    pub events: &'a [Event],
    pub now: DateTime<Utc>,
}

pub fn plan(input: PlanInput<'_>) -> Plan {
    let mut work = Work::new(input);
    work.forget_expired();
    let mut events: Vec<&Event> = input.events.iter().collect();
    // Reordered delivery: take signals in event-time order, so the newest wins.
    events.sort_by_key(|e| (e.time, e.id.clone()));
    for event in events {
        work.ingest(event);
    }
    work.ingest_activities();
    work.reconcile_fallback_units();
    work.judge_spot();
    work.advance_failback();
    work.fall_back();
    work.replace_instances();
    work.start_failback();
    work.lifecycle_actions();
    work.headroom();
    work.finish()
}

/// The planner's working state: a copy of the record and the desired sizes it
/// is changing, with the reasons for each change.
struct Work<'a> {
    input: PlanInput<'a>,
    cfg: &'a PoolConfig,
    observed: &'a ObservedPool,
    now: DateTime<Utc>,
    record: PoolRecord,
    desired: BTreeMap<String, u32>,
    desired_reasons: BTreeMap<String, Vec<String>>,
    /// Spot ASGs judged failing in this plan, with why.
    failing: BTreeMap<String, String>,
    moved_this_plan: bool,
    actions: Vec<Action>,
    notes: Vec<String>,
}

impl<'a> Work<'a> {
    fn new(input: PlanInput<'a>) -> Self {
        let desired = input.observed.asgs().map(|a| (a.name.clone(), a.desired)).collect();
        Work {
            input,
            cfg: input.pool,
            observed: input.observed,
            now: input.now,
            record: input.record.clone(),
            desired,
            desired_reasons: BTreeMap::new(),
            failing: BTreeMap::new(),
            moved_this_plan: false,
            actions: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn desired_of(&self, asg: &str) -> u32 {
        self.desired.get(asg).copied().unwrap_or(0)
    }

    fn room_up(&self, asg: &ObservedAsg) -> u32 {
        asg.max.saturating_sub(self.desired_of(&asg.name))
    }

    fn room_down(&self, asg: &ObservedAsg) -> u32 {
        self.desired_of(&asg.name).saturating_sub(asg.min)
    }

    /// Changes an ASG's working desired size; callers have checked the bounds.
    fn adjust(&mut self, asg: &str, delta: i64, reason: String) {
        let current = i64::from(self.desired_of(asg));
        let next = (current + delta).clamp(0, i64::from(u32::MAX)) as u32;
        self.desired.insert(asg.to_string(), next);
        self.desired_reasons.entry(asg.to_string()).or_default().push(reason);
    }

    fn act(&mut self, kind: ActionKind, reason: impl Into<String>) {
        self.actions.push(Action { kind, reason: reason.into() });
    }

    fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    fn finish(self) -> Plan {
        let mut actions = Vec::new();
        for asg in self.observed.asgs() {
            let wanted = self.desired_of(&asg.name);
            // Guard: never beyond the ASG's bounds, whatever a rule computed.
            let to = wanted.clamp(asg.min, asg.max.max(asg.min));
            if to == asg.desired {
                continue;
            }
            let mut reason = self.desired_reasons.get(&asg.name).map(|r| r.join("; ")).unwrap_or_default();
            if to != wanted {
                reason.push_str(&format!(" (limited to the ASG's bounds {}..{})", asg.min, asg.max));
            }
            actions.push(Action {
                kind: ActionKind::SetDesiredCapacity { asg: asg.name.clone(), from: asg.desired, to },
                reason,
            });
        }
        let record_changed = self.record != *self.input.record;
        let mut all = Vec::with_capacity(self.actions.len() + actions.len() + 1);
        if record_changed {
            all.push(Action {
                kind: ActionKind::RecordState,
                reason: "write the pool record first, so a re-run knows what this plan intends".into(),
            });
        }
        all.extend(actions);
        all.extend(self.actions);
        Plan {
            pool: self.cfg.name.clone(),
            now: self.now,
            dry_run: self.input.dry_run,
            actions: all,
            notes: self.notes,
            record: self.record,
        }
    }
}

/// `a` after `b`, as a short human duration.
fn since(a: DateTime<Utc>, b: DateTime<Utc>) -> String {
    let secs = (a - b).num_seconds().max(0) as u64;
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

#[cfg(test)]
mod tests;
