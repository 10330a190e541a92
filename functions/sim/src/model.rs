//! The state of the simulated pool and the methods that change it: nodes, pods and the
//! scheduling queue (`cluster`), the ASGs (desired capacity, instances, failed launches,
//! hourly cost), the Deployments' and the pause pods' replicas. Actors read it and
//! return `Call`s; `Model::apply` carries each out. An ASG acts on a new desired
//! capacity at once, as EC2 Auto Scaling does, so launching lives here too: what it
//! needs of EC2 comes in through `Ec2`, and what the engine must schedule or report
//! goes out as `Effect`s. It imports no actor and not the engine.

use crate::cluster::{Cluster, Node, NodeId, NodePhase, Placement, PodId, PodKind, Requests, SlotDraws};
use crate::scenario::{Market, Scenario};
use crate::time::MINUTE;

/// What an ASG's launch asks of EC2 (the spot market answers).
pub trait Ec2 {
    /// Whether there is spot capacity for `instance_type` in zone `az` at `now`.
    fn spot_capacity(&self, instance_type: &str, az: usize, now: u64) -> bool;
    /// What the `slot`-th launch of group `group` holds (boot time, interruption hazard).
    fn slot_draws(&self, group: usize, slot: u64) -> SlotDraws;
}

/// A change an actor asks of the pool.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// SetDesiredCapacity: the ASG launches or scales in at once.
    SetDesired {
        group: usize,
        desired: u32,
    },
    /// The ASG's own loop: launch up to desired where EC2 has capacity, or scale in,
    /// newest first.
    Reconcile {
        group: usize,
    },
    /// TerminateInstanceInAutoScalingGroup as Ballast calls it: nothing if the node is
    /// gone already; else it goes (`decrement` lowers desired, not below min) and the
    /// ASG acts at once (a replacement unless decremented).
    Terminate {
        node: NodeId,
        decrement: bool,
    },
    /// The node goes and its ASG does not act before its own loop: a reclaim,
    /// cluster-autoscaler's scale-down (decrementing), a node Capacity Rebalancing
    /// replaced.
    Remove {
        node: NodeId,
        decrement: bool,
    },
    /// Capacity Rebalancing: a replacement for `node` in its group, where EC2 has
    /// capacity (else nothing); from then on the ASG does not count `node`.
    Replace {
        node: NodeId,
    },
    Cordon {
        node: NodeId,
    },
    Uncordon {
        node: NodeId,
    },
    /// Every pod of the node evicted: their controllers recreate them, pending.
    Evict {
        node: NodeId,
    },
    /// One of a pool's pause-pod Deployments set to `replicas` pods of `cpu`/`mem`: a
    /// new shape replaces every pod of the slot (the Deployments' `Recreate` strategy).
    SetPauseReplicas {
        pool: usize,
        slot: usize,
        requests: Requests,
        replicas: u32,
    },
    /// A workload Deployment scaled (its ReplicaSet removes pending pods first).
    ScaleDeployment {
        deployment: usize,
        replicas: usize,
    },
    CreatePod {
        kind: PodKind,
        class: usize,
        cpu: u64,
        mem: u64,
        gpu: u32,
        priority: i32,
    },
    DeletePod {
        pod: PodId,
    },
}

/// What carrying out a call started, for the engine to schedule or report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// A node launched; it is Ready at `ready_at`.
    Booting { node: NodeId, ready_at: u64 },
    /// An ASG found no capacity for a launch.
    LaunchFailed { group: usize },
}

/// An ASG as the simulation runs it.
#[derive(Debug, Clone)]
pub struct Asg {
    pub desired: u32,
    /// Booting or Ready instances.
    pub nodes: Vec<NodeId>,
    /// When launches failed for want of capacity (recent ones).
    pub failures: Vec<u64>,
    /// What its instances cost per hour, all together.
    pub hourly: f64,
    /// Launches so far: the next launch's slot.
    launches: u64,
}

/// The pause pods' shape and priority (the strategy's).
#[derive(Debug, Clone, Copy)]
pub struct PausePods {
    pub cpu: u64,
    pub mem: u64,
    pub priority: i32,
}

/// One pause-pod Deployment of a pool: its pods' shape, how many it asked for, and the
/// pods.
#[derive(Debug, Clone, Default)]
pub struct PauseSlot {
    pub requests: Requests,
    pub target: u32,
    pods: Vec<PodId>,
}

/// What the forwarder reports of one of Ballast's pools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolWorkload {
    pub cpu: u64,
    pub mem: u64,
    pub pods: u32,
    pub pending: u32,
}

pub struct Model<'s> {
    pub sc: &'s Scenario,
    pub cluster: Cluster,
    /// One per scenario group, in order.
    pub asgs: Vec<Asg>,
    deployment_pods: Vec<Vec<PodId>>,
    /// Per Ballast pool: its pause-pod Deployments, by slot.
    pause_slots: Vec<Vec<PauseSlot>>,
    /// Per Ballast pool: the pause pods it asked for, all slots together.
    pub pause_targets: Vec<u32>,
    pause: Vec<PausePods>,
    /// The scheduler's candidate nodes, rebuilt when a node's schedulability changed.
    schedulable: Vec<NodeId>,
    schedulable_dirty: bool,
    /// Replacements Capacity Rebalancing launched (on a recommendation, where EC2 had
    /// capacity).
    pub rebalance_replacements: u32,
}

impl<'s> Model<'s> {
    /// `pause`: each pool's pause pods, in the order of the scenario's pools.
    pub fn new(sc: &'s Scenario, pause: Vec<PausePods>) -> Self {
        let mut cluster =
            Cluster::new(sc.ca.expendable_cutoff, sc.scheduler.preemption.0.as_millis() as u64, sc.accepts.clone());
        cluster.scoring = sc.scheduler.scoring;
        let asgs = sc
            .groups
            .iter()
            .map(|g| Asg { desired: g.initial, nodes: Vec::new(), failures: Vec::new(), hourly: 0.0, launches: 0 })
            .collect();
        Model {
            sc,
            cluster,
            asgs,
            deployment_pods: vec![Vec::new(); sc.deployments.len()],
            pause_slots: vec![Vec::new(); pause.len()],
            pause_targets: vec![0; pause.len()],
            pause,
            schedulable: Vec::new(),
            schedulable_dirty: true,
            rebalance_replacements: 0,
        }
    }

    /// Warm start: each group's initial nodes, Ready already.
    pub fn warm_start(&mut self, now: u64, ec2: &impl Ec2, effects: &mut Vec<Effect>) {
        let every_az: Vec<usize> = (0..self.sc.availability_zones.len()).collect();
        for g in 0..self.asgs.len() {
            for _ in 0..self.asgs[g].desired {
                let az = self.least_used_az(g, &every_az);
                let instance_type = self.sc.groups[g].instance_types[0].clone();
                let id = self.launch(g, az, &instance_type, now, ec2, effects);
                self.cluster.node_ready(id);
            }
        }
        self.schedulable_dirty = true;
    }

    /// Carries out `call` at `now`.
    pub fn apply(&mut self, call: Call, now: u64, ec2: &impl Ec2, effects: &mut Vec<Effect>) {
        match call {
            Call::SetDesired { group, desired } => {
                self.asgs[group].desired = desired;
                self.reconcile(group, now, ec2, effects);
            }
            Call::Reconcile { group } => self.reconcile(group, now, ec2, effects),
            Call::Terminate { node, decrement } => {
                if self.cluster.nodes[node].phase != NodePhase::Gone {
                    let g = self.cluster.nodes[node].group;
                    self.remove_node(node, decrement, now);
                    self.reconcile(g, now, ec2, effects);
                }
            }
            Call::Remove { node, decrement } => self.remove_node(node, decrement, now),
            Call::Replace { node } => {
                let g = self.cluster.nodes[node].group;
                let Some((az, instance_type)) = self.launch_target(g, ec2, now) else { return };
                let new = self.launch(g, az, &instance_type, now, ec2, effects);
                self.cluster.nodes[new].replaces = Some(node);
                self.cluster.nodes[node].leaving = true;
                self.rebalance_replacements += 1;
            }
            Call::Cordon { node } => {
                self.cluster.cordon(node);
                self.schedulable_dirty = true;
            }
            Call::Uncordon { node } => {
                self.cluster.uncordon(node);
                self.schedulable_dirty = true;
            }
            Call::Evict { node } => {
                self.cluster.evict_all(node, now);
            }
            Call::SetPauseReplicas { pool, slot, requests, replicas } => {
                self.set_pause_replicas(pool, slot, requests, replicas, now)
            }
            Call::ScaleDeployment { deployment, replicas } => self.scale_deployment(deployment, replicas, now),
            Call::CreatePod { kind, class, cpu, mem, gpu, priority } => {
                self.cluster.create_pod(kind, class, Requests { cpu, mem, gpu }, priority, now);
            }
            Call::DeletePod { pod } => self.cluster.delete_pod(pod),
        }
    }

    /// A booting node finished booting; false if it was not booting (gone, or started Ready).
    pub fn node_ready(&mut self, id: NodeId) -> bool {
        if self.cluster.nodes[id].phase != NodePhase::Booting {
            return false;
        }
        self.cluster.node_ready(id);
        self.schedulable_dirty = true;
        true
    }

    /// A kube-scheduler pass over the schedulable nodes.
    pub fn schedule(&mut self, now: u64) -> Placement {
        if self.schedulable_dirty {
            self.schedulable = (0..self.cluster.nodes.len()).filter(|&n| self.cluster.nodes[n].schedulable()).collect();
            self.schedulable_dirty = false;
        }
        self.cluster.schedule(now, &self.schedulable)
    }

    /// All the pause pods the pools asked for.
    pub fn pause_total(&self) -> u32 {
        self.pause_targets.iter().sum()
    }

    /// A Ballast pool's workload as the forwarder counts it: pods bound to the pool's
    /// nodes, and pending pods whose placement fits it first (`Scenario::class_pool`:
    /// a pending pod counts in one pool only). When every group is in the pool that is
    /// all of it (the cluster's running totals).
    pub fn pool_workload(&self, pool: usize) -> PoolWorkload {
        let c = &self.cluster;
        let of_pool = |g: usize| self.sc.groups[g].pool == Some(pool);
        if (0..self.sc.groups.len()).all(of_pool) {
            return PoolWorkload {
                cpu: c.workload_cpu,
                mem: c.workload_mem,
                pods: c.workload_pods,
                pending: c.pending_workload,
            };
        }
        let mut w = PoolWorkload::default();
        for pod in c.pods.iter().filter(|p| p.alive && p.is_workload()) {
            let counted = match pod.node {
                Some(n) => of_pool(c.nodes[n].group),
                None => self.sc.class_pool[pod.class] == Some(pool),
            };
            if counted {
                w.cpu += pod.cpu;
                w.mem += pod.mem;
                w.pods += 1;
                w.pending += u32::from(pod.node.is_none());
            }
        }
        w
    }

    /// The pool's pause pods as the strategy makes them (`pod_cpu`/`pod_memory`).
    pub fn pause_default(&self, pool: usize) -> PausePods {
        self.pause[pool]
    }

    /// The pool's pause-pod Deployments, by slot (a slot never written is empty).
    pub fn pause_slots(&self, pool: usize) -> &[PauseSlot] {
        &self.pause_slots[pool]
    }

    fn set_pause_replicas(&mut self, pool: usize, slot: usize, requests: Requests, replicas: u32, now: u64) {
        let slots = &mut self.pause_slots[pool];
        if slots.len() <= slot {
            slots.resize(slot + 1, PauseSlot::default());
        }
        let s = &mut slots[slot];
        if s.requests != requests {
            for pod in s.pods.drain(..) {
                self.cluster.delete_pod(pod);
            }
            s.requests = requests;
        }
        s.target = replicas;
        let priority = self.pause[pool].priority;
        while s.pods.len() < replicas as usize {
            // Class `pool`: the pool's node selector and tolerations.
            let id = self.cluster.create_pod(PodKind::Pause, pool, requests, priority, now);
            s.pods.push(id);
        }
        while s.pods.len() > replicas as usize {
            let index = s.pods.iter().rposition(|p| self.cluster.pods[*p].node.is_none()).unwrap_or(s.pods.len() - 1);
            let pod = s.pods.swap_remove(index);
            self.cluster.delete_pod(pod);
        }
        self.pause_targets[pool] = slots.iter().map(|s| s.target).sum();
    }

    fn scale_deployment(&mut self, d: usize, replicas: usize, now: u64) {
        let spec = &self.sc.deployments[d];
        let requests = Requests { cpu: spec.cpu_millis, mem: spec.memory_bytes, gpu: spec.gpus };
        let class = spec.class;
        while self.deployment_pods[d].len() < replicas {
            let id = self.cluster.create_pod(
                PodKind::Deployment(d),
                class,
                requests,
                crate::cluster::WORKLOAD_PRIORITY,
                now,
            );
            self.deployment_pods[d].push(id);
        }
        while self.deployment_pods[d].len() > replicas {
            let pods = &self.deployment_pods[d];
            // A ReplicaSet removes pending pods before running ones.
            let index = pods.iter().rposition(|p| self.cluster.pods[*p].node.is_none()).unwrap_or(pods.len() - 1);
            let pod = self.deployment_pods[d].swap_remove(index);
            self.cluster.delete_pod(pod);
        }
    }

    fn least_used_az(&self, g: usize, candidates: &[usize]) -> usize {
        let mut counts = vec![0u32; self.sc.availability_zones.len()];
        for &n in &self.asgs[g].nodes {
            counts[self.cluster.nodes[n].az] += 1;
        }
        candidates.iter().copied().min_by_key(|&az| (counts[az], az)).unwrap_or(0)
    }

    /// Launches a node of group `g`, booting.
    fn launch(
        &mut self,
        g: usize,
        az: usize,
        instance_type: &str,
        now: u64,
        ec2: &impl Ec2,
        effects: &mut Vec<Effect>,
    ) -> NodeId {
        let spec = &self.sc.groups[g];
        let shape = self.sc.node_shape(instance_type, spec.max_pods);
        let spot = spec.market == Market::Spot;
        let mut node = Node::booting(g, az, spot, shape.cpu, shape.mem);
        node.max_pods = shape.pods;
        node.gpu = shape.gpus;
        let it = &self.sc.instance_types[instance_type];
        node.hourly_price = if spot { it.spot_price } else { it.on_demand_price };
        node.instance_type = instance_type.to_string();
        self.asgs[g].hourly += node.hourly_price;
        let slot = self.asgs[g].launches;
        self.asgs[g].launches += 1;
        node.market = ec2.slot_draws(g, slot);
        let boot = node.market.boot_ms;
        let id = self.cluster.add_node(node);
        self.asgs[g].nodes.push(id);
        effects.push(Effect::Booting { node: id, ready_at: now + boot });
        id
    }

    /// Where group `g` can launch now: the least used AZ with capacity for one of its
    /// types, and the first such type there; `None` when its spot capacity is gone
    /// everywhere.
    fn launch_target(&self, g: usize, ec2: &impl Ec2, now: u64) -> Option<(usize, String)> {
        let spec = &self.sc.groups[g];
        let type_in = |az: usize| {
            spec.instance_types.iter().find(|t| spec.market == Market::OnDemand || ec2.spot_capacity(t, az, now))
        };
        let azs: Vec<usize> = (0..self.sc.availability_zones.len()).filter(|&az| type_in(az).is_some()).collect();
        if azs.is_empty() {
            return None;
        }
        let az = self.least_used_az(g, &azs);
        type_in(az).map(|t| (az, t.clone()))
    }

    /// The group's instances its desired capacity counts: not those Capacity
    /// Rebalancing is replacing.
    fn counted(&self, g: usize) -> Vec<NodeId> {
        self.asgs[g].nodes.iter().copied().filter(|&n| !self.cluster.nodes[n].leaving).collect()
    }

    /// What an ASG does on its own: launch up to desired (if there is capacity), or
    /// scale in, newest first.
    fn reconcile(&mut self, g: usize, now: u64, ec2: &impl Ec2, effects: &mut Vec<Effect>) {
        let desired = self.asgs[g].desired as usize;
        loop {
            let counted = self.counted(g);
            if counted.len() <= desired {
                break;
            }
            let pick = counted
                .iter()
                .rposition(|&n| self.cluster.nodes[n].phase == NodePhase::Booting)
                .unwrap_or(counted.len() - 1);
            self.remove_node(counted[pick], false, now);
        }
        let missing = desired.saturating_sub(self.counted(g).len());
        for _ in 0..missing {
            let Some((az, instance_type)) = self.launch_target(g, ec2, now) else {
                let state = &mut self.asgs[g];
                state.failures.retain(|&t| t + 30 * MINUTE > now);
                state.failures.push(now);
                effects.push(Effect::LaunchFailed { group: g });
                return;
            };
            self.launch(g, az, &instance_type, now, ec2, effects);
        }
    }

    /// A node leaves (reclaimed, terminated): its pods go pending.
    fn remove_node(&mut self, id: NodeId, decrement: bool, now: u64) {
        let g = self.cluster.nodes[id].group;
        if self.cluster.nodes[id].phase != NodePhase::Gone {
            self.asgs[g].hourly -= self.cluster.nodes[id].hourly_price;
        }
        self.cluster.remove_node(id, now);
        self.asgs[g].nodes.retain(|&n| n != id);
        if decrement {
            let min = self.sc.groups[g].min;
            self.asgs[g].desired = self.asgs[g].desired.saturating_sub(1).max(min);
        }
        self.schedulable_dirty = true;
    }
}
