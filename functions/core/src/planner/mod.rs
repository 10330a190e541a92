//! The planner: a pure function from configuration, the pool record, the observed
//! pool, the pool's signals and `now` to a [`Plan`]. No clock, no I/O.
//!
//! Rules, in the order they run (what each guarantees: docs/src/safety.md):
//! 0. judge the last plan's journal against what is observed: finish a move whose
//!    raise landed, take back what a raise that never landed promised; withdraw the
//!    surge of an interrupted instance that left without Ballast's decrement;
//! 1. forget what expired; take in the signals (idempotent: keyed by instance,
//!    activity, token or event time; times ahead of `now` taken as `now`) and the
//!    capacity errors in scaling activities;
//! 2. recompute fallback units from the on-demand ASG;
//! 3. judge each spot ASG (capacity errors, launch grace, interruption rate);
//! 4. advance or abandon a failback step in progress;
//! 5. fall back: move each failing spot ASG's shortfall to healthy spot, then on-demand;
//! 6. replace interrupted instances: surge, cordon, drain, terminate with decrement;
//! 7. start a failback step when spot has been healthy for `failback_after`;
//! 8. drain and complete terminate lifecycle actions;
//! 9. size the headroom;
//! 10. guards: every desired size within the ASG's min and max, one write per ASG,
//!     a lower never below the live instances; raises before lowers, lowers before
//!     cordons, drains, terminations; the capacity calls journaled in that order.

mod capacity;
mod headroom;
mod journal;
mod lifecycle;
mod remake;
mod replace;
mod signals;
mod stand_down;
mod urgent;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::config::PoolConfig;
use crate::event::{Event, Signal};
use crate::observe::{ObservedAsg, ObservedPool};
use crate::plan::{Action, ActionKind, HeadroomDecision, Plan};
use crate::record::{CapacityCall, Journal, PoolRecord};

/// How far ahead of `now` an event's time may be (clock skew between EventBridge, the
/// forwarder and Lambda); a time further ahead is taken as `now`, with a note.
pub const CLOCK_SKEW: chrono::Duration = chrono::Duration::seconds(120);

pub use headroom::{headroom_percent, headroom_replicas, PercentInForce, PercentSource};
pub use remake::{STALE_WRITE_WINDOW, UNFILLED_WINDOW};
pub use stand_down::{has_open_work, stand_down};
pub use urgent::{urgent_surge, UrgentSurge, Warned};

/// The words of a note that leaves surplus instances to cluster-autoscaler, after their
/// count and before the ASG: "2 surplus instance(s) left in eks-general-spot".
pub const SURPLUS_NOTE: &str = "surplus instance(s) left in";

/// Everything the planner needs, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    /// The pool's config.
    pub pool: &'a PoolConfig,
    /// Plan only: the plan is logged and its record kept apart, never applied.
    pub dry_run: bool,
    /// The pool record as loaded from the state store.
    pub record: &'a PoolRecord,
    /// The pool as observed at the start of this run.
    pub observed: &'a ObservedPool,
    /// This pool's signals not yet seen, in any order, possibly repeated.
    pub events: &'a [Event],
    /// The run's time; every decision is made as of it.
    pub now: DateTime<Utc>,
    /// The run planning (its lease owner), recorded on what it takes on.
    pub run: &'a str,
}

/// Plans one pool: the rules above, in order, as of `input.now`. Never fails: what it
/// cannot act on is said in the plan's notes.
pub fn plan(input: PlanInput<'_>) -> Plan {
    let mut work = Work::new(input);
    work.settle_journal();
    work.withdraw_orphaned_surges();
    work.forget_expired();
    let mut events: Vec<Event> = input.events.iter().map(|e| work.not_ahead(e)).collect();
    // Reordered delivery: take signals in event-time order, so the newest wins.
    events.sort_by_key(|e| (e.time, e.id.clone()));
    for event in &events {
        work.ingest(event);
    }
    work.ingest_activities();
    work.remake_undone_raises();
    work.reconcile_fallback_units();
    work.judge_spot();
    work.advance_failback();
    work.uncordon_released();
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
    /// Terminations with decrement planned per ASG (they lower it by themselves).
    decrements: BTreeMap<String, u32>,
    /// Fallback units this plan adds to the on-demand ASG.
    units_added: u32,
    /// Spot ASGs judged failing in this plan, with why.
    failing: BTreeMap<String, String>,
    moved_this_plan: bool,
    /// Lowers of this plan owed whatever its own raises do (see `Journal::owed`).
    owed: Vec<crate::record::OwedLower>,
    /// This plan's moves (see `Journal::moves`).
    moves: Vec<crate::record::Move>,
    /// This plan's number, should it journal capacity calls.
    seq: u64,
    actions: Vec<Action>,
    notes: Vec<String>,
    surplus: BTreeMap<String, u32>,
    headroom: Option<HeadroomDecision>,
    /// Surges re-planned per ASG because another writer took their slots.
    surges_replanned: BTreeMap<String, u32>,
    /// Raises of Ballast's another writer undid, made again by this plan, per ASG.
    remade: BTreeMap<String, u32>,
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
            decrements: BTreeMap::new(),
            units_added: 0,
            failing: BTreeMap::new(),
            moved_this_plan: false,
            owed: Vec::new(),
            moves: Vec::new(),
            seq: input.record.plans + 1,
            actions: Vec::new(),
            notes: Vec::new(),
            surplus: BTreeMap::new(),
            headroom: None,
            surges_replanned: BTreeMap::new(),
            remade: BTreeMap::new(),
        }
    }

    fn desired_of(&self, asg: &str) -> u32 {
        self.desired.get(asg).copied().unwrap_or(0)
    }

    /// The ASG's size once the plan is applied: its desired size less the
    /// terminations with decrement planned in it.
    fn after(&self, asg: &str) -> u32 {
        self.desired_of(asg).saturating_sub(self.decrements.get(asg).copied().unwrap_or(0))
    }

    fn room_up(&self, asg: &ObservedAsg) -> u32 {
        asg.max.saturating_sub(self.desired_of(&asg.name))
    }

    fn room_down(&self, asg: &ObservedAsg) -> u32 {
        self.after(&asg.name).saturating_sub(asg.min)
    }

    /// Slots of the ASG that no instance fills: lowering by these removes nothing live.
    fn unfilled(&self, asg: &ObservedAsg) -> u32 {
        self.after(&asg.name).saturating_sub(asg.live())
    }

    /// Whether a termination in `asg` can decrement it (never below its minimum, the
    /// other decrements of this plan counted); if so, counts it.
    fn take_decrement(&mut self, asg: &ObservedAsg) -> bool {
        if self.after(&asg.name) > asg.min {
            *self.decrements.entry(asg.name.clone()).or_default() += 1;
            true
        } else {
            false
        }
    }

    /// Takes `count` back from a surge on `asg` without touching a Ready node: first
    /// the slots no instance fills, then instances that are not yet Ready nodes, each
    /// terminated by id with decrement. Never below `floor`. Returns what is left.
    fn withdraw(&mut self, asg_name: &str, count: u32, floor: u32, reason: &str) -> u32 {
        let Some(asg) = self.observed.asg(asg_name) else { return count };
        let mut left = count.min(self.after(asg_name).saturating_sub(floor.max(asg.min)));
        let lower = left.min(self.unfilled(asg));
        if lower > 0 {
            left -= lower;
            self.adjust(asg_name, -i64::from(lower), format!("{reason}: withdraw {lower} unfilled"));
            // Owed even if this plan's raises do not land; if the slots fill before it is
            // made, as many instances are withdrawn instead.
            let floor = floor.max(asg.min);
            self.owed.push(crate::record::OwedLower {
                asg: asg_name.to_string(),
                by: lower,
                raised: vec![(asg_name.to_string(), floor, floor + lower)],
            });
        }
        let mut unready: Vec<String> = asg
            .instances
            .iter()
            .filter(|i| i.lifecycle_state.is_live())
            .filter(|i| !self.observed.node_of_instance(&i.id).is_some_and(|n| n.ready))
            .map(|i| i.id.clone())
            .collect();
        unready.sort();
        for id in unready {
            if left == 0 || !self.take_decrement(asg) {
                break;
            }
            left -= 1;
            self.act(
                ActionKind::TerminateInstance {
                    asg: asg_name.to_string(),
                    instance_id: id,
                    decrement: true,
                    only_if_drained: false,
                    withdraws: true,
                },
                format!("{reason}: withdraw an instance that is not yet a Ready node"),
            );
        }
        left
    }

    /// The event as the planner takes it: a time ahead of `now` (beyond the clock
    /// skew) is taken as `now`, so one bad clock cannot pin the record's memory.
    fn not_ahead(&mut self, event: &Event) -> Event {
        let horizon = self.now + CLOCK_SKEW;
        let mut event = event.clone();
        if event.time > horizon {
            self.note(format!(
                "event {} is dated {}, ahead of now ({}): taken as now",
                event.id,
                event.time.to_rfc3339(),
                self.now.to_rfc3339()
            ));
            event.time = self.now;
        }
        if let Signal::PoolDemand(d) = &mut event.signal {
            if d.observed_at > horizon {
                self.note(format!(
                    "demand of pool {} observed_at {} is ahead of now: taken as now",
                    d.pool,
                    d.observed_at.to_rfc3339()
                ));
                d.observed_at = self.now;
            }
        }
        if let Signal::PoolWaits(w) = &mut event.signal {
            if w.window_end > horizon {
                // A window from a clock ahead ends now: a far-future end would hold back
                // every later window.
                let length = w.window_end - w.window_start;
                w.window_end = self.now;
                w.window_start = self.now - length;
            }
        }
        if let Signal::LaunchUnsuccessful(f) = &mut event.signal {
            if f.at.is_some_and(|at| at > horizon) {
                f.at = Some(self.now);
            }
        }
        if let Signal::LaunchSuccessful { started, .. } = &mut event.signal {
            *started = (*started).min(self.now);
        }
        event
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

    /// Instances Ballast added that are no longer needed but are Ready nodes (they may
    /// hold pods): cluster-autoscaler's scale-down removes them safely if unneeded, so
    /// they are left to it, said in a note of one fixed form ([`SURPLUS_NOTE`]).
    fn leave_surplus(&mut self, asg: &str, count: u32, why: &str) {
        if count > 0 {
            self.note(format!("{why}: {count} {SURPLUS_NOTE} {asg}, which cluster-autoscaler removes if unneeded"));
            *self.surplus.entry(asg.to_string()).or_default() += count;
        }
    }

    fn finish(mut self) -> Plan {
        let mut raises = Vec::new();
        let mut lowers = Vec::new();
        for asg in self.observed.asgs() {
            let wanted = self.desired_of(&asg.name);
            // Guards: never beyond the ASG's bounds, whatever a rule computed; a lower
            // never below the live instances (the ASG would choose which to kill).
            let floor = if wanted < asg.desired { asg.min.max(asg.live().min(asg.desired)) } else { asg.min };
            let to = wanted.clamp(floor, asg.max.max(floor));
            if to == asg.desired {
                continue;
            }
            let mut reason = self.desired_reasons.get(&asg.name).map(|r| r.join("; ")).unwrap_or_default();
            if to != wanted {
                reason
                    .push_str(&format!(" (limited to {floor}..{}: the ASG's bounds and its live instances)", asg.max));
            }
            let action = Action {
                kind: ActionKind::SetDesiredCapacity { asg: asg.name.clone(), from: asg.desired, to },
                reason,
            };
            if to > asg.desired {
                raises.push(action);
            } else {
                lowers.push(action);
            }
        }
        // Raise the receiving ASG before lowering the giving one; cordon, drain, then
        // terminate; headroom last. A stop between any two leaves no less capacity.
        self.actions.sort_by_key(|a| phase(&a.kind));
        let capacity: Vec<&Action> = raises.iter().chain(&lowers).chain(&self.actions).collect();
        let calls: Vec<CapacityCall> = capacity
            .iter()
            .filter_map(|a| match &a.kind {
                ActionKind::SetDesiredCapacity { asg, from, to } => Some(CapacityCall::SetDesired {
                    asg: asg.clone(),
                    from: *from,
                    to: *to,
                    planned_lower: from.saturating_sub(*to),
                    done: false,
                }),
                ActionKind::TerminateInstance { asg, instance_id, decrement, withdraws, .. } => {
                    Some(CapacityCall::Terminate {
                        asg: asg.clone(),
                        instance_id: instance_id.clone(),
                        decrement: *decrement,
                        withdraws: *withdraws,
                        done: false,
                    })
                }
                _ => None,
            })
            .collect();
        if !calls.is_empty() {
            self.record.plans = self.seq;
        }
        let raised: Vec<String> = raises
            .iter()
            .filter_map(|a| match &a.kind {
                ActionKind::SetDesiredCapacity { asg, .. } => Some(asg.clone()),
                _ => None,
            })
            .collect();
        let raised_asgs: Vec<_> = raised.iter().filter_map(|name| self.observed.asg(name)).collect();
        let raised_live = raised_asgs
            .iter()
            .map(|asg| {
                let live = asg.instances.iter().filter(|i| i.lifecycle_state.is_live()).map(|i| i.id.clone());
                (asg.name.clone(), live.collect())
            })
            .collect();
        let looked_at = raised_asgs.iter().map(|asg| (asg.name.clone(), asg.desired)).collect();
        self.record.journal = (!calls.is_empty()).then_some(Journal {
            planned_at: self.now,
            seq: self.seq,
            units_added: self.units_added,
            calls,
            attempted: 0,
            owed: std::mem::take(&mut self.owed),
            moves: std::mem::take(&mut self.moves),
            live: raised_live,
            looked_at,
            remakes: self.remade.keys().cloned().collect(),
        });
        let record_changed = self.record != *self.input.record;
        let mut all = Vec::with_capacity(self.actions.len() + raises.len() + lowers.len() + 1);
        if record_changed {
            all.push(Action {
                kind: ActionKind::RecordState,
                reason: "write the pool record first, so a re-run knows what this plan intends".into(),
            });
        }
        all.extend(raises);
        all.extend(lowers);
        all.extend(self.actions);
        Plan {
            pool: self.cfg.name.clone(),
            now: self.now,
            dry_run: self.input.dry_run,
            actions: all,
            notes: self.notes,
            record: self.record,
            headroom: self.headroom,
            surplus: self.surplus,
            remade: self.remade,
        }
    }
}

/// The order actions are applied in, after the desired-capacity changes.
fn phase(kind: &ActionKind) -> u8 {
    match kind {
        ActionKind::RecordLifecycleHeartbeat(_) => 0,
        ActionKind::CordonNode { .. } | ActionKind::UncordonNode { .. } => 1,
        ActionKind::DrainNode { .. } => 2,
        ActionKind::TerminateInstance { .. } | ActionKind::CompleteLifecycleAction(_) => 3,
        ActionKind::SetHeadroomReplicas { .. } => 4,
        ActionKind::RecordState | ActionKind::SetDesiredCapacity { .. } => 5,
    }
}

/// Whether an instance of the pool is still, or is becoming, capacity.
fn is_live(observed: &ObservedPool, instance_id: &str) -> bool {
    observed.asgs().find_map(|a| a.instance(instance_id)).is_some_and(|i| i.lifecycle_state.is_live())
}

/// `a` after `b`, as a short human duration.
fn since(a: DateTime<Utc>, b: DateTime<Utc>) -> String {
    let secs = (a - b).num_seconds().max(0) as u64;
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

#[cfg(test)]
mod tests;
