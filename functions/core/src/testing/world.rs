//! Every port in memory over one shared [`World`], an emulation of AWS and the cluster
//! that tests drive and inspect. It records each mutating call ([`Call`]) for
//! assertions and can move the world on as AWS would ([`World::settle`]). A world
//! starts from a state [`Snapshot`], the format `ballast plan --state` reads; what only
//! tests need (calls, evictions, leases, dedup, dead letters) is here, not in the
//! snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::config::{resolve_pool_asgs, AsgRef, Config, PoolConfig};
use crate::observe::{AsgInstance, AsgSize, Demand, LaunchedBy, LifecycleState, Market, NodeState, ObservedAsg};
use crate::plan::LifecycleRef;
use crate::ports::{
    may_take_lease, note_lease_claim, Autoscaling, Cluster, DeadLetters, DrainReport, ErrorKind, PortError, StateStore,
    Urgency, Versioned,
};
use crate::record::PoolRecord;
use crate::shape::{PodShape, SlotState};
use crate::snapshot::{self, Snapshot};

use crate::asg_emulator as asgs;

/// The whole emulated world of a deployment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct World {
    /// The account's ASGs, each with its instances and recent scaling activities.
    pub asgs: Vec<ObservedAsg>,
    /// The cluster's nodes, one per instance once [`World::settle`] ran.
    pub nodes: Vec<WorldNode>,
    /// By pool name: what the state table and the cluster hold for it.
    pub pools: BTreeMap<String, WorldPool>,
    /// Event ids marked handled, until when (the dedup table).
    pub seen: BTreeMap<String, DateTime<Utc>>,
    /// By pool name: who holds its lease.
    pub leases: BTreeMap<String, Lease>,
    /// Urgent runs' claims on the next turn of a pool's lease, until when.
    pub lease_claims: BTreeMap<String, DateTime<Utc>>,
    /// Messages sent to the dead-letter queue, with why.
    pub dead_letters: Vec<(String, String)>,
    /// Every mutating call, in order (tests count them).
    pub calls: Vec<Call>,
    /// Instances gone from their ASG that EC2 still lists (for [`EC2_LISTS_GONE_FOR`]),
    /// by id: the ASG that launched each (its `aws:autoscaling:groupName` tag), whether
    /// the spot market took it, and when it went. [`World::settle`] notes them.
    pub gone: BTreeMap<String, GoneInstance>,
    /// Instances EC2 runs that no ASG launched (no `aws:autoscaling:groupName` tag).
    pub outside_asgs: BTreeSet<String>,
}

/// An instance gone from its ASG, as EC2 still lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoneInstance {
    /// The ASG that launched it.
    pub asg: String,
    /// The spot market took it back (it was `Terminated` when its ASG let it go).
    pub spot_reclaimed: bool,
    /// When it left the ASG.
    pub at: DateTime<Utc>,
}

/// How long EC2 lists an instance after it terminated ("about an hour").
pub const EC2_LISTS_GONE_FOR: chrono::Duration = chrono::Duration::hours(1);

/// A node of the emulated cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorldNode {
    /// What the cluster port answers for it.
    pub state: NodeState,
    /// Pods a PodDisruptionBudget keeps on this node: a drain reports them blocked.
    pub pdb_blocked_pods: Vec<String>,
    /// Pods evicted so far by drains.
    pub evicted: u32,
    /// Pods on it now; a drain evicts all but the blocked ones.
    pub pods: u32,
}

/// What the emulated deployment holds for one pool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorldPool {
    /// Its stored record.
    pub record: PoolRecord,
    /// The record's version: 0 before the first save, one more with each.
    pub version: u64,
    /// What listing the pool's pods would sum to.
    pub demand: Option<Demand>,
    /// Its pause-pod Deployments by slot: the pods' shape (`None`: the config's
    /// `pod_cpu` / `pod_memory`) and replicas.
    pub headroom: BTreeMap<usize, (Option<PodShape>, u32)>,
}

/// A pool's lease as the state table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The run holding it.
    pub owner: String,
    /// When it lapses unless renewed.
    pub until: DateTime<Utc>,
}

/// A mutating call the in-memory ports carried out, with what it was about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// SetDesiredCapacity.
    SetDesired {
        /// The ASG's name.
        asg: String,
        /// Its desired size after the call.
        desired: u32,
    },
    /// TerminateInstanceInAutoScalingGroup.
    Terminate {
        /// The instance.
        instance_id: String,
        /// Whether the ASG's desired size dropped with it.
        decrement: bool,
    },
    /// RecordLifecycleActionHeartbeat.
    Heartbeat {
        /// The lifecycle action's token.
        token: String,
    },
    /// CompleteLifecycleAction.
    Complete {
        /// The lifecycle action's token.
        token: String,
    },
    /// A node marked unschedulable.
    Cordon {
        /// The node's name.
        node: String,
    },
    /// A node made schedulable again.
    Uncordon {
        /// The node's name.
        node: String,
    },
    /// A node's pods evicted.
    Drain {
        /// The node's name.
        node: String,
    },
    /// A pause-pod Deployment scaled.
    SetHeadroom {
        /// The pool's name.
        pool: String,
        /// Which of the pool's Deployments.
        slot: usize,
        /// Its replicas after the call.
        replicas: u32,
    },
    /// A pool's record written.
    SaveRecord {
        /// The pool's name.
        pool: String,
        /// The record's version after the write.
        version: u64,
    },
}

impl Call {
    /// Calls that change the cluster or its ASGs (not Ballast's own record).
    pub fn is_effect(&self) -> bool {
        !matches!(self, Call::SaveRecord { .. })
    }
}

/// What a launch gets when its ASG has no instance to copy the zone and type from.
const LAUNCH_ZONE: &str = "eu-west-1a";
const LAUNCH_TYPE: &str = "m6i.large";

impl From<Snapshot> for World {
    fn from(snapshot: Snapshot) -> World {
        World {
            asgs: snapshot.asgs,
            nodes: snapshot.nodes.into_iter().map(|state| WorldNode { state, ..WorldNode::default() }).collect(),
            pools: snapshot
                .pools
                .into_iter()
                .map(|(name, p)| {
                    let pool = WorldPool {
                        record: p.record,
                        version: p.version,
                        demand: p.demand,
                        headroom: if p.headroom.is_empty() {
                            p.headroom_replicas.map(|n| (0, (None, n))).into_iter().collect()
                        } else {
                            p.headroom.into_iter().map(|s| (s.slot, (Some(s.shape), s.replicas.unwrap_or(0)))).collect()
                        },
                    };
                    (name, pool)
                })
                .collect(),
            ..World::default()
        }
    }
}

impl World {
    /// The ASG of that name.
    pub fn asg(&self, name: &str) -> Option<&ObservedAsg> {
        self.asgs.iter().find(|a| a.name == name)
    }

    /// The node of that name; `verb` names the call that looked for it.
    fn node_mut(&mut self, name: &str, verb: &str) -> Result<&mut WorldNode, PortError> {
        self.nodes
            .iter_mut()
            .find(|n| n.state.name == name)
            .ok_or_else(|| not_found(&format!("{verb} {name}"), format!("node {name} not found")))
    }

    /// The ASG of that name, to change it as another writer would.
    pub fn asg_mut(&mut self, name: &str) -> Option<&mut ObservedAsg> {
        self.asgs.iter_mut().find(|a| a.name == name)
    }

    /// Every instance an ASG lists, with that ASG.
    fn listed(&self) -> BTreeMap<String, String> {
        self.asgs.iter().flat_map(|a| a.instances.iter().map(|i| (i.id.clone(), a.name.clone()))).collect()
    }

    /// What EC2 says of these instances: the ASG listing each, or that it left within
    /// [`EC2_LISTS_GONE_FOR`] (its `aws:autoscaling:groupName` tag); no ASG for one outside
    /// them; those EC2 does not list left out.
    pub fn launched_by(&self, instance_ids: &[String]) -> BTreeMap<String, LaunchedBy> {
        let listed = self.listed();
        instance_ids
            .iter()
            .filter_map(|id| {
                let launched = if let Some(asg) = listed.get(id) {
                    LaunchedBy { asg: Some(asg.clone()), spot_reclaimed: false }
                } else if let Some(gone) = self.gone.get(id) {
                    LaunchedBy { asg: Some(gone.asg.clone()), spot_reclaimed: gone.spot_reclaimed }
                } else if self.outside_asgs.contains(id) {
                    LaunchedBy { asg: None, spot_reclaimed: false }
                } else {
                    return None;
                };
                Some((id.clone(), launched))
            })
            .collect()
    }

    /// Resolves a pool's selectors against the world's ASGs (the shared rule).
    pub fn pool_asgs(&self, pool: &PoolConfig) -> Result<(Vec<&ObservedAsg>, Option<&ObservedAsg>), PortError> {
        snapshot::pool_asgs(&self.asgs, pool, "DescribeAutoScalingGroups")
    }

    /// Moves the world on as AWS would between reconciles, at `now`: ASGs launch up to
    /// their desired size (unless listed in `no_capacity`), new instances become Ready
    /// nodes. A launch buys what the ASG's purchase options say: spot for the ASGs the
    /// config's pools take as spot, on-demand for every other (an ASG without a spot
    /// share in its instances distribution); its zone and type are those of the ASG's
    /// first instance. An instance leaving its ASG stays in EC2's list for
    /// [`EC2_LISTS_GONE_FOR`]; one left `Terminated` (not `Terminating`, the ASG's own
    /// doing) was taken by the spot market.
    pub fn settle(&mut self, config: &Config, no_capacity: &BTreeSet<String>, next_id: &mut u64, now: DateTime<Utc>) {
        let listed_before = self.listed();
        let reclaimed: BTreeSet<String> = self
            .asgs
            .iter()
            .flat_map(|a| &a.instances)
            .filter(|i| i.lifecycle_state == LifecycleState::Terminated)
            .map(|i| i.id.clone())
            .collect();
        let spot: BTreeSet<String> = config
            .pools
            .iter()
            .filter_map(|pool| {
                resolve_pool_asgs(pool, self.asgs.iter().map(|a| AsgRef { name: &a.name, tags: &a.tags })).ok()
            })
            .flat_map(|resolved| resolved.spot.into_iter().map(str::to_string))
            .collect();
        for asg in &mut self.asgs {
            asg.instances.retain(|i| i.lifecycle_state.is_live());
            for i in &mut asg.instances {
                if i.lifecycle_state != LifecycleState::InService && !no_capacity.contains(&asg.name) {
                    i.lifecycle_state = LifecycleState::InService;
                }
            }
            let market = if spot.contains(&asg.name) { Market::Spot } else { Market::OnDemand };
            let (zone, instance_type) = asg.instances.first().map_or((LAUNCH_ZONE.into(), LAUNCH_TYPE.into()), |i| {
                (i.availability_zone.clone(), i.instance_type.clone())
            });
            while asg.live() < asg.desired && !no_capacity.contains(&asg.name) {
                *next_id += 1;
                asg.instances.push(AsgInstance {
                    id: format!("i-{:017x}", *next_id),
                    lifecycle_state: LifecycleState::InService,
                    availability_zone: zone.clone(),
                    instance_type: instance_type.clone(),
                    market,
                });
            }
            // An ASG above its desired size removes instances, newest first.
            while asg.live() > asg.desired {
                if let Some(pos) = asg.instances.iter().rposition(|i| i.lifecycle_state.is_live()) {
                    asg.instances.remove(pos);
                } else {
                    break;
                }
            }
        }
        let listed = self.listed();
        for (id, asg) in listed_before {
            if !listed.contains_key(&id) {
                let spot_reclaimed = reclaimed.contains(&id);
                self.gone.insert(id, GoneInstance { asg, spot_reclaimed, at: now });
            }
        }
        self.gone.retain(|_, g| now - g.at < EC2_LISTS_GONE_FOR);
        let live: BTreeSet<String> = listed.into_keys().collect();
        self.nodes.retain(|n| live.contains(&n.state.instance_id));
        for id in live {
            if !self.nodes.iter().any(|n| n.state.instance_id == id) {
                self.nodes.push(WorldNode {
                    state: NodeState {
                        allocatable: None,
                        name: format!("node-{id}"),
                        instance_id: id,
                        ready: true,
                        unschedulable: false,
                    },
                    ..WorldNode::default()
                });
            }
        }
    }
}

/// One handle, cloned into every port: the adapters share a single world.
#[derive(Debug, Clone, Default)]
pub struct InMemory {
    world: Arc<Mutex<World>>,
}

impl InMemory {
    /// The ports over `world`.
    pub fn new(world: World) -> Self {
        InMemory { world: Arc::new(Mutex::new(world)) }
    }

    /// The world; a panic in another holder does not lose it.
    pub fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn not_found(op: &str, what: String) -> PortError {
    PortError::new(ErrorKind::Permanent, op, what)
}

#[async_trait]
impl Autoscaling for InMemory {
    async fn describe_pool(&self, pool: &PoolConfig) -> Result<(Vec<ObservedAsg>, Option<ObservedAsg>), PortError> {
        asgs::describe_pool(&self.world().asgs, pool)
    }

    async fn asgs_of_instances(&self, instance_ids: &[String]) -> Result<BTreeMap<String, String>, PortError> {
        Ok(snapshot::asgs_of_instances(&self.world().asgs, instance_ids))
    }

    async fn launched_by(&self, instance_ids: &[String]) -> Result<BTreeMap<String, LaunchedBy>, PortError> {
        Ok(self.world().launched_by(instance_ids))
    }

    async fn asg_tags(&self, asgs: &[String]) -> Result<BTreeMap<String, BTreeMap<String, String>>, PortError> {
        Ok(snapshot::asg_tags(&self.world().asgs, asgs))
    }

    async fn asg_size(&self, asg: &str) -> Result<AsgSize, PortError> {
        asgs::size(&self.world().asgs, asg)
    }

    async fn set_desired_capacity(&self, asg: &str, desired: u32) -> Result<(), PortError> {
        let mut world = self.world();
        asgs::set_desired(&mut world.asgs, asg, desired)?;
        world.calls.push(Call::SetDesired { asg: asg.to_string(), desired });
        Ok(())
    }

    async fn terminate_instance(&self, instance_id: &str, decrement: bool) -> Result<(), PortError> {
        let mut world = self.world();
        asgs::terminate(&mut world.asgs, instance_id, decrement)?;
        world.calls.push(Call::Terminate { instance_id: instance_id.to_string(), decrement });
        Ok(())
    }

    async fn record_lifecycle_heartbeat(&self, action: &LifecycleRef) -> Result<(), PortError> {
        self.world().calls.push(Call::Heartbeat { token: action.token.clone() });
        Ok(())
    }

    async fn complete_lifecycle_action(&self, action: &LifecycleRef) -> Result<(), PortError> {
        self.world().calls.push(Call::Complete { token: action.token.clone() });
        Ok(())
    }
}

#[async_trait]
impl Cluster for InMemory {
    async fn pool_nodes(&self, pool: &PoolConfig) -> Result<Vec<NodeState>, PortError> {
        let world = self.world();
        let (mut asgs, on_demand) = snapshot::pool_asgs(&world.asgs, pool, "list nodes")?;
        asgs.extend(on_demand);
        Ok(snapshot::nodes_in(world.nodes.iter().map(|n| &n.state), &asgs))
    }

    async fn headroom(&self, pool: &PoolConfig) -> Result<Vec<SlotState>, PortError> {
        let world = self.world();
        let Some(p) = world.pools.get(&pool.name) else { return Ok(Vec::new()) };
        Ok(p.headroom
            .iter()
            .map(|(slot, (shape, n))| SlotState {
                slot: *slot,
                shape: shape.clone().unwrap_or_else(|| pool.headroom.unit_shape()),
                replicas: Some(*n),
            })
            .collect())
    }

    async fn set_headroom(
        &self,
        pool: &PoolConfig,
        slot: usize,
        shape: &PodShape,
        replicas: u32,
    ) -> Result<(), PortError> {
        let mut world = self.world();
        world.pools.entry(pool.name.clone()).or_default().headroom.insert(slot, (Some(shape.clone()), replicas));
        world.calls.push(Call::SetHeadroom { pool: pool.name.clone(), slot, replicas });
        Ok(())
    }

    async fn pool_demand(&self, pool: &PoolConfig, _now: DateTime<Utc>) -> Result<Option<Demand>, PortError> {
        Ok(self.world().pools.get(&pool.name).and_then(|p| p.demand))
    }

    async fn cordon(&self, node: &str) -> Result<(), PortError> {
        let mut world = self.world();
        let n = world.node_mut(node, "cordon")?;
        n.state.unschedulable = true;
        world.calls.push(Call::Cordon { node: node.to_string() });
        Ok(())
    }

    async fn uncordon(&self, node: &str) -> Result<(), PortError> {
        let mut world = self.world();
        let n = world.node_mut(node, "uncordon")?;
        n.state.unschedulable = false;
        world.calls.push(Call::Uncordon { node: node.to_string() });
        Ok(())
    }

    async fn drain(&self, node: &str, _timeout: Duration) -> Result<DrainReport, PortError> {
        let mut world = self.world();
        let n = world.node_mut(node, "drain")?;
        let blocked: Vec<(String, String)> = n
            .pdb_blocked_pods
            .iter()
            .map(|p| (p.clone(), "a PodDisruptionBudget allows no disruption (HTTP 429)".to_string()))
            .collect();
        let evicted = n.pods.saturating_sub(blocked.len() as u32);
        n.evicted += evicted;
        n.pods -= evicted;
        world.calls.push(Call::Drain { node: node.to_string() });
        Ok(DrainReport { evicted, blocked })
    }
}

#[async_trait]
impl StateStore for InMemory {
    async fn load(&self, pool: &str) -> Result<Versioned<PoolRecord>, PortError> {
        let world = self.world();
        Ok(world
            .pools
            .get(pool)
            .map(|p| Versioned { value: p.record.clone(), version: p.version })
            .unwrap_or(Versioned { value: PoolRecord::default(), version: 0 }))
    }

    async fn save(&self, pool: &str, record: &PoolRecord, expected: u64) -> Result<u64, PortError> {
        let mut world = self.world();
        let entry = world.pools.entry(pool.to_string()).or_default();
        if entry.version != expected {
            return Err(PortError::new(
                ErrorKind::Conflict,
                "PutItem",
                format!("pool {pool}: record is at version {}, expected {expected}", entry.version),
            ));
        }
        entry.record = record.clone();
        entry.version += 1;
        let version = entry.version;
        world.calls.push(Call::SaveRecord { pool: pool.to_string(), version });
        Ok(version)
    }

    async fn acquire_lease(
        &self,
        pool: &str,
        owner: &str,
        now: DateTime<Utc>,
        ttl: Duration,
        urgency: Urgency,
    ) -> Result<bool, PortError> {
        let mut world = self.world();
        let holder = world.leases.get(pool).map(|l| (l.owner.as_str(), l.until));
        let taken = may_take_lease(holder, world.lease_claims.get(pool).copied(), owner, now, urgency);
        if taken {
            let until = now + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::seconds(60));
            world.leases.insert(pool.to_string(), Lease { owner: owner.to_string(), until });
        }
        note_lease_claim(&mut world.lease_claims, pool, now, urgency, taken);
        Ok(taken)
    }

    async fn release_lease(&self, pool: &str, owner: &str) -> Result<(), PortError> {
        let mut world = self.world();
        if world.leases.get(pool).is_some_and(|l| l.owner == owner) {
            world.leases.remove(pool);
        }
        Ok(())
    }

    async fn seen(&self, event_ids: &[String]) -> Result<BTreeSet<String>, PortError> {
        let world = self.world();
        Ok(event_ids.iter().filter(|id| world.seen.contains_key(*id)).cloned().collect())
    }

    async fn mark_seen(&self, event_ids: &[String], expires_at: DateTime<Utc>) -> Result<(), PortError> {
        let mut world = self.world();
        for id in event_ids {
            world.seen.insert(id.clone(), expires_at);
        }
        Ok(())
    }
}

#[async_trait]
impl DeadLetters for InMemory {
    async fn send(&self, body: &str, reason: &str) -> Result<(), PortError> {
        self.world().dead_letters.push((body.to_string(), reason.to_string()));
        Ok(())
    }
}
