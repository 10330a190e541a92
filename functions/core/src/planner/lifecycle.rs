//! Terminate lifecycle actions: heartbeat, cordon, drain, complete; and taking one on
//! again when the run that planned it is over and it still waits.

use super::Work;
use crate::observe::LifecycleState;
use crate::plan::{ActionKind, LifecycleRef};
use crate::units::HumanDuration;

/// The least drain an action whose drain time is over is given: its evictions are still
/// asked for, so pods get their termination grace rather than the instance's stop.
const LIFECYCLE_DRAIN_AT_LEAST: chrono::Duration = chrono::Duration::seconds(5);

/// How long after its drain the run that planned an action may still be at it: the
/// calls after the drain (taking the lease back, the completion), within what the
/// config's function timeout check leaves beside `drain_timeout`.
fn after_drain() -> chrono::Duration {
    chrono::Duration::from_std(crate::config::FUNCTION_TIMEOUT_MARGIN).unwrap_or(chrono::Duration::MAX)
}

impl Work<'_> {
    /// Whether the pending action at `index` is planned now: not yet planned, or planned
    /// by a run that is over (its window past) while its instance still waits in
    /// `Terminating:Wait`. A run within its window is never doubled.
    fn take_on(&mut self, index: usize) -> bool {
        let pending = &self.record.lifecycle_actions[index];
        if !pending.planned {
            return true;
        }
        let Some(until) = pending.planned_until else {
            // Planned before runs were recorded: whichever run holds it gets a whole window
            // from now, after which it is taken on like any left behind.
            let until = self.now + self.cfg.interruption.drain_timeout.as_chrono() + after_drain();
            self.record.lifecycle_actions[index].planned_until = Some(until);
            return false;
        };
        if self.now < until {
            return false;
        }
        let waiting = self
            .observed
            .asg_of_instance(&pending.instance_id)
            .and_then(|a| a.instance(&pending.instance_id))
            .is_some_and(|i| i.lifecycle_state == LifecycleState::TerminatingWait);
        if waiting {
            let by = pending.planned_by.as_deref().unwrap_or("an earlier run");
            self.note(format!(
                "the terminate lifecycle action for {} was planned by {by}, which left it undone (its window ended \
                 at {}; the instance still waits in Terminating:Wait): planned again",
                pending.instance_id,
                until.format("%Y-%m-%dT%H:%M:%SZ")
            ));
        }
        waiting
    }

    /// The action's drain: what is left of its `drain_until` (set when first planned),
    /// at least a few seconds, and why when not the whole `drain_timeout`.
    fn lifecycle_drain(&mut self, index: usize) -> (HumanDuration, Option<String>) {
        let full = self.cfg.interruption.drain_timeout;
        let until = *self.record.lifecycle_actions[index].drain_until.get_or_insert(self.now + full.as_chrono());
        let left = until - self.now;
        if left >= full.as_chrono() {
            return (full, None);
        }
        let time = left.max(LIFECYCLE_DRAIN_AT_LEAST).num_seconds().max(0).unsigned_abs();
        let why = format!(
            "drains until {} (drain_timeout after its first drain, whichever run drains it){}",
            until.format("%Y-%m-%dT%H:%M:%SZ"),
            if left < LIFECYCLE_DRAIN_AT_LEAST { "; that is past: its evictions asked for, briefly" } else { "" }
        );
        (HumanDuration::from_secs(time), Some(why))
    }

    pub(super) fn lifecycle_actions(&mut self) {
        for index in 0..self.record.lifecycle_actions.len() {
            if !self.take_on(index) {
                continue;
            }
            let pending = self.record.lifecycle_actions[index].clone();
            let action = LifecycleRef {
                asg: pending.asg.clone(),
                hook: pending.hook.clone(),
                token: pending.token.clone(),
                instance_id: pending.instance_id.clone(),
            };
            let reason =
                format!("terminate lifecycle action {} on {} for {}", pending.hook, pending.asg, pending.instance_id);
            let has_node = self.observed.node_of_instance(&pending.instance_id).is_some();
            if self.cfg.interruption.drain && has_node {
                self.act(
                    ActionKind::RecordLifecycleHeartbeat(action.clone()),
                    format!("{reason}: keep the hook open while draining"),
                );
            }
            let drain = self.lifecycle_drain(index);
            let drained_for =
                if self.cfg.interruption.drain && has_node { drain.0.as_chrono() } else { chrono::Duration::zero() };
            self.cordon_and_drain(&pending.instance_id, Some(action.clone()), drain, &reason);
            self.act(
                ActionKind::CompleteLifecycleAction(action),
                format!("{reason}: drained, let termination continue"),
            );
            let entry = &mut self.record.lifecycle_actions[index];
            entry.planned = true;
            entry.planned_by = Some(self.input.run.to_string());
            entry.planned_until = Some(self.now + drained_for + after_drain());
        }
    }
}
