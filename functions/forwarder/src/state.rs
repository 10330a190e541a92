//! What the forwarder remembers of the cluster: a compact record per pod and per node,
//! never whole objects. Fed by the watchers' events (including relists after a 410 or
//! an API server restart); read as per-pool totals by the publisher.
//!
//! Memory is the constraint (150,000 pods in a few MiB): a pod is its UID as a number and
//! a 24-byte record (requests as integers, node and pool as indexes), kept in a B-tree
//! because a hash table doubles its allocation at each growth and holds both copies while
//! it rehashes.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::time::Duration;

use ballast_core::event::{CapacityType, NodeCondition, NodeLifecycleDetail};
use ballast_core::shape::ShapeCount;
use ballast_kube::cluster::{instance_id, node_ready};
use ballast_kube::pods::{self, PodRole};
use ballast_kube::pools::{Placement, PoolMatcher};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};

use crate::room::{HeldRoom, Size};
use crate::shapes::ShapeTally;

/// Index of a pool in the config.
pub type PoolId = u16;
type NodeId = u32;

/// No node (a pending pod) or no pool, in the records' index fields.
const NO_NODE: NodeId = NodeId::MAX;
const NO_POOL: PoolId = PoolId::MAX;

/// First-start waits held between two takes, at most.
const MAX_WAITS_HELD: usize = 65_536;

/// 24 bytes: what the totals need of a pod, and nothing else.
#[derive(Debug, Clone, Copy)]
struct PodRecord {
    memory_bytes: u64,
    cpu_millis: u32,
    /// The node it is bound to (interned), or `NO_NODE` while pending.
    node: NodeId,
    /// Seconds since the epoch when the scheduler gave up on it (u32 lasts until 2106).
    unschedulable_since: Option<NonZeroU32>,
    /// The pool a pending pod fits, or `NO_POOL` (bound pods take their node's).
    pending_pool: PoolId,
    /// Which list generation last saw it (records a relist does not see are dropped).
    /// Wraps: only equality with the current generation matters.
    generation: u16,
}

impl PodRecord {
    fn node(&self) -> Option<NodeId> {
        (self.node != NO_NODE).then_some(self.node)
    }

    fn pending_pool(&self) -> Option<PoolId> {
        (self.pending_pool != NO_POOL).then_some(self.pending_pool)
    }
}

#[derive(Debug, Clone)]
struct NodeRecord {
    name: Box<str>,
    pool: Option<PoolId>,
    provider_id: Box<str>,
    capacity_type: CapacityType,
    ready: bool,
    present: bool,
    generation: u16,
}

/// A workload pod's first start: its wait from creation to the scheduler binding it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FirstStart {
    pub pool: PoolId,
    pub seconds: f64,
    /// It waited longer than the pool's wait target while a Running pause pod of the pool,
    /// at least its size, held room: its wait was not for room.
    pub with_room: bool,
}

/// Per-pool sums of workload demand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolTotals {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub pods: u32,
    pub nodes: u32,
}

/// Workload pods of a pool the scheduler could not place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unschedulable {
    pub count: u32,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub oldest_since: DateTime<Utc>,
    pub newest_since: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pods,
    Nodes,
}

/// Node changes held while the sender is behind (each ~200 bytes).
pub const MAX_QUEUED_NODE_CHANGES: usize = 5_000;

pub struct ClusterState {
    matcher: PoolMatcher,
    /// Labels all nodes of each pool share (learned as nodes join).
    shared_labels: Vec<Option<BTreeMap<String, String>>>,
    pods: BTreeMap<u128, PodRecord>,
    /// What decides a pending pod's pool (selector, affinity, tolerations), kept for
    /// pending pods only, so their pool is decided again when a pool's labels are learned.
    placement: HashMap<u128, Box<Placement>>,
    node_ids: HashMap<Box<str>, NodeId>,
    nodes: Vec<NodeRecord>,
    pod_generation: u16,
    node_generation: u16,
    /// Lists after the first, per kind (a 410 Gone or a lost watch makes the watcher list again).
    pod_relists: u32,
    node_relists: u32,
    pods_synced: bool,
    nodes_synced: bool,
    node_changes: Vec<NodeLifecycleDetail>,
    /// Pods whose requests could not be read (counted, then logged by the caller).
    pub unreadable_pods: u64,
    /// First-start waits seen since the last take.
    first_start_waits: Vec<FirstStart>,
    /// Per pool: its wait target, if it has one (a wait is "over" past it).
    wait_targets: Vec<Option<Duration>>,
    /// Room the pools' Running pause pods hold.
    held: HeldRoom,
    /// The shapes of the workload pods that started since each pool's last demand report,
    /// and of those pending.
    shapes: ShapeTally,
}

impl ClusterState {
    pub fn new(matcher: PoolMatcher) -> ClusterState {
        let pools = matcher.len();
        ClusterState {
            matcher,
            shared_labels: vec![None; pools],
            pods: BTreeMap::new(),
            placement: HashMap::new(),
            node_ids: HashMap::new(),
            nodes: Vec::new(),
            pod_generation: 0,
            node_generation: 0,
            pod_relists: 0,
            node_relists: 0,
            pods_synced: false,
            nodes_synced: false,
            node_changes: Vec::new(),
            unreadable_pods: 0,
            first_start_waits: Vec::new(),
            wait_targets: vec![None; pools],
            held: HeldRoom::new(pools),
            shapes: ShapeTally::new(pools),
        }
    }

    /// Each pool's wait target (`headroom.target.wait_p95`), in the config's order: a
    /// first start past it with room held is counted apart. None known: none counted.
    pub fn with_wait_targets(mut self, targets: Vec<Option<Duration>>) -> ClusterState {
        self.wait_targets = targets;
        self
    }

    pub fn pool_name(&self, pool: PoolId) -> &str {
        self.matcher.name(usize::from(pool))
    }

    /// The pool named so, if it is one of the config's.
    pub fn pool_named(&self, name: &str) -> Option<usize> {
        self.matcher.index_of(name)
    }

    pub fn pool_count(&self) -> usize {
        self.matcher.len()
    }

    /// Both initial lists are in: totals now describe the cluster.
    pub fn synced(&self) -> bool {
        self.pods_synced && self.nodes_synced
    }

    pub fn relists(&self) -> u32 {
        self.pod_relists + self.node_relists
    }

    /// Relists of (pods, nodes).
    pub fn relists_by_kind(&self) -> (u32, u32) {
        (self.pod_relists, self.node_relists)
    }

    pub fn pod_records(&self) -> usize {
        self.pods.len()
    }

    pub fn node_records(&self) -> usize {
        self.nodes.iter().filter(|n| n.present).count()
    }

    /// A (re)list starts: what it does not show again is gone when it ends.
    pub fn begin_list(&mut self, kind: Kind) {
        match kind {
            Kind::Pods => {
                self.pod_relists += u32::from(self.pod_generation != 0 || self.pods_synced);
                self.pod_generation = self.pod_generation.wrapping_add(1);
            }
            Kind::Nodes => {
                self.node_relists += u32::from(self.node_generation != 0 || self.nodes_synced);
                self.node_generation = self.node_generation.wrapping_add(1);
            }
        }
    }

    pub fn end_list(&mut self, kind: Kind) {
        match kind {
            Kind::Pods => {
                let generation = self.pod_generation;
                self.pods.retain(|_, p| p.generation == generation);
                let pods = &self.pods;
                self.placement.retain(|key, _| pods.contains_key(key));
                self.shapes.retain_pending(|key| pods.contains_key(&key));
                self.held.keep_generation(generation);
                self.pods_synced = true;
            }
            Kind::Nodes => {
                let generation = self.node_generation;
                let announce = self.nodes_synced;
                for id in 0..self.nodes.len() {
                    let node = &self.nodes[id];
                    if node.present && node.generation != generation {
                        self.nodes[id].present = false;
                        if announce {
                            self.announce(id as NodeId, NodeCondition::Left);
                        }
                    }
                }
                self.nodes_synced = true;
            }
        }
    }

    pub fn apply_pod(&mut self, pod: &Pod) {
        let key = pod_key(pod);
        let role = pods::role(pod);
        self.placement.remove(&key);
        if role == PodRole::Pause {
            self.note_pause(key, pod);
        } else {
            self.held.gone(key);
        }
        if !role.is_demand() {
            // A pod that finished or is not demand (pause, DaemonSet, mirror) holds nothing.
            self.pods.remove(&key);
            self.shapes.not_pending(key);
            return;
        }
        let Some(spec) = pod.spec.as_ref() else { return };
        let requests = match pods::effective_requests(spec) {
            Ok(r) => r,
            Err(_) => {
                self.unreadable_pods += 1;
                self.pods.remove(&key);
                self.shapes.not_pending(key);
                return;
            }
        };
        let node = pods::node_name(pod).map(|name| self.intern_node(name));
        match node {
            Some(bound) => {
                self.note_started_shape(key, bound, pod, spec, requests);
                self.note_first_start(key, bound, pod, requests);
            }
            None => self.shapes.pending(key, (pods::shape(spec, requests), pods::workload_kind(pod))),
        }
        let pending_pool = match node {
            Some(_) => None,
            None => {
                let placement = Placement::of(spec);
                let pool = self.pool_id(self.matcher.placed(&placement));
                if placement.depends_on_node_labels() {
                    self.placement.insert(key, Box::new(placement));
                }
                pool
            }
        };
        self.pods.insert(
            key,
            PodRecord {
                node: node.unwrap_or(NO_NODE),
                pending_pool: pending_pool.unwrap_or(NO_POOL),
                cpu_millis: u32::try_from(requests.cpu_millis).unwrap_or(u32::MAX),
                memory_bytes: requests.memory_bytes,
                unschedulable_since: pods::unschedulable_since(pod)
                    .and_then(|t| u32::try_from(t.timestamp()).ok())
                    .and_then(NonZeroU32::new),
                generation: self.pod_generation,
            },
        );
    }

    /// A workload pod seen bound: if it was pending when last seen (or is new since the
    /// first list), its shape counts as started in the pool of its node (or the pool it
    /// was pending for) until the pool's next demand report.
    fn note_started_shape(&mut self, key: u128, bound: NodeId, pod: &Pod, spec: &PodSpec, requests: pods::Requests) {
        self.shapes.not_pending(key);
        let previous = self.pods.get(&key);
        if !self.pods_synced || previous.is_some_and(|p| p.node().is_some()) {
            return;
        }
        let Some(pool) = self.nodes[bound as usize].pool.or_else(|| previous.and_then(PodRecord::pending_pool)) else {
            return;
        };
        self.shapes.started(usize::from(pool), (pods::shape(spec, requests), pods::workload_kind(pod)));
    }

    /// A workload pod seen bound: if it was pending when last seen (or is new since the
    /// first list), its wait from creation to the scheduler's binding counts for the
    /// pool of its node (or the pool it was pending for). Pods bound when the forwarder
    /// started, and pods given a node at creation (no scheduling), are not counted.
    fn note_first_start(&mut self, key: u128, bound: NodeId, pod: &Pod, requests: pods::Requests) {
        let previous = self.pods.get(&key);
        if !self.pods_synced || previous.is_some_and(|p| p.node().is_some()) {
            return;
        }
        let Some(pool) = self.nodes[bound as usize].pool.or_else(|| previous.and_then(PodRecord::pending_pool)) else {
            return;
        };
        // Taken every tick; the cap only bounds memory if nobody takes them.
        let Some(wait) = pods::first_start_wait(pod).filter(|_| self.first_start_waits.len() < MAX_WAITS_HELD) else {
            return;
        };
        let target = self.wait_targets.get(usize::from(pool)).copied().flatten().filter(|target| wait > *target);
        // Room counts if it was held when the wait passed the target: bound by then.
        let by = target.and_then(|target| {
            let created = pods::to_chrono(pod.metadata.creation_timestamp.as_ref()?.0)?;
            epoch_secs(created + chrono::Duration::from_std(target).ok()?)
        });
        let with_room = by.is_some_and(|by| {
            pod.spec.as_ref().is_some_and(|spec| {
                Size::of(requests, pods::extended_requests(spec)).is_some_and(|size| self.held.holds(pool, &size, by))
            })
        });
        self.first_start_waits.push(FirstStart { pool, seconds: wait.as_secs_f64(), with_room });
    }

    /// A pause pod seen: Running and bound, it holds room of its size in its pool (the
    /// pool its Deployment names, else its node's) since it was bound; otherwise none.
    fn note_pause(&mut self, key: u128, pod: &Pod) {
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let held = pods::node_name(pod).filter(|_| running).and_then(|node| {
            let spec = pod.spec.as_ref()?;
            let requests = pods::effective_requests(spec).ok()?;
            let size = Size {
                cpu_millis: requests.cpu_millis,
                memory_bytes: requests.memory_bytes,
                gpus: pods::extended_requests(spec).gpus,
            };
            let named = pod.metadata.labels.as_ref().and_then(|l| l.get(pods::POOL_LABEL));
            let pool = match named {
                Some(name) => self.matcher.index_of(name),
                None => self.node_ids.get(node).and_then(|id| self.nodes[*id as usize].pool).map(usize::from),
            };
            // Given its node at creation: bound then.
            let since = pods::scheduled_at(pod)
                .or_else(|| pods::to_chrono(pod.metadata.creation_timestamp.as_ref()?.0))
                .and_then(epoch_secs)
                .unwrap_or(0);
            Some((self.pool_id(pool)?, size, since))
        });
        match held {
            Some((pool, size, since)) => self.held.running(key, pool, size, since, self.pod_generation),
            None => self.held.gone(key),
        }
    }

    /// The first-start waits seen since the last call.
    pub fn take_first_start_waits(&mut self) -> Vec<FirstStart> {
        std::mem::take(&mut self.first_start_waits)
    }

    pub fn delete_pod(&mut self, pod: &Pod) {
        let key = pod_key(pod);
        self.pods.remove(&key);
        self.shapes.not_pending(key);
        self.placement.remove(&key);
        self.held.gone(key);
    }

    /// A pool index as a record stores it (`NO_POOL` is not a pool).
    fn pool_id(&self, pool: Option<usize>) -> Option<PoolId> {
        pool.and_then(|p| PoolId::try_from(p).ok()).filter(|p| *p != NO_POOL)
    }

    fn intern_node(&mut self, name: &str) -> NodeId {
        if let Some(id) = self.node_ids.get(name) {
            return *id;
        }
        // Names are interned for good (a node that left and came back keeps its index);
        // 4 billion distinct node names would be a cluster of another kind.
        let id = NodeId::try_from(self.nodes.len()).unwrap_or(NO_NODE - 1).min(NO_NODE - 1);
        self.nodes.push(NodeRecord {
            name: name.into(),
            pool: None,
            provider_id: "".into(),
            capacity_type: CapacityType::OnDemand,
            ready: false,
            present: false,
            generation: 0,
        });
        self.node_ids.insert(name.into(), id);
        id
    }

    pub fn apply_node(&mut self, node: &Node) {
        let Some(name) = node.metadata.name.as_deref() else { return };
        let id = self.intern_node(name);
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        let pool = self.pool_id(self.matcher.node_pool(labels));
        let ready = node_ready(node);
        let provider_id: Box<str> =
            node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).unwrap_or_default().into();
        let generation = self.node_generation;
        let announce = self.nodes_synced;
        let record = &mut self.nodes[id as usize];
        let (was_present, was_ready) = (record.present, record.ready);
        *record = NodeRecord {
            name: record.name.clone(),
            pool,
            provider_id,
            capacity_type: capacity_type(labels),
            ready,
            present: true,
            generation,
        };
        if let Some(pool) = pool {
            self.learn(pool, labels);
        }
        if !announce {
            return;
        }
        if !was_present {
            self.announce(id, NodeCondition::Joined);
            if ready {
                self.announce(id, NodeCondition::Ready);
            }
        } else if ready != was_ready {
            self.announce(id, if ready { NodeCondition::Ready } else { NodeCondition::NotReady });
        }
    }

    pub fn delete_node(&mut self, node: &Node) {
        let Some(id) = node.metadata.name.as_deref().and_then(|n| self.node_ids.get(n)).copied() else { return };
        if self.nodes[id as usize].present {
            self.nodes[id as usize].present = false;
            if self.nodes_synced {
                self.announce(id, NodeCondition::Left);
            }
        }
    }

    fn learn(&mut self, pool: PoolId, labels: &BTreeMap<String, String>) {
        let shared = &mut self.shared_labels[usize::from(pool)];
        let before = shared.as_ref().map(BTreeMap::len);
        match shared {
            None => *shared = Some(labels.clone()),
            Some(s) => s.retain(|k, v| labels.get(k) == Some(v)),
        }
        if shared.as_ref().map(BTreeMap::len) != before {
            let learned = shared.clone().unwrap_or_default();
            self.matcher.learn_template(usize::from(pool), [&learned]);
            // What fits where may have changed for the pods still waiting.
            for (key, spec) in &self.placement {
                if let Some(pod) = self.pods.get_mut(key) {
                    pod.pending_pool =
                        self.matcher.placed(spec).and_then(|p| PoolId::try_from(p).ok()).unwrap_or(NO_POOL);
                }
            }
        }
    }

    fn announce(&mut self, id: NodeId, condition: NodeCondition) {
        let node = &self.nodes[id as usize];
        // Only pool nodes with an EC2 instance behind them mean anything to the functions.
        let (Some(pool), Some(instance)) = (node.pool, instance_id(&node.provider_id)) else { return };
        self.node_changes.push(NodeLifecycleDetail {
            pool: self.matcher.name(usize::from(pool)).to_string(),
            node: node.name.to_string(),
            provider_id: node.provider_id.to_string(),
            instance_id: instance.to_string(),
            capacity_type: node.capacity_type,
            condition,
            observed_at: None,
        });
    }

    /// Node joins, departures and Ready changes since the last call.
    pub fn take_node_changes(&mut self) -> Vec<NodeLifecycleDetail> {
        std::mem::take(&mut self.node_changes)
    }

    /// Changes that could not be sent, before the newer ones; the newest
    /// [`MAX_QUEUED_NODE_CHANGES`] are kept while the sender stays behind.
    pub fn requeue_node_changes(&mut self, mut unsent: Vec<NodeLifecycleDetail>) {
        unsent.append(&mut self.node_changes);
        let excess = unsent.len().saturating_sub(MAX_QUEUED_NODE_CHANGES);
        unsent.drain(..excess);
        self.node_changes = unsent;
    }

    fn pod_pool(&self, pod: &PodRecord) -> Option<PoolId> {
        match pod.node() {
            Some(node) => {
                let node = self.nodes.get(node as usize)?;
                node.present.then_some(node.pool).flatten()
            }
            None => pod.pending_pool(),
        }
    }

    /// Workload demand per pool (bound pods by their node's pool, pending ones by fit).
    pub fn totals(&self) -> Vec<PoolTotals> {
        let mut totals = vec![PoolTotals::default(); self.matcher.len()];
        for pod in self.pods.values() {
            if let Some(pool) = self.pod_pool(pod) {
                let t = &mut totals[usize::from(pool)];
                t.cpu_millis += u64::from(pod.cpu_millis);
                t.memory_bytes += pod.memory_bytes;
                t.pods += 1;
            }
        }
        for node in self.nodes.iter().filter(|n| n.present) {
            if let Some(pool) = node.pool {
                totals[usize::from(pool)].nodes += 1;
            }
        }
        totals
    }

    /// The shapes `pool`'s demand report carries: those of its workload pods that started
    /// since the previous call for the pool, and of those pending for it now.
    pub fn take_shapes(&mut self, pool: PoolId) -> Vec<ShapeCount> {
        let pods = &self.pods;
        let waiting: Vec<u128> = self
            .shapes
            .pending_pods()
            .filter(|key| pods.get(key).is_some_and(|p| p.node().is_none() && p.pending_pool() == Some(pool)))
            .collect();
        self.shapes.report(usize::from(pool), waiting)
    }

    /// Started counts of a demand report that was never sent: they go into the next.
    pub fn restore_shapes(&mut self, pool: PoolId, shapes: &[ShapeCount]) {
        self.shapes.restore(usize::from(pool), shapes);
    }

    pub fn unschedulable(&self) -> Vec<Option<Unschedulable>> {
        let mut out: Vec<Option<Unschedulable>> = vec![None; self.matcher.len()];
        for pod in self.pods.values() {
            let (Some(pool), Some(since)) = (pod.pending_pool(), pod.unschedulable_since) else { continue };
            let since = DateTime::from_timestamp(i64::from(since.get()), 0).unwrap_or_default();
            let entry = out[usize::from(pool)].get_or_insert(Unschedulable {
                count: 0,
                cpu_millis: 0,
                memory_bytes: 0,
                oldest_since: since,
                newest_since: since,
            });
            entry.count += 1;
            entry.cpu_millis += u64::from(pod.cpu_millis);
            entry.memory_bytes += pod.memory_bytes;
            entry.oldest_since = entry.oldest_since.min(since);
            entry.newest_since = entry.newest_since.max(since);
        }
        out
    }
}

/// Seconds since the epoch, as the records keep them (u32 lasts until 2106).
fn epoch_secs(t: DateTime<Utc>) -> Option<u32> {
    u32::try_from(t.timestamp()).ok()
}

/// The pod's UID as a number (16 bytes instead of a string); namespace/name hashed if
/// the UID is missing or odd.
fn pod_key(pod: &Pod) -> u128 {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let hex: String = uid.chars().filter(|c| *c != '-').collect();
    if hex.len() == 32 {
        if let Ok(v) = u128::from_str_radix(&hex, 16) {
            return v;
        }
    }
    let name = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    name.bytes().fold(0x6c62272e07bb014262b821756295c58du128, |h, b| {
        (h ^ u128::from(b)).wrapping_mul(0x1000000000000000000013b)
    })
}

/// Capacity type from the labels EKS managed node groups, Karpenter or the common
/// self-managed convention put on nodes; on-demand when none says spot.
pub fn capacity_type(labels: &BTreeMap<String, String>) -> CapacityType {
    let spot = [
        ("eks.amazonaws.com/capacityType", "SPOT"),
        ("karpenter.sh/capacity-type", "spot"),
        ("node.kubernetes.io/lifecycle", "spot"),
        ("ballast.io/capacity-type", "spot"),
    ];
    if spot.iter().any(|(k, v)| labels.get(*k).is_some_and(|l| l.eq_ignore_ascii_case(v))) {
        CapacityType::Spot
    } else {
        CapacityType::OnDemand
    }
}
