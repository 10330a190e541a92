//! A spot warning's surge made before the pool is observed (the rule:
//! [`crate::planner::urgent_surge`]), under the lease, journaled like any plan's call.
//! What it needs (the record, the warned ASG's size and on-demand's) is read while the
//! lease is being taken: the save that follows is version-checked, so a record read
//! before another run's last save only loses the surge to the full plan.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::apply::Run;
use super::batch::Located;
use super::lease::Lease;
use super::{Applied, Reconciler};
use crate::config::{AsgSelector, PoolConfig};
use crate::event::{Event, Signal};
use crate::observe::AsgSize;
use crate::plan::{Action, ActionKind};
use crate::planner::{urgent_surge, Warned, CLOCK_SKEW};
use crate::ports::{Autoscaling, Clock, Cluster, PortError, StateStore, Versioned};
use crate::record::PoolRecord;

/// What a surge ahead is planned from, read beside the lease.
pub(super) struct AheadReads {
    warned: Vec<Warned>,
    loaded: Versioned<PoolRecord>,
    size: AsgSize,
    on_demand: Option<AsgSize>,
    /// The warned ASG's tags, when routing read them (tag selectors need them).
    tags: Option<BTreeMap<String, String>>,
}

impl<A: Autoscaling, C: Cluster, S: StateStore, K: Clock> Reconciler<A, C, S, K> {
    /// Reads what a surge for the batch's spot warnings is planned from, or `None` when
    /// there is none to make or a read failed (the full plan then does it all).
    pub(super) async fn read_ahead(
        &self,
        pool: &PoolConfig,
        events: &[Event],
        located: &Located,
        key: &str,
    ) -> Option<AheadReads> {
        let now = self.clock.now();
        let warnings: Vec<_> = events
            .iter()
            .filter_map(|e| match &e.signal {
                Signal::SpotInterruption { instance_id, action } => {
                    let at = if e.time > now + CLOCK_SKEW { now } else { e.time };
                    Some((instance_id.clone(), *action, at))
                }
                _ => None,
            })
            .collect();
        if warnings.is_empty() {
            return None;
        }
        let ids: Vec<String> = warnings.iter().map(|(id, ..)| id.clone()).collect();
        // Routing looked the instances up; a run not routed by a batch looks them up here
        // (their ASG's tags then unknown).
        let routed = ids.iter().all(|id| located.instance_asgs.contains_key(id));
        let sizes = |asg: String| async move {
            // On-demand's size tells whether a spot ASG kept off has anywhere else to put
            // it: read beside the warned ASG's, when named.
            let on_demand = match &pool.on_demand_asg {
                Some(AsgSelector::Name(name)) if *name != asg => Some(name.as_str()),
                _ => None,
            };
            let (size, on_demand) = futures_util::future::join(self.autoscaling.asg_bounds(&asg), async {
                match on_demand {
                    Some(name) => self.autoscaling.asg_bounds(name).await.ok(),
                    None => None,
                }
            })
            .await;
            (size, on_demand)
        };
        let found_and_sized = async {
            let found = if routed {
                located.instance_asgs.clone()
            } else {
                self.autoscaling.asgs_of_instances(&ids).await.ok()?
            };
            let asg = found.get(&ids[0])?.clone();
            let (size, on_demand) = sizes(asg).await;
            Some((found, size.ok()?, on_demand))
        };
        let (loaded, found_and_sized) = futures_util::future::join(self.store.load(key), found_and_sized).await;
        let (loaded, (found, size, on_demand)) = (loaded.ok()?, found_and_sized?);
        let warned: Vec<Warned> = warnings
            .into_iter()
            .filter_map(|(instance_id, action, at)| {
                let asg = found.get(&instance_id)?.clone();
                Some(Warned { instance_id, asg, action, at })
            })
            .collect();
        let asg = warned.first().map(|w| w.asg.clone()).filter(|_| warned.len() == ids.len())?;
        let tags = (routed && located.tags_read).then(|| located.tags.get(&asg).cloned().unwrap_or_default());
        Some(AheadReads { warned, loaded, size, on_demand, tags })
    }

    /// Makes the surge for the batch's spot warnings at once when the rule allows it, and
    /// returns it as the action it was (for the run's plan, logs and metrics); otherwise,
    /// or on any failure, leaves everything to the full plan that follows (which settles a
    /// surge whose call failed as it settles any plan's).
    pub(super) async fn surge_ahead(
        &self,
        pool: &PoolConfig,
        events: &[Event],
        reads: AheadReads,
        key: &str,
        deadline: Option<DateTime<Utc>>,
        lease: &mut Lease,
    ) -> Option<(Action, Applied)> {
        let now = self.clock.now();
        let AheadReads { warned, loaded, size, on_demand, tags } = reads;
        let others = events.iter().filter(|e| !matches!(e.signal, Signal::SpotInterruption { .. })).count();
        let surge = match urgent_surge(
            &self.config,
            pool,
            &loaded.value,
            &warned,
            tags.as_ref(),
            others,
            &size,
            on_demand.as_ref(),
            now,
        ) {
            Ok(surge) => surge,
            Err(why) => {
                tracing::debug!(pool = %pool.name, why, "the surge waits for the full plan");
                return None;
            }
        };
        let mut run = Run { pool, key, record: surge.record, version: loaded.version, deadline, lease };
        // Checked before the journal says the call may have been made.
        if self.may_act(&mut run).await.is_err() {
            return None;
        }
        // A run that saved meanwhile wins: the full plan reads what it left. The size the
        // call is rebased on is read meanwhile.
        let (saved, read) = futures_util::future::join(
            self.store.save(key, &run.record, run.version),
            self.autoscaling.asg_bounds(&surge.asg),
        )
        .await;
        run.version = saved.ok()?;
        let made: Result<_, PortError> = self.set_desired_on(&mut run, &surge.asg, surge.from, read.ok()).await;
        let warned_ids = warned.iter().map(|w| w.instance_id.as_str()).collect::<Vec<_>>().join(", ");
        match made {
            Ok(applied) => {
                tracing::info!(
                    pool = %pool.name, asg = %surge.asg, from = surge.from, to = surge.to, ?applied,
                    "surged for the spot warning(s) ahead of the full plan"
                );
                let kind = ActionKind::SetDesiredCapacity { asg: surge.asg.clone(), from: surge.from, to: surge.to };
                let reason =
                    format!("surge a replacement before the pool is read: spot interruption warning for {warned_ids}");
                Some((Action { kind, reason }, applied))
            }
            Err(error) => {
                tracing::warn!(
                    pool = %pool.name, asg = %surge.asg, %error,
                    "the surge ahead of the full plan failed; the full plan settles it"
                );
                None
            }
        }
    }
}
