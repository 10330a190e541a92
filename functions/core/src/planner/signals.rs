//! Taking signals into the record. Every change is keyed (instance, activity,
//! lifecycle token, event time), so a duplicate or late signal changes nothing.

use chrono::Duration;

use super::Work;
use crate::config::RebalancePolicy;
use crate::event::{Event, InstanceState, LaunchError, NodeCondition, Signal};
use crate::learn::WaitsSeen;
use crate::observe::{ActivityStatus, Demand, LifecycleState, Market};
use crate::record::{
    Disruption, DisruptionKind, HeadroomOverride, Interruption, InterruptionCause, KeptOffBy, PendingLifecycleAction,
    ReportedLaunchError, Unavailable, UnschedulableSeen,
};

/// How long reported launch errors are remembered, to report each once.
const REPORT_MEMORY_HOURS: i64 = 24;
/// A Pods Unschedulable this soon after its oldest pod became unschedulable is the
/// forwarder's first report of them (sent at once; SDK retries take seconds).
const FRESH_REPORT: Duration = Duration::seconds(15);
/// How far the forwarder's clock may run ahead of EventBridge's for its time to be used.
const CLOCKS_APART: Duration = Duration::seconds(5);

impl Work<'_> {
    /// Older disruptions no longer count for the rate or the boost: a late
    /// delivery must not bring them back.
    fn disruption_is_recent(&self, at: chrono::DateTime<chrono::Utc>) -> bool {
        let keep = self.cfg.fallback.interruption_rate.window.as_chrono().max(self.cfg.headroom.boost_for.as_chrono());
        at > self.now - keep
    }

    pub(super) fn forget_expired(&mut self) {
        let now = self.now;
        let record = &mut self.record;
        // Written by an older version from a clock ahead of ours: never trusted past now.
        if let Some(d) = record.demand.as_mut().filter(|d| d.observed_at > now + super::CLOCK_SKEW) {
            d.observed_at = now;
        }
        if record.shapes.reported_at.is_some_and(|at| at > now + super::CLOCK_SKEW) {
            record.shapes.reported_at = Some(now);
        }
        record.unavailable.retain(|_, u| u.until > now);
        if record.headroom_override.as_ref().is_some_and(|o| o.until <= now) {
            record.headroom_override = None;
        }
        let keep = self.cfg.fallback.interruption_rate.window.as_chrono().max(self.cfg.headroom.boost_for.as_chrono());
        record.disruptions.retain(|d| d.at > now - keep);
        let observed = self.observed;
        // An interrupted instance that left the pool's ASGs has been replaced.
        record.interruptions.retain(|i| observed.asg_of_instance(&i.instance_id).is_some());
        record.lifecycle_actions.retain(|a| observed.asg_of_instance(&a.instance_id).is_some());
        record.reported_launch_errors.retain(|r| r.at > now - Duration::hours(REPORT_MEMORY_HOURS));
        let spot_names: Vec<&str> = observed.spot.iter().map(|a| a.name.as_str()).collect();
        record.short_since.retain(|k, _| spot_names.contains(&k.as_str()));
        record.healthy_since.retain(|k, _| spot_names.contains(&k.as_str()));
        record.unavailable.retain(|k, _| spot_names.contains(&k.as_str()));
    }

    /// A loss told after the instance left its ASG (the event redelivered): a spot ASG of
    /// the pool launched it and EC2 says the spot market took it (not a scale-in), so its
    /// going lowered no ASG.
    fn ingest_loss_after_leaving(&mut self, event: &Event, instance_id: &str, state: InstanceState) {
        let Some(left) = self.observed.left.get(instance_id) else { return };
        let Some(asg) = left.asg.as_deref().filter(|asg| self.observed.spot.iter().any(|a| &a.name == asg)) else {
            return;
        };
        let ours = self.record.interruptions.iter().any(|i| i.instance_id == instance_id)
            || self.record.failback.as_ref().is_some_and(|f| f.victims.iter().any(|v| v == instance_id));
        let known = self.record.disruptions.iter().any(|d| d.instance_id == instance_id);
        if !left.spot_reclaimed || ours || known || !self.disruption_is_recent(event.time) {
            return;
        }
        self.record.disruptions.push(Disruption {
            instance_id: instance_id.to_string(),
            asg: asg.to_string(),
            at: event.time,
            kind: DisruptionKind::UnplannedLoss,
        });
        self.note(format!("spot instance {instance_id} of {asg} lost without warning ({state:?}), gone from it since"));
    }

    pub(super) fn ingest(&mut self, event: &Event) {
        match &event.signal {
            Signal::SpotInterruption { instance_id, action } => {
                self.note_replacement(instance_id, InterruptionCause::SpotWarning { action: *action }, event, true);
            }
            Signal::RebalanceRecommendation { instance_id } => match self.cfg.interruption.rebalance {
                RebalancePolicy::Surge => {
                    self.note_replacement(instance_id, InterruptionCause::Rebalance, event, false)
                }
                RebalancePolicy::Ignore => self.note(format!(
                    "rebalance recommendation for {instance_id} ignored (interruption.rebalance: ignore)"
                )),
            },
            Signal::InstanceStateChange { instance_id, state } if state.is_loss() => {
                // Only a reclaimed spot instance is an interruption: a spot-market
                // instance the ASG still counted in service. One the ASG is already
                // terminating (a scale-in, cluster-autoscaler's or Ballast's terminate)
                // or an on-demand instance of a mixed-instances ASG is not.
                let Some(asg) = self.observed.spot.iter().find(|a| a.instance(instance_id).is_some()) else {
                    self.ingest_loss_after_leaving(event, instance_id, *state);
                    return;
                };
                let Some(instance) = asg.instance(instance_id) else { return };
                let ours = self.record.interruptions.iter().any(|i| &i.instance_id == instance_id)
                    || self.record.failback.as_ref().is_some_and(|f| f.victims.contains(instance_id));
                if instance.market != Market::Spot || instance.lifecycle_state != LifecycleState::InService || ours {
                    return;
                }
                let known = self.record.disruptions.iter().any(|d| &d.instance_id == instance_id);
                if !known && self.disruption_is_recent(event.time) {
                    self.record.disruptions.push(Disruption {
                        instance_id: instance_id.clone(),
                        asg: asg.name.clone(),
                        at: event.time,
                        kind: DisruptionKind::UnplannedLoss,
                    });
                    self.note(format!("spot instance {instance_id} of {} lost without warning ({state:?})", asg.name));
                }
            }
            // Both ends of a launch, dated by the events themselves (the reconcile's looks
            // date them only to within a look): the lead time a wait target learns.
            Signal::LaunchSuccessful { instance_id, started, .. } => {
                // A node already Ready makes the event a late one: nothing to time. One that
                // registered but is not Ready yet is still launching (kubelet registers
                // before the CNI makes it Ready).
                let ready = self.observed.nodes.iter().any(|n| &n.instance_id == instance_id && n.ready);
                if self.cfg.headroom.target.is_some() && self.observed.asg_of_instance(instance_id).is_some() && !ready
                {
                    self.record.learned.get_or_insert_with(Default::default).launch_started(instance_id, *started);
                }
            }
            Signal::NodeLifecycle(n) if n.condition == NodeCondition::Ready => {
                if let Some(history) = self.record.learned.as_mut().filter(|_| self.cfg.headroom.target.is_some()) {
                    // When the forwarder saw it, not when it was sent; never ahead of now.
                    history.node_ready(&n.instance_id, n.observed_at.unwrap_or(event.time).min(self.now));
                }
            }
            Signal::InstanceStateChange { .. }
            | Signal::Reconcile
            | Signal::NodeLifecycle(_)
            | Signal::ConfigChanged { .. } => {}
            Signal::Ignored { why, .. } => self.note(why.clone()),
            Signal::LaunchUnsuccessful(failure) => {
                let at = failure.at.unwrap_or(event.time);
                let is_spot = self.observed.spot.iter().any(|a| a.name == failure.asg);
                match &failure.error {
                    LaunchError::Capacity(kind) if is_spot => {
                        self.mark_unavailable(
                            &failure.asg,
                            at,
                            format!(
                                "capacity error {kind:?} in {}",
                                failure.availability_zone.as_deref().unwrap_or("an AZ")
                            ),
                            KeptOffBy::Capacity,
                        );
                    }
                    error => {
                        self.report_launch_error(&failure.asg, &failure.activity_id, at, error, &failure.status_message)
                    }
                }
            }
            Signal::TerminateLifecycleAction(action) => {
                // Replayed after the instance left: it was handled (or is moot).
                let present = self.observed.asg_of_instance(&action.instance_id).is_some();
                if present && !self.record.lifecycle_actions.iter().any(|a| a.token == action.token) {
                    self.record.lifecycle_actions.push(PendingLifecycleAction {
                        asg: action.asg.clone(),
                        hook: action.hook.clone(),
                        token: action.token.clone(),
                        instance_id: action.instance_id.clone(),
                        received_at: event.time,
                        planned: false,
                        planned_by: None,
                        planned_until: None,
                        drain_until: None,
                    });
                }
            }
            Signal::ScheduledChange { instance_ids, event_type_code, start_time, .. } => {
                for id in instance_ids {
                    if self.observed.asg_of_instance(id).is_some() {
                        let cause = InterruptionCause::ScheduledChange {
                            event_type_code: event_type_code.clone(),
                            start_time: *start_time,
                        };
                        self.note_replacement(id, cause, event, false);
                    }
                }
            }
            Signal::HeadroomOverride { percent, duration, .. } => {
                let newer = self.record.headroom_override.as_ref().is_none_or(|o| o.set_at < event.time);
                let until = event.time + duration.as_chrono();
                if newer && until > self.now {
                    self.record.headroom_override =
                        Some(HeadroomOverride { percent: *percent, until, set_at: event.time });
                }
            }
            Signal::PoolDemand(d) => {
                // A clock ahead of ours would hold every later report off.
                let tz = self.cfg.headroom.target.map_or(chrono_tz::Tz::UTC, |t| t.time_zone);
                self.record.shapes.observe(&d.shapes, d.observed_at.min(self.now + super::CLOCK_SKEW), tz);
                if self.record.demand.is_none_or(|old| old.observed_at < d.observed_at) {
                    self.record.demand = Some(Demand {
                        cpu_millis: d.cpu_millis,
                        memory_bytes: d.memory_bytes,
                        pods: d.pods,
                        observed_at: d.observed_at,
                    });
                }
            }
            Signal::PoolWaits(w) => {
                let Some(target) = self.cfg.headroom.target else {
                    return;
                };
                let target_ms = target.wait_p95.0.as_millis() as u64;
                let seen = WaitsSeen {
                    window_start: w.window_start,
                    window_end: w.window_end,
                    pods: w.pods,
                    p95_ms: (w.p95_seconds * 1000.0).round() as u64,
                    max_ms: (w.max_seconds * 1000.0).round() as u64,
                    over: w.pods_over(target_ms as f64 / 1000.0),
                    over_with_room: w.over_with_room,
                };
                self.record.learned.get_or_insert_with(Default::default).measured(seen, target_ms);
            }
            Signal::PodsUnschedulable(u) => {
                // The forwarder reports the first unschedulable pods of a pool at once: a
                // report whose oldest pod is that new is of pods arriving where none waited.
                // Any other report times nothing: one with a pod that has waited longer (on
                // what no launch answers: while it waits, nothing in the pool is timed), one
                // that reached EventBridge late (a slow or retried send), or one dated ahead
                // of it (a clock apart).
                let age = event.time - u.oldest_pending_since;
                if self.cfg.headroom.target.is_some() && age <= FRESH_REPORT && age >= -CLOCKS_APART {
                    let since = u.oldest_pending_since.min(self.now);
                    self.record.learned.get_or_insert_with(Default::default).pods_unschedulable(since);
                }
                if self.record.unschedulable.as_ref().is_none_or(|old| old.observed_at < event.time) {
                    self.record.unschedulable = Some(UnschedulableSeen {
                        count: u.count,
                        cpu_millis: u.cpu_millis,
                        memory_bytes: u.memory_bytes,
                        oldest_pending_since: u.oldest_pending_since,
                        observed_at: event.time,
                    });
                }
            }
        }
    }

    /// Scaling activities tell the same story as launch events: a lost event does not
    /// hide a capacity error.
    pub(super) fn ingest_activities(&mut self) {
        let ttl = self.cfg.fallback.unavailable_ttl.as_chrono();
        for asg in &self.observed.spot {
            for activity in &asg.activities {
                if activity.status != ActivityStatus::Failed {
                    continue;
                }
                let at = activity.end.unwrap_or(activity.start);
                if at + ttl <= self.now {
                    continue;
                }
                match LaunchError::classify(&activity.status_message, &activity.cause) {
                    LaunchError::Capacity(kind) => self.mark_unavailable(
                        &asg.name,
                        at,
                        format!("capacity error {kind:?} in scaling activity {}", activity.id),
                        KeptOffBy::Capacity,
                    ),
                    error => self.report_launch_error(&asg.name, &activity.id, at, &error, &activity.status_message),
                }
            }
        }
    }

    pub(super) fn mark_unavailable(
        &mut self,
        asg: &str,
        at: chrono::DateTime<chrono::Utc>,
        reason: String,
        by: KeptOffBy,
    ) {
        let until = at + self.cfg.fallback.unavailable_ttl.as_chrono();
        if until <= self.now {
            return;
        }
        // A capacity error in force is not hidden by a later mark for the rate.
        let in_force = self.record.unavailable.get(asg).filter(|u| u.until > self.now).map(|u| u.by);
        let by = if in_force == Some(KeptOffBy::Capacity) { KeptOffBy::Capacity } else { by };
        match self.record.unavailable.get_mut(asg) {
            Some(kept) if kept.until >= until => kept.by = if by == KeptOffBy::Capacity { by } else { kept.by },
            _ => {
                self.record.unavailable.insert(asg.to_string(), Unavailable { until, reason, by });
            }
        }
    }

    fn report_launch_error(
        &mut self,
        asg: &str,
        activity_id: &str,
        at: chrono::DateTime<chrono::Utc>,
        error: &LaunchError,
        message: &str,
    ) {
        if self.record.reported_launch_errors.iter().any(|r| r.activity_id == activity_id) {
            return;
        }
        self.record.reported_launch_errors.push(ReportedLaunchError {
            activity_id: activity_id.to_string(),
            asg: asg.to_string(),
            at,
        });
        let code = match error {
            LaunchError::Capacity(kind) => format!("{kind:?} on an on-demand ASG"),
            LaunchError::Other(Some(code)) => code.clone(),
            LaunchError::Other(None) => "an unrecognised error".into(),
        };
        self.note(format!(
            "launch failure in {asg} ({code}) is not a spot capacity error: not falling back; fix the cause: {message}"
        ));
    }

    fn note_replacement(&mut self, instance_id: &str, cause: InterruptionCause, event: &Event, disruption: bool) {
        let Some(asg) = self.observed.asg_of_instance(instance_id) else {
            self.note(format!("{instance_id} is not (or no longer) in pool {}; nothing to replace", self.cfg.name));
            return;
        };
        let asg_name = asg.name.clone();
        // The instance's own market, not its ASG's: a mixed-instances spot ASG holds
        // on-demand instances too.
        let is_spot = asg.instance(instance_id).is_some_and(|i| i.market == Market::Spot)
            && self.observed.spot.iter().any(|a| a.name == asg_name);
        let recent = self.disruption_is_recent(event.time);
        if disruption && is_spot && recent && !self.record.disruptions.iter().any(|d| d.instance_id == instance_id) {
            self.record.disruptions.push(Disruption {
                instance_id: instance_id.to_string(),
                asg: asg_name.clone(),
                at: event.time,
                kind: DisruptionKind::InterruptionWarning,
            });
        }
        if let Some(known) = self.record.interruptions.iter_mut().find(|i| i.instance_id == instance_id) {
            // A spot warning after a rebalance recommendation or a Health change for the
            // same instance: now its reclaim is set, and its drain ends by it.
            if matches!(cause, InterruptionCause::SpotWarning { .. })
                && !matches!(known.cause, InterruptionCause::SpotWarning { .. })
            {
                known.cause = cause;
                known.noticed_at = event.time;
            }
            return;
        }
        self.record.interruptions.push(Interruption {
            instance_id: instance_id.to_string(),
            asg: asg_name,
            cause,
            noticed_at: event.time,
            planned_at: None,
            surge: None,
            terminated: false,
        });
    }
}
