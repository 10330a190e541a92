//! Spot health, fallback and failback: moving capacity between spot and on-demand
//! without ever lowering the pool's total desired size.

use super::{since, Work};
use crate::config::PoolConfig;
use crate::observe::{LifecycleState, ObservedAsg};
use crate::plan::ActionKind;
use crate::record::{FailbackStep, KeptOffBy, Move, SurgeMove};

/// How long a failback step's victims may take to drain before they are released:
/// a few drain attempts, one per reconcile.
pub fn failback_drain_deadline(cfg: &PoolConfig) -> chrono::Duration {
    cfg.interruption.drain_timeout.as_chrono() * 3 + chrono::Duration::seconds(60)
}

impl Work<'_> {
    /// Fallback units no longer held (a raise that did not land, a surge taken).
    pub(super) fn give_back_fallback_units(&mut self, n: u32) {
        self.record.fallback_units = self.record.fallback_units.saturating_sub(n);
        if self.record.fallback_units == 0 {
            self.record.fallback_since = None;
        }
    }

    /// Fallback units are what the on-demand ASG still holds above its minimum: CA may
    /// have removed some, and memory is never trusted over the ASG.
    pub(super) fn reconcile_fallback_units(&mut self) {
        let Some(od) = &self.observed.on_demand else {
            // A spot-only pool holds no fallback (an on-demand ASG removed from the
            // config leaves its instances to cluster-autoscaler).
            if self.record.fallback_units > 0 {
                self.note(format!("fallback units {} -> 0: the pool has no on-demand ASG", self.record.fallback_units));
            }
            self.record.fallback_units = 0;
            self.record.fallback_since = None;
            return;
        };
        // A raise of Ballast's made again (`remake`) holds its units again.
        let remade = self.remade.get(&od.name).copied().unwrap_or(0);
        let held = (od.desired + remade).saturating_sub(od.min);
        if self.record.fallback_units > held {
            self.note(format!(
                "fallback units {} -> {held}: {} holds only {held} above its minimum",
                self.record.fallback_units, od.name
            ));
            self.record.fallback_units = held;
        }
        if self.record.fallback_units == 0 {
            self.record.fallback_since = None;
        }
    }

    pub(super) fn judge_spot(&mut self) {
        let grace = self.cfg.fallback.spot_launch_grace.as_chrono();
        let rate = self.cfg.fallback.interruption_rate;
        for asg in &self.observed.spot {
            let name = asg.name.clone();
            if asg.shortfall() > 0 {
                self.record.short_since.entry(name.clone()).or_insert(self.now);
            } else {
                self.record.short_since.remove(&name);
            }
            let recent = self.record.disruptions_since(&name, self.now - rate.window.as_chrono());
            if recent >= rate.count {
                let reason = format!("{recent} interruptions within {} (limit {})", rate.window, rate.count);
                self.mark_unavailable(&name, self.now, reason, KeptOffBy::InterruptionRate);
            }
            let failing = if let Some(u) = self.record.unavailable.get(&name) {
                Some(format!("{} until {}", u.reason, u.until.format("%H:%M:%SZ")))
            } else {
                match self.record.short_since.get(&name) {
                    Some(t) if self.now - *t >= grace => Some(format!(
                        "{} below desired for {} (grace {})",
                        asg.shortfall(),
                        since(self.now, *t),
                        self.cfg.fallback.spot_launch_grace
                    )),
                    _ => None,
                }
            };
            match failing {
                Some(why) => {
                    self.record.healthy_since.remove(&name);
                    self.failing.insert(name, why);
                }
                None => {
                    self.record.healthy_since.entry(name).or_insert(self.now);
                }
            }
        }
    }

    /// Ready nodes whose instance is in service in `asg`, not counting instances being
    /// replaced (their going would read as a failback surge not delivered), nor those in
    /// `before`.
    fn ready_nodes(&self, asg: &ObservedAsg, before: &[String]) -> u32 {
        let replaced: Vec<&str> = self.record.interruptions.iter().map(|i| i.instance_id.as_str()).collect();
        asg.instances
            .iter()
            .filter(|i| i.lifecycle_state == LifecycleState::InService && !replaced.contains(&i.id.as_str()))
            .filter(|i| !before.contains(&i.id))
            .filter(|i| self.observed.node_of_instance(&i.id).is_some_and(|n| n.ready))
            .count() as u32
    }

    /// Instances launched in `asg` since a failback step began that are not surely the
    /// step's: slots another writer asked for (unfilled before the step, or above its
    /// raise), and replacements of instances the ASG had before (Auto Scaling's own, an
    /// interruption's surge here). An old instance that left with a decrement (a
    /// cluster-autoscaler scale-in) is replaced by nothing; one that left without, or is
    /// being replaced by a surge here, is; a surge here not yet landed is not launched.
    fn not_the_steps(&self, step: &FailbackStep, asg: &ObservedAsg, before: &[String], raised_to: u32) -> u32 {
        let surged_here = |id: &str| {
            self.record.interruptions.iter().any(|i| {
                i.instance_id == id
                    && i.noticed_at >= step.started_at
                    && i.surge.as_ref().is_some_and(|s| s.asg == asg.name)
            })
        };
        let live_here = |id: &str| asg.instance(id).is_some_and(|i| i.lifecycle_state.is_live());
        // Surges here for instances of this ASG still live: their decrement comes here.
        let in_flight = self
            .record
            .interruptions
            .iter()
            .filter(|i| i.noticed_at >= step.started_at && live_here(&i.instance_id))
            .filter(|i| i.surge.as_ref().is_some_and(|s| s.asg == asg.name))
            .count() as u32;
        let expected = raised_to + in_flight;
        let raised_by_others = step.unfilled_before + asg.desired.saturating_sub(expected);
        // Old instances gone, or going and replaced by a surge here. (One interrupted
        // before the step had its surge in the size then: it leaves with a decrement.)
        // Those live above the size when the step began leave replaced by nothing new.
        let old_gone = before.iter().filter(|id| !live_here(id) || surged_here(id)).count() as u32;
        let old_gone = old_gone.saturating_sub(step.over_before);
        // Removed with a decrement by others (or a surge here not yet landed): no
        // replacement follows them.
        let decremented = expected.saturating_sub(asg.desired);
        // Live above the size: replacements launched before the instances they replace
        // leave (Capacity Rebalancing, an instance maintenance policy).
        let replacing = asg.live().saturating_sub(asg.desired);
        raised_by_others + old_gone.saturating_sub(decremented) + replacing
    }

    /// A failback step is judged afresh every reconcile against what is observed: its
    /// victims are only what fallback still holds, it ends by its deadlines, and a step
    /// with nothing left to move back is abandoned and its surge withdrawn.
    pub(super) fn advance_failback(&mut self) {
        let Some(mut step) = self.record.failback.clone() else { return };
        let Some(asg) = self.observed.spot.iter().find(|a| a.name == step.spot_asg) else {
            self.note(format!("failback step dropped: {} is no longer in the pool", step.spot_asg));
            self.record.failback = None;
            return;
        };
        let asg_name = asg.name.clone();
        if !step.victims.is_empty() {
            self.advance_victims(step);
            return;
        }
        // Ready nodes of instances launched since the step began: the step's, or another
        // writer's (cluster-autoscaler's, for pending pods), launched for slots it asked
        // for before the step (still unfilled then) or since (above the step's raise), or
        // the ASG's replacement of an instance it had before.
        let raised_to = step.raised();
        // Which new nodes are whose, no observation tells; so doubt never removes
        // capacity. On-demand is drained only for nodes surely the step's (the others'
        // taken to be Ready first); a surge is withdrawn only where no new Ready node may
        // be the step's (the others' taken to be the ones booting), so an instance another
        // writer is booting is never taken for the step's undelivered one.
        self.follow_new_instances(&mut step, asg);
        let (ready_new, gained) = match &step.instances_before {
            Some(before) => {
                let ready_new = self.ready_nodes(asg, before);
                let theirs = self.not_the_steps(&step, asg, before, raised_to);
                (ready_new, ready_new.saturating_sub(theirs).min(step.count))
            }
            None => {
                let ready_new = self.ready_nodes(asg, &[]).saturating_sub(step.ready_before);
                let others = step.unfilled_before + asg.desired.saturating_sub(raised_to);
                (ready_new, ready_new.saturating_sub(others).min(step.count))
            }
        };
        let maybe_gained = ready_new.min(step.count);
        let failing = self.failing.get(&asg_name).cloned();
        let timed_out = self.now - step.started_at >= self.cfg.fallback.spot_launch_grace.as_chrono();
        if gained >= step.count || failing.is_some() || timed_out {
            if maybe_gained > gained {
                let why = format!(
                    "failback: {} new Ready spot node(s) of {asg_name} may be the step's or another writer's",
                    maybe_gained - gained
                );
                self.leave_surplus(&asg_name, maybe_gained - gained, &why);
            }
            let undelivered = step.count - maybe_gained;
            if undelivered > 0 {
                let why = failing.unwrap_or_else(|| {
                    format!("only {maybe_gained} of {} Ready after {}", step.count, self.cfg.fallback.spot_launch_grace)
                });
                let reason = format!("failback step failed ({why})");
                let left = self.withdraw(&asg_name, undelivered, step.desired_before, &reason);
                self.leave_surplus(&asg_name, left, &reason);
                self.note(format!("{reason}; next attempt after {}", self.cfg.fallback.wait_and_retry));
            } else if gained < step.count {
                self.note(format!(
                    "failback step ended with {} node(s) in doubt; next attempt after {}",
                    step.count - gained,
                    self.cfg.fallback.wait_and_retry
                ));
            }
            // A step ending short of its count, undelivered, in doubt or its nodes lost
            // meanwhile, is not followed at once by another: while cluster-autoscaler
            // scales the same ASG (or spot reclaims there) each new surge would end so too.
            let lost = step.asked.saturating_sub(step.count);
            if lost > 0 {
                self.note(format!(
                    "failback step: {lost} of its {} new spot node(s) of {asg_name} left meanwhile; next attempt after {}",
                    step.asked, self.cfg.fallback.wait_and_retry
                ));
            }
            if gained < step.count || lost > 0 {
                self.record.retry_after = Some(self.now + self.cfg.fallback.wait_and_retry.as_chrono());
            }
            // Move back only what fallback still holds: cluster-autoscaler may have
            // removed on-demand nodes meanwhile, and the baseline is never drained.
            let movable = match &self.observed.on_demand {
                Some(od) => gained.min(self.record.fallback_units).min(self.room_down(od)),
                None => 0,
            };
            if movable < gained {
                let why = format!(
                    "failback: {} of {gained} new spot node(s) have nothing to replace (fallback holds {})",
                    gained - movable,
                    self.record.fallback_units
                );
                self.leave_surplus(&asg_name, gained - movable, &why);
            }
            if movable == 0 {
                self.record.failback = None;
                return;
            }
            let reason = format!(
                "failback: {movable} new spot node(s) of {asg_name} are Ready; drain and remove as many on-demand instances"
            );
            step.victims = self.drain_on_demand(movable, &reason, &[]);
            step.count = step.victims.len() as u32;
            step.victims_since = Some(self.now);
            self.record.failback = (!step.victims.is_empty()).then_some(step);
        } else {
            self.note(format!(
                "failback step waiting: {gained} of {} new spot node(s) of {asg_name} Ready",
                step.count
            ));
            self.record.failback = Some(step);
        }
    }

    /// Instances launched since the step began that another writer removed since they
    /// were last seen (a cluster-autoscaler scale-in, a reclaim): the step expects one
    /// less for each, so that the slot a decrement took is not taken for an old instance's
    /// and that one's replacement for the step's. Ballast's own (interrupted) ones are
    /// counted where it plans their terminate.
    fn follow_new_instances(&self, step: &mut FailbackStep, asg: &ObservedAsg) {
        let Some(before) = &step.instances_before else { return };
        // Interrupted ones are never followed: their record may be forgotten before the
        // next look, and they would then read as another writer's removal.
        let ours = |id: &String| self.record.interruptions.iter().any(|i| &i.instance_id == id);
        let live_new: Vec<String> = asg
            .instances
            .iter()
            .filter(|i| i.lifecycle_state.is_live() && !before.contains(&i.id) && !ours(&i.id))
            .map(|i| i.id.clone())
            .collect();
        let gone = step.seen_new.iter().filter(|id| !live_new.contains(id) && !ours(id)).count();
        for _ in 0..gone {
            step.expect_one_less();
        }
        step.seen_new = live_new;
    }

    /// Victims chosen earlier: done when they are gone; drained again while fallback
    /// still holds them; past the deadline (or when fallback no longer holds them)
    /// uncordoned and released.
    fn advance_victims(&mut self, mut step: FailbackStep) {
        let Some(od) = self.observed.on_demand.as_ref() else {
            // The on-demand ASG left the pool: its instances are no longer Ballast's to
            // remove; the victims are uncordoned, never left cordoned and half-drained.
            for id in &step.victims {
                if !self.record.uncordon.contains(id) {
                    self.record.uncordon.push(id.clone());
                }
            }
            self.note(format!(
                "failback step ended: the pool has no on-demand ASG any more; victims {} released",
                step.victims.join(", ")
            ));
            self.record.failback = None;
            return;
        };
        let remaining: Vec<String> = step
            .victims
            .iter()
            .filter(|v| od.instance(v).is_some_and(|i| i.lifecycle_state.is_live()))
            .cloned()
            .collect();
        let done = step.victims.len() as u32 - remaining.len() as u32;
        // The victims' decrements lowered the on-demand ASG: they were fallback units.
        // Counted here once (the held cap alone would count capacity cluster-autoscaler
        // added as fallback, and a later step would drain it).
        if done > 0 {
            self.record.fallback_units =
                self.record.fallback_units.min(self.input.record.fallback_units.saturating_sub(done));
            if self.record.fallback_units == 0 {
                self.record.fallback_since = None;
            }
        }
        if remaining.is_empty() {
            self.note(format!("failback step done: {done} on-demand instance(s) replaced by spot"));
            self.record.failback = None;
            return;
        }
        let since = step.victims_since.unwrap_or(step.started_at);
        let deadline = since + failback_drain_deadline(self.cfg);
        let holdable = self.record.fallback_units.min(self.room_down(od)) as usize;
        let (keep, release): (Vec<String>, Vec<String>) = if self.now >= deadline {
            (Vec::new(), remaining)
        } else {
            let mut keep = remaining;
            let release = keep.split_off(holdable.min(keep.len()));
            (keep, release)
        };
        for id in &release {
            if !self.record.uncordon.contains(id) {
                self.record.uncordon.push(id.clone());
            }
        }
        if !release.is_empty() {
            let why = if self.now >= deadline {
                format!(
                    "the failback step is past its deadline ({})",
                    humantime::format_duration(failback_drain_deadline(self.cfg).to_std().unwrap_or_default())
                )
            } else {
                "fallback no longer holds them (cluster-autoscaler removed on-demand nodes)".to_string()
            };
            self.note(format!("failback victims {} released: {why}", release.join(", ")));
        }
        if keep.is_empty() {
            if self.now >= deadline {
                self.record.retry_after = Some(self.now + self.cfg.fallback.wait_and_retry.as_chrono());
                // The step's spot nodes are Ready by now and may hold pods that left the
                // victims: never terminated undrained, they are left to cluster-autoscaler.
                let why = format!(
                    "failback step past its deadline with {} victim(s) not drained: released, next attempt after {}",
                    release.len(),
                    self.cfg.fallback.wait_and_retry
                );
                let asg_name = step.spot_asg.clone();
                self.leave_surplus(&asg_name, release.len() as u32, &why);
            }
            self.record.failback = None;
            return;
        }
        let reason =
            format!("failback: drain and remove on-demand instance(s) {} (again: not drained yet)", keep.join(", "));
        let kept = self.drain_on_demand(keep.len() as u32, &reason, &keep);
        step.victims = kept;
        self.record.failback = Some(step);
    }

    /// Uncordons the released nodes that are still cordoned; forgets those seen
    /// schedulable or gone, and those a failback step holds again as victims.
    pub(super) fn uncordon_released(&mut self) {
        let victims: Vec<String> = self.record.failback.iter().flat_map(|f| f.victims.clone()).collect();
        let mut still = Vec::new();
        for id in std::mem::take(&mut self.record.uncordon) {
            if victims.contains(&id) {
                continue;
            }
            let Some(node) = self.observed.node_of_instance(&id).filter(|n| n.unschedulable) else { continue };
            let node = node.name.clone();
            self.act(
                ActionKind::UncordonNode { node, instance_id: id.clone() },
                format!("release {id}: cordoned for work Ballast no longer holds it for"),
            );
            still.push(id);
        }
        self.record.uncordon = still;
    }

    /// Cordons, drains and removes (with decrement, never without) up to `count`
    /// on-demand instances: `prefer` first, then others in service.
    fn drain_on_demand(&mut self, count: u32, reason: &str, prefer: &[String]) -> Vec<String> {
        let Some(od) = self.observed.on_demand.clone() else { return Vec::new() };
        let busy: Vec<&str> = self
            .record
            .interruptions
            .iter()
            .map(|i| i.instance_id.as_str())
            .chain(self.record.lifecycle_actions.iter().map(|a| a.instance_id.as_str()))
            .collect();
        let mut candidates: Vec<_> = od
            .instances
            .iter()
            .filter(|i| i.lifecycle_state == LifecycleState::InService && !busy.contains(&i.id.as_str()))
            .collect();
        // Chosen before first; then nodes already cordoned or not Ready; then by id.
        candidates.sort_by_key(|i| {
            let node = self.observed.node_of_instance(&i.id);
            (!prefer.contains(&i.id), node.is_some_and(|n| n.ready && !n.unschedulable), i.id.clone())
        });
        let chosen: Vec<String> = candidates.iter().take(count as usize).map(|i| i.id.clone()).collect();
        let mut victims = Vec::new();
        for id in chosen {
            if !self.take_decrement(&od) {
                break;
            }
            self.cordon_and_drain(&id, None, (self.cfg.interruption.drain_timeout, None), reason);
            self.act(
                ActionKind::TerminateInstance {
                    asg: od.name.clone(),
                    instance_id: id.clone(),
                    decrement: true,
                    only_if_drained: true,
                    withdraws: false,
                },
                reason.to_string(),
            );
            victims.push(id);
        }
        victims
    }

    pub(super) fn fall_back(&mut self) {
        let max_on_demand = self.cfg.fallback.max_on_demand;
        for (index, asg) in self.observed.spot.iter().enumerate() {
            let Some(why) = self.failing.get(&asg.name).cloned() else { continue };
            let shortfall = self.desired_of(&asg.name).saturating_sub(asg.live());
            let movable = shortfall.min(self.room_down(asg));
            if movable == 0 {
                if shortfall > 0 {
                    self.note(format!("{} is failing but already at its minimum {}", asg.name, asg.min));
                }
                continue;
            }
            let mut left = movable;
            let mut receivers: Vec<(String, u32)> = Vec::new();
            // Healthy spot first, in preference order, then on-demand.
            for (other_index, other) in self.observed.spot.iter().enumerate() {
                if left == 0 {
                    break;
                }
                if other_index == index || self.failing.contains_key(&other.name) {
                    continue;
                }
                let n = left.min(self.room_up(other));
                if n > 0 {
                    left -= n;
                    self.adjust(&other.name, i64::from(n), format!("take {n} from failing spot ASG {}", asg.name));
                    receivers.push((other.name.clone(), n));
                }
            }
            let cap_room = max_on_demand.saturating_sub(self.record.fallback_units);
            let od = self.observed.on_demand.as_ref();
            let n = od.map_or(0, |od| left.min(self.room_up(od)).min(cap_room));
            if let Some(od) = od.filter(|_| n > 0) {
                left -= n;
                self.record.fallback_units += n;
                self.units_added += n;
                self.record.fallback_since.get_or_insert(self.now);
                let od_name = od.name.clone();
                self.adjust(&od_name, i64::from(n), format!("fallback: take {n} from failing spot ASG {}", asg.name));
                receivers.push((od_name, n));
            }
            let moved = movable - left;
            if moved > 0 {
                self.moved_this_plan = true;
                for (to, n) in &receivers {
                    self.moves.push(Move { from: asg.name.clone(), to: to.clone(), n: *n });
                }
                self.adjust(
                    &asg.name,
                    -i64::from(moved),
                    format!("spot failing ({why}): move {moved} of {shortfall} missing elsewhere"),
                );
                self.move_surges(&asg.name, &receivers);
            }
            if left > 0 {
                let why = match od {
                    Some(_) => format!("on-demand is at max_on_demand {max_on_demand} or its max size"),
                    None => "the pool has no on-demand ASG to fall back to".to_string(),
                };
                self.note(format!("{left} missing instance(s) of {} stay on spot: {why}", asg.name));
            }
        }
    }

    /// The surges still waiting for their interrupted instance's decrement are among
    /// the failing ASG's missing slots: those moved go with the slots, so withdrawing
    /// one later (its instance left without Ballast's decrement) takes it back from
    /// where it now is, not from an ASG that no longer holds it.
    fn move_surges(&mut self, from: &str, receivers: &[(String, u32)]) {
        let seq = self.seq;
        let mut slots = receivers.iter().flat_map(|(asg, n)| std::iter::repeat_n(asg.clone(), *n as usize));
        let mut moved = Vec::new();
        for interruption in &mut self.record.interruptions {
            let Some(surge) = interruption.surge.as_mut().filter(|s| s.asg == from && !interruption.terminated) else {
                continue;
            };
            let Some(to) = slots.next() else { break };
            surge.moved = Some(SurgeMove { from: from.to_string(), plan: seq, holds_at: surge.holds_at });
            // In `to` from now on: what it holds there starts from `to`'s size before this plan.
            surge.holds_at = self.observed.asg(&to).map(|a| a.desired);
            // Moved out of a spot ASG: a fallback unit if it went to on-demand.
            surge.fallback_unit = self.observed.is_on_demand(&to);
            surge.asg = to.clone();
            moved.push(format!("{} -> {to}", interruption.instance_id));
        }
        if !moved.is_empty() {
            self.note(format!("surges moved with the missing slots of {from}: {}", moved.join(", ")));
        }
    }

    pub(super) fn start_failback(&mut self) {
        if self.record.fallback_units == 0 || self.record.failback.is_some() || self.moved_this_plan {
            return;
        }
        if self.record.retry_after.is_some_and(|t| t > self.now) {
            return;
        }
        self.record.retry_after = None;
        let wait = self.cfg.fallback.failback_after.as_chrono();
        let target = self.observed.spot.iter().find(|a| {
            !self.failing.contains_key(&a.name)
                && self.record.healthy_since.get(&a.name).is_some_and(|t| self.now - *t >= wait)
                && self.room_up(a) > 0
        });
        let Some(asg) = target else { return };
        let count = self.cfg.fallback.failback_step.min(self.record.fallback_units).min(self.room_up(asg));
        let healthy_for = since(self.now, self.record.healthy_since[&asg.name]);
        let ready_before = self.ready_nodes(asg, &[]);
        let instances_before: Vec<String> =
            asg.instances.iter().filter(|i| i.lifecycle_state.is_live()).map(|i| i.id.clone()).collect();
        let unfilled_before = self.unfilled(asg);
        // Its size once this plan's terminations with decrement are made: the floor a
        // withdrawal of this step never goes below.
        let desired_before = self.after(&asg.name);
        let over_before = (instances_before.len() as u32).saturating_sub(desired_before);
        let name = asg.name.clone();
        self.adjust(
            &name,
            i64::from(count),
            format!(
                "failback: spot healthy for {healthy_for} (>= {}); surge {count} of {} fallback unit(s) back to spot first",
                self.cfg.fallback.failback_after, self.record.fallback_units
            ),
        );
        self.record.failback = Some(FailbackStep {
            spot_asg: name,
            count,
            started_at: self.now,
            plan: self.seq,
            desired_before,
            raised_to: desired_before + count,
            ready_before,
            instances_before: Some(instances_before),
            unfilled_before,
            victims: Vec::new(),
            victims_since: None,
            over_before,
            asked: count,
            seen_new: Vec::new(),
            floor_lowered_for: Vec::new(),
        });
    }
}
