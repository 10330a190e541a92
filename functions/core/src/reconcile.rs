//! `reconcile(pool)`: take the lease, observe, plan, record, apply. Every function
//! ends here; the simulator and `ballast plan` run the same code.

mod stand_down;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::{check_one_role, AsgRef, AsgSelector, Config, PoolConfig};
use crate::event::{Event, Signal};
use crate::observe::{ObservedAsg, ObservedPool};
use crate::plan::{Action, ActionKind, LifecycleRef, Plan};
use crate::planner::{plan, PlanInput, CLOCK_SKEW};
use crate::ports::{Autoscaling, Clock, Cluster, DrainReport, ErrorKind, PortError, StateStore, Urgency, Versioned};
use crate::record::{CapacityCall, Draining, PoolRecord};

mod handover;
pub use handover::{after_drain, AfterDrain};

/// A forwarder demand event younger than this spares the reconcile a pod listing: the
/// forwarder's heartbeat (5 min) and a minute for its delivery, so a tick just before the
/// next heartbeat lands does not list every pod of the pool.
pub const DEMAND_FRESH_FOR: chrono::Duration = chrono::Duration::minutes(6);
/// How long handled event ids are remembered (EventBridge redelivers within hours).
pub const DEDUP_FOR: chrono::Duration = chrono::Duration::hours(24);
const MAX_ATTEMPTS: u32 = 3;
/// Reads of an ASG's size, around journal writes, before a desired-size write gives up.
const SETTLE_ATTEMPTS: u32 = 3;
/// A drain for a lifecycle action runs in slices this long, with a heartbeat between
/// them, so the hook never times out under a long drain.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(60);

/// Time kept free before the Lambda deadline: no call starts within it.
pub const DEADLINE_MARGIN: chrono::Duration = chrono::Duration::seconds(10);
/// Time a drain cut short by the deadline leaves the calls after it (taking the lease
/// back, the terminate, the lifecycle action's completion): without it the plan stops at
/// the margin, and each retry drains again and stops there again.
pub const KEPT_AFTER_DRAINS: chrono::Duration = chrono::Duration::seconds(20);
/// The pool record a dry run keeps, beside the live one: its memory, never applied.
pub const DRY_RUN_SUFFIX: &str = "@dry-run";

/// What failed before the batch was split per pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchStage {
    /// Looking up which event ids were handled already.
    Dedup,
    /// Describing the ASGs to find which pool each event concerns.
    Routing,
}

impl std::fmt::Display for BatchStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BatchStage::Dedup => "looking up handled event ids",
            BatchStage::Routing => "routing events to pools",
        })
    }
}

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
    /// Applying the plan stopped at an action; the plan says what was intended (its
    /// notes included), the journal what was done.
    #[error("pool {pool}: applying action {} of {} stopped: {source}", failed_at + 1, plan.actions.len())]
    Apply {
        pool: String,
        plan: Box<Plan>,
        failed_at: usize,
        #[source]
        source: PortError,
    },
    /// The plan was applied whole, but its events could not be marked handled: a retry
    /// takes them again (harmless: the record says what was done), and the plan is
    /// still logged and counted.
    #[error("pool {pool}: the plan was applied, but its events could not be marked handled: {source}")]
    MarkSeen {
        pool: String,
        plan: Box<Plan>,
        #[source]
        source: PortError,
    },
    #[error("pool {pool}: the record changed under every one of {MAX_ATTEMPTS} attempts")]
    Contention { pool: String },
    /// A failure before the batch was split per pool: it concerns every event of it.
    #[error("{stage}: {source}")]
    Batch {
        stage: BatchStage,
        #[source]
        source: PortError,
    },
}

impl ReconcileError {
    pub fn is_retryable(&self) -> bool {
        match self {
            ReconcileError::LeaseBusy { .. } | ReconcileError::Contention { .. } => true,
            ReconcileError::Port { source, .. }
            | ReconcileError::Apply { source, .. }
            | ReconcileError::MarkSeen { source, .. }
            | ReconcileError::Batch { source, .. } => source.is_retryable(),
        }
    }

    /// The plan whose apply stopped part-way, or was applied whole before the failure,
    /// to log what it intended.
    pub fn plan(&self) -> Option<&Plan> {
        match self {
            ReconcileError::Apply { plan, .. } | ReconcileError::MarkSeen { plan, .. } => Some(plan),
            _ => None,
        }
    }

    /// The pool that failed; `None` for a batch-wide failure.
    pub fn pool(&self) -> Option<&str> {
        match self {
            ReconcileError::LeaseBusy { pool }
            | ReconcileError::Port { pool, .. }
            | ReconcileError::Apply { pool, .. }
            | ReconcileError::MarkSeen { pool, .. }
            | ReconcileError::Contention { pool } => Some(pool),
            ReconcileError::Batch { .. } => None,
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
    /// Worth an operator's look, not routine (logged as a warning).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub warning: bool,
}

#[derive(Debug, Default)]
pub struct BatchOutcome {
    pub pools: Vec<PoolOutcome>,
    pub unrouted: Vec<Unrouted>,
    pub duplicates: Vec<String>,
    /// Pools that failed, with the ids of the events that routed to them.
    pub failures: Vec<(ReconcileError, Vec<String>)>,
    /// Pools whose only events were ticks (or news of a node) while another run held the
    /// lease: that run reconciles them now.
    pub covered: Vec<String>,
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
        self.handle_until(events, None).await
    }

    /// As [`Self::handle`], with no call started past `deadline` less
    /// [`DEADLINE_MARGIN`] (the Lambda deadline), and drains cut short to end before it.
    pub async fn handle_until(&self, events: Vec<Event>, deadline: Option<DateTime<Utc>>) -> BatchOutcome {
        self.handle_until_waiting(events, deadline, LEASE_WAIT).await
    }

    /// As [`Self::handle_until`], a busy lease waited for up to `lease_wait` (never past
    /// what the deadline leaves the run). An SQS batch waits little: the queue retries
    /// ten times, and a waiting run would hold back other pools' messages. An
    /// asynchronous invocation has one or two retries a minute apart, so it waits out a
    /// drain within its deadline rather than spend them.
    pub async fn handle_until_waiting(
        &self,
        events: Vec<Event>,
        deadline: Option<DateTime<Utc>>,
        lease_wait: chrono::Duration,
    ) -> BatchOutcome {
        let mut outcome = BatchOutcome::default();
        // A failure before the batch is split per pool concerns every event of it.
        let all_ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
        let (fresh, duplicates) = drop_repeats(events);
        outcome.duplicates = duplicates;
        // Handled for every pool it concerned: dropped before routing (the instance a
        // redelivered warning names may have left its ASG since).
        let fresh = match self.drop_handled(fresh).await {
            Ok((fresh, handled)) => {
                outcome.duplicates.extend(handled);
                fresh
            }
            Err(source) => {
                outcome.failures.push((ReconcileError::Batch { stage: BatchStage::Dedup, source }, all_ids));
                return outcome;
            }
        };
        let routed = match self.route(fresh).await {
            Ok((routed, unrouted)) => {
                outcome.unrouted = unrouted;
                routed
            }
            Err(source) => {
                outcome.failures.push((ReconcileError::Batch { stage: BatchStage::Routing, source }, all_ids));
                return outcome;
            }
        };
        let routed = match self.drop_seen(routed).await {
            Ok((routed, seen)) => {
                for id in seen {
                    if !outcome.duplicates.contains(&id) {
                        outcome.duplicates.push(id);
                    }
                }
                routed
            }
            Err(source) => {
                outcome.failures.push((ReconcileError::Batch { stage: BatchStage::Dedup, source }, all_ids));
                return outcome;
            }
        };
        // Pools are reconciled together, each under its own lease: one pool's drain, or its
        // wait for a lease another run holds, never holds back another pool's spot warning.
        let runs: Vec<_> =
            routed.into_iter().filter_map(|(pool, events)| self.config.pool(&pool).map(|cfg| (cfg, events))).collect();
        // Runs of the batch at work (not waiting for a lease): while one is, the
        // invocation lasts anyway, so a run waiting for its pool's lease waits on (its
        // hooks kept open) instead of failing for a retry that could only come after it.
        let working = &AtomicUsize::new(0);
        let results = futures_util::future::join_all(runs.into_iter().map(|(pool_cfg, events)| async move {
            let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
            let first = self.reconcile_counting(pool_cfg, &events, deadline, Some(working)).await;
            let result = match (first, deadline) {
                // The run holding the lease is reconciling the pool now: a tick adds
                // nothing to it (and failing would retry, then dead-letter, a tick), nor
                // news of a node.
                (Err(ReconcileError::LeaseBusy { .. }), _)
                    if events
                        .iter()
                        .all(|e| e.signal.covered_by_the_lease_holder(pool_cfg.headroom.target.is_some())) =>
                {
                    PoolRun::Covered
                }
                (Err(busy @ ReconcileError::LeaseBusy { .. }), deadline) => {
                    self.keep_hooks_open(&pool_cfg.name, &events).await;
                    match deadline {
                        Some(deadline) => PoolRun::Done(Box::new(
                            self.reconcile_when_free(pool_cfg, &events, deadline, lease_wait, working).await,
                        )),
                        None => PoolRun::Done(Box::new(Err(busy))),
                    }
                }
                (done, _) => PoolRun::Done(Box::new(done)),
            };
            (pool_cfg.name.clone(), ids, result)
        }))
        .await;
        let mut handled: Vec<String> = Vec::new();
        for (pool, ids, result) in results {
            match result {
                PoolRun::Covered => outcome.covered.push(pool),
                PoolRun::Done(done) => match *done {
                    Ok(result) => {
                        handled.extend(ids);
                        outcome.pools.push(result)
                    }
                    Err(err) => outcome.failures.push((err, ids)),
                },
            }
        }
        // Each pool marked its events handled for itself; an event no pool failed is also
        // marked handled as a whole. If that fails, the per-pool marks still hold.
        let failed: BTreeSet<&String> = outcome.failures.iter().flat_map(|(_, ids)| ids).collect();
        let whole: Vec<String> =
            handled.iter().filter(|id| !failed.contains(id)).cloned().collect::<BTreeSet<_>>().into_iter().collect();
        if !whole.is_empty() && !self.config.dry_run {
            if let Err(e) = self.store.mark_seen(&whole, self.clock.now() + DEDUP_FOR).await {
                tracing::warn!(error = %e, "could not mark the batch's events handled as a whole; each pool's mark holds");
            }
        }
        outcome
    }

    /// Drops the events handled for every pool they concerned.
    async fn drop_handled(&self, events: Vec<Event>) -> Result<(Vec<Event>, Vec<String>), PortError> {
        let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
        let seen = if ids.is_empty() { BTreeSet::new() } else { self.store.seen(&ids).await? };
        let (handled, fresh): (Vec<Event>, Vec<Event>) = events.into_iter().partition(|e| seen.contains(&e.id));
        Ok((fresh, handled.into_iter().map(|e| e.id).collect()))
    }

    /// Waits for the pool's lease (polling, jittered) up to `lease_wait`, or on while
    /// other runs of the batch are `working`, and never past what the deadline leaves the
    /// run; then the events fail for a retry.
    async fn reconcile_when_free(
        &self,
        pool: &PoolConfig,
        events: &[Event],
        deadline: DateTime<Utc>,
        lease_wait: chrono::Duration,
        working: &AtomicUsize,
    ) -> Result<PoolOutcome, ReconcileError> {
        let leaves_the_run = deadline - KEPT_AFTER_LEASE_WAIT - DEADLINE_MARGIN;
        let give_up = self.clock.now().checked_add_signed(lease_wait).map_or(leaves_the_run, |t| t.min(leaves_the_run));
        let mut polls: u64 = 0;
        let every = chrono::Duration::from_std(HEARTBEAT_EVERY).unwrap_or(chrono::Duration::MAX);
        let mut hooks_kept_at = self.clock.now();
        loop {
            let pause = lease_poll(&self.owner, polls);
            let pause_chrono = chrono::Duration::from_std(pause).unwrap_or(chrono::Duration::MAX);
            let after_pause = self.clock.now() + pause_chrono;
            let others_at_work = working.load(Ordering::SeqCst) > 0;
            if after_pause > leaves_the_run || after_pause > give_up && !others_at_work {
                // The retry comes a pause later: the hook is heard of as late as it would
                // be after an ordinary lease wait.
                if self.clock.now() - hooks_kept_at >= LEASE_WAIT {
                    self.keep_hooks_open(&pool.name, events).await;
                }
                return Err(ReconcileError::LeaseBusy { pool: pool.name.clone() });
            }
            self.clock.sleep(pause).await;
            if self.clock.now() - hooks_kept_at >= every {
                self.keep_hooks_open(&pool.name, events).await;
                hooks_kept_at = self.clock.now();
            }
            // Waiting on for the batch, the lease is taken only while a whole drain fits
            // before the deadline: a drain cut short would only hand its lifecycle actions
            // on to a later run. Until the others are done, hooks kept.
            let drain_fits = self.clock.now() + drain_and_margins(pool) <= deadline;
            if self.clock.now() > give_up && !drain_fits {
                continue;
            }
            polls += 1;
            let tried = self.reconcile_counting(pool, events, Some(deadline), Some(working)).await;
            match tried {
                Err(ReconcileError::LeaseBusy { .. }) => continue,
                done => {
                    if polls > 1 {
                        tracing::info!(pool = %pool.name, polls, "the pool's lease was busy; got it after waiting");
                    }
                    return done;
                }
            }
        }
    }

    /// Lifecycle actions waiting for the pool's lease (another run drains, for minutes
    /// maybe) keep their hooks open: a heartbeat needs no lease and moves no capacity, and
    /// without one a hook whose heartbeat timeout is shorter than the wait ends with the
    /// node undrained. A failed heartbeat is only logged: the wait goes on regardless.
    async fn keep_hooks_open(&self, pool: &str, events: &[Event]) {
        if self.config.dry_run {
            return;
        }
        for event in events {
            let Signal::TerminateLifecycleAction(a) = &event.signal else { continue };
            let action = LifecycleRef {
                asg: a.asg.clone(),
                hook: a.hook.clone(),
                token: a.token.clone(),
                instance_id: a.instance_id.clone(),
            };
            if let Err(e) = lifecycle_call(self.autoscaling.record_lifecycle_heartbeat(&action).await) {
                tracing::warn!(pool, instance = %a.instance_id, error = %e, "could not keep the lifecycle hook open while waiting for the lease");
            }
        }
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

    /// Drops the events already handled for their pool (marked per pool: an event for two
    /// pools handled for one is still retried for the other).
    async fn drop_seen(&self, routed: Routed) -> Result<(Routed, Vec<String>), PortError> {
        let keys: Vec<String> =
            routed.iter().flat_map(|(pool, events)| events.iter().map(move |e| seen_key(pool, &e.id))).collect();
        let seen = if keys.is_empty() { BTreeSet::new() } else { self.store.seen(&keys).await? };
        let mut duplicates = Vec::new();
        let mut kept = Routed::new();
        for (pool, events) in routed {
            let (old, fresh): (Vec<Event>, Vec<Event>) =
                events.into_iter().partition(|e| seen.contains(&seen_key(&pool, &e.id)));
            duplicates.extend(old.into_iter().map(|e| e.id));
            if !fresh.is_empty() {
                kept.insert(pool, fresh);
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
            if let Signal::Ignored { why, warning } = &event.signal {
                let why = format!("ignored: {why}");
                unrouted.push(Unrouted { event_id: event.id.clone(), why, warning: *warning });
                continue;
            }
            if let Signal::ConfigChanged { parameter, operation } = &event.signal {
                let why =
                    format!("the config parameter {parameter} changed ({operation}): read again, no pool reconciled");
                unrouted.push(Unrouted { event_id: event.id.clone(), why, warning: false });
                continue;
            }
            // Every launch in the account comes by the launch rule: only a pool with a wait
            // target reads one, so without one nothing is described or reconciled for it.
            let for_targets_only = matches!(event.signal, Signal::LaunchSuccessful { .. });
            if for_targets_only && !self.config.pools.iter().any(|p| p.headroom.target.is_some()) {
                let why = "ignored: a successful launch only times a wait target's lead, and no pool has one";
                unrouted.push(Unrouted { event_id: event.id.clone(), why: why.into(), warning: false });
                continue;
            }
            if event.signal == Signal::Reconcile {
                pools.extend(self.config.pools.iter().map(|p| p.name.clone()));
            } else if let Some(name) = event.signal.named_pool() {
                if self.config.pool(name).is_some() {
                    pools.insert(name.to_string());
                } else {
                    unrouted.push(Unrouted {
                        event_id: event.id.clone(),
                        why: format!("names pool `{name}`, which is not in the config"),
                        warning: false,
                    });
                    continue;
                }
            } else {
                let by_name = event.signal.named_asg().and_then(|asg| {
                    self.config.pools.iter().find(|p| {
                        p.spot_asgs
                            .iter()
                            .chain(p.on_demand_asg.as_ref())
                            .any(|s| s == &AsgSelector::Name(asg.to_string()))
                    })
                });
                if let Some(pool) = by_name {
                    pools.insert(pool.name.clone());
                } else {
                    if view.is_none() {
                        let mut all = Vec::new();
                        for pool in &self.config.pools {
                            let (spot, od) = self.autoscaling.describe_pool(pool).await?;
                            all.push((pool.name.clone(), spot.into_iter().chain(od).collect()));
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
            if for_targets_only {
                pools.retain(|p| self.config.pool(p).is_some_and(|c| c.headroom.target.is_some()));
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
                    warning: false,
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
        let ((spot, on_demand), nodes, headroom_replicas, demand) = futures_util::future::try_join4(
            self.autoscaling.describe_pool(pool),
            self.cluster.pool_nodes(pool),
            self.cluster.headroom_replicas(pool),
            demand,
        )
        .await?;
        // Another pool's selectors taking one of these ASGs would size it twice: the pool
        // is refused before anything is planned.
        let listed = spot.iter().chain(&on_demand).map(|a| AsgRef { name: &a.name, tags: &a.tags });
        check_one_role(pool, &self.config.pools, listed)
            .map_err(|e| PortError::new(ErrorKind::Permanent, "describe_pool", e.to_string()))?;
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
        plan(PlanInput { pool, dry_run: self.config.dry_run, record, observed, events, now, run: &self.owner })
    }

    /// One pool: lease, observe, plan, write the record, apply.
    pub async fn reconcile(
        &self,
        pool: &PoolConfig,
        events: &[Event],
        deadline: Option<DateTime<Utc>>,
    ) -> Result<PoolOutcome, ReconcileError> {
        self.reconcile_counting(pool, events, deadline, None).await
    }

    /// As [`Self::reconcile`], counted in `working` from when the pool is its own (the
    /// lease taken, no other run draining) to the end.
    async fn reconcile_counting(
        &self,
        pool: &PoolConfig,
        events: &[Event],
        deadline: Option<DateTime<Utc>>,
        working: Option<&AtomicUsize>,
    ) -> Result<PoolOutcome, ReconcileError> {
        let name = pool.name.as_str();
        let urgency =
            if events.iter().any(|e| e.signal.cannot_wait()) { Urgency::CannotWait } else { Urgency::CanWait };
        let mut lease = Lease { ttl: LEASE_TTL, until: self.clock.now(), urgency };
        if !self
            .store
            .acquire_lease(name, &self.owner, lease.until, lease.ttl, lease.urgency)
            .await
            .map_err(ReconcileError::port(name))?
        {
            return Err(ReconcileError::LeaseBusy { pool: name.to_string() });
        }
        lease.until += chrono::Duration::from_std(lease.ttl).unwrap_or(chrono::Duration::MAX);
        let result = self.reconcile_leased(pool, events, deadline, &mut lease, working).await;
        // A lease left behind expires on its own; failing to release is only logged.
        if let Err(e) = self.store.release_lease(name, &self.owner).await {
            tracing::warn!(pool = name, error = %e, "could not release the lease; it expires on its own");
        }
        result
    }

    async fn reconcile_leased(
        &self,
        pool: &PoolConfig,
        events: &[Event],
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
            let observed = self.observe(pool, &record, events, now).await.map_err(ReconcileError::port(name))?;
            let mut plan = self.plan_for(pool, &record, &observed, events, now);
            // Each plan supersedes the last: whoever drained for it is done or left the
            // rest to this one.
            plan.record.draining = None;
            if dry_run {
                // The shadow record keeps the memory (grace, failback, rates) so the logs
                // show what a live run would do, tick after tick; nothing is applied, so
                // the calls are taken as made.
                plan.record.journal = None;
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
                Ok(applied) => {
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
                Err((failed_at, source)) => {
                    self.take_back_intent(&key, &plan, failed_at, run.record.clone(), run.version).await;
                    Err(ReconcileError::Apply { pool: name.to_string(), plan: Box::new(plan), failed_at, source })
                }
            };
        }
        Err(ReconcileError::Contention { pool: name.to_string() })
    }

    /// Before a mutating call: the lease is still ours (renewed when half its time is
    /// gone) and the deadline is not near. A run that lost its lease stops applying.
    async fn may_act(&self, run: &mut Run<'_>) -> Result<(), PortError> {
        let now = self.clock.now();
        if let Some(deadline) = run.deadline.filter(|d| now >= *d - DEADLINE_MARGIN) {
            return Err(PortError::new(
                ErrorKind::Retryable,
                "apply",
                format!(
                    "pool {}: the function's deadline {} is within {}s of now ({}); the rest is left to the next run",
                    run.pool.name,
                    deadline.to_rfc3339(),
                    DEADLINE_MARGIN.num_seconds(),
                    now.to_rfc3339()
                ),
            ));
        }
        let ttl = chrono::Duration::from_std(run.lease.ttl).unwrap_or(chrono::Duration::MAX);
        if now + ttl / 2 >= run.lease.until {
            if !self.store.acquire_lease(&run.pool.name, &self.owner, now, run.lease.ttl, run.lease.urgency).await? {
                return Err(PortError::new(
                    ErrorKind::Retryable,
                    "lease",
                    format!("pool {}: the lease expired and another run holds it; stopped applying", run.pool.name),
                ));
            }
            run.lease.until = now + ttl;
        }
        Ok(())
    }

    /// After a failed apply: the intent of what did not happen taken back, so the retry
    /// does it (the journal already tells which capacity calls were made). Into the
    /// record as another run left it if one saved since (one that took over a drain
    /// holds this plan's lifecycle actions as planned).
    async fn take_back_intent(
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

    /// Before drains: the record says who drains until when (scheduled ticks stand down
    /// meanwhile), and the lease is let go, so that an event arriving during a drain
    /// that may take minutes (a spot warning for another node, a launch failure) is acted
    /// on at once by its own run, not after the drain.
    async fn lend_lease(&self, run: &mut Run<'_>, longest: Duration) -> Result<(), PortError> {
        let longest = chrono::Duration::from_std(longest + LEASE_AFTER_DRAIN).unwrap_or(chrono::Duration::MAX);
        let until = self.clock.now().checked_add_signed(longest).unwrap_or(DateTime::<Utc>::MAX_UTC);
        run.record.draining = Some(Draining { owner: self.owner.clone(), until });
        run.version = self.store.save(run.key, &run.record, run.version).await?;
        if let Err(e) = self.store.release_lease(&run.pool.name, &self.owner).await {
            tracing::warn!(pool = %run.pool.name, error = %e, "could not let the lease go for the drain; held through it");
        }
        run.lease.until = self.clock.now();
        Ok(())
    }

    /// After drains: the lease taken back, if no other run planned the pool meanwhile
    /// (the record is where this run left it). False: the rest of the plan is not this
    /// run's any more. A lease held without the record changing (a tick standing down,
    /// another drainer taking its own back) is waited for, briefly: only a run that
    /// planned takes the rest over, and any run that plans writes the record.
    async fn take_back_lease(&self, run: &mut Run<'_>) -> Result<bool, PortError> {
        let give_up = self.clock.now() + LEASE_WAIT;
        let mut polls = 0;
        loop {
            if self.store.load(run.key).await?.version != run.version {
                return Ok(false);
            }
            let now = self.clock.now();
            if self.store.acquire_lease(&run.pool.name, &self.owner, now, run.lease.ttl, run.lease.urgency).await? {
                run.lease.until = now + chrono::Duration::from_std(run.lease.ttl).unwrap_or(chrono::Duration::MAX);
                if self.store.load(run.key).await?.version != run.version {
                    return Ok(false);
                }
                run.record.draining = None;
                return match self.store.save(run.key, &run.record, run.version).await {
                    Ok(version) => {
                        run.version = version;
                        Ok(true)
                    }
                    Err(e) if e.kind == ErrorKind::Conflict => Ok(false),
                    Err(e) => Err(e),
                };
            }
            let pause = lease_poll(&self.owner, polls);
            let late = run
                .deadline
                .is_some_and(|d| now + chrono::Duration::from_std(pause).unwrap_or_default() >= d - DEADLINE_MARGIN);
            if late || now >= give_up {
                return Err(PortError::new(
                    ErrorKind::Retryable,
                    "lease",
                    format!("pool {}: the lease, let go for the drain, is still held by another run; the rest is left to the next run", run.pool.name),
                ));
            }
            self.clock.sleep(pause).await;
            polls += 1;
        }
    }

    /// Marks the journal's next open call for this effect done (or rewrites it first,
    /// with `rewrite`, when what will be sent differs from the plan) and saves.
    async fn journal(
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
    async fn reach(&self, plan: &Plan, index: usize, run: &mut Run<'_>) -> Result<(), PortError> {
        let position = plan.actions[..index].iter().filter(|a| is_capacity_call(&a.kind)).count();
        let Some(journal) = run.record.journal.as_ref() else { return Ok(()) };
        if position < journal.attempted {
            return Ok(());
        }
        let run_len = plan.actions[index..].iter().take_while(|a| is_capacity_call(&a.kind)).count();
        let mut rebased = Vec::new();
        for call in journal.calls.iter().skip(position).take(run_len) {
            if let CapacityCall::SetDesired { asg, from, to, .. } = call {
                let size = self.autoscaling.asg_size(asg).await?;
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

    async fn set_desired(&self, run: &mut Run<'_>, asg: &str, planned_from: u32) -> Result<Applied, PortError> {
        let is_call = |c: &CapacityCall| matches!(c, CapacityCall::SetDesired { asg: a, done: false, .. } if a == asg);
        let Some((from, to)) = run.record.journal.as_ref().and_then(|j| {
            j.calls.iter().find(|c| is_call(c)).and_then(|c| match c {
                CapacityCall::SetDesired { from, to, .. } => Some((*from, *to)),
                CapacityCall::Terminate { .. } => None,
            })
        }) else {
            return Ok(Applied::Skipped { why: format!("{asg}: no open call in the journal") });
        };
        let (from, to) = self.settle_size(run, asg, from, to, is_call).await?;
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
    ) -> Result<(u32, u32), PortError> {
        for _ in 0..SETTLE_ATTEMPTS {
            let size = self.autoscaling.asg_size(asg).await?;
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
            "set_desired_capacity",
            format!("{asg} kept changing under {SETTLE_ATTEMPTS} reads; not written, the next run plans afresh"),
        ))
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
            let size = self.autoscaling.asg_size(asg).await?;
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
            if e.kind == ErrorKind::Permanent && !self.still_in(run.pool, asg, instance_id).await? {
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
                    CapacityCall::SetDesired { asg, from, to, done: true } if to > from => Some(asg.as_str()),
                    _ => None,
                })
                .filter_map(|asg| Some((asg, i64::from(journal.landed_on(asg)?.0?))))
                .collect(),
        };
        for (asg, want) in wanted {
            let size = self.autoscaling.asg_size(asg).await?;
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

    /// Carries out the plan's effects in order; stops at the first failure, since
    /// later actions rely on earlier ones (a terminate-with-decrement on its surge).
    /// Consecutive drains run together, each cut short to end before the deadline.
    async fn apply(&self, plan: &Plan, run: &mut Run<'_>) -> Result<Vec<Applied>, (usize, PortError)> {
        let mut applied = Vec::new();
        let mut drained: BTreeMap<String, bool> = BTreeMap::new();
        // By lifecycle action token: whether its drain lets it be completed.
        let mut hooks: BTreeMap<String, AfterDrain> = BTreeMap::new();
        let mut index = 0;
        while index < plan.actions.len() {
            let action = &plan.actions[index];
            if !matches!(action.kind, ActionKind::RecordState) {
                self.may_act(run).await.map_err(|e| (index, e))?;
            }
            if is_capacity_call(&action.kind) {
                self.reach(plan, index, run).await.map_err(|e| (index, e))?;
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
                self.lend_lease(run, longest).await.map_err(|e| (index, e))?;
                let results = futures_util::future::join_all(drains.iter().map(|a| {
                    let ActionKind::DrainNode { node, lifecycle, .. } = &a.kind else { unreachable!() };
                    self.drain(node, timeout_of(a), lifecycle.as_ref())
                }))
                .await;
                for (offset, (action, result)) in drains.iter().zip(results).enumerate() {
                    let ActionKind::DrainNode { instance_id, lifecycle, timeout, .. } = &action.kind else {
                        unreachable!()
                    };
                    let report = result.map_err(|e| (index + offset, e))?;
                    if let Some(l) = lifecycle {
                        hooks.insert(l.token.clone(), after_drain(report.complete(), timeout_of(action), timeout.0));
                    }
                    drained.insert(instance_id.clone(), report.complete());
                    applied.push(Applied::Drained(report));
                }
                index += drains.len();
                if !self.take_back_lease(run).await.map_err(|e| (index, e))? {
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
                            applied.push(done.map_err(|e| (at, e))?);
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
                ActionKind::SetHeadroomReplicas { to, .. } => {
                    self.cluster.set_headroom_replicas(run.pool, *to).await.map(|_| Applied::Done)
                }
            };
            match result {
                Ok(a) => applied.push(a),
                Err(e) => return Err((index, e)),
            }
            index += 1;
        }
        Ok(applied)
    }
}

/// How one pool of a batch ended: reconciled (or failed), or covered by the run
/// holding its lease.
enum PoolRun {
    Covered,
    Done(Box<Result<PoolOutcome, ReconcileError>>),
}

/// The lease: held until `until`, renewed for `ttl`, taken in the turn `urgency` gives.
struct Lease {
    ttl: Duration,
    until: DateTime<Utc>,
    urgency: Urgency,
}

/// One plan being applied: the record as journaled so far and its version.
struct Run<'a> {
    pool: &'a PoolConfig,
    key: &'a str,
    record: PoolRecord,
    version: u64,
    deadline: Option<DateTime<Utc>>,
    lease: &'a mut Lease,
}

fn is_capacity_call(kind: &ActionKind) -> bool {
    matches!(kind, ActionKind::SetDesiredCapacity { .. } | ActionKind::TerminateInstance { .. })
}

fn mark_done(call: &mut CapacityCall) {
    match call {
        CapacityCall::SetDesired { done, .. } | CapacityCall::Terminate { done, .. } => *done = true,
    }
}

/// Time beyond the longest drain before a run that died in it is taken as dead by ticks.
const LEASE_AFTER_DRAIN: Duration = Duration::from_secs(60);

/// Events grouped by the pool they concern.
type Routed = BTreeMap<String, Vec<Event>>;

/// What marks an event handled for a pool.
pub fn seen_key(pool: &str, event_id: &str) -> String {
    format!("{pool}#{event_id}")
}

/// Drops the repeats within a batch (SQS delivers at least once).
fn drop_repeats(events: Vec<Event>) -> (Vec<Event>, Vec<String>) {
    let mut in_batch = BTreeSet::new();
    let (kept, repeats): (Vec<Event>, Vec<Event>) = events.into_iter().partition(|e| in_batch.insert(e.id.clone()));
    (kept, repeats.into_iter().map(|e| e.id).collect())
}

/// A wait for a busy lease ends this long before the deadline, for the run itself.
const KEPT_AFTER_LEASE_WAIT: chrono::Duration = chrono::Duration::seconds(60);
/// The longest wait for a busy lease in an SQS batch: runs hold it for seconds (drains
/// let it go); one that died holding it is outlasted by the queue's retries.
pub const LEASE_WAIT: chrono::Duration = chrono::Duration::seconds(15);

/// A run of a batch at work on its pool, counted while this lives.
struct AtWork<'a>(&'a AtomicUsize);

impl<'a> AtWork<'a> {
    fn new(working: &'a AtomicUsize) -> AtWork<'a> {
        working.fetch_add(1, Ordering::SeqCst);
        AtWork(working)
    }
}

impl Drop for AtWork<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a run taking the lease needs before the deadline to drain whole: the pool's
/// `drain_timeout` and what the config's function timeout check allows beside it.
fn drain_and_margins(pool: &PoolConfig) -> chrono::Duration {
    chrono::Duration::from_std(pool.interruption.drain_timeout.0 + crate::config::FUNCTION_TIMEOUT_MARGIN)
        .unwrap_or(chrono::Duration::MAX)
}

/// One to two seconds between tries for a busy lease, spread by the run's owner id so
/// that runs waiting for the same pool do not try in step.
fn lease_poll(owner: &str, poll: u64) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (owner, poll).hash(&mut hasher);
    Duration::from_millis(1_000 + hasher.finish() % 1_000)
}

/// Two minutes, whatever the pool's `drain_timeout`: the lease is let go during drains
/// and renewed before each call once half of it is gone, so it covers only observing,
/// planning and a call; a run that dies holding it (killed, out of memory) delays the
/// pool's next spot warning by no more than this.
pub const LEASE_TTL: Duration = Duration::from_secs(120);

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

/// A lifecycle hook call answered "No active Lifecycle Action found" (AWS's wording):
/// the action is over (completed by an earlier run whose answer was lost, or timed out
/// and the hook's default result taken). Nothing is left to do: not a failure to
/// dead-letter.
fn lifecycle_call(result: Result<(), PortError>) -> Result<Applied, PortError> {
    match result {
        Ok(()) => Ok(Applied::Done),
        Err(e) if e.kind == ErrorKind::Permanent && e.message.contains("No active Lifecycle Action found") => {
            Ok(Applied::Skipped { why: format!("the lifecycle action is over: {}", e.message) })
        }
        Err(e) => Err(e),
    }
}

/// A planned `from -> to` moved onto the ASG's size now. A raise that no longer fits
/// whole under the ASG's max (another writer raised it meanwhile) is not made: the
/// lowers and terminations it pays for would take more than it adds, so the run stops
/// and the next one plans afresh from what is there.
fn rebase(asg: &str, from: u32, to: u32, size: &crate::observe::AsgSize) -> Result<u32, PortError> {
    let delta = i64::from(to) - i64::from(from);
    let target = size.shifted(delta);
    let fits = i64::from(target) - i64::from(size.desired);
    if delta > 0 && fits < delta {
        return Err(PortError::new(
            ErrorKind::Retryable,
            "set_desired_capacity",
            format!(
                "{asg} is at {} now, not {from} as planned: only {fits} of the raise of {delta} fits under its max {}; \
                 not made, the next run plans afresh",
                size.desired, size.max
            ),
        ));
    }
    Ok(target)
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

#[cfg(test)]
mod tests {
    use super::rebase;
    use crate::observe::AsgSize;

    #[test]
    fn a_raise_that_no_longer_fits_under_max_is_not_made() {
        let size = |desired| AsgSize { desired, min: 0, max: 10, live: desired };
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
    }
}
