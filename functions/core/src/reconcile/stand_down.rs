//! The kill switch's stand-down, run by a dry run under the pool's lease before it plans
//! on its shadow record: the live record's open work that can be undone is undone and
//! applied (see [`crate::planner::stand_down`]); the rest of the run changes nothing.

use super::apply::Run;
use super::lease::Lease;
use super::{ApplyError, ReconcileError, Reconciler, MAX_ATTEMPTS};
use crate::config::PoolConfig;
use crate::planner::{has_open_work, stand_down, PlanInput};
use crate::ports::{Autoscaling, Clock, Cluster, ErrorKind, StateStore, Versioned};

impl<A: Autoscaling, C: Cluster, S: StateStore, K: Clock> Reconciler<A, C, S, K> {
    /// Stands the live record down, when it holds open work; logs the plan it applied. A
    /// failure is logged and left to the next run: the dry run goes on regardless.
    pub(super) async fn stand_down_live(
        &self,
        pool: &PoolConfig,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
        lease: &mut Lease,
    ) {
        if let Err(e) = self.try_stand_down(pool, deadline, lease).await {
            tracing::warn!(pool = %pool.name, error = %e, "stand-down: could not undo the live run's open work; the next run tries again");
        }
    }

    async fn try_stand_down(
        &self,
        pool: &PoolConfig,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
        lease: &mut Lease,
    ) -> Result<(), ReconcileError> {
        let name = pool.name.as_str();
        for _ in 0..MAX_ATTEMPTS {
            let Versioned { value: record, version } =
                self.store.load(name).await.map_err(ReconcileError::port(name))?;
            if !has_open_work(&record) {
                return Ok(());
            }
            let now = self.clock.now();
            // A live run still draining (on the version before the switch) finishes its
            // drain first: undoing its cordon under it would draw pods back to the node.
            if record.draining.as_ref().is_some_and(|d| d.owner != self.owner && now < d.until) {
                tracing::info!(pool = name, "stand-down: a live run is still draining; left to the next run");
                return Ok(());
            }
            let observed = self.observe(pool, &record, &[], now).await.map_err(ReconcileError::port(name))?;
            let plan = stand_down(PlanInput {
                pool,
                dry_run: false,
                record: &record,
                observed: &observed,
                events: &[],
                now,
                run: &self.owner,
            });
            if plan.record == record && plan.effects().next().is_none() {
                return Ok(());
            }
            let version = match self.store.save(name, &plan.record, version).await {
                Ok(v) => v,
                Err(e) if e.kind == ErrorKind::Conflict => continue,
                Err(source) => {
                    return Err(ReconcileError::Apply {
                        pool: name.to_string(),
                        plan: Box::new(plan),
                        failed_at: 0,
                        source,
                    })
                }
            };
            let mut run = Run { pool, key: name, record: plan.record.clone(), version, deadline, lease };
            return match self.apply(&plan, &mut run).await {
                Ok(applied) => {
                    tracing::info!(pool = name, applied = applied.len(), plan = %plan.log_line(), "stand-down: dry_run is set; the live run's open work undone");
                    Ok(())
                }
                Err(ApplyError { failed_at, source }) => {
                    self.take_back_intent(name, &plan, failed_at, run.record.clone(), run.version).await;
                    Err(ReconcileError::Apply { pool: name.to_string(), plan: Box::new(plan), failed_at, source })
                }
            };
        }
        Err(ReconcileError::Contention { pool: name.to_string() })
    }
}
