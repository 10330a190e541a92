//! One pool under its lease: load the record, observe, plan, save the plan's record
//! (version-checked: a run that lost the race loads again), then apply.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicUsize;

use chrono::{DateTime, Utc};

use super::apply::Run;
use super::batch::{seen_key, Located};
use super::lease::{AtWork, Lease};
use super::urgent::AheadReads;
use super::{
    ApplyError, PoolOutcome, ReconcileError, Reconciler, DEDUP_FOR, DEMAND_FRESH_FOR, DRY_RUN_SUFFIX, MAX_ATTEMPTS,
};
use crate::config::{check_one_role, AsgRef, PoolConfig};
use crate::event::{Event, Signal};
use crate::observe::ObservedPool;
use crate::plan::{ActionKind, Plan};
use crate::planner::{plan, PlanInput, CLOCK_SKEW};
use crate::ports::{Autoscaling, Clock, Cluster, ErrorKind, PortError, StateStore, Urgency, Versioned};
use crate::record::PoolRecord;

impl<A: Autoscaling, C: Cluster, S: StateStore, K: Clock> Reconciler<A, C, S, K> {
    /// One pool: lease, observe, plan, write the record, apply.
    pub async fn reconcile(
        &self,
        pool: &PoolConfig,
        events: &[Event],
        deadline: Option<DateTime<Utc>>,
    ) -> Result<PoolOutcome, ReconcileError> {
        self.reconcile_counting(pool, events, &Located::default(), deadline, None).await
    }

    /// Under the lease: load the record, observe, plan, save (a save that lost the race
    /// to another run loads again, up to [`MAX_ATTEMPTS`] times), apply, and mark the
    /// events handled for the pool.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn reconcile_leased(
        &self,
        pool: &PoolConfig,
        events: &[Event],
        located: &Located,
        ahead: Option<AheadReads>,
        deadline: Option<DateTime<Utc>>,
        lease: &mut Lease,
        working: Option<&AtomicUsize>,
    ) -> Result<PoolOutcome, ReconcileError> {
        let name = pool.name.as_str();
        let dry_run = self.config.dry_run;
        if dry_run {
            self.stand_down_live(pool, deadline, lease).await;
        }
        let key = if dry_run { format!("{name}{DRY_RUN_SUFFIX}") } else { name.to_string() };
        let ahead = match ahead {
            Some(reads) if lease.urgency == Urgency::CannotWait && !dry_run => {
                self.surge_ahead(pool, events, reads, &key, deadline, lease).await
            }
            _ => None,
        };
        let mut at_work = None;
        for _ in 0..MAX_ATTEMPTS {
            let now = self.clock.now();
            let Versioned { value: record, version } =
                self.store.load(&key).await.map_err(ReconcileError::port(name))?;
            // Another run is draining without the lease: only an event that cannot wait
            // plans now (that run then leaves the rest to it); the others wait for the
            // drain as for a held lease (a tick stands down: the drainer covers it).
            let can_wait = lease.urgency == Urgency::CanWait;
            if can_wait && record.draining.as_ref().is_some_and(|d| d.owner != self.owner && now < d.until) {
                return Err(ReconcileError::LeaseBusy { pool: name.to_string() });
            }
            if at_work.is_none() {
                at_work = working.map(AtWork::new);
            }
            let mut observed = self.observe(pool, &record, events, now).await.map_err(ReconcileError::port(name))?;
            observed.left = located.left(&observed);
            self.look_up_gone_under_raises(&record, &mut observed).await;
            let mut plan = self.plan_for(pool, &record, &observed, events, now);
            // Each plan supersedes the last: whoever drained for it is done or left the
            // rest to this one.
            plan.record.draining = None;
            if dry_run {
                // The shadow record keeps the memory (grace, failback, rates) so the logs
                // show what a live run would do, tick after tick; nothing is applied, so
                // the calls are taken as made.
                plan.record.journal = None;
                plan.record.surged_over = None;
            }
            let version = if plan.record != record {
                match self.store.save(&key, &plan.record, version).await {
                    Ok(v) => v,
                    Err(e) if e.kind == crate::ports::ErrorKind::Conflict => continue,
                    // The plan's first action (record the state) failed: nothing else
                    // ran, and the plan still says what it intended (its notes).
                    Err(source) => {
                        return Err(ReconcileError::Apply {
                            pool: name.to_string(),
                            plan: Box::new(plan),
                            failed_at: 0,
                            source,
                        })
                    }
                }
            } else {
                version
            };
            if dry_run {
                return Ok(PoolOutcome { plan, applied: Vec::new() });
            }
            let mut run = Run { pool, key: &key, record: plan.record.clone(), version, deadline, lease };
            return match self.apply(&plan, &mut run).await {
                Ok(mut applied) => {
                    if let Some((action, done)) = ahead {
                        // The run's plan shows what the run did, the surge made ahead first.
                        let at = plan.actions.iter().take_while(|a| a.kind == ActionKind::RecordState).count();
                        plan.actions.insert(at, action);
                        applied.insert(at, done);
                    }
                    let ids: Vec<String> = events.iter().map(|e| seen_key(name, &e.id)).collect();
                    if !ids.is_empty() {
                        if let Err(source) = self.store.mark_seen(&ids, now + DEDUP_FOR).await {
                            return Err(ReconcileError::MarkSeen {
                                pool: name.to_string(),
                                plan: Box::new(plan),
                                source,
                            });
                        }
                    }
                    Ok(PoolOutcome { plan, applied })
                }
                Err(ApplyError { failed_at, source }) => {
                    self.take_back_intent(&key, &plan, failed_at, run.record.clone(), run.version).await;
                    Err(ReconcileError::Apply { pool: name.to_string(), plan: Box::new(plan), failed_at, source })
                }
            };
        }
        Err(ReconcileError::Contention { pool: name.to_string() })
    }

    /// Reads the pool as it is now: ASGs, nodes, headroom, and demand when needed.
    pub async fn observe(
        &self,
        pool: &PoolConfig,
        record: &PoolRecord,
        events: &[Event],
        now: DateTime<Utc>,
    ) -> Result<ObservedPool, PortError> {
        let forwarded = events
            .iter()
            .filter_map(|e| match &e.signal {
                Signal::PoolDemand(d) => Some(d.observed_at),
                _ => None,
            })
            .chain(record.demand.map(|d| d.observed_at))
            .max();
        // No fresh forwarder event: list the pool's pods ourselves. A time ahead of now
        // (a bad clock) is not fresh: it would spare the listing forever.
        let demand = async {
            match forwarded {
                Some(at) if at <= now + CLOCK_SKEW && now - at < DEMAND_FRESH_FOR => Ok(None),
                _ => self.cluster.pool_demand(pool, now).await,
            }
        };
        // The reads are independent: made together, the run waits for the slowest, not
        // their sum (a spot warning's first call waits on them).
        let ((spot, on_demand), nodes, headroom, demand) = futures_util::future::try_join4(
            self.autoscaling.describe_pool(pool),
            self.cluster.pool_nodes(pool),
            self.cluster.headroom(pool),
            demand,
        )
        .await?;
        // Another pool's selectors taking one of these ASGs would size it twice: the pool
        // is refused before anything is planned.
        let listed = spot.iter().chain(&on_demand).map(|a| AsgRef { name: &a.name, tags: &a.tags });
        check_one_role(pool, &self.config.pools, listed)
            .map_err(|e| PortError::new(ErrorKind::Permanent, "DescribeAutoScalingGroups", e.to_string()))?;
        Ok(ObservedPool { spot, on_demand, nodes, headroom, demand, left: BTreeMap::new() })
    }

    /// The instances a kept raise of Ballast's counted live that have left the pool's ASGs
    /// with no event telling why: EC2 says whether the spot market took one (its going
    /// then explains no lower of the ASG, which replaces it) or the ASG ended it. Only
    /// when there are any; a failed lookup leaves them counted as the ASG's own.
    async fn look_up_gone_under_raises(&self, record: &PoolRecord, observed: &mut ObservedPool) {
        let live_now: BTreeSet<&str> =
            observed.asgs().flat_map(|a| a.instances.iter()).map(|i| i.id.as_str()).collect();
        let gone: Vec<String> = record
            .raised
            .values()
            .flat_map(|r| r.live.iter().chain(&r.seen))
            .filter(|id| !live_now.contains(id.as_str()) && !observed.left.contains_key(*id))
            .filter(|id| !record.disruptions.iter().any(|d| &d.instance_id == *id))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if gone.is_empty() {
            return;
        }
        match self.autoscaling.launched_by(&gone).await {
            Ok(found) => {
                let of_the_pool = |asg: &Option<String>| asg.as_deref().is_some_and(|a| observed.asg(a).is_some());
                let found: Vec<_> = found.into_iter().filter(|(_, l)| of_the_pool(&l.asg)).collect();
                observed.left.extend(found);
            }
            Err(error) => tracing::warn!(
                pool = ?observed.spot.first().map(|a| &a.name), %error,
                "could not ask EC2 why instances under a kept raise left; counted as the ASG's own"
            ),
        }
    }

    /// The plan for `pool` from what was observed and stored, with this reconciler's
    /// config and run id; nothing is acted on (`ballast plan` prints it).
    pub fn plan_for(
        &self,
        pool: &PoolConfig,
        record: &PoolRecord,
        observed: &ObservedPool,
        events: &[Event],
        now: DateTime<Utc>,
    ) -> Plan {
        plan(PlanInput { pool, dry_run: self.config.dry_run, record, observed, events, now, run: &self.owner })
    }
}
