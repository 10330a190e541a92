//! Replacing instances that are going away (Spot interruption warnings, rebalance
//! recommendations, Health scheduled changes).

use super::Work;
use crate::event::InstanceAction;
use crate::plan::{ActionKind, LifecycleRef};
use crate::record::{Interruption, InterruptionCause, KeptOffBy, Surge};
use crate::units::HumanDuration;

/// The least drain a spot warning's node is given once its time after the warning is
/// over: its evictions are still asked for, so pods get their termination grace rather
/// than the instance's stop.
const SPOT_DRAIN_AT_LEAST: chrono::Duration = chrono::Duration::seconds(5);
/// A warning reaches a run a few seconds after its time (EventBridge, the queue, the
/// function): its drain may end this much past `drain_timeout` after the warning, so an
/// ordinary first plan drains the whole `drain_timeout`.
const SPOT_WARNING_DELIVERY: chrono::Duration = chrono::Duration::seconds(10);

/// Where a surged replacement goes.
struct SurgeTarget {
    asg: String,
    /// On-demand standing in for spot: it counts against the fallback cap.
    fallback_unit: bool,
}

impl Work<'_> {
    /// How long an interrupted instance's node drains, and why if not `drain_timeout`. A
    /// spot warning's drain ends `drain_timeout` (and the delivery's few seconds) after
    /// the warning, whichever plan drains it: a run taking over a drained plan, or
    /// retrying it, drains for what is left, so the terminate-with-decrement still lands
    /// before the reclaim (else the ASG replaces the node beside its surge). Other causes
    /// have no reclaim at a set time.
    fn interruption_drain(&self, interruption: &Interruption) -> (HumanDuration, Option<String>) {
        let full = self.cfg.interruption.drain_timeout;
        if !matches!(interruption.cause, InterruptionCause::SpotWarning { .. }) {
            return (full, None);
        }
        let until = interruption.noticed_at.min(self.now) + full.as_chrono() + SPOT_WARNING_DELIVERY;
        let left = until - self.now;
        if left >= full.as_chrono() {
            return (full, None);
        }
        let time = left.max(SPOT_DRAIN_AT_LEAST).num_seconds().max(0).unsigned_abs();
        let why = format!(
            "drains until {} (drain_timeout after the warning, whichever run drains it){}",
            until.format("%Y-%m-%dT%H:%M:%SZ"),
            if left < SPOT_DRAIN_AT_LEAST { "; that is past: its evictions asked for, briefly" } else { "" }
        );
        (HumanDuration::from_secs(time), Some(why))
    }

    pub(super) fn cordon_and_drain(
        &mut self,
        instance_id: &str,
        lifecycle: Option<LifecycleRef>,
        (timeout, why): (HumanDuration, Option<String>),
        reason: &str,
    ) {
        if !self.cfg.interruption.drain {
            return;
        }
        let Some(node) = self.observed.node_of_instance(instance_id) else {
            self.note(format!("{instance_id} has no Kubernetes node; nothing to drain"));
            return;
        };
        let node_name = node.name.clone();
        if !node.unschedulable {
            self.act(
                ActionKind::CordonNode { node: node_name.clone(), instance_id: instance_id.to_string() },
                reason.to_string(),
            );
        }
        let drain_reason = why.map_or_else(|| reason.to_string(), |why| format!("{reason}: {why}"));
        self.act(
            ActionKind::DrainNode { node: node_name, instance_id: instance_id.to_string(), timeout, lifecycle },
            drain_reason,
        );
    }

    /// Where a replacement goes: the instance's own ASG when it is healthy, else the
    /// next healthy spot ASG, else on-demand within the fallback cap, else the own ASG
    /// all the same; or why it goes nowhere. A replacement elsewhere needs the own ASG to
    /// take the decrement afterwards (above its minimum), or the own ASG would replace the
    /// instance too: two replacements for one interruption.
    fn surge_target(&self, own_asg: &str) -> Result<SurgeTarget, String> {
        let Some(own) = self.observed.asg(own_asg) else { return Err(format!("{own_asg} was not read")) };
        let own_is_spot = self.observed.spot.iter().any(|a| a.name == own_asg);
        let kept_off = own_is_spot && self.failing.contains_key(own_asg);
        let here = SurgeTarget { asg: own_asg.to_string(), fallback_unit: false };
        if !kept_off && self.room_up(own) > 0 {
            return Ok(here);
        }
        let od = self.observed.on_demand.as_ref();
        let under_cap = self.record.fallback_units < self.cfg.fallback.max_on_demand;
        let others = || self.observed.spot.iter().filter(|a| a.name != own_asg);
        if self.after(own_asg) > own.min {
            if let Some(other) = others().find(|a| !self.failing.contains_key(&a.name) && self.room_up(a) > 0) {
                return Ok(SurgeTarget { asg: other.name.clone(), fallback_unit: false });
            }
            if let Some(od) = od.filter(|od| own_is_spot && under_cap && self.room_up(od) > 0) {
                return Ok(SurgeTarget { asg: od.name.clone(), fallback_unit: true });
            }
        }
        // Nowhere else to go: the slot stays in the kept-off ASG either way (without a
        // surge the instance goes without decrement and the ASG replaces it after the
        // drain). Kept off only by its interruption rate and filling what it is asked, it
        // still launches: asked for now, the replacement has the drain's minutes. Not an
        // ASG that cannot launch (a capacity error, missing instances): a raise there
        // buys nothing and is one more call whose lost answer leaves surplus; and the
        // fallback moves its missing slots out in this plan, into whose lower the surge
        // would be netted, then taken as made if the move's raise failed.
        let launches = own.shortfall() == 0
            && self.record.unavailable.get(own_asg).is_some_and(|u| u.by == KeptOffBy::InterruptionRate);
        if kept_off && launches && self.room_up(own) > 0 {
            return Ok(here);
        }
        let mut why = Vec::new();
        if self.room_up(own) == 0 {
            why.push(format!("{own_asg} is at its maximum {}", own.max));
        } else {
            why.push(format!("{own_asg} cannot launch now (a capacity error, or instances missing)"));
        }
        if self.after(own_asg) <= own.min {
            why.push(format!("{own_asg} is at its minimum {}, so a replacement elsewhere would be a second", own.min));
        } else {
            if others().next().is_some() {
                why.push("no other spot ASG is healthy with room".to_string());
            }
            why.push(match od {
                None => "the pool has no on-demand ASG".to_string(),
                Some(_) if !own_is_spot => format!("{own_asg} is the on-demand ASG"),
                Some(_) if !under_cap => {
                    format!("the fallback cap is reached (max_on_demand {})", self.cfg.fallback.max_on_demand)
                }
                Some(od) => format!("{} is at its maximum {}", od.name, od.max),
            });
        }
        Err(why.join(", "))
    }

    pub(super) fn replace_instances(&mut self) {
        let retry_after = self.cfg.interruption.drain_timeout.as_chrono() + chrono::Duration::seconds(60);
        for index in 0..self.record.interruptions.len() {
            let interruption = self.record.interruptions[index].clone();
            let Some(asg) = self.observed.asg_of_instance(&interruption.instance_id).cloned() else { continue };
            let Some(instance) = asg.instance(&interruption.instance_id) else { continue };
            if !instance.lifecycle_state.is_live() {
                continue; // already on its way out: the ASG or an earlier plan handles it
            }
            // Planned before: act again only if the instance outlived the drain.
            if interruption.planned_at.is_some_and(|t| self.now - t < retry_after) {
                continue;
            }
            let what = match &interruption.cause {
                InterruptionCause::SpotWarning { action: InstanceAction::Hibernate } => {
                    "spot interruption warning (hibernate, no lead time)".to_string()
                }
                InterruptionCause::SpotWarning { action } => {
                    format!("spot interruption warning ({action:?}, two minutes' notice)").to_lowercase()
                }
                InterruptionCause::Rebalance => "rebalance recommendation (interruption.rebalance: surge)".into(),
                InterruptionCause::ScheduledChange { event_type_code, start_time } => match start_time {
                    Some(t) => format!("AWS Health {event_type_code} starting {}", t.format("%Y-%m-%dT%H:%MZ")),
                    None => format!("AWS Health {event_type_code}"),
                },
            };
            let reason = format!("{what} for {}", interruption.instance_id);
            let asg_name = asg.name.clone();

            // One replacement per interruption: a surge recorded earlier landed (the
            // journal took back any that did not), so it is never made twice.
            // A surge in an ASG that left the pool is no longer the pool's capacity.
            let mut surge = interruption.surge.clone().filter(|s| self.observed.asg(&s.asg).is_some());
            if let Some(gone) = interruption.surge.as_ref().filter(|_| surge.is_none()) {
                self.note(format!(
                    "{}'s surge was in {}, which left the pool: made again",
                    interruption.instance_id, gone.asg
                ));
                if gone.fallback_unit {
                    self.give_back_fallback_units(1);
                }
            }
            if self.cfg.interruption.surge && surge.is_none() {
                match self.surge_target(&asg_name) {
                    Ok(SurgeTarget { asg: target, fallback_unit }) => {
                        self.adjust(&target, 1, format!("surge a replacement: {reason}"));
                        if fallback_unit {
                            self.record.fallback_units += 1;
                            self.units_added += 1;
                            self.record.fallback_since.get_or_insert(self.now);
                        }
                        // Its ASG's size before this plan: the plan's calls there move it on.
                        let holds_at = self.observed.asg(&target).map(|a| a.desired);
                        surge = Some(Surge {
                            asg: target,
                            planned_at: self.now,
                            plan: self.seq,
                            moved: None,
                            holds_at,
                            fallback_unit,
                        });
                    }
                    Err(why) => self.note(format!(
                        "no room to surge for {}: {why}; terminating without decrement so {asg_name} replaces it",
                        interruption.instance_id
                    )),
                }
            }
            let drain = self.interruption_drain(&interruption);
            self.cordon_and_drain(&interruption.instance_id, None, drain, &reason);
            // With a surge, the instance goes with decrement (never below the minimum);
            // without one, the ASG replaces it.
            let decrement = surge.is_some() && self.take_decrement(&asg);
            if decrement {
                self.decrement_in_failback_step(&asg.name, &interruption.instance_id, surge.as_ref());
            }
            if surge.is_some() && !decrement {
                self.note(format!(
                    "{asg_name} is at its minimum {}: {} goes without decrement; its surge is withdrawn next",
                    asg.min, interruption.instance_id
                ));
            }
            self.act(
                ActionKind::TerminateInstance {
                    asg: asg_name,
                    instance_id: interruption.instance_id.clone(),
                    decrement,
                    only_if_drained: false,
                    withdraws: false,
                },
                reason,
            );
            let entry = &mut self.record.interruptions[index];
            entry.surge = surge;
            entry.planned_at = Some(self.now);
            // Without decrement the ASG replaces it: a surge made for it is then surplus.
            entry.terminated = decrement || entry.surge.is_none();
        }
    }

    /// A terminate with decrement in the ASG a failback step raises: with its surge in the
    /// same ASG the sizes are unmoved (one up, one down). Otherwise an instance there
    /// before the step lowers the step's floor (its size without the step's surge); one
    /// launched since (the step's, or another writer's, none can tell) lowers what the
    /// step raised it to and expects, so that the slot its decrement takes is not taken
    /// for another's removed with a decrement. Once per instance, however often planned.
    fn decrement_in_failback_step(&mut self, asg: &str, instance_id: &str, surge: Option<&Surge>) {
        let Some(step) = self.record.failback.as_mut().filter(|f| f.spot_asg == asg) else { return };
        if step.floor_lowered_for.iter().any(|id| id == instance_id) || surge.is_some_and(|s| s.asg == asg) {
            return;
        }
        step.floor_lowered_for.push(instance_id.to_string());
        match &step.instances_before {
            Some(before) if !before.iter().any(|id| id == instance_id) => step.expect_one_less(),
            _ => step.desired_before = step.desired_before.saturating_sub(1),
        }
    }
}
