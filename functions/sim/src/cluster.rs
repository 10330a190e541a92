//! Nodes, pods and the scheduler: bin-packing placement, priorities, and preemption
//! of pause pods by workload pods.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use crate::scenario::Scoring;

pub type NodeId = usize;
pub type PodId = usize;

/// The pause pods' priority: exactly cluster-autoscaler's expendable cutoff.
pub const PAUSE_PRIORITY: i32 = -10;
pub const WORKLOAD_PRIORITY: i32 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodePhase {
    Booting,
    Ready,
    Gone,
}

/// The random draws of one launch slot (the k-th launch of a node group), the same for
/// every strategy run on the same seed: common random numbers, so strategies that launch
/// different numbers of nodes still face the same market slot by slot.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SlotDraws {
    /// Which launch of its group this node is.
    pub slot: u64,
    /// Time to Ready.
    pub boot_ms: u64,
    /// Interruption hazard this node survives (an Exp(1) draw, spent minute by minute at
    /// the market's rate of the moment): interrupted when it is spent.
    pub hazard_left: f64,
    /// Whether a rebalance recommendation precedes its interruption, and by how much.
    pub rebalance_lead_ms: Option<u64>,
    /// Hazard left before a rebalance recommendation that no interruption follows.
    pub false_rebalance_left: f64,
}

#[derive(Debug, Clone)]
pub struct Node {
    pub group: usize,
    pub az: usize,
    pub spot: bool,
    pub instance_type: String,
    /// What it costs per hour (its market's price for its type).
    pub hourly_price: f64,
    /// Allocatable to pods other than DaemonSets, and how many of them it takes.
    pub cpu: u64,
    pub mem: u64,
    pub max_pods: u32,
    /// `nvidia.com/gpu`: whole devices, never shared.
    pub gpu: u32,
    pub cpu_used: u64,
    pub mem_used: u64,
    pub gpu_used: u32,
    /// Requests of the pods CA counts (priority at or above its cutoff).
    pub cpu_counted: u64,
    pub mem_counted: u64,
    pub pause_cpu: u64,
    pub pause_mem: u64,
    /// Room held for pods nominated here after preempting (their victims terminating).
    pub reserved_cpu: u64,
    pub reserved_mem: u64,
    pub reserved_gpu: u32,
    /// Pod slots held for them too (the scheduler counts nominated pods).
    pub reserved_pods: u32,
    pub pods: Vec<PodId>,
    pub phase: NodePhase,
    pub cordoned: bool,
    /// What the spot market holds for this launch slot (drawn at launch, see `SlotDraws`).
    pub market: SlotDraws,
    /// Capacity Rebalancing launched this node to replace `replaces`.
    pub replaces: Option<NodeId>,
    /// Capacity Rebalancing is replacing this node: its ASG no longer counts it.
    pub leaving: bool,
}

impl Node {
    /// A node just launched: booting, empty.
    pub fn booting(group: usize, az: usize, spot: bool, cpu: u64, mem: u64) -> Node {
        Node {
            group,
            az,
            spot,
            instance_type: String::new(),
            hourly_price: 0.0,
            cpu,
            mem,
            max_pods: u32::MAX,
            gpu: 0,
            cpu_used: 0,
            mem_used: 0,
            gpu_used: 0,
            cpu_counted: 0,
            mem_counted: 0,
            pause_cpu: 0,
            pause_mem: 0,
            reserved_cpu: 0,
            reserved_mem: 0,
            reserved_gpu: 0,
            reserved_pods: 0,
            pods: Vec::new(),
            phase: NodePhase::Booting,
            cordoned: false,
            market: SlotDraws::default(),
            replaces: None,
            leaving: false,
        }
    }

    pub fn free(&self) -> (u64, u64) {
        (self.cpu - self.cpu_used, self.mem - self.mem_used)
    }

    /// What a pod not nominated here may take: free room less what nominees hold.
    fn open(&self) -> (u64, u64) {
        let (cpu, mem) = self.free();
        (cpu.saturating_sub(self.reserved_cpu), mem.saturating_sub(self.reserved_mem))
    }

    /// GPUs neither in use nor held for a nominee.
    fn open_gpu(&self) -> u32 {
        self.gpu.saturating_sub(self.gpu_used + self.reserved_gpu)
    }

    /// Whether a pod not nominated here fits in its open room (not counting pod slots).
    fn fits(&self, pod: &Pod) -> bool {
        let (cpu, mem) = self.open();
        cpu >= pod.cpu && mem >= pod.mem && self.open_gpu() >= pod.gpu
    }

    /// kube-scheduler's `NodeResourcesFit` score with the `LeastAllocated` strategy (its
    /// default): per resource, CPU and memory at weight 1, `(allocatable - requested) *
    /// 100 / allocatable` in integers, with the pod's requests in `requested`; the mean
    /// over the resources. Room held for nominees counts as requested. Allocatable here is
    /// what the DaemonSets leave (kube-scheduler counts their requests in `requested`):
    /// the same order among nodes of one type, a few points off across types.
    fn least_allocated_score(&self, pod: &Pod) -> u64 {
        let score = |allocatable: u64, requested: u64| {
            if allocatable == 0 || requested > allocatable {
                0
            } else {
                (allocatable - requested) * 100 / allocatable
            }
        };
        let cpu = score(self.cpu, self.cpu_used + self.reserved_cpu + pod.cpu);
        let mem = score(self.mem, self.mem_used + self.reserved_mem + pod.mem);
        (cpu + mem) / 2
    }

    pub fn schedulable(&self) -> bool {
        self.phase == NodePhase::Ready && !self.cordoned
    }

    fn has_pod_room(&self) -> bool {
        (self.pods.len() as u32) + self.reserved_pods < self.max_pods
    }
}

/// What a pod requests: CPU (millicores), memory (bytes) and `nvidia.com/gpu`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    pub cpu: u64,
    pub mem: u64,
    pub gpu: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodKind {
    Deployment(usize),
    Batch { duration_ms: u64 },
    Pause,
}

#[derive(Debug, Clone)]
pub struct Pod {
    pub kind: PodKind,
    /// Where it may run: an index into the scenario's placement classes.
    pub class: usize,
    pub cpu: u64,
    pub mem: u64,
    /// `nvidia.com/gpu` requested.
    pub gpu: u32,
    pub priority: i32,
    pub node: Option<NodeId>,
    pub pending_since: u64,
    pub alive: bool,
    /// Bumped at each (re)start so a stale completion is ignored.
    pub generation: u32,
    /// Its place in the scheduling queue while pending.
    queue_seq: u64,
    /// After preempting: the node holding room for it, and when its victims are gone.
    nominated: Option<(NodeId, u64)>,
    /// A scheduling pass found no room for it (`PodScheduled=False`, `Unschedulable`):
    /// only such pods make cluster-autoscaler scale up.
    pub unschedulable: bool,
}

impl Pod {
    pub fn is_workload(&self) -> bool {
        !matches!(self.kind, PodKind::Pause)
    }
}

/// What the scheduler did, for the engine to account and schedule follow-ups.
#[derive(Debug, Default)]
pub struct Placement {
    /// Workload pods that started, with how long they waited.
    pub started: Vec<(PodId, u64)>,
    pub preempted: u32,
    /// When the earliest nominated pod's victims are gone: the next pass to run.
    pub wake_at: Option<u64>,
    /// Workload pods this pass marked unschedulable for the first time.
    pub newly_unschedulable: Vec<PodId>,
}

#[derive(Debug, Default)]
pub struct Cluster {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    /// (priority desc, creation order, pod): the scheduling queue.
    pending: BTreeSet<(Reverse<i32>, u64, PodId)>,
    seq: u64,
    dirty: bool,
    /// Counters kept exact on every change (the metrics integrate them).
    pub workload_cpu: u64,
    pub workload_mem: u64,
    pub workload_pods: u32,
    pub pending_workload: u32,
    pub ready_cpu: u64,
    pub ready_mem: u64,
    pub running_workload_cpu: u64,
    pub expendable_cutoff: i32,
    /// From choosing victims to binding the preemptor.
    pub preemption_ms: u64,
    /// `accepts[class][group]`: whether a node of the group takes a pod of the class.
    pub accepts: Vec<Vec<bool>>,
    /// Which feasible node a pod goes to.
    pub scoring: Scoring,
}

impl Cluster {
    pub fn new(expendable_cutoff: i32, preemption_ms: u64, accepts: Vec<Vec<bool>>) -> Self {
        Cluster { expendable_cutoff, preemption_ms, accepts, ..Default::default() }
    }

    /// Whether `pod` may go on `node` at all (placement and pod count, not room).
    pub fn admits(&self, node: &Node, pod: &Pod) -> bool {
        self.accepts[pod.class][node.group] && node.has_pod_room()
    }

    /// Whether a scheduling pass has something new to look at.
    pub fn is_dirty(&self) -> bool {
        self.dirty && !self.pending.is_empty()
    }

    /// Makes the next pass run (a nominee's victims are gone).
    pub fn wake(&mut self) {
        self.dirty = true;
    }

    /// Drops a pending pod's nomination and the room held for it.
    fn release(&mut self, pod_id: PodId) {
        if let Some((node_id, _)) = self.pods[pod_id].nominated.take() {
            let (cpu, mem, gpu) = (self.pods[pod_id].cpu, self.pods[pod_id].mem, self.pods[pod_id].gpu);
            let node = &mut self.nodes[node_id];
            node.reserved_cpu -= cpu;
            node.reserved_mem -= mem;
            node.reserved_gpu -= gpu;
            node.reserved_pods -= 1;
            self.dirty = true;
        }
    }

    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    pub fn pending_pods(&self) -> impl Iterator<Item = PodId> + '_ {
        self.pending.iter().map(|(_, _, p)| *p)
    }

    pub fn add_node(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    pub fn node_ready(&mut self, id: NodeId) {
        let node = &mut self.nodes[id];
        if node.phase == NodePhase::Booting {
            node.phase = NodePhase::Ready;
            self.ready_cpu += node.cpu;
            self.ready_mem += node.mem;
            self.dirty = true;
        }
    }

    pub fn create_pod(&mut self, kind: PodKind, class: usize, requests: Requests, priority: i32, now: u64) -> PodId {
        let Requests { cpu, mem, gpu } = requests;
        let id = self.pods.len();
        self.pods.push(Pod {
            kind,
            class,
            cpu,
            mem,
            gpu,
            priority,
            node: None,
            pending_since: now,
            alive: true,
            generation: 0,
            queue_seq: 0,
            nominated: None,
            unschedulable: false,
        });
        if !matches!(kind, PodKind::Pause) {
            self.workload_cpu += cpu;
            self.workload_mem += mem;
            self.workload_pods += 1;
        }
        self.enqueue(id, now);
        id
    }

    fn enqueue(&mut self, id: PodId, now: u64) {
        let pod = &mut self.pods[id];
        pod.pending_since = now;
        pod.node = None;
        pod.unschedulable = false;
        self.seq += 1;
        pod.queue_seq = self.seq;
        self.pending.insert((Reverse(pod.priority), self.seq, id));
        if pod.is_workload() {
            self.pending_workload += 1;
        }
        self.dirty = true;
    }

    fn dequeue(&mut self, id: PodId) -> bool {
        self.release(id);
        let pod = &self.pods[id];
        if self.pending.remove(&(Reverse(pod.priority), pod.queue_seq, id)) {
            if self.pods[id].is_workload() {
                self.pending_workload -= 1;
            }
            true
        } else {
            false
        }
    }

    fn bind(&mut self, pod_id: PodId, node_id: NodeId) {
        let pod = &mut self.pods[pod_id];
        pod.node = Some(node_id);
        pod.unschedulable = false;
        pod.generation += 1;
        let node = &mut self.nodes[node_id];
        node.cpu_used += pod.cpu;
        node.mem_used += pod.mem;
        node.gpu_used += pod.gpu;
        // A device is one pod's: the fit checks keep it so.
        debug_assert!(node.gpu_used <= node.gpu, "GPUs over-committed on node {node_id}");
        if pod.priority >= self.expendable_cutoff {
            node.cpu_counted += pod.cpu;
            node.mem_counted += pod.mem;
        }
        if matches!(pod.kind, PodKind::Pause) {
            node.pause_cpu += pod.cpu;
            node.pause_mem += pod.mem;
        } else {
            self.running_workload_cpu += pod.cpu;
        }
        node.pods.push(pod_id);
    }

    /// Takes a running pod off its node (it is then pending again or deleted).
    fn unbind(&mut self, pod_id: PodId) {
        let pod = &self.pods[pod_id];
        let Some(node_id) = pod.node else { return };
        let node = &mut self.nodes[node_id];
        node.cpu_used -= pod.cpu;
        node.mem_used -= pod.mem;
        node.gpu_used -= pod.gpu;
        if pod.priority >= self.expendable_cutoff {
            node.cpu_counted -= pod.cpu;
            node.mem_counted -= pod.mem;
        }
        if matches!(pod.kind, PodKind::Pause) {
            node.pause_cpu -= pod.cpu;
            node.pause_mem -= pod.mem;
        } else {
            self.running_workload_cpu -= pod.cpu;
        }
        if let Some(pos) = node.pods.iter().position(|p| *p == pod_id) {
            node.pods.swap_remove(pos);
        }
        self.pods[pod_id].node = None;
        self.dirty = true;
    }

    /// Deletes a pod for good (scale-down, job done).
    pub fn delete_pod(&mut self, id: PodId) {
        if !self.pods[id].alive {
            return;
        }
        if self.pods[id].node.is_some() {
            self.unbind(id);
        } else {
            self.dequeue(id);
        }
        let pod = &mut self.pods[id];
        pod.alive = false;
        if pod.is_workload() {
            self.workload_cpu -= pod.cpu;
            self.workload_mem -= pod.mem;
            self.workload_pods -= 1;
        }
    }

    /// Evicts every pod of a node: its controller recreates it, pending.
    pub fn evict_all(&mut self, node_id: NodeId, now: u64) -> u32 {
        let pods = self.nodes[node_id].pods.clone();
        let count = pods.len() as u32;
        for pod in pods {
            self.unbind(pod);
            self.enqueue(pod, now);
        }
        count
    }

    pub fn cordon(&mut self, node_id: NodeId) {
        self.nodes[node_id].cordoned = true;
    }

    pub fn uncordon(&mut self, node_id: NodeId) {
        self.nodes[node_id].cordoned = false;
    }

    /// The node disappears; its pods go back to pending.
    pub fn remove_node(&mut self, node_id: NodeId, now: u64) {
        if self.nodes[node_id].phase == NodePhase::Gone {
            return;
        }
        self.evict_all(node_id, now);
        let nominees: Vec<PodId> = self
            .pending
            .iter()
            .map(|k| k.2)
            .filter(|&p| self.pods[p].nominated.is_some_and(|(n, _)| n == node_id))
            .collect();
        for pod in nominees {
            self.release(pod);
        }
        let node = &mut self.nodes[node_id];
        if node.phase == NodePhase::Ready {
            self.ready_cpu -= node.cpu;
            self.ready_mem -= node.mem;
        }
        node.phase = NodePhase::Gone;
    }

    /// Places pending pods, highest priority first; a workload pod that fits nowhere
    /// preempts pause pods and is bound `preemption_ms` later, on the room they leave
    /// (held for it meanwhile). Runs only when something changed.
    pub fn schedule(&mut self, now: u64, schedulable: &[NodeId]) -> Placement {
        let mut placement = Placement::default();
        if !self.dirty || self.pending.is_empty() {
            self.dirty = false;
            return placement;
        }
        self.dirty = false;
        // Shapes that fit nowhere in this pass: bigger or equal ones are skipped.
        let mut failed: Vec<(u64, u64, u32, i32, usize)> = Vec::new();
        let queue: Vec<(Reverse<i32>, u64, PodId)> = self.pending.iter().copied().collect();
        for key in queue {
            let id = key.2;
            let pod = &self.pods[id];
            let (cpu, mem, gpu, priority, class) = (pod.cpu, pod.mem, pod.gpu, pod.priority, pod.class);
            if let Some((node_id, ready_at)) = self.pods[id].nominated {
                if now < ready_at {
                    placement.wake_at = Some(placement.wake_at.map_or(ready_at, |w| w.min(ready_at)));
                    continue;
                }
                // Its victims are gone: bound on the room held for it.
                self.release(id);
                self.start(key, node_id, now, &mut placement);
                continue;
            }
            if failed.iter().any(|&(c, m, g, p, k)| cpu >= c && mem >= m && gpu >= g && priority <= p && class == k) {
                self.mark_unschedulable(id, &mut placement);
                continue;
            }
            let target = self.pick_node(id, schedulable);
            match target {
                Some(n) => self.start(key, n, now, &mut placement),
                None if priority > PAUSE_PRIORITY && self.preempt_for(id, schedulable, now, &mut placement) => {}
                None => {
                    self.mark_unschedulable(id, &mut placement);
                    failed.push((cpu, mem, gpu, priority, class));
                }
            }
        }
        placement
    }

    /// Where the scheduler puts pod `id` among the schedulable nodes it fits on: the
    /// first (first fit), or the best `LeastAllocated` score, the first of equals
    /// (kube-scheduler draws among equals at random; the first keeps runs reproducible
    /// without a draw the other scoring lacks).
    fn pick_node(&self, id: PodId, schedulable: &[NodeId]) -> Option<NodeId> {
        let pod = &self.pods[id];
        let mut feasible = schedulable.iter().copied().filter(|&n| {
            let node = &self.nodes[n];
            node.fits(pod) && self.admits(node, pod)
        });
        match self.scoring {
            Scoring::FirstFit => feasible.next(),
            Scoring::LeastAllocated => feasible.max_by_key(|&n| (self.nodes[n].least_allocated_score(pod), Reverse(n))),
        }
    }

    fn mark_unschedulable(&mut self, id: PodId, placement: &mut Placement) {
        let pod = &mut self.pods[id];
        if !pod.unschedulable && pod.is_workload() {
            placement.newly_unschedulable.push(id);
        }
        pod.unschedulable = true;
    }

    fn start(&mut self, key: (Reverse<i32>, u64, PodId), node_id: NodeId, now: u64, placement: &mut Placement) {
        let id = key.2;
        self.pending.remove(&key);
        let pod = &self.pods[id];
        if pod.is_workload() {
            self.pending_workload -= 1;
            placement.started.push((id, now - pod.pending_since));
        }
        self.bind(id, node_id);
    }

    /// Evicts pause pods from the first node where that makes room, and nominates the
    /// pod there: the room is held for it until its victims have terminated.
    fn preempt_for(&mut self, id: PodId, schedulable: &[NodeId], now: u64, placement: &mut Placement) -> bool {
        let (cpu, mem, gpu) = (self.pods[id].cpu, self.pods[id].mem, self.pods[id].gpu);
        let pod = &self.pods[id];
        // Pause pods hold no GPU: evicting them frees none.
        let Some(node_id) = schedulable.iter().copied().find(|&n| {
            let node = &self.nodes[n];
            let (fc, fm) = node.open();
            // A full node gets a pod slot from its first victim.
            let slot = node.has_pod_room() || node.pause_cpu + node.pause_mem > 0;
            fc + node.pause_cpu >= cpu
                && fm + node.pause_mem >= mem
                && node.open_gpu() >= gpu
                && self.accepts[pod.class][node.group]
                && slot
        }) else {
            return false;
        };
        let mut victims: Vec<PodId> =
            self.nodes[node_id].pods.iter().copied().filter(|p| matches!(self.pods[*p].kind, PodKind::Pause)).collect();
        victims.sort_unstable();
        for victim in victims {
            let (fc, fm) = self.nodes[node_id].open();
            if fc >= cpu && fm >= mem && self.nodes[node_id].has_pod_room() {
                break;
            }
            self.unbind(victim);
            self.enqueue(victim, now);
            placement.preempted += 1;
        }
        let ready_at = now + self.preemption_ms;
        self.pods[id].nominated = Some((node_id, ready_at));
        self.pods[id].unschedulable = false;
        let node = &mut self.nodes[node_id];
        node.reserved_cpu += cpu;
        node.reserved_mem += mem;
        node.reserved_gpu += gpu;
        node.reserved_pods += 1;
        placement.wake_at = Some(placement.wake_at.map_or(ready_at, |w| w.min(ready_at)));
        true
    }
}

#[cfg(test)]
mod tests;
