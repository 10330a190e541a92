//! The executor: carries a plan's actions out in order, each mutating call checked
//! against the lease and the deadline, capacity calls journaled, drains run together
//! with the lease lent out.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::intent::mark_done;
use super::lease::Lease;
use super::{
    after_drain, AfterDrain, Applied, ApplyError, Reconciler, DEADLINE_MARGIN, HEARTBEAT_EVERY, KEPT_AFTER_DRAINS,
    SETTLE_ATTEMPTS,
};
use crate::config::PoolConfig;
use crate::observe::AsgSize;
use crate::plan::{Action, ActionKind, LifecycleRef, Plan};
use crate::ports::{Autoscaling, Clock, Cluster, DrainReport, ErrorKind, PortError, StateStore};
use crate::record::{CapacityCall, PoolRecord};

/// One plan being applied: the record as journaled so far and its version.
pub(super) struct Run<'a> {
    pub(super) pool: &'a PoolConfig,
    pub(super) key: &'a str,
    pub(super) record: PoolRecord,
    pub(super) version: u64,
    pub(super) deadline: Option<DateTime<Utc>>,
    pub(super) lease: &'a mut Lease,
}

impl<A: Autoscaling, C: Cluster, S: StateStore, K: Clock> Reconciler<A, C, S, K> {
    /// Carries out the plan's effects in order; stops at the first failure, since
    /// later actions rely on earlier ones (a terminate-with-decrement on its surge).
    /// Consecutive drains run together, each cut short to end before the deadline.
    pub(super) async fn apply(&self, plan: &Plan, run: &mut Run<'_>) -> Result<Vec<Applied>, ApplyError> {
        let mut applied = Vec::new();
        let mut drained: BTreeMap<String, bool> = BTreeMap::new();
        // By lifecycle action token: whether its drain lets it be completed.
        let mut hooks: BTreeMap<String, AfterDrain> = BTreeMap::new();
        let mut index = 0;
        while index < plan.actions.len() {
            let action = &plan.actions[index];
            if !matches!(action.kind, ActionKind::RecordState) {
                self.may_act(run).await.map_err(ApplyError::at(index))?;
            }
            if is_capacity_call(&action.kind) {
                self.reach(plan, index, run).await.map_err(ApplyError::at(index))?;
            }
            if let ActionKind::DrainNode { .. } = action.kind {
                let drains: Vec<&Action> = plan.actions[index..]
                    .iter()
                    .take_while(|a| matches!(a.kind, ActionKind::DrainNode { .. }))
                    .collect();
                let left = run
                    .deadline
                    .map(|d| (d - DEADLINE_MARGIN - KEPT_AFTER_DRAINS - self.clock.now()).to_std().unwrap_or_default());
                let timeout_of = |a: &Action| match &a.kind {
                    ActionKind::DrainNode { timeout, .. } => left.map_or(timeout.0, |l| timeout.0.min(l)),
                    _ => Duration::ZERO,
                };
                let longest = drains.iter().map(|a| timeout_of(a)).max().unwrap_or_default();
                self.lend_lease(run, longest).await.map_err(ApplyError::at(index))?;
                let results = futures_util::future::join_all(drains.iter().map(|a| {
                    let ActionKind::DrainNode { node, lifecycle, .. } = &a.kind else { unreachable!() };
                    self.drain(node, timeout_of(a), lifecycle.as_ref())
                }))
                .await;
                for (offset, (action, result)) in drains.iter().zip(results).enumerate() {
                    let ActionKind::DrainNode { instance_id, lifecycle, timeout, .. } = &action.kind else {
                        unreachable!()
                    };
                    let report = result.map_err(ApplyError::at(index + offset))?;
                    if let Some(l) = lifecycle {
                        hooks.insert(l.token.clone(), after_drain(report.complete(), timeout_of(action), timeout.0));
                    }
                    drained.insert(instance_id.clone(), report.complete());
                    applied.push(Applied::Drained(report));
                }
                index += drains.len();
                if !self.take_back_lease(run).await.map_err(ApplyError::at(index))? {
                    // Another run planned the pool meanwhile: it judged this plan's journal
                    // as a run's that died here, and re-planned what is left of it, but for
                    // the lifecycle actions this plan holds (planned, for that run): this
                    // run completes them, drained here or with nothing to drain.
                    for (at, action) in plan.actions.iter().enumerate().skip(index) {
                        if let ActionKind::CompleteLifecycleAction(l) = &action.kind {
                            // A failure here leaves only this one and those after it to redo.
                            let done = match hooks.get(&l.token) {
                                Some(AfterDrain::HandOn) => self.hand_on_taken_over(run.key, l).await,
                                _ => lifecycle_call(self.autoscaling.complete_lifecycle_action(l).await),
                            };
                            applied.push(done.map_err(ApplyError::at(at))?);
                        }
                    }
                    applied.push(Applied::Skipped {
                        why: "another run planned the pool while this one drained (its events could not wait): \
                              the rest of this plan is re-planned by it"
                            .into(),
                    });
                    return Ok(applied);
                }
                continue;
            }
            let result = match &action.kind {
                ActionKind::RecordState | ActionKind::DrainNode { .. } => Ok(Applied::Done),
                ActionKind::SetDesiredCapacity { asg, from, .. } => self.set_desired(run, asg, *from).await,
                ActionKind::CordonNode { node, .. } => self.cluster.cordon(node).await.map(|_| Applied::Done),
                ActionKind::UncordonNode { node, .. } => self.cluster.uncordon(node).await.map(|_| Applied::Done),
                ActionKind::TerminateInstance { asg, instance_id, decrement, only_if_drained, .. } => {
                    if *only_if_drained && drained.get(instance_id) == Some(&false) {
                        let is_call = |c: &CapacityCall| matches!(c, CapacityCall::Terminate { instance_id: i, .. } if i == instance_id);
                        self.journal(run, is_call, mark_done).await.map(|_| Applied::Skipped {
                            why: "drain incomplete: a PodDisruptionBudget still protects pods".into(),
                        })
                    } else {
                        self.terminate(run, asg, instance_id, *decrement, *only_if_drained).await
                    }
                }
                ActionKind::RecordLifecycleHeartbeat(action) => {
                    lifecycle_call(self.autoscaling.record_lifecycle_heartbeat(action).await)
                }
                ActionKind::CompleteLifecycleAction(action) => match hooks.get(&action.token) {
                    Some(AfterDrain::HandOn) => self.hand_on(run, action).await,
                    _ => lifecycle_call(self.autoscaling.complete_lifecycle_action(action).await),
                },
                ActionKind::SetHeadroomReplicas { slot, shape, to, .. } => {
                    self.cluster.set_headroom(run.pool, *slot, shape, *to).await.map(|_| Applied::Done)
                }
            };
            match result {
                Ok(a) => applied.push(a),
                Err(source) => return Err(ApplyError { failed_at: index, source }),
            }
            index += 1;
        }
        Ok(applied)
    }

    pub(super) async fn set_desired(
        &self,
        run: &mut Run<'_>,
        asg: &str,
        planned_from: u32,
    ) -> Result<Applied, PortError> {
        self.set_desired_on(run, asg, planned_from, None).await
    }

    /// As [`Self::set_desired`], rebased first on `read` when the ASG's size was read
    /// since the journal was saved (beside the save).
    pub(super) async fn set_desired_on(
        &self,
        run: &mut Run<'_>,
        asg: &str,
        planned_from: u32,
        read: Option<AsgSize>,
    ) -> Result<Applied, PortError> {
        let is_call = |c: &CapacityCall| matches!(c, CapacityCall::SetDesired { asg: a, done: false, .. } if a == asg);
        let Some((from, to)) = run.record.journal.as_ref().and_then(|j| {
            j.calls.iter().find(|c| is_call(c)).and_then(|c| match c {
                CapacityCall::SetDesired { from, to, .. } => Some((*from, *to)),
                CapacityCall::Terminate { .. } => None,
            })
        }) else {
            return Ok(Applied::Skipped { why: format!("{asg}: no open call in the journal") });
        };
        let (from, to) = self.settle_size(run, asg, from, to, is_call, read).await?;
        if to == from {
            self.journal(run, is_call, mark_done).await?;
            return Ok(Applied::Skipped { why: format!("{asg} is already at {to}") });
        }
        self.autoscaling.set_desired_capacity(asg, to).await?;
        self.journal(run, is_call, mark_done).await?;
        Ok(if from != planned_from {
            Applied::Skipped { why: format!("{asg} was {from} when applied, not {planned_from}: set to {to}") }
        } else {
            Applied::Done
        })
    }

    /// The write is absolute and the journal write before it takes time: another writer
    /// (cluster-autoscaler) may change the ASG in between, and writing the older target
    /// would undo its change. So the size is read again after the journal is on record;
    /// while it moved, the call is rebased on it and journaled again. Returns the
    /// `(from, to)` on record when the size held still across the last journal write.
    async fn settle_size(
        &self,
        run: &mut Run<'_>,
        asg: &str,
        mut from: u32,
        mut to: u32,
        is_call: impl Fn(&CapacityCall) -> bool + Copy,
        mut read: Option<AsgSize>,
    ) -> Result<(u32, u32), PortError> {
        for _ in 0..SETTLE_ATTEMPTS {
            // A size read without the instances only serves a raise (a lower is floored
            // at them).
            let size = match read.take().filter(|r| to >= from || r.live.is_some()) {
                Some(size) => size,
                None => self.size_for(asg, from, to).await?,
            };
            if size.desired == from {
                return Ok((from, to));
            }
            let target = rebase(asg, from, to, &size)?;
            tracing::info!(
                asg,
                was = from,
                now = size.desired,
                to = target,
                "the ASG changed since it was read: rebased"
            );
            (from, to) = (size.desired, target);
            self.journal(run, is_call, |c| {
                if let CapacityCall::SetDesired { from: f, to: t, .. } = c {
                    (*f, *t) = (from, to);
                }
            })
            .await?;
        }
        Err(PortError::new(
            ErrorKind::Retryable,
            "SetDesiredCapacity",
            format!("{asg} kept changing under {SETTLE_ATTEMPTS} reads; not written, the next run plans afresh"),
        ))
    }

    /// The size a write from `from` to `to` is rebased on: a raise needs the bounds
    /// alone; a lower also the live instances, never to lower below them.
    pub(super) async fn size_for(&self, asg: &str, from: u32, to: u32) -> Result<AsgSize, PortError> {
        if to >= from {
            self.autoscaling.asg_bounds(asg).await
        } else {
            self.autoscaling.asg_size(asg).await
        }
    }

    async fn terminate(
        &self,
        run: &mut Run<'_>,
        asg: &str,
        instance_id: &str,
        mut decrement: bool,
        only_if_drained: bool,
    ) -> Result<Applied, PortError> {
        let is_call =
            |c: &CapacityCall| matches!(c, CapacityCall::Terminate { instance_id: i, .. } if i == instance_id);
        if decrement {
            // Never below the minimum: cluster-autoscaler may have lowered the ASG since.
            let size = self.autoscaling.asg_bounds(asg).await?;
            let at_minimum = (size.desired <= size.min).then(|| format!("{asg} is at its minimum {}", size.min));
            let why = match at_minimum {
                Some(why) => Some(why),
                None => self.raise_undone(run, instance_id).await?,
            };
            if let Some(why) = why {
                if only_if_drained {
                    self.journal(run, is_call, mark_done).await?;
                    return Ok(Applied::Skipped { why: format!("{why}: not removed") });
                }
                tracing::warn!(instance_id, why = %why, "terminated without decrement: the ASG replaces it");
                decrement = false;
                self.journal(run, is_call, |c| {
                    if let CapacityCall::Terminate { decrement, .. } = c {
                        *decrement = false;
                    }
                })
                .await?;
            }
        }
        if let Err(e) = self.autoscaling.terminate_instance(instance_id, decrement).await {
            // Refused because the instance already left the ASG (AWS reclaimed it during
            // the drain): a race, not a fault. Known not made with decrement, it is
            // journaled as gone without one, so the next run withdraws the surge the
            // ASG's own replacement makes surplus; the plan goes on.
            if matches!(e.kind, ErrorKind::Permanent | ErrorKind::Gone)
                && !self.still_in(run.pool, asg, instance_id).await?
            {
                self.journal(run, is_call, |c| {
                    if let CapacityCall::Terminate { decrement, done, .. } = c {
                        (*decrement, *done) = (false, true);
                    }
                })
                .await?;
                return Ok(Applied::Skipped {
                    why: format!("{instance_id} left {asg} before Ballast removed it ({e})"),
                });
            }
            return Err(e);
        }
        self.journal(run, is_call, mark_done).await?;
        Ok(Applied::Done)
    }

    /// Whether the instance is still a live member of the ASG.
    async fn still_in(&self, pool: &PoolConfig, asg: &str, instance_id: &str) -> Result<bool, PortError> {
        let (spot, on_demand) = self.autoscaling.describe_pool(pool).await?;
        Ok(spot
            .iter()
            .chain(on_demand.iter())
            .filter(|a| a.name == asg)
            .flat_map(|a| a.instances.iter())
            .any(|i| i.id == instance_id && i.lifecycle_state.is_live()))
    }

    /// Whether the slot a terminate-with-decrement relies on may be gone: the surge's ASG
    /// is below the size Ballast's own calls left it at (`Surge::holds_at`, moved on by this
    /// plan's landed calls there; what they left, for a surge this plan made). Records
    /// written before surges kept that: any ASG this plan raised below what it left it at.
    /// Cluster-autoscaler does exactly that to a raise spot cannot fill: it deletes the
    /// unfulfillable placeholders by setting the ASG to the instances it has, taking the
    /// surge's slot; decrementing as well would take the interrupted instance's own slot.
    /// Erring toward surplus: another writer's scale-in looks the same.
    async fn raise_undone(&self, run: &Run<'_>, instance_id: &str) -> Result<Option<String>, PortError> {
        let Some(journal) = run.record.journal.as_ref() else { return Ok(None) };
        // A withdrawal takes back a raise no longer needed: nothing relies on it.
        let withdraws = journal
            .calls
            .iter()
            .any(|c| matches!(c, CapacityCall::Terminate { instance_id: i, withdraws: true, .. } if i == instance_id));
        if withdraws {
            return Ok(None);
        }
        let surge =
            run.record.interruptions.iter().find(|i| i.instance_id == instance_id).and_then(|i| i.surge.as_ref());
        let wanted: Vec<(&str, i64)> = match surge.and_then(|s| Some((s, s.holds_at?))) {
            Some((surge, holds_at)) => {
                let by_this_plan = surge.moved.as_ref().map_or(surge.plan == journal.seq, |m| m.plan == journal.seq);
                let want = match (by_this_plan, journal.landed_on(&surge.asg)) {
                    (true, Some((Some(left_at), _))) => i64::from(left_at),
                    (_, landed) => i64::from(holds_at) + landed.map_or(0, |(_, change)| change),
                };
                vec![(surge.asg.as_str(), want)]
            }
            None => journal
                .calls
                .iter()
                .filter_map(|c| match c {
                    CapacityCall::SetDesired { asg, from, to, done: true, .. } if to > from => Some(asg.as_str()),
                    _ => None,
                })
                .filter_map(|asg| Some((asg, i64::from(journal.landed_on(asg)?.0?))))
                .collect(),
        };
        for (asg, want) in wanted {
            let size = self.autoscaling.asg_bounds(asg).await?;
            if i64::from(size.desired) < want {
                return Ok(Some(format!(
                    "{asg}, where Ballast surged for {instance_id}, is at {} below the {want} its calls left it at \
                     (its unfilled slots deleted by another writer, cluster-autoscaler's failed scale-up say)",
                    size.desired
                )));
            }
        }
        Ok(None)
    }

    /// Drains within `timeout`; for a lifecycle action, in slices with a heartbeat
    /// between them.
    async fn drain(
        &self,
        node: &str,
        timeout: Duration,
        lifecycle: Option<&LifecycleRef>,
    ) -> Result<DrainReport, PortError> {
        let mut remaining = timeout;
        let mut evicted = 0;
        loop {
            let slice = if lifecycle.is_some() { remaining.min(HEARTBEAT_EVERY) } else { remaining };
            let report = self.cluster.drain(node, slice).await?;
            evicted += report.evicted;
            remaining = remaining.saturating_sub(slice);
            if report.complete() || remaining.is_zero() {
                return Ok(DrainReport { evicted, blocked: report.blocked });
            }
            if let Some(action) = lifecycle {
                // The action is over (timed out, or completed): the instance is going, and
                // draining on would only hold the lease.
                let heartbeat = lifecycle_call(self.autoscaling.record_lifecycle_heartbeat(action).await)?;
                if let Applied::Skipped { why } = heartbeat {
                    tracing::warn!(node, why = %why, "drain stopped: the lifecycle action is over");
                    return Ok(DrainReport { evicted, blocked: report.blocked });
                }
            }
        }
    }
}

pub(super) fn is_capacity_call(kind: &ActionKind) -> bool {
    matches!(kind, ActionKind::SetDesiredCapacity { .. } | ActionKind::TerminateInstance { .. })
}

/// A lifecycle hook call answered that the action is [`ErrorKind::Gone`]: it is over (completed by an earlier run whose answer was lost, or timed out
/// and the hook's default result taken). Nothing is left to do: not a failure to
/// dead-letter.
pub(super) fn lifecycle_call(result: Result<(), PortError>) -> Result<Applied, PortError> {
    match result {
        Ok(()) => Ok(Applied::Done),
        Err(e) if e.kind == ErrorKind::Gone => {
            Ok(Applied::Skipped { why: format!("the lifecycle action is over: {}", e.message) })
        }
        Err(e) => Err(e),
    }
}

/// A planned `from -> to` moved onto the ASG's size now. A raise that no longer fits
/// whole under the ASG's max (another writer raised it meanwhile) is not made: the
/// lowers and terminations it pays for would take more than it adds, so the run stops
/// and the next one plans afresh from what is there.
pub(super) fn rebase(asg: &str, from: u32, to: u32, size: &AsgSize) -> Result<u32, PortError> {
    let delta = i64::from(to) - i64::from(from);
    let target = size.shifted(delta);
    let fits = i64::from(target) - i64::from(size.desired);
    if delta > 0 && fits < delta {
        return Err(PortError::new(
            ErrorKind::Retryable,
            "SetDesiredCapacity",
            format!(
                "{asg} is at {} now, not {from} as planned: only {fits} of the raise of {delta} fits under its max {}; \
                 not made, the next run plans afresh",
                size.desired, size.max
            ),
        ));
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::rebase;
    use crate::observe::AsgSize;

    #[test]
    fn a_raise_that_no_longer_fits_under_max_is_not_made() {
        let size = |desired| AsgSize { desired, min: 0, max: 10, live: Some(desired) };
        // Where it was planned from: made as planned.
        assert_eq!(rebase("fallback", 0, 9, &size(0)).unwrap(), 9);
        // Another writer added 1 meanwhile: the raise still fits whole, on top.
        assert_eq!(rebase("fallback", 0, 9, &size(1)).unwrap(), 10);
        // Added 2: only 8 of 9 fit; the move's lower would take 9.
        let err = rebase("fallback", 0, 9, &size(2)).unwrap_err();
        assert!(err.is_retryable());
        assert!(err.to_string().contains("only 8 of the raise of 9 fits under its max 10"), "{err}");
        // A lower is rebased and floored (here at its live instances), never refused: it
        // can only leave more.
        assert_eq!(rebase("spot", 10, 1, &size(3)).unwrap(), 3);
        // Read without its instances, a lower lowers nothing: which slots are unfilled
        // is unknown. A raise needs no instances.
        let bounds = |desired| AsgSize { desired, min: 0, max: 10, live: None };
        assert_eq!(rebase("spot", 10, 1, &bounds(3)).unwrap(), 3);
        assert_eq!(rebase("spot", 5, 3, &bounds(6)).unwrap(), 6);
        assert_eq!(rebase("fallback", 0, 4, &bounds(1)).unwrap(), 5);
    }
}
