//! A lifecycle action after its drain: completed, or handed on to the next run. A run
//! that got the pool late in its invocation (a direct invocation that waited for the
//! lease) drains only for what its deadline leaves; completing the action then would
//! let the instance go with pods a PodDisruptionBudget still protects.

use std::time::Duration;

use super::apply::{lifecycle_call, Run};
use super::{Applied, Reconciler, MAX_ATTEMPTS};
use crate::plan::LifecycleRef;
use crate::ports::{Autoscaling, Clock, Cluster, ErrorKind, PortError, StateStore};

/// What follows a lifecycle action's drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterDrain {
    /// Complete the action: the instance may go.
    Complete,
    /// Heartbeat the hook and leave the action to the next run, which drains on.
    HandOn,
}

/// Complete once the drain finished, or once it ran the whole time planned for it (what
/// was left of the action's own drain time: its deadline came). A drain the run's
/// deadline cut short (`given` less than `planned`) with pods left hands the action on.
pub fn after_drain(drained_whole: bool, given: Duration, planned: Duration) -> AfterDrain {
    if drained_whole || given >= planned {
        AfterDrain::Complete
    } else {
        AfterDrain::HandOn
    }
}

const HANDED_ON: &str = "the drain was cut short by the function's deadline with pods left: the hook is kept open \
                         and the action handed on to the next run, which drains for what is left of its time";

impl<A: Autoscaling, C: Cluster, S: StateStore, K: Clock> Reconciler<A, C, S, K> {
    /// Heartbeats the hook and marks the action not planned in the run's record, so the
    /// next run (a tick within a minute) plans it again.
    pub(super) async fn hand_on(&self, run: &mut Run<'_>, action: &LifecycleRef) -> Result<Applied, PortError> {
        if let over @ Applied::Skipped { .. } =
            lifecycle_call(self.autoscaling.record_lifecycle_heartbeat(action).await)?
        {
            return Ok(over);
        }
        if let Some(pending) = run.record.lifecycle_actions.iter_mut().find(|p| p.token == action.token) {
            pending.planned = false;
            run.version = self.store.save(run.key, &run.record, run.version).await?;
        }
        tracing::warn!(instance = %action.instance_id, "{HANDED_ON}");
        Ok(Applied::Skipped { why: HANDED_ON.into() })
    }

    /// As [`Self::hand_on`], into the record as another run left it (it planned the pool
    /// while this run drained).
    pub(super) async fn hand_on_taken_over(&self, key: &str, action: &LifecycleRef) -> Result<Applied, PortError> {
        if let over @ Applied::Skipped { .. } =
            lifecycle_call(self.autoscaling.record_lifecycle_heartbeat(action).await)?
        {
            return Ok(over);
        }
        for _ in 0..MAX_ATTEMPTS {
            let latest = self.store.load(key).await?;
            let mut record = latest.value;
            let Some(pending) = record.lifecycle_actions.iter_mut().find(|p| p.token == action.token) else { break };
            pending.planned = false;
            match self.store.save(key, &record, latest.version).await {
                Err(e) if e.kind == ErrorKind::Conflict => continue,
                Err(e) => return Err(e),
                Ok(_) => break,
            }
        }
        tracing::warn!(instance = %action.instance_id, "{HANDED_ON}");
        Ok(Applied::Skipped { why: HANDED_ON.into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_is_completed_only_drained_or_at_its_own_deadline() {
        let s = Duration::from_secs;
        // Drained: complete, however short the drain was.
        assert_eq!(after_drain(true, s(25), s(300)), AfterDrain::Complete);
        // Its whole drain time spent, pods still held by a budget: its deadline came.
        assert_eq!(after_drain(false, s(300), s(300)), AfterDrain::Complete);
        // The run's deadline left 25 s of its 300: handed on, not completed.
        assert_eq!(after_drain(false, s(25), s(300)), AfterDrain::HandOn);
        assert_eq!(after_drain(false, Duration::ZERO, s(5)), AfterDrain::HandOn);
    }
}
