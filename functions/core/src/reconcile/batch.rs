//! A batch of events: repeats and handled events dropped, the rest routed to their
//! pools, the pools reconciled together, each under its own lease.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicUsize;

use super::{BatchOutcome, BatchStage, Budget, PoolOutcome, ReconcileError, Reconciler, Unrouted, DEDUP_FOR};
use crate::config::{AsgSelector, PoolConfig};
use crate::event::{Event, Signal};
use crate::observe::{LaunchedBy, ObservedPool};
use crate::plan::Plan;
use crate::ports::{Autoscaling, Clock, Cluster, PortError, StateStore};

impl<A: Autoscaling, C: Cluster, S: StateStore, K: Clock> Reconciler<A, C, S, K> {
    /// The batch's events by the pools they concern, repeats and handled events dropped
    /// (as duplicates in `outcome`), those of no pool put in `outcome` as unrouted. `None`:
    /// a failure before the batch was split per pool, put in `outcome` against every event.
    pub(super) async fn dedup_and_route(&self, events: Vec<Event>, outcome: &mut BatchOutcome) -> Option<Routed> {
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
                return None;
            }
        };
        let routed = match self.route(fresh).await {
            Ok((routed, unrouted)) => {
                outcome.unrouted = unrouted;
                routed
            }
            Err(source) => {
                outcome.failures.push((ReconcileError::Batch { stage: BatchStage::Routing, source }, all_ids));
                return None;
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
                return None;
            }
        };
        Some(routed)
    }

    /// Reconciles each routed pool once, within `budget`; puts what came of each in
    /// `outcome`. Returns the ids of the events of the pools that succeeded.
    pub(super) async fn reconcile_pools(
        &self,
        routed: Routed,
        budget: Budget,
        outcome: &mut BatchOutcome,
    ) -> Vec<String> {
        let Budget { deadline, lease_wait } = budget;
        // Pools are reconciled together, each under its own lease: one pool's drain, or its
        // wait for a lease another run holds, never holds back another pool's spot warning.
        let Routed { pools, located } = routed;
        let located = &located;
        let runs: Vec<_> =
            pools.into_iter().filter_map(|(pool, events)| self.config.pool(&pool).map(|cfg| (cfg, events))).collect();
        // Runs of the batch at work (not waiting for a lease): while one is, the
        // invocation lasts anyway, so a run waiting for its pool's lease waits on (its
        // hooks kept open) instead of failing for a retry that could only come after it.
        let working = &AtomicUsize::new(0);
        let results = futures_util::future::join_all(runs.into_iter().map(|(pool_cfg, events)| async move {
            let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
            let first = self.reconcile_counting(pool_cfg, &events, located, deadline, Some(working)).await;
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
                            self.reconcile_when_free(pool_cfg, &events, located, deadline, lease_wait, working).await,
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
        handled
    }

    /// Each pool marked its events handled for itself; an event no pool failed is also
    /// marked handled as a whole. If that fails, the per-pool marks still hold.
    pub(super) async fn mark_batch_handled(&self, handled: &[String], outcome: &BatchOutcome) {
        let failed: BTreeSet<&String> = outcome.failures.iter().flat_map(|(_, ids)| ids).collect();
        let whole: Vec<String> =
            handled.iter().filter(|id| !failed.contains(id)).cloned().collect::<BTreeSet<_>>().into_iter().collect();
        if !whole.is_empty() && !self.config.dry_run {
            if let Err(e) = self.store.mark_seen(&whole, self.clock.now() + DEDUP_FOR).await {
                tracing::warn!(error = %e, "could not mark the batch's events handled as a whole; each pool's mark holds");
            }
        }
    }

    /// Plans every pool the events concern, without a lease and without acting.
    pub async fn plan_only(&self, events: Vec<Event>) -> Result<(Vec<Plan>, Vec<Unrouted>), PortError> {
        let (routed, unrouted) = self.route(events).await?;
        let mut plans = Vec::new();
        for (pool, events) in routed.pools {
            let Some(pool_cfg) = self.config.pool(&pool) else { continue };
            let record = self.store.load(&pool).await?;
            let now = self.clock.now();
            let mut observed = self.observe(pool_cfg, &record.value, &events, now).await?;
            observed.left = routed.located.left(&observed);
            plans.push(self.plan_for(pool_cfg, &record.value, &observed, &events, now));
        }
        Ok((plans, unrouted))
    }

    /// Drops the events handled for every pool they concerned.
    async fn drop_handled(&self, events: Vec<Event>) -> Result<(Vec<Event>, Vec<String>), PortError> {
        let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
        let seen = if ids.is_empty() { BTreeSet::new() } else { self.store.seen(&ids).await? };
        let (handled, fresh): (Vec<Event>, Vec<Event>) = events.into_iter().partition(|e| seen.contains(&e.id));
        Ok((fresh, handled.into_iter().map(|e| e.id).collect()))
    }

    /// Drops the events already handled for their pool (marked per pool: an event for two
    /// pools handled for one is still retried for the other).
    async fn drop_seen(&self, routed: Routed) -> Result<(Routed, Vec<String>), PortError> {
        let keys: Vec<String> =
            routed.pools.iter().flat_map(|(pool, events)| events.iter().map(move |e| seen_key(pool, &e.id))).collect();
        let seen = if keys.is_empty() { BTreeSet::new() } else { self.store.seen(&keys).await? };
        let mut duplicates = Vec::new();
        let mut kept = Routed { pools: BTreeMap::new(), located: routed.located };
        for (pool, events) in routed.pools {
            let (old, fresh): (Vec<Event>, Vec<Event>) =
                events.into_iter().partition(|e| seen.contains(&seen_key(&pool, &e.id)));
            duplicates.extend(old.into_iter().map(|e| e.id));
            if !fresh.is_empty() {
                kept.pools.insert(pool, fresh);
            }
        }
        Ok((kept, duplicates))
    }

    /// Which pool each event concerns. An instance's ASG, and a tag-selected ASG's tags,
    /// are looked up once per batch, for the events that need them.
    async fn route(&self, events: Vec<Event>) -> Result<(Routed, Vec<Unrouted>), PortError> {
        let mut routed = Routed::default();
        let mut unrouted = Vec::new();
        let located = self.locate(&events).await?;
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
                if let Some(pool) = self.pool_naming(&event.signal) {
                    pools.insert(pool.name.clone());
                } else {
                    let instances = event.signal.instance_ids();
                    let asgs = event
                        .signal
                        .named_asg()
                        .into_iter()
                        .chain(instances.iter().filter_map(|id| located.asg_of(id)));
                    for asg in asgs {
                        pools.extend(located.pools_selecting(&self.config.pools, asg).map(|p| p.name.clone()));
                    }
                }
            }
            if for_targets_only {
                pools.retain(|p| self.config.pool(p).is_some_and(|c| c.headroom.target.is_some()));
            }
            if pools.is_empty() {
                let why = match (event.signal.named_asg(), event.signal.instance_ids().first()) {
                    (Some(asg), _) => format!("ASG {asg} is in none of the configured pools"),
                    (None, Some(id)) => located.why_unrouted(id),
                    _ => "its subject is in none of the configured pools".into(),
                };
                unrouted.push(Unrouted { event_id: event.id.clone(), why, warning: false });
            }
            for pool in pools {
                routed.pools.entry(pool).or_default().push(event.clone());
            }
        }
        routed.located = located;
        Ok((routed, unrouted))
    }

    /// The pool selecting the signal's ASG by its name.
    fn pool_naming(&self, signal: &Signal) -> Option<&PoolConfig> {
        let asg = signal.named_asg()?;
        self.config.pools.iter().find(|p| {
            p.spot_asgs.iter().chain(p.on_demand_asg.as_ref()).any(|s| s == &AsgSelector::Name(asg.to_string()))
        })
    }

    /// The ASGs of the batch's instances (and the tags of those and of the named ASGs,
    /// when a pool selects by tags): two small lookups instead of describing every pool.
    /// An instance Auto Scaling no longer lists (an event redelivered after it left its
    /// ASG) is looked up by the tag EC2 gave it at launch: its going concerns that pool.
    async fn locate(&self, events: &[Event]) -> Result<Located, PortError> {
        let (instances, named) = self.to_locate(events);
        let instance_asgs =
            if instances.is_empty() { BTreeMap::new() } else { self.autoscaling.asgs_of_instances(&instances).await? };
        let unlisted: Vec<String> = instances.into_iter().filter(|id| !instance_asgs.contains_key(id)).collect();
        let launched_by =
            if unlisted.is_empty() { BTreeMap::new() } else { self.autoscaling.launched_by(&unlisted).await? };
        let names: Vec<String> = named
            .into_iter()
            .chain(instance_asgs.values().cloned())
            .chain(launched_by.values().filter_map(|l| l.asg.clone()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let tags_read = !names.is_empty() && self.selects_by_tags();
        let tags = if tags_read { self.autoscaling.asg_tags(&names).await? } else { BTreeMap::new() };
        Ok(Located { instance_asgs, launched_by, tags, tags_read })
    }

    /// The instances, and the ASGs by name, that the events routed by neither the config
    /// alone nor a pool's name concern.
    fn to_locate(&self, events: &[Event]) -> (Vec<String>, Vec<String>) {
        let targets = self.config.pools.iter().any(|p| p.headroom.target.is_some());
        let mut instances = BTreeSet::new();
        let mut named = BTreeSet::new();
        for event in events {
            let located_by_config = match &event.signal {
                Signal::Ignored { .. } | Signal::ConfigChanged { .. } | Signal::Reconcile => true,
                Signal::LaunchSuccessful { .. } if !targets => true,
                signal => signal.named_pool().is_some() || self.pool_naming(signal).is_some(),
            };
            if located_by_config {
                continue;
            }
            // An event naming its ASG (a lifecycle action, a launch) is routed by that ASG;
            // its instance is in it.
            match event.signal.named_asg() {
                Some(asg) => {
                    named.insert(asg.to_string());
                }
                None => instances.extend(event.signal.instance_ids().iter().map(|id| id.to_string())),
            }
        }
        (instances.into_iter().collect(), named.into_iter().collect())
    }

    fn selects_by_tags(&self) -> bool {
        self.config
            .pools
            .iter()
            .flat_map(|p| p.spot_asgs.iter().chain(p.on_demand_asg.as_ref()))
            .any(|s| matches!(s, AsgSelector::Tags(_)))
    }
}

/// How one pool of a batch ended: reconciled (or failed), or covered by the run
/// holding its lease.
enum PoolRun {
    Covered,
    Done(Box<Result<PoolOutcome, ReconcileError>>),
}

/// Events grouped by the pool they concern.
/// A batch's events by pool, and where its instances and ASGs are (looked up for the
/// routing; a spot warning's surge ahead of the full plan needs it again).
#[derive(Default)]
pub(super) struct Routed {
    pools: BTreeMap<String, Vec<Event>>,
    located: Located,
}

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

/// Where the batch's instances and ASGs are: each instance's ASG, each ASG's tags.
#[derive(Debug, Default)]
pub(crate) struct Located {
    /// The ASG each instance is in, as Auto Scaling lists it.
    pub(super) instance_asgs: BTreeMap<String, String>,
    /// Of the instances Auto Scaling does not list, those EC2 knows: the ASG that
    /// launched each. Routed by, not taken as in that ASG now.
    pub(super) launched_by: BTreeMap<String, LaunchedBy>,
    /// The tags of the ASGs that have any (read only when a pool selects by tags).
    pub(super) tags: BTreeMap<String, BTreeMap<String, String>>,
    /// Whether `tags` was read: an ASG missing from it then has none.
    pub(super) tags_read: bool,
}

impl Located {
    /// The ASG the instance is in, or that launched it if it has left.
    fn asg_of(&self, instance_id: &str) -> Option<&str> {
        let launched_by = || self.launched_by.get(instance_id).and_then(|l| l.asg.as_deref());
        self.instance_asgs.get(instance_id).map(String::as_str).or_else(launched_by)
    }

    /// The instances that have left one of the pool's ASGs, as EC2 still lists them.
    pub(super) fn left(&self, observed: &ObservedPool) -> BTreeMap<String, LaunchedBy> {
        let of_the_pool = |l: &LaunchedBy| l.asg.as_deref().is_some_and(|asg| observed.asg(asg).is_some());
        self.launched_by.iter().filter(|(_, l)| of_the_pool(l)).map(|(id, l)| (id.clone(), l.clone())).collect()
    }

    /// Why an instance routed to no pool: where it was looked for and what was found.
    fn why_unrouted(&self, instance_id: &str) -> String {
        let listed = self.instance_asgs.get(instance_id);
        match (listed, self.launched_by.get(instance_id).map(|l| l.asg.as_deref())) {
            (Some(asg), _) => {
                format!("instance {instance_id} is in ASG {asg}, which none of the configured pools selects")
            }
            (None, Some(Some(asg))) => format!(
                "instance {instance_id} has left ASG {asg} (its aws:autoscaling:groupName tag), which none of the \
                 configured pools selects"
            ),
            (None, Some(None)) => format!(
                "instance {instance_id} is in no ASG and no ASG launched it (EC2 lists it without an \
                 aws:autoscaling:groupName tag): it is in none of the configured pools"
            ),
            (None, None) => format!(
                "instance {instance_id} is in no ASG, and EC2 does not list it (gone for over an hour, or never \
                 there): it is in none of the configured pools"
            ),
        }
    }

    /// The pools one of whose selectors takes the ASG (two pools taking it are refused
    /// when each is observed).
    fn pools_selecting<'p>(&self, pools: &'p [PoolConfig], asg: &str) -> impl Iterator<Item = &'p PoolConfig> {
        let no_tags = BTreeMap::new();
        let tags = self.tags.get(asg).cloned().unwrap_or(no_tags);
        let asg = asg.to_string();
        pools.iter().filter(move |p| p.spot_asgs.iter().chain(p.on_demand_asg.as_ref()).any(|s| s.matches(&asg, &tags)))
    }
}
