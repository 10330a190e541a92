//! `reconcile(pool)`: take the lease, observe, plan, record, apply. Every function
//! ends here; the simulator and `ballast plan` run the same code.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::{AsgSelector, Config, PoolConfig};
use crate::event::{Event, Signal};
use crate::model::{ObservedAsg, ObservedPool, PoolRecord};
use crate::plan::{ActionKind, LifecycleRef, Plan};
use crate::planner::{plan, PlanInput};
use crate::ports::{Autoscaling, Clock, Cluster, DrainReport, PortError, StateStore, Versioned};

/// A forwarder demand event younger than this spares the reconcile a pod listing.
pub const DEMAND_FRESH_FOR: chrono::Duration = chrono::Duration::minutes(5);
/// How long handled event ids are remembered (EventBridge redelivers within hours).
pub const DEDUP_FOR: chrono::Duration = chrono::Duration::hours(24);
const MAX_ATTEMPTS: u32 = 3;
/// A drain for a lifecycle action runs in slices this long, with a heartbeat between
/// them, so the hook never times out under a long drain.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("pool {pool}: another run holds the lease; try again shortly")]
    LeaseBusy { pool: String },
    #[error("pool {pool}: {source}")]
    Port {
        pool: String,
        #[source]
        source: PortError,
    },
    #[error("pool {pool}: the record changed under every one of {MAX_ATTEMPTS} attempts")]
    Contention { pool: String },
}

impl ReconcileError {
    pub fn is_retryable(&self) -> bool {
        match self {
            ReconcileError::LeaseBusy { .. } | ReconcileError::Contention { .. } => true,
            ReconcileError::Port { source, .. } => source.is_retryable(),
        }
    }

    fn port(pool: &str) -> impl FnOnce(PortError) -> ReconcileError + '_ {
        move |source| ReconcileError::Port { pool: pool.to_string(), source }
    }
}

/// What happened to one action of an applied plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Applied {
    Done,
    Drained(DrainReport),
    Skipped { why: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct PoolOutcome {
    pub plan: Plan,
    /// One entry per action of the plan that was carried out (empty in dry run).
    pub applied: Vec<Applied>,
}

/// An event that concerns none of the pools (a Spot warning for another team's instance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unrouted {
    pub event_id: String,
    pub why: String,
}

#[derive(Debug, Default)]
pub struct BatchOutcome {
    pub pools: Vec<PoolOutcome>,
    pub unrouted: Vec<Unrouted>,
    pub duplicates: Vec<String>,
    /// Pools that failed, with the ids of the events that routed to them.
    pub failures: Vec<(ReconcileError, Vec<String>)>,
}

pub struct Reconciler<A, C, S, K> {
    pub config: Arc<Config>,
    pub autoscaling: A,
    pub cluster: C,
    pub store: S,
    pub clock: K,
    /// Names this run in leases (e.g. the Lambda request id).
    pub owner: String,
}

impl<A: Autoscaling, C: Cluster, S: StateStore, K: Clock> Reconciler<A, C, S, K> {
    /// Routes a batch to its pools and reconciles each once.
    pub async fn handle(&self, events: Vec<Event>) -> BatchOutcome {
        let mut outcome = BatchOutcome::default();
        // A failure before the batch is split per pool concerns every event of it.
        let all_ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
        let (fresh, duplicates) = match self.drop_seen(events).await {
            Ok(split) => split,
            Err(source) => {
                outcome.failures.push((ReconcileError::Port { pool: "(dedup)".into(), source }, all_ids));
                return outcome;
            }
        };
        outcome.duplicates = duplicates;
        let routed = match self.route(fresh).await {
            Ok((routed, unrouted)) => {
                outcome.unrouted = unrouted;
                routed
            }
            Err(source) => {
                outcome.failures.push((ReconcileError::Port { pool: "(routing)".into(), source }, all_ids));
                return outcome;
            }
        };
        for (pool, events) in routed {
            let Some(pool_cfg) = self.config.pool(&pool) else { continue };
            let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
            match self.reconcile(pool_cfg, &events).await {
                Ok(result) => outcome.pools.push(result),
                Err(err) => outcome.failures.push((err, ids)),
            }
        }
        outcome
    }

    /// Plans every pool the events concern, without a lease and without acting.
    pub async fn plan_only(&self, events: Vec<Event>) -> Result<(Vec<Plan>, Vec<Unrouted>), PortError> {
        let (routed, unrouted) = self.route(events).await?;
        let mut plans = Vec::new();
        for (pool, events) in routed {
            let Some(pool_cfg) = self.config.pool(&pool) else { continue };
            let record = self.store.load(&pool).await?;
            let now = self.clock.now();
            let observed = self.observe(pool_cfg, &record.value, &events, now).await?;
            plans.push(self.plan_for(pool_cfg, &record.value, &observed, &events, now));
        }
        Ok((plans, unrouted))
    }

    async fn drop_seen(&self, events: Vec<Event>) -> Result<(Vec<Event>, Vec<String>), PortError> {
        let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
        let seen = if ids.is_empty() { BTreeSet::new() } else { self.store.seen(&ids).await? };
        let mut kept = Vec::new();
        let mut duplicates = Vec::new();
        let mut in_batch = BTreeSet::new();
        for event in events {
            if seen.contains(&event.id) || !in_batch.insert(event.id.clone()) {
                duplicates.push(event.id);
            } else {
                kept.push(event);
            }
        }
        Ok((kept, duplicates))
    }

    /// Which pool each event concerns. Instance and tag-selected ASG signals need the
    /// ASGs; they are described once per batch, only when some event needs it.
    async fn route(&self, events: Vec<Event>) -> Result<(BTreeMap<String, Vec<Event>>, Vec<Unrouted>), PortError> {
        let mut routed: BTreeMap<String, Vec<Event>> = BTreeMap::new();
        let mut unrouted = Vec::new();
        let mut view: Option<Vec<(String, Vec<ObservedAsg>)>> = None;
        for event in events {
            let mut pools: BTreeSet<String> = BTreeSet::new();
            if event.signal == Signal::Reconcile {
                pools.extend(self.config.pools.iter().map(|p| p.name.clone()));
            } else if let Some(name) = event.signal.named_pool() {
                if self.config.pool(name).is_some() {
                    pools.insert(name.to_string());
                } else {
                    unrouted.push(Unrouted {
                        event_id: event.id.clone(),
                        why: format!("names pool `{name}`, which is not in the config"),
                    });
                    continue;
                }
            } else {
                let by_name = event.signal.named_asg().and_then(|asg| {
                    self.config.pools.iter().find(|p| {
                        p.spot_asgs.iter().chain([&p.on_demand_asg]).any(|s| s == &AsgSelector::Name(asg.to_string()))
                    })
                });
                if let Some(pool) = by_name {
                    pools.insert(pool.name.clone());
                } else {
                    if view.is_none() {
                        let mut all = Vec::new();
                        for pool in &self.config.pools {
                            let (spot, od) = self.autoscaling.describe_pool(pool).await?;
                            all.push((pool.name.clone(), spot.into_iter().chain([od]).collect()));
                        }
                        view = Some(all);
                    }
                    let asgs = view.as_deref().unwrap_or_default();
                    let instances = event.signal.instance_ids();
                    for (pool, groups) in asgs {
                        let hit = groups.iter().any(|g| {
                            event.signal.named_asg() == Some(g.name.as_str())
                                || instances.iter().any(|id| g.instance(id).is_some())
                        });
                        if hit {
                            pools.insert(pool.clone());
                        }
                    }
                }
            }
            if pools.is_empty() {
                let about = match (event.signal.named_asg(), event.signal.instance_ids().first()) {
                    (Some(asg), _) => format!("ASG {asg}"),
                    (None, Some(id)) => format!("instance {id}"),
                    _ => "its subject".into(),
                };
                unrouted.push(Unrouted {
                    event_id: event.id.clone(),
                    why: format!("{about} is in none of the configured pools"),
                });
            }
            for pool in pools {
                routed.entry(pool).or_default().push(event.clone());
            }
        }
        Ok((routed, unrouted))
    }

    /// Reads the pool as it is now: ASGs, nodes, headroom, and demand when needed.
    pub async fn observe(
        &self,
        pool: &PoolConfig,
        record: &PoolRecord,
        events: &[Event],
        now: DateTime<Utc>,
    ) -> Result<ObservedPool, PortError> {
        let (spot, on_demand) = self.autoscaling.describe_pool(pool).await?;
        let nodes = self.cluster.pool_nodes(pool).await?;
        let headroom_replicas = self.cluster.headroom_replicas(pool).await?;
        let forwarded = events
            .iter()
            .filter_map(|e| match &e.signal {
                Signal::PoolDemand(d) => Some(d.observed_at),
                _ => None,
            })
            .chain(record.demand.map(|d| d.observed_at))
            .max();
        // No fresh forwarder event: list the pool's pods ourselves.
        let demand = match forwarded {
            Some(at) if now - at < DEMAND_FRESH_FOR => None,
            _ => self.cluster.pool_demand(pool, now).await?,
        };
        Ok(ObservedPool { spot, on_demand, nodes, headroom_replicas, demand })
    }

    pub fn plan_for(
        &self,
        pool: &PoolConfig,
        record: &PoolRecord,
        observed: &ObservedPool,
        events: &[Event],
        now: DateTime<Utc>,
    ) -> Plan {
        plan(PlanInput { pool, dry_run: self.config.dry_run, record, observed, events, now })
    }

    /// One pool: lease, observe, plan, write the record, apply.
    pub async fn reconcile(&self, pool: &PoolConfig, events: &[Event]) -> Result<PoolOutcome, ReconcileError> {
        let name = pool.name.as_str();
        let lease_ttl = pool.interruption.drain_timeout.0 + Duration::from_secs(120);
        if !self
            .store
            .acquire_lease(name, &self.owner, self.clock.now(), lease_ttl)
            .await
            .map_err(ReconcileError::port(name))?
        {
            return Err(ReconcileError::LeaseBusy { pool: name.to_string() });
        }
        let result = self.reconcile_leased(pool, events).await;
        // A lease left behind expires on its own; failing to release is not an error.
        let _ = self.store.release_lease(name, &self.owner).await;
        result
    }

    async fn reconcile_leased(&self, pool: &PoolConfig, events: &[Event]) -> Result<PoolOutcome, ReconcileError> {
        let name = pool.name.as_str();
        for _ in 0..MAX_ATTEMPTS {
            let now = self.clock.now();
            let Versioned { value: record, version } =
                self.store.load(name).await.map_err(ReconcileError::port(name))?;
            let observed = self.observe(pool, &record, events, now).await.map_err(ReconcileError::port(name))?;
            let plan = self.plan_for(pool, &record, &observed, events, now);
            if plan.dry_run {
                return Ok(PoolOutcome { plan, applied: Vec::new() });
            }
            let version = if plan.record != record {
                match self.store.save(name, &plan.record, version).await {
                    Ok(v) => v,
                    Err(e) if e.kind == crate::ports::ErrorKind::Conflict => continue,
                    Err(e) => return Err(ReconcileError::Port { pool: name.to_string(), source: e }),
                }
            } else {
                version
            };
            return match self.apply(pool, &plan).await {
                Ok(applied) => {
                    let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
                    if !ids.is_empty() {
                        self.store.mark_seen(&ids, now + DEDUP_FOR).await.map_err(ReconcileError::port(name))?;
                    }
                    Ok(PoolOutcome { plan, applied })
                }
                Err((failed_at, source)) => {
                    // Take back the intent of what did not happen, so the retry does it.
                    let undone = unplan(&plan, failed_at);
                    if undone != plan.record {
                        let _ = self.store.save(name, &undone, version).await;
                    }
                    Err(ReconcileError::Port { pool: name.to_string(), source })
                }
            };
        }
        Err(ReconcileError::Contention { pool: name.to_string() })
    }

    /// Carries out the plan's effects in order; stops at the first failure, since
    /// later actions rely on earlier ones (a terminate-with-decrement on its surge).
    async fn apply(&self, pool: &PoolConfig, plan: &Plan) -> Result<Vec<Applied>, (usize, PortError)> {
        let mut applied = Vec::new();
        let mut drained: BTreeMap<&str, bool> = BTreeMap::new();
        for (index, action) in plan.actions.iter().enumerate() {
            let result = match &action.kind {
                ActionKind::RecordState => Ok(Applied::Done),
                ActionKind::SetDesiredCapacity { asg, to, .. } => {
                    self.autoscaling.set_desired_capacity(asg, *to).await.map(|_| Applied::Done)
                }
                ActionKind::CordonNode { node, .. } => self.cluster.cordon(node).await.map(|_| Applied::Done),
                ActionKind::DrainNode { node, instance_id, timeout, lifecycle } => {
                    self.drain(node, timeout.0, lifecycle.as_ref()).await.map(|report| {
                        drained.insert(instance_id, report.complete());
                        Applied::Drained(report)
                    })
                }
                ActionKind::TerminateInstance { instance_id, decrement, only_if_drained, .. } => {
                    if *only_if_drained && drained.get(instance_id.as_str()) == Some(&false) {
                        Ok(Applied::Skipped {
                            why: "drain incomplete: a PodDisruptionBudget still protects pods".into(),
                        })
                    } else {
                        self.autoscaling.terminate_instance(instance_id, *decrement).await.map(|_| Applied::Done)
                    }
                }
                ActionKind::RecordLifecycleHeartbeat(action) => {
                    self.autoscaling.record_lifecycle_heartbeat(action).await.map(|_| Applied::Done)
                }
                ActionKind::CompleteLifecycleAction(action) => {
                    self.autoscaling.complete_lifecycle_action(action).await.map(|_| Applied::Done)
                }
                ActionKind::SetHeadroomReplicas { to, .. } => {
                    self.cluster.set_headroom_replicas(pool, *to).await.map(|_| Applied::Done)
                }
            };
            match result {
                Ok(a) => applied.push(a),
                Err(e) => return Err((index, e)),
            }
        }
        Ok(applied)
    }
}

impl<A: Autoscaling, C: Cluster, S: StateStore, K: Clock> Reconciler<A, C, S, K> {
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
                self.autoscaling.record_lifecycle_heartbeat(action).await?;
            }
        }
    }
}

/// The plan's record, minus the intent of the actions from `failed_at` on.
///
/// A failed call may still have been carried out (the response was lost), so recorded
/// targets stay: a surge keeps its target desired size, which the retry compares with
/// what it observes, and a failback step keeps the size before its surge. Only the
/// "done" marks of actions not reached are taken back, so the retry does them.
fn unplan(plan: &Plan, failed_at: usize) -> PoolRecord {
    let mut record = plan.record.clone();
    let missed = &plan.actions[failed_at..];
    for interruption in &mut record.interruptions {
        let terminate_missed = missed.iter().any(|a| {
            matches!(&a.kind, ActionKind::TerminateInstance { instance_id, .. } if *instance_id == interruption.instance_id)
        });
        if interruption.planned_at == Some(plan.now) && terminate_missed {
            interruption.planned_at = None;
        }
    }
    for action in &mut record.lifecycle_actions {
        let missed_complete =
            missed.iter().any(|a| matches!(&a.kind, ActionKind::CompleteLifecycleAction(l) if l.token == action.token));
        if missed_complete {
            action.planned = false;
        }
    }
    record
}
