//! The ports Ballast runs on in the simulation: a view of the simulated pool kept in
//! step with the model (ASGs, instances, nodes, pods, scaling activities), Ballast's
//! state store, and the calls Ballast made through them, turned into calls on the model.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use ballast_core::asg_emulator as asgs;
use ballast_core::config::PoolConfig;
use ballast_core::observe::{
    ActivityStatus, AsgInstance, AsgSize, Demand, LaunchedBy, LifecycleState, Market as CoreMarket, NodeState,
    ObservedAsg, ScalingActivity,
};
use ballast_core::plan::LifecycleRef;
use ballast_core::ports::{
    may_take_lease, note_lease_claim, Autoscaling, Cluster, DrainReport, ErrorKind, PortError, StateStore, Urgency,
    Versioned,
};
use ballast_core::record::PoolRecord;
use ballast_core::shape::{PodShape, SlotState};
use ballast_core::snapshot::pool_asgs;
use chrono::{DateTime, Utc};

use crate::cluster::{NodeId, NodePhase, Requests};
use crate::model::PausePods;
use crate::model::{Call, Model};
use crate::scenario::{Market, Scenario};

use super::{instance_id, node_name, node_of_instance, node_of_name, pool_names, NO_SPOT_MESSAGE};

/// A change Ballast made through its ports, as they recorded it.
#[derive(Debug)]
pub(super) enum PortCall {
    SetDesired { asg: String, desired: u32 },
    Terminate { instance_id: String, decrement: bool },
    Cordon { node: String },
    Uncordon { node: String },
    Drain { node: String },
    SetHeadroom { pool: usize, slot: usize, shape: PodShape, replicas: u32 },
}

/// How long a failed launch stays in an ASG's scaling activities.
const ACTIVITY_SHOWN_MS: u64 = 600_000;

/// A node of the view: what the cluster port answers, and the pods a drain evicts.
#[derive(Debug)]
pub(super) struct ViewNode {
    pub(super) state: NodeState,
    pub(super) group: usize,
    pub(super) pods: u32,
}

/// What Ballast observes of the simulated pool (one ASG per scenario group, in order;
/// their nodes, group by group), and Ballast's state store.
#[derive(Debug)]
pub(super) struct View {
    pub(super) asgs: Vec<ObservedAsg>,
    /// Per ASG: the simulated node behind each instance, in the same order.
    pub(super) members: Vec<Vec<NodeId>>,
    /// Per ASG: when the launch failure its activities show happened.
    pub(super) failure_shown: Vec<Option<u64>>,
    pub(super) nodes: Vec<ViewNode>,
    /// The simulated node behind each of `nodes`.
    pub(super) node_ids: Vec<NodeId>,
    /// Scratch: a simulated node's position in the list being rebuilt.
    pub(super) position: Vec<usize>,
    /// Per pool, in the scenario's order: its name, its demand and its pause pods.
    pub(super) pools: Vec<String>,
    pub(super) demand: Vec<Option<Demand>>,
    pub(super) headroom: Vec<Vec<SlotState>>,
    pub(super) records: BTreeMap<String, Versioned<PoolRecord>>,
    pub(super) leases: BTreeMap<String, (String, DateTime<Utc>)>,
    pub(super) lease_claims: BTreeMap<String, DateTime<Utc>>,
    pub(super) seen: BTreeSet<String>,
    pub(super) calls: Vec<PortCall>,
}

fn lifecycle(phase: NodePhase) -> LifecycleState {
    if phase == NodePhase::Ready {
        LifecycleState::InService
    } else {
        LifecycleState::Pending
    }
}

/// Moves the entries of `old` (standing for `old_ids`) into the order of `new_ids`,
/// building the missing ones with `make`; `position` is scratch indexed by node id.
fn reorder<T>(
    old: Vec<T>,
    old_ids: &[NodeId],
    new_ids: &[NodeId],
    position: &mut Vec<usize>,
    mut make: impl FnMut(NodeId) -> T,
) -> Vec<T> {
    let mut old: Vec<Option<T>> = old.into_iter().map(Some).collect();
    for (i, &n) in old_ids.iter().enumerate() {
        if position.len() <= n {
            position.resize(n + 1, usize::MAX);
        }
        position[n] = i;
    }
    new_ids
        .iter()
        .map(|&n| {
            let kept = position.get(n).filter(|&&i| old_ids.get(i) == Some(&n)).and_then(|&i| old[i].take());
            kept.unwrap_or_else(|| make(n))
        })
        .collect()
}

impl View {
    pub(super) fn new(sc: &Scenario) -> View {
        let asgs = sc
            .groups
            .iter()
            .map(|spec| ObservedAsg {
                name: spec.name.clone(),
                tags: BTreeMap::new(),
                desired: spec.initial,
                min: spec.min,
                max: spec.max,
                instances: Vec::new(),
                activities: Vec::new(),
            })
            .collect();
        View {
            asgs,
            members: vec![Vec::new(); sc.groups.len()],
            failure_shown: vec![None; sc.groups.len()],
            nodes: Vec::new(),
            node_ids: Vec::new(),
            position: Vec::new(),
            pools: pool_names(sc),
            demand: vec![None; sc.pools().len()],
            headroom: vec![Vec::new(); sc.pools().len()],
            records: BTreeMap::new(),
            leases: BTreeMap::new(),
            lease_claims: BTreeMap::new(),
            seen: BTreeSet::new(),
            calls: Vec::new(),
        }
    }

    /// Brings the view in step with the model: every field as the model has it now;
    /// instances and nodes are built only for simulated nodes not seen before.
    pub(super) fn sync(&mut self, model: &Model, now: u64, start: DateTime<Utc>) {
        let sc = model.sc;
        let time = |ms: u64| start + chrono::Duration::milliseconds(ms as i64);
        let mut moved = false;
        for (g, state) in model.asgs.iter().enumerate() {
            let spec = &sc.groups[g];
            let asg = &mut self.asgs[g];
            asg.desired = state.desired;
            if self.members[g] != state.nodes {
                moved = true;
                let market = match spec.market {
                    Market::Spot => CoreMarket::Spot,
                    Market::OnDemand => CoreMarket::OnDemand,
                };
                let instances = std::mem::take(&mut asg.instances);
                // An instance carries what the reconcile reads: its id, lifecycle state and
                // market. Its zone and type stay empty, since the planner reads neither
                // (`snapshot::tests::plans_do_not_depend_on_instance_zones_or_types`), and
                // every reconcile copies each instance: two strings fewer per instance
                // is a third of the simulator's cost of running Ballast.
                asg.instances =
                    reorder(instances, &self.members[g], &state.nodes, &mut self.position, |n| AsgInstance {
                        id: instance_id(n),
                        lifecycle_state: LifecycleState::Pending,
                        availability_zone: String::new(),
                        instance_type: String::new(),
                        market,
                    });
                self.members[g].clone_from(&state.nodes);
            }
            for (instance, &n) in asg.instances.iter_mut().zip(&state.nodes) {
                instance.lifecycle_state = lifecycle(model.cluster.nodes[n].phase);
            }
            let shown = state.failures.last().copied().filter(|&t| t + ACTIVITY_SHOWN_MS > now);
            if shown != self.failure_shown[g] {
                self.failure_shown[g] = shown;
                asg.activities = shown
                    .map(|t| ScalingActivity {
                        id: format!("activity-{t}-{}", spec.name),
                        status: ActivityStatus::Failed,
                        description: String::new(),
                        status_message: NO_SPOT_MESSAGE.into(),
                        cause: String::new(),
                        start: time(t),
                        end: Some(time(t)),
                    })
                    .into_iter()
                    .collect();
            }
        }
        if moved {
            let ids: Vec<NodeId> = model.asgs.iter().flat_map(|s| s.nodes.iter().copied()).collect();
            let nodes = std::mem::take(&mut self.nodes);
            self.nodes = reorder(nodes, &self.node_ids, &ids, &mut self.position, |n| ViewNode {
                state: NodeState {
                    allocatable: {
                        let node = &model.cluster.nodes[n];
                        Some(shape_of(Requests { cpu: node.cpu, mem: node.mem, gpu: node.gpu }))
                    },
                    name: node_name(n),
                    instance_id: instance_id(n),
                    ready: false,
                    unschedulable: false,
                },
                group: model.cluster.nodes[n].group,
                pods: 0,
            });
            self.node_ids = ids;
        }
        for (node, &n) in self.nodes.iter_mut().zip(&self.node_ids) {
            let simulated = &model.cluster.nodes[n];
            node.state.ready = simulated.phase == NodePhase::Ready;
            node.state.unschedulable = simulated.cordoned;
            node.pods = simulated.pods.len() as u32;
        }
        for pool in 0..self.pools.len() {
            let workload = model.pool_workload(pool);
            self.demand[pool] = Some(Demand {
                cpu_millis: workload.cpu,
                memory_bytes: workload.mem,
                pods: workload.pods,
                observed_at: time(now),
            });
            let slots = model.pause_slots(pool).iter().enumerate().map(|(slot, s)| SlotState {
                slot,
                shape: shape_of(s.requests),
                replicas: Some(s.target),
            });
            self.headroom[pool] = slots.collect();
            if self.headroom[pool].is_empty() {
                // No Deployment written yet: the first, empty, as the strategy makes it.
                let PausePods { cpu, mem, .. } = model.pause_default(pool);
                self.headroom[pool] = vec![SlotState { slot: 0, shape: PodShape::new(cpu, mem), replicas: Some(0) }];
            }
        }
    }

    /// The index of the pool a port call names; `None` for a pool the scenario lacks.
    pub(super) fn pool_index(&self, pool: &PoolConfig) -> Option<usize> {
        self.pools.iter().position(|n| *n == pool.name)
    }

    pub(super) fn node_mut(&mut self, name: &str, operation: &str) -> Result<&mut ViewNode, PortError> {
        self.nodes
            .iter_mut()
            .find(|n| n.state.name == name)
            .ok_or_else(|| not_found(&format!("{operation} {name}"), format!("node {name} not found")))
    }
}

/// The autoscaling, cluster and state-store ports over the view, one handle shared.
#[derive(Debug, Clone)]
pub(super) struct SimPorts(pub(super) Arc<Mutex<View>>);

impl SimPorts {
    pub(super) fn view(&self) -> MutexGuard<'_, View> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn not_found(operation: &str, what: String) -> PortError {
    PortError::new(ErrorKind::Permanent, operation, what)
}

#[async_trait]
impl Autoscaling for SimPorts {
    async fn describe_pool(&self, pool: &PoolConfig) -> Result<(Vec<ObservedAsg>, Option<ObservedAsg>), PortError> {
        asgs::describe_pool(&self.view().asgs, pool)
    }

    async fn asgs_of_instances(&self, instance_ids: &[String]) -> Result<BTreeMap<String, String>, PortError> {
        Ok(ballast_core::snapshot::asgs_of_instances(&self.view().asgs, instance_ids))
    }

    /// The view holds what the ASGs list: an instance gone from them is unknown here (the
    /// simulator's events about an instance come while its ASG lists it).
    async fn launched_by(&self, instance_ids: &[String]) -> Result<BTreeMap<String, LaunchedBy>, PortError> {
        Ok(ballast_core::snapshot::launched_by_listed(&self.view().asgs, instance_ids))
    }

    async fn asg_tags(&self, asgs: &[String]) -> Result<BTreeMap<String, BTreeMap<String, String>>, PortError> {
        Ok(ballast_core::snapshot::asg_tags(&self.view().asgs, asgs))
    }

    async fn asg_size(&self, asg: &str) -> Result<AsgSize, PortError> {
        asgs::size(&self.view().asgs, asg)
    }

    async fn set_desired_capacity(&self, asg: &str, desired: u32) -> Result<(), PortError> {
        let mut view = self.view();
        asgs::set_desired(&mut view.asgs, asg, desired)?;
        view.calls.push(PortCall::SetDesired { asg: asg.to_string(), desired });
        Ok(())
    }

    async fn terminate_instance(&self, instance_id: &str, decrement: bool) -> Result<(), PortError> {
        let mut view = self.view();
        asgs::terminate(&mut view.asgs, instance_id, decrement)?;
        view.calls.push(PortCall::Terminate { instance_id: instance_id.to_string(), decrement });
        Ok(())
    }

    async fn record_lifecycle_heartbeat(&self, _action: &LifecycleRef) -> Result<(), PortError> {
        Ok(())
    }

    async fn complete_lifecycle_action(&self, _action: &LifecycleRef) -> Result<(), PortError> {
        Ok(())
    }
}

#[async_trait]
impl Cluster for SimPorts {
    async fn pool_nodes(&self, pool: &PoolConfig) -> Result<Vec<NodeState>, PortError> {
        let view = self.view();
        let (spot, on_demand) = pool_asgs(&view.asgs, pool, "list nodes")?;
        // The view's nodes are those of its ASGs' instances, ASG by ASG.
        let groups: Vec<usize> = spot
            .into_iter()
            .chain(on_demand)
            .filter_map(|asg| view.asgs.iter().position(|a| std::ptr::eq(a, asg)))
            .collect();
        let in_pool = |n: &&ViewNode| groups.contains(&n.group);
        // Sized first: one allocation for a thousand nodes, not a doubling series.
        let mut nodes = Vec::with_capacity(view.nodes.iter().filter(in_pool).count());
        nodes.extend(view.nodes.iter().filter(in_pool).map(|n| n.state.clone()));
        Ok(nodes)
    }

    async fn headroom(&self, pool: &PoolConfig) -> Result<Vec<SlotState>, PortError> {
        let view = self.view();
        Ok(view.pool_index(pool).map(|p| view.headroom[p].clone()).unwrap_or_default())
    }

    async fn set_headroom(
        &self,
        pool: &PoolConfig,
        slot: usize,
        shape: &PodShape,
        replicas: u32,
    ) -> Result<(), PortError> {
        let mut view = self.view();
        if let Some(p) = view.pool_index(pool) {
            let state = SlotState { slot, shape: shape.clone(), replicas: Some(replicas) };
            match view.headroom[p].iter_mut().find(|s| s.slot == slot) {
                Some(s) => *s = state,
                None => view.headroom[p].push(state),
            }
            view.calls.push(PortCall::SetHeadroom { pool: p, slot, shape: shape.clone(), replicas });
        }
        Ok(())
    }

    async fn pool_demand(&self, pool: &PoolConfig, _now: DateTime<Utc>) -> Result<Option<Demand>, PortError> {
        let view = self.view();
        Ok(view.pool_index(pool).and_then(|p| view.demand[p]))
    }

    async fn cordon(&self, node: &str) -> Result<(), PortError> {
        let mut view = self.view();
        view.node_mut(node, "cordon")?.state.unschedulable = true;
        view.calls.push(PortCall::Cordon { node: node.to_string() });
        Ok(())
    }

    async fn uncordon(&self, node: &str) -> Result<(), PortError> {
        let mut view = self.view();
        view.node_mut(node, "uncordon")?.state.unschedulable = false;
        view.calls.push(PortCall::Uncordon { node: node.to_string() });
        Ok(())
    }

    async fn drain(&self, node: &str, _timeout: Duration) -> Result<DrainReport, PortError> {
        let mut view = self.view();
        let n = view.node_mut(node, "drain")?;
        // No PodDisruptionBudget in the model: every pod is evicted.
        let evicted = std::mem::take(&mut n.pods);
        view.calls.push(PortCall::Drain { node: node.to_string() });
        Ok(DrainReport { evicted, blocked: Vec::new() })
    }
}

#[async_trait]
impl StateStore for SimPorts {
    async fn load(&self, pool: &str) -> Result<Versioned<PoolRecord>, PortError> {
        let view = self.view();
        Ok(view.records.get(pool).cloned().unwrap_or(Versioned { value: PoolRecord::default(), version: 0 }))
    }

    async fn save(&self, pool: &str, record: &PoolRecord, expected: u64) -> Result<u64, PortError> {
        let mut view = self.view();
        let entry =
            view.records.entry(pool.to_string()).or_insert(Versioned { value: PoolRecord::default(), version: 0 });
        if entry.version != expected {
            return Err(PortError::new(
                ErrorKind::Conflict,
                "PutItem",
                format!("pool {pool}: record is at version {}, expected {expected}", entry.version),
            ));
        }
        entry.value = record.clone();
        entry.version += 1;
        Ok(entry.version)
    }

    async fn acquire_lease(
        &self,
        pool: &str,
        owner: &str,
        now: DateTime<Utc>,
        ttl: Duration,
        urgency: Urgency,
    ) -> Result<bool, PortError> {
        let mut view = self.view();
        let holder = view.leases.get(pool).map(|(holder, until)| (holder.as_str(), *until));
        let taken = may_take_lease(holder, view.lease_claims.get(pool).copied(), owner, now, urgency);
        if taken {
            let until = now + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::seconds(60));
            view.leases.insert(pool.to_string(), (owner.to_string(), until));
        }
        note_lease_claim(&mut view.lease_claims, pool, now, urgency, taken);
        Ok(taken)
    }

    async fn release_lease(&self, pool: &str, owner: &str) -> Result<(), PortError> {
        let mut view = self.view();
        if view.leases.get(pool).is_some_and(|(holder, _)| holder == owner) {
            view.leases.remove(pool);
        }
        Ok(())
    }

    async fn seen(&self, event_ids: &[String]) -> Result<BTreeSet<String>, PortError> {
        let view = self.view();
        Ok(event_ids.iter().filter(|id| view.seen.contains(*id)).cloned().collect())
    }

    async fn mark_seen(&self, event_ids: &[String], _expires_at: DateTime<Utc>) -> Result<(), PortError> {
        self.view().seen.extend(event_ids.iter().cloned());
        Ok(())
    }
}

/// Ballast's calls as calls on the model. Names that were never the model's are
/// dropped; whether a node is still there when its call comes is the model's to check.
pub(super) fn calls_on_model(model: &Model, recorded: Vec<PortCall>) -> Vec<Call> {
    let known = |n: &NodeId| *n < model.cluster.nodes.len();
    recorded
        .into_iter()
        .filter_map(|call| match call {
            PortCall::SetDesired { asg, desired } => {
                model.sc.groups.iter().position(|g| g.name == asg).map(|group| Call::SetDesired { group, desired })
            }
            PortCall::Terminate { instance_id, decrement } => {
                node_of_instance(&instance_id).filter(known).map(|node| Call::Terminate { node, decrement })
            }
            PortCall::Cordon { node } => node_of_name(&node).filter(known).map(|node| Call::Cordon { node }),
            PortCall::Uncordon { node } => node_of_name(&node).filter(known).map(|node| Call::Uncordon { node }),
            // No PodDisruptionBudget in the model: every pod is evicted.
            PortCall::Drain { node } => node_of_name(&node).filter(known).map(|node| Call::Evict { node }),
            PortCall::SetHeadroom { pool, slot, shape, replicas } => {
                Some(Call::SetPauseReplicas { pool, slot, requests: requests_of(&shape), replicas })
            }
        })
        .collect()
}

/// The model's GPUs are `nvidia.com/gpu`, the one extended resource it knows.
pub(super) const GPU: &str = "nvidia.com/gpu";

/// A pod's requests in the model, as Ballast's shapes say them.
pub fn shape_of(r: Requests) -> PodShape {
    let mut shape = PodShape::new(r.cpu, r.mem);
    if r.gpu > 0 {
        shape.extended.insert(GPU.into(), u64::from(r.gpu));
    }
    shape
}

/// A shape Ballast placed, as the model's requests (other extended resources have no
/// meaning there).
fn requests_of(shape: &PodShape) -> Requests {
    let gpu = shape.extended.get(GPU).copied().unwrap_or(0);
    Requests { cpu: shape.cpu_millis, mem: shape.memory_bytes, gpu: u32::try_from(gpu).unwrap_or(u32::MAX) }
}
