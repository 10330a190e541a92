//! The journal around a plan's capacity calls, and taking back intent after a failed
//! apply. The journal is what a later run reads to tell which calls were made: a call is
//! marked done after it lands, and a run of calls is marked reached before the first.

use super::apply::{is_capacity_call, rebase, Run};
use super::{Reconciler, MAX_ATTEMPTS};
use crate::plan::{ActionKind, Plan};
use crate::ports::{Autoscaling, Clock, Cluster, ErrorKind, PortError, StateStore};
use crate::record::{CapacityCall, PoolRecord};

impl<A: Autoscaling, C: Cluster, S: StateStore, K: Clock> Reconciler<A, C, S, K> {
    /// Marks the journal's next open call for this effect done (or rewrites it first,
    /// with `rewrite`, when what will be sent differs from the plan) and saves.
    pub(super) async fn journal(
        &self,
        run: &mut Run<'_>,
        matches: impl Fn(&CapacityCall) -> bool,
        update: impl FnOnce(&mut CapacityCall),
    ) -> Result<(), PortError> {
        let Some(journal) = run.record.journal.as_mut() else { return Ok(()) };
        let Some(call) = journal.calls.iter_mut().find(|c| !c.done() && matches(c)) else { return Ok(()) };
        update(call);
        run.version = self.store.save(run.key, &run.record, run.version).await?;
        Ok(())
    }

    /// Before the first of a run of consecutive capacity calls, one journal write: apply
    /// got this far (so a call never reached, the run having died in a drain, is not
    /// taken for one whose answer was lost), and each desired-size change of the run
    /// rebased on the size read now. The write is absolute: the planned change applied
    /// to what the ASG holds now keeps another writer's change since the observation,
    /// and the size the call starts from is on record before the call, for judging it.
    pub(super) async fn reach(&self, plan: &Plan, index: usize, run: &mut Run<'_>) -> Result<(), PortError> {
        let position = plan.actions[..index].iter().filter(|a| is_capacity_call(&a.kind)).count();
        let Some(journal) = run.record.journal.as_ref() else { return Ok(()) };
        if position < journal.attempted {
            return Ok(());
        }
        let run_len = plan.actions[index..].iter().take_while(|a| is_capacity_call(&a.kind)).count();
        let mut rebased = Vec::new();
        for call in journal.calls.iter().skip(position).take(run_len) {
            if let CapacityCall::SetDesired { asg, from, to, .. } = call {
                let size = self.size_for(asg, *from, *to).await?;
                rebased.push((size.desired, rebase(asg, *from, *to, &size)?));
            }
        }
        let Some(journal) = run.record.journal.as_mut() else { return Ok(()) };
        let calls = journal.calls.iter_mut().skip(position).take(run_len);
        for (call, (now, target)) in calls.filter(|c| matches!(c, CapacityCall::SetDesired { .. })).zip(rebased) {
            if let CapacityCall::SetDesired { from, to, .. } = call {
                (*from, *to) = (now, target);
            }
        }
        journal.attempted = position + run_len;
        run.version = self.store.save(run.key, &run.record, run.version).await?;
        Ok(())
    }

    /// After a failed apply: the intent of what did not happen taken back, so the retry
    /// does it (the journal already tells which capacity calls were made). Into the
    /// record as another run left it if one saved since (one that took over a drain
    /// holds this plan's lifecycle actions as planned).
    pub(super) async fn take_back_intent(
        &self,
        key: &str,
        plan: &Plan,
        failed_at: usize,
        mut record: PoolRecord,
        mut version: u64,
    ) {
        for _ in 0..MAX_ATTEMPTS {
            let mut undone = unplan(plan, failed_at, record.clone());
            // Its drains are over, whatever failed: ticks need not stand down for them.
            if undone.draining.as_ref().is_some_and(|d| d.owner == self.owner) {
                undone.draining = None;
            }
            if undone == record {
                return;
            }
            match self.store.save(key, &undone, version).await {
                Err(e) if e.kind == ErrorKind::Conflict => match self.store.load(key).await {
                    Ok(latest) => (record, version) = (latest.value, latest.version),
                    Err(e) => return self.intent_not_taken_back(key, &e),
                },
                Err(e) => return self.intent_not_taken_back(key, &e),
                Ok(_) => return,
            }
        }
    }

    fn intent_not_taken_back(&self, key: &str, e: &PortError) {
        tracing::warn!(pool = key, error = %e, "could not take back the intent of the actions not reached; the journal and the next reconcile settle them");
    }
}

pub(super) fn mark_done(call: &mut CapacityCall) {
    match call {
        CapacityCall::SetDesired { done, .. } | CapacityCall::Terminate { done, .. } => *done = true,
    }
}

/// The record as journaled, minus the intent of the actions from `failed_at` on that
/// the journal does not cover: a lifecycle action not completed is planned again.
fn unplan(plan: &Plan, failed_at: usize, mut record: PoolRecord) -> PoolRecord {
    let missed = &plan.actions[failed_at..];
    for action in &mut record.lifecycle_actions {
        let missed_complete =
            missed.iter().any(|a| matches!(&a.kind, ActionKind::CompleteLifecycleAction(l) if l.token == action.token));
        if missed_complete {
            action.planned = false;
        }
    }
    record
}
