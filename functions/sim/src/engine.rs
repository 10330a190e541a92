//! The discrete-event engine: a simulated clock and event queue driving the spot
//! market, the ASGs, the workload, cluster-autoscaler and (optionally) Ballast.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use chrono::{Datelike, Timelike, Weekday};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::bridge::Bridge;
use crate::cluster::{Cluster, Node, NodeId, NodePhase, PodId, PodKind, SlotDraws, WORKLOAD_PRIORITY};
use crate::metrics::Metrics;
use crate::scenario::{Curve, Market, Scenario};
use crate::{ca, handlers, Strategy};

pub const SECOND: u64 = 1000;
pub const MINUTE: u64 = 60 * SECOND;
const ASG_LOOP: u64 = 10 * SECOND;
const TICK: u64 = MINUTE;
/// A spot interruption warning comes two minutes ahead.
const WARNING_LEAD: u64 = 2 * MINUTE;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ev {
    NodeReady(NodeId),
    Reclaim(NodeId),
    Warning(NodeId),
    Rebalance(NodeId),
    JobDone(PodId, u32),
    BatchStart(usize),
    AsgLoop,
    CaScan,
    WorkloadTick,
    MarketTick,
    Sample,
    BallastTick,
    BallastDeliver,
    /// kube-scheduler's pass, a cycle after what made it due.
    SchedulePass,
    /// A nominated pod's victims are gone: a pass binds it.
    NomineeReady,
    /// aws-node-termination-handler cordons and drains the node.
    Drain(NodeId),
}

/// What the forwarder reports of Ballast's pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolWorkload {
    pub cpu: u64,
    pub mem: u64,
    pub pods: u32,
    pub pending: u32,
}

/// An ASG as the simulation runs it.
#[derive(Debug, Clone)]
pub struct GroupState {
    pub desired: u32,
    /// Booting or Ready instances.
    pub nodes: Vec<NodeId>,
    /// When launches failed for want of capacity (recent ones).
    pub failures: Vec<u64>,
    /// Cluster-autoscaler's view of the group.
    pub ca: CaGroupView,
    /// What its instances cost per hour, all together.
    pub hourly: f64,
}

/// What cluster-autoscaler keeps about one node group.
#[derive(Debug, Clone, Default)]
pub struct CaGroupView {
    /// Since when the group is below its target size.
    pub unfulfilled_since: Option<u64>,
    /// CA asked for the instances still missing (its own scale-up request).
    pub scale_up_requested: bool,
    /// When CA last set the ASG's desired capacity (the AWS provider's `lastUpdateTime`).
    pub last_write: u64,
    pub backoff_until: u64,
    pub backoff_ms: u64,
    pub last_failure: Option<u64>,
}

pub struct Sim<'s> {
    pub sc: &'s Scenario,
    pub strategy: Strategy,
    pub now: u64,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    pub cluster: Cluster,
    pub groups: Vec<GroupState>,
    deployment_pods: Vec<Vec<PodId>>,
    pause_pods: Vec<PodId>,
    pub pause_target: u32,
    pause_cpu: u64,
    pause_mem: u64,
    pause_priority: i32,
    seed: u64,
    /// Launches so far per group: the next launch's slot.
    launches: Vec<u64>,
    rng_work: ChaCha8Rng,
    /// Cluster-autoscaler's own draws (its cache's phase, expander ties).
    pub rng_ca: ChaCha8Rng,
    /// When the AWS provider's ASG cache next refreshes.
    pub ca_next_refresh: u64,
    schedulable: Vec<NodeId>,
    schedulable_dirty: bool,
    /// A scheduling pass is due at this time.
    pass_due: Option<u64>,
    pub metrics: Metrics,
    pub ballast: Option<Bridge>,
    pub last_scale_up: u64,
    last_unschedulable_sent: Option<u64>,
    pub interruptions: u32,
    /// Each interruption: (group, launch slot, when it was decided).
    pub interrupted: Vec<(usize, u64, u64)>,
}

/// SplitMix64's finaliser: independent-looking seeds for neighbouring slots.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl<'s> Sim<'s> {
    pub fn new(sc: &'s Scenario, strategy: Strategy, seed: u64) -> Self {
        let pool = &sc.ballast.pools[0];
        let groups = sc
            .groups
            .iter()
            .map(|g| GroupState {
                desired: g.initial,
                nodes: Vec::new(),
                failures: Vec::new(),
                ca: CaGroupView::default(),
                hourly: 0.0,
            })
            .collect();
        let ballast = (strategy == Strategy::Ballast).then(|| Bridge::new(sc));
        Sim {
            sc,
            strategy,
            now: 0,
            queue: BinaryHeap::new(),
            seq: 0,
            cluster: Cluster::new(
                sc.ca.expendable_cutoff,
                sc.scheduler.preemption.0.as_millis() as u64,
                sc.accepts.clone(),
            ),
            groups,
            deployment_pods: vec![Vec::new(); sc.deployments.len()],
            pause_pods: Vec::new(),
            pause_target: 0,
            pause_cpu: pool.headroom.pod_cpu_millis,
            pause_mem: pool.headroom.pod_memory_bytes,
            pause_priority: match strategy {
                Strategy::StaticOverprovisioning => sc.static_overprovisioning.priority,
                _ => pool.headroom.priority_class.value,
            },
            seed,
            launches: vec![0; sc.groups.len()],
            rng_work: ChaCha8Rng::seed_from_u64(seed ^ 0x776f_726b),
            rng_ca: ChaCha8Rng::seed_from_u64(mix(seed ^ 0x6361)),
            ca_next_refresh: 0,
            schedulable: Vec::new(),
            schedulable_dirty: true,
            pass_due: None,
            metrics: Metrics::new(sc),
            ballast,
            last_scale_up: 0,
            last_unschedulable_sent: None,
            interruptions: 0,
            interrupted: Vec::new(),
        }
    }

    pub fn at(&mut self, time: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((time, self.seq, ev)));
    }

    /// Runs to the end of the scenario, calling `progress` with the fraction done.
    pub fn run(&mut self, progress: &mut dyn FnMut(f64)) {
        self.start();
        let end = self.sc.end_ms();
        self.run_until(end, progress);
        self.metrics.advance(end, &self.cluster, &self.groups, self.sc);
        self.now = end;
        self.metrics.finish(&self.cluster, end);
        progress(1.0);
    }

    /// Handles every event up to and including `until`.
    pub fn run_until(&mut self, until: u64, progress: &mut dyn FnMut(f64)) {
        let end = self.sc.end_ms().max(1);
        let mut last_report = self.now;
        while let Some(Reverse((time, _, _))) = self.queue.peek() {
            if *time > until {
                break;
            }
            let Some(Reverse((time, _, ev))) = self.queue.pop() else { break };
            self.metrics.advance(time, &self.cluster, &self.groups, self.sc);
            self.now = time;
            self.handle(ev);
            self.place();
            if time - last_report >= 15 * MINUTE {
                last_report = time;
                progress(time as f64 / end as f64);
            }
        }
    }

    pub fn start(&mut self) {
        // Warm start: the initial nodes are up and the workload of the first minute placed.
        for g in 0..self.groups.len() {
            for _ in 0..self.groups[g].desired {
                let az = self.least_used_az(g, &(0..self.sc.availability_zones.len()).collect::<Vec<_>>());
                let instance_type = self.sc.groups[g].instance_types[0].clone();
                let id = self.launch(g, az, &instance_type);
                self.cluster.node_ready(id);
            }
        }
        self.schedulable_dirty = true;
        self.workload_tick();
        match self.strategy {
            Strategy::StaticOverprovisioning => self.set_pause_target(self.sc.static_overprovisioning.replicas),
            Strategy::ClusterAutoscaler | Strategy::Ballast => {}
        }
        self.schedule_pass();
        for (i, batch) in self.sc.batches.iter().enumerate() {
            for at in &batch.at {
                self.at(at.0.as_millis() as u64, Ev::BatchStart(i));
            }
        }
        self.at(0, Ev::AsgLoop);
        // CA started at some moment before the run: its cache refresh has a phase of its own.
        let refresh = self.sc.ca.asg_cache_refresh.0.as_millis() as u64;
        self.ca_next_refresh = self.rng_ca.random_range(0..refresh.max(1));
        self.at(self.sc.ca.scan_interval.0.as_millis() as u64, Ev::CaScan);
        self.at(TICK, Ev::WorkloadTick);
        self.at(TICK, Ev::MarketTick);
        self.at(0, Ev::Sample);
        if self.ballast.is_some() {
            self.at(0, Ev::BallastTick);
        }
    }

    fn handle(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::NodeReady(id) => {
                if self.cluster.nodes[id].phase == NodePhase::Booting {
                    self.cluster.node_ready(id);
                    self.schedulable_dirty = true;
                    handlers::node_ready(self, id);
                }
            }
            Ev::Reclaim(id) => {
                if self.cluster.nodes[id].phase != NodePhase::Gone {
                    self.remove_node(id, false);
                }
            }
            Ev::Warning(id) => {
                if self.cluster.nodes[id].phase != NodePhase::Gone {
                    match self.ballast.as_mut() {
                        Some(b) => {
                            b.spot_warning(id, now);
                            self.at(now + self.sc.delivery_delay.0.as_millis() as u64, Ev::BallastDeliver);
                        }
                        None => handlers::warning(self, id),
                    }
                }
            }
            Ev::Rebalance(id) => {
                if self.cluster.nodes[id].phase != NodePhase::Gone {
                    match self.ballast.as_mut() {
                        Some(b) => {
                            b.rebalance(id, now);
                            self.at(now + self.sc.delivery_delay.0.as_millis() as u64, Ev::BallastDeliver);
                        }
                        None => handlers::rebalance(self, id),
                    }
                }
            }
            Ev::Drain(id) => handlers::drain(self, id),
            Ev::JobDone(pod, generation) => {
                let p = &self.cluster.pods[pod];
                if p.alive && p.generation == generation && p.node.is_some() {
                    self.cluster.delete_pod(pod);
                }
            }
            Ev::BatchStart(i) => {
                let batch = self.sc.batches[i].clone();
                for _ in 0..batch.jobs {
                    let lo = batch.duration[0].0.as_millis() as u64;
                    let hi = batch.duration[1].0.as_millis() as u64;
                    let duration_ms = if hi > lo { self.rng_work.random_range(lo..=hi) } else { lo };
                    self.cluster.create_pod(
                        PodKind::Batch { duration_ms },
                        batch.class,
                        batch.cpu_millis,
                        batch.memory_bytes,
                        WORKLOAD_PRIORITY,
                        now,
                    );
                }
            }
            Ev::AsgLoop => {
                for g in 0..self.groups.len() {
                    self.reconcile_group(g);
                }
                self.at(now + ASG_LOOP, Ev::AsgLoop);
            }
            Ev::CaScan => {
                ca::scan(self);
                self.at(now + self.sc.ca.scan_interval.0.as_millis() as u64, Ev::CaScan);
            }
            Ev::WorkloadTick => {
                self.workload_tick();
                self.at(now + TICK, Ev::WorkloadTick);
            }
            Ev::MarketTick => {
                self.market_tick();
                self.at(now + TICK, Ev::MarketTick);
            }
            Ev::Sample => {
                self.metrics.sample(now, &self.cluster, &self.groups, self.sc, self.pause_target);
                self.at(now + TICK, Ev::Sample);
            }
            Ev::BallastTick => {
                if let Some(b) = self.ballast.as_mut() {
                    b.scheduled_reconcile(now);
                }
                self.deliver_to_ballast();
                self.at(now + TICK, Ev::BallastTick);
            }
            Ev::BallastDeliver => self.deliver_to_ballast(),
            Ev::SchedulePass => {
                self.pass_due = None;
                self.schedule_pass();
            }
            Ev::NomineeReady => {
                self.cluster.wake();
                self.schedule_pass();
            }
        }
    }

    fn deliver_to_ballast(&mut self) {
        let Some(mut bridge) = self.ballast.take() else { return };
        bridge.deliver(self);
        self.ballast = Some(bridge);
    }

    /// After each event: a scheduling pass a cycle later if something changed.
    fn place(&mut self) {
        if !self.cluster.is_dirty() || self.pass_due.is_some() {
            return;
        }
        let cycle = self.sc.scheduler.cycle.0.as_millis() as u64;
        if cycle == 0 {
            self.schedule_pass();
        } else {
            self.pass_due = Some(self.now + cycle);
            self.at(self.now + cycle, Ev::SchedulePass);
        }
    }

    /// Runs the scheduler and starts the clocks of what started.
    fn schedule_pass(&mut self) {
        if self.schedulable_dirty {
            self.schedulable = (0..self.cluster.nodes.len()).filter(|&n| self.cluster.nodes[n].schedulable()).collect();
            self.schedulable_dirty = false;
        }
        let placement = self.cluster.schedule(self.now, &self.schedulable);
        for (pod, waited) in placement.started {
            // Bound once by now: this was its first start.
            self.metrics.pod_started(waited, self.cluster.pods[pod].generation == 1);
            if let PodKind::Batch { duration_ms } = self.cluster.pods[pod].kind {
                let generation = self.cluster.pods[pod].generation;
                self.at(self.now + duration_ms, Ev::JobDone(pod, generation));
            }
        }
        if let Some(at) = placement.wake_at {
            self.at(at, Ev::NomineeReady);
        }
        // The forwarder reports the workload pods this pass left unschedulable (debounced).
        if self.cluster.pending_workload > 0 && self.ballast.is_some() {
            let due = self.last_unschedulable_sent.is_none_or(|t| self.now >= t + MINUTE);
            let count = if due { self.pool_workload().pending } else { 0 };
            if count > 0 {
                self.last_unschedulable_sent = Some(self.now);
                let now = self.now;
                if let Some(b) = self.ballast.as_mut() {
                    b.pods_unschedulable(count, now);
                }
                self.at(now + self.sc.delivery_delay.0.as_millis() as u64, Ev::BallastDeliver);
            }
        }
    }

    /// Ballast's pool's workload as the forwarder counts it: pods bound to the pool's
    /// nodes and pending pods whose placement fits one of its groups. When every group
    /// is in the pool that is all of it (the cluster's running totals).
    pub fn pool_workload(&self) -> PoolWorkload {
        let c = &self.cluster;
        if self.sc.groups.iter().all(|g| g.in_pool) {
            return PoolWorkload {
                cpu: c.workload_cpu,
                mem: c.workload_mem,
                pods: c.workload_pods,
                pending: c.pending_workload,
            };
        }
        let in_pool =
            |class: usize| self.sc.accepts[class].iter().zip(&self.sc.groups).any(|(takes, g)| *takes && g.in_pool);
        let mut w = PoolWorkload::default();
        for pod in c.pods.iter().filter(|p| p.alive && p.is_workload()) {
            let counted = match pod.node {
                Some(n) => self.sc.groups[c.nodes[n].group].in_pool,
                None => in_pool(pod.class),
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

    pub fn mark_schedulable_dirty(&mut self) {
        self.schedulable_dirty = true;
    }

    fn local_hour(&self) -> (f64, bool) {
        let t = self.sc.start + chrono::Duration::milliseconds(self.now as i64);
        let local = t.with_timezone(&self.sc.time_zone);
        let weekend = matches!(local.weekday(), Weekday::Sat | Weekday::Sun);
        (f64::from(local.hour()) + f64::from(local.minute()) / 60.0, weekend)
    }

    fn workload_tick(&mut self) {
        let (hour, weekend) = self.local_hour();
        for d in 0..self.sc.deployments.len() {
            let spec = &self.sc.deployments[d];
            let (lo, hi) = (f64::from(spec.min_replicas), f64::from(spec.peak_replicas));
            let level = match spec.curve {
                Curve::Flat => 1.0,
                Curve::Business if weekend => 0.0,
                Curve::Business => match hour {
                    h if h < 7.0 => 0.0,
                    h if h < 9.0 => (h - 7.0) / 2.0,
                    h if h < 17.0 => 1.0,
                    h if h < 20.0 => 1.0 - (h - 17.0) / 3.0,
                    _ => 0.0,
                },
            };
            let target = (lo + (hi - lo) * level).ceil() as usize;
            let (cpu, mem, class) = (spec.cpu_millis, spec.memory_bytes, spec.class);
            while self.deployment_pods[d].len() < target {
                let id = self.cluster.create_pod(PodKind::Deployment(d), class, cpu, mem, WORKLOAD_PRIORITY, self.now);
                self.deployment_pods[d].push(id);
            }
            while self.deployment_pods[d].len() > target {
                let pods = &self.deployment_pods[d];
                // A ReplicaSet removes pending pods before running ones.
                let index = pods.iter().rposition(|p| self.cluster.pods[*p].node.is_none()).unwrap_or(pods.len() - 1);
                let pod = self.deployment_pods[d].swap_remove(index);
                self.cluster.delete_pod(pod);
            }
        }
    }

    pub fn set_pause_target(&mut self, replicas: u32) {
        self.pause_target = replicas;
        while self.pause_pods.len() < replicas as usize {
            // Class 0: the pool's node selector and tolerations.
            let id = self.cluster.create_pod(
                PodKind::Pause,
                0,
                self.pause_cpu,
                self.pause_mem,
                self.pause_priority,
                self.now,
            );
            self.pause_pods.push(id);
        }
        while self.pause_pods.len() > replicas as usize {
            let index = self
                .pause_pods
                .iter()
                .rposition(|p| self.cluster.pods[*p].node.is_none())
                .unwrap_or(self.pause_pods.len() - 1);
            let pod = self.pause_pods.swap_remove(index);
            self.cluster.delete_pod(pod);
        }
    }

    fn spot_available(&self, instance_type: &str, az: usize) -> bool {
        let now = self.now;
        let az_name = &self.sc.availability_zones[az];
        !self.sc.spot.capacity_losses.iter().any(|loss| {
            let start = loss.at.0.as_millis() as u64;
            let end = start + loss.duration.0.as_millis() as u64;
            loss.instance_type == instance_type
                && loss.availability_zone.as_ref().is_none_or(|a| a == az_name)
                && now >= start
                && now < end
        })
    }

    fn least_used_az(&self, g: usize, candidates: &[usize]) -> usize {
        let mut counts = vec![0u32; self.sc.availability_zones.len()];
        for &n in &self.groups[g].nodes {
            counts[self.cluster.nodes[n].az] += 1;
        }
        candidates.iter().copied().min_by_key(|&az| (counts[az], az)).unwrap_or(0)
    }

    pub fn launch(&mut self, g: usize, az: usize, instance_type: &str) -> NodeId {
        let spec = &self.sc.groups[g];
        let shape = self.sc.node_shape(instance_type, spec.max_pods);
        let spot = spec.market == Market::Spot;
        let mut node = Node::booting(g, az, spot, shape.cpu, shape.mem);
        node.max_pods = shape.pods;
        let it = &self.sc.instance_types[instance_type];
        node.hourly_price = if spot { it.spot_price } else { it.on_demand_price };
        node.instance_type = instance_type.to_string();
        self.groups[g].hourly += node.hourly_price;
        node.market = self.slot_draws(g);
        let boot = node.market.boot_ms;
        let id = self.cluster.add_node(node);
        self.groups[g].nodes.push(id);
        self.at(self.now + boot, Ev::NodeReady(id));
        id
    }

    /// The draws of group `g`'s next launch slot, from a stream of its own: always drawn
    /// in the same order, whatever is used, so slot k sees the same values in every run.
    fn slot_draws(&mut self, g: usize) -> SlotDraws {
        let slot = self.launches[g];
        self.launches[g] += 1;
        let mut rng = ChaCha8Rng::seed_from_u64(mix(self.seed ^ mix((g as u64) << 40 | slot)));
        let draw = |rng: &mut ChaCha8Rng, r: &[ballast_core::units::HumanDuration; 2]| {
            let (lo, hi) = (r[0].0.as_millis() as u64, r[1].0.as_millis() as u64);
            let u: u64 = rng.random_range(0..=u64::from(u32::MAX));
            lo + (hi.saturating_sub(lo)) * u / u64::from(u32::MAX)
        };
        let boot_ms = draw(&mut rng, &self.sc.nodes.boot) + draw(&mut rng, &self.sc.nodes.network_attach);
        let hazard_left = -(1.0 - rng.random::<f64>()).ln();
        let rebalanced = rng.random::<f64>() < self.sc.spot.rebalance_fraction;
        let lead = draw(&mut rng, &self.sc.spot.rebalance_lead);
        let false_rebalance_left = -(1.0 - rng.random::<f64>()).ln();
        SlotDraws { slot, boot_ms, hazard_left, rebalance_lead_ms: rebalanced.then_some(lead), false_rebalance_left }
    }

    /// Where group `g` can launch now: the least used AZ with capacity for one of its
    /// types, and the first such type there; `None` when its spot capacity is gone
    /// everywhere.
    pub fn launch_target(&self, g: usize) -> Option<(usize, String)> {
        let spec = &self.sc.groups[g];
        let type_in = |az: usize| {
            spec.instance_types.iter().find(|t| spec.market == Market::OnDemand || self.spot_available(t, az))
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
        self.groups[g].nodes.iter().copied().filter(|&n| !self.cluster.nodes[n].leaving).collect()
    }

    /// What an ASG does on its own: launch up to desired (if there is capacity), or
    /// scale in, newest first.
    pub fn reconcile_group(&mut self, g: usize) {
        let spec = &self.sc.groups[g];
        let desired = self.groups[g].desired as usize;
        loop {
            let counted = self.counted(g);
            if counted.len() <= desired {
                break;
            }
            let pick = counted
                .iter()
                .rposition(|&n| self.cluster.nodes[n].phase == NodePhase::Booting)
                .unwrap_or(counted.len() - 1);
            self.remove_node(counted[pick], false);
        }
        let missing = desired.saturating_sub(self.counted(g).len());
        if missing == 0 {
            return;
        }
        for _ in 0..missing {
            let Some((az, instance_type)) = self.launch_target(g) else {
                let now = self.now;
                let state = &mut self.groups[g];
                state.failures.retain(|&t| t + 30 * MINUTE > now);
                state.failures.push(now);
                self.metrics.spot_launch_failed(now);
                if let Some(b) = self.ballast.as_mut() {
                    b.launch_failed(&spec.name, now);
                    self.at(now + self.sc.delivery_delay.0.as_millis() as u64, Ev::BallastDeliver);
                }
                return;
            };
            self.launch(g, az, &instance_type);
        }
    }

    /// A node leaves (reclaimed, terminated): its pods go pending.
    pub fn remove_node(&mut self, id: NodeId, decrement: bool) {
        let g = self.cluster.nodes[id].group;
        if self.cluster.nodes[id].phase != NodePhase::Gone {
            self.groups[g].hourly -= self.cluster.nodes[id].hourly_price;
        }
        self.cluster.remove_node(id, self.now);
        self.groups[g].nodes.retain(|&n| n != id);
        if decrement {
            let min = self.sc.groups[g].min;
            self.groups[g].desired = self.groups[g].desired.saturating_sub(1).max(min);
        }
        self.schedulable_dirty = true;
    }

    fn market_tick(&mut self) {
        let now = self.now;
        let per_minute = self.sc.spot.interruptions_per_node_hour / 60.0;
        let false_per_minute = self.sc.spot.false_rebalances_per_node_hour / 60.0;
        let storms: Vec<(Option<String>, f64)> = self
            .sc
            .spot
            .storms
            .iter()
            .filter(|s| {
                let start = s.at.0.as_millis() as u64;
                now >= start && now < start + s.duration.0.as_millis() as u64
            })
            .map(|s| (s.instance_type.clone(), s.fraction / (s.duration.0.as_secs_f64() / 60.0).max(1.0)))
            .collect();
        for g in 0..self.groups.len() {
            if self.sc.groups[g].market != Market::Spot {
                continue;
            }
            for i in 0..self.groups[g].nodes.len() {
                let id = self.groups[g].nodes[i];
                if self.cluster.nodes[id].doomed {
                    continue;
                }
                let instance_type = &self.cluster.nodes[id].instance_type;
                let storm_p: f64 =
                    storms.iter().filter(|(t, _)| t.as_ref().is_none_or(|t| t == instance_type)).map(|(_, p)| p).sum();
                let p = per_minute + storm_p;
                // A recommendation without an interruption after it (once per node).
                let market = &mut self.cluster.nodes[id].market;
                if market.false_rebalance_left > 0.0 {
                    market.false_rebalance_left -= false_per_minute;
                    if market.false_rebalance_left <= 0.0 {
                        self.at(now, Ev::Rebalance(id));
                    }
                }
                let node = &mut self.cluster.nodes[id];
                // The minute's hazard (p is small: the chance of an interruption in it).
                node.market.hazard_left -= p;
                if node.market.hazard_left > 0.0 {
                    continue;
                }
                node.doomed = true;
                self.interruptions += 1;
                self.interrupted.push((g, node.market.slot, now));
                let warning_at = match node.market.rebalance_lead_ms {
                    Some(ahead) => {
                        self.at(now, Ev::Rebalance(id));
                        now + ahead
                    }
                    None => now,
                };
                self.at(warning_at, Ev::Warning(id));
                self.at(warning_at + WARNING_LEAD, Ev::Reclaim(id));
            }
        }
    }
}
