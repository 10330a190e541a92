//! Ballast inside the simulation: the production `Reconciler` and planner over ports
//! that serve what Ballast would observe of the simulated pool. That view is kept in
//! step with the model before each invocation, changing only what changed (an
//! instance or node is built once, when its simulated node appears); during the
//! invocation the ports answer from it and record Ballast's calls, which are returned
//! as calls on the model. Ballast's own state (pool record, dedup, leases, the events
//! on their way to it, the forwarder's debounce) persists in between. The pools are the
//! scenario's, by the names its config gives them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast_core::event::{
    CapacityError, CapacityType, Event, EventKind, InstanceAction, LaunchError, LaunchFailure, NodeCondition,
    NodeLifecycleDetail, PodsUnschedulableDetail, PoolDemandDetail, PoolWaitsDetail, Signal,
};
use ballast_core::forwarder::{DemandTiming, Requests, UnschedulableTiming};
use ballast_core::plan::HeadroomDecision;
use ballast_core::ports::FixedClock;
use ballast_core::reconcile::{Budget, Reconciler};
use chrono::{DateTime, Utc};

use crate::cluster::{NodeId, NodePhase, PodId, PodKind};
use crate::event::Ev;
use crate::model::{Call, Model};
use crate::scenario::Scenario;
use crate::time::MINUTE;
use ballast_core::shape::{PodShape, ShapeCount, WorkloadKind};

mod ports;
pub use ports::shape_of;
use ports::{calls_on_model, SimPorts, View};

/// The Lambda functions take SQS batches of at most ten messages.
const BATCH: usize = 10;
const NO_SPOT_MESSAGE: &str =
    "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity available that matches your request. Launching EC2 instance failed.";

pub struct Bridge {
    ports: SimPorts,
    clock: FixedClock,
    reconciler: Reconciler<SimPorts, SimPorts, SimPorts, FixedClock>,
    runtime: tokio::runtime::Runtime,
    start: DateTime<Utc>,
    delay_ms: u64,
    inbox: Vec<(u64, Event)>,
    next_id: u64,
    /// The pools' names in Ballast's config, in the scenario's order.
    pools: Vec<String>,
    /// Per pool: when its newest unschedulable workload pod became so.
    newest_unschedulable: Vec<Option<u64>>,
    /// Per pool: the workload pods made unschedulable and when, the latest time for a pod
    /// made so again (those since placed or gone are dropped at the next report), for the
    /// report's oldest pod.
    unschedulable_at: Vec<BTreeMap<PodId, u64>>,
    /// Per pool: the newest unschedulable pod the forwarder reported, and when.
    unschedulable_sent: Vec<Option<(u64, u64)>>,
    pub invocations: u32,
    /// Rebalance recommendations sent (some followed by no interruption).
    pub rebalances_sent: u32,
    /// Launch failure events sent (EC2 Instance Launch Unsuccessful).
    pub launch_failures_sent: u32,
    /// Per pool: the forwarder's Pods Unschedulable reports sent.
    pub unschedulable_reports: Vec<u32>,
    /// Per pool: the first-start waits (ms) of the forwarder's open window, and when it
    /// opened.
    waits: Vec<(u64, Vec<u64>)>,
    /// Per pool: the forwarder's Pool Waits Measured events sent.
    pub waits_reports: Vec<u32>,
    /// Per pool: whether it has a wait target (the forwarder publishes only those waits).
    wait_targets: Vec<bool>,
    /// Per pool: the demand the forwarder last published, and when.
    demand_sent: Vec<Option<(Requests, u64)>>,
    /// Per pool: the shapes of the workload pods bound since its last demand report.
    started_shapes: Vec<BTreeMap<(PodShape, WorkloadKind), u32>>,
    /// When the forwarder's next look is scheduled (its one-second tick, only where a
    /// report, a move or a heartbeat falls due).
    look_at: Option<u64>,
    /// Per pool: when the forwarder published its demand (newest last).
    #[cfg(test)]
    pub demand_published: Vec<Vec<u64>>,
    /// Per pool: when the forwarder reported unschedulable pods, and the time its oldest
    /// pod became so (newest last).
    #[cfg(test)]
    pub unschedulable_published: Vec<Vec<(u64, u64)>>,
}

/// From a launch's start to its instance running, when Auto Scaling reports it.
const INSTANCE_RUNNING_AFTER: u64 = 34_000;

/// The forwarder's window for Pool Waits Measured (its `BALLAST_WAITS_EVERY` default).
const WAITS_EVERY: u64 = 5 * MINUTE;

/// What one invocation of Ballast did.
pub struct Invocation {
    pub calls: Vec<Call>,
    /// Each planned pool's headroom decision, by the pool's index.
    pub headroom: Vec<(usize, HeadroomDecision)>,
    /// Slots of its raises another writer undid that its plans made again.
    pub remade: u32,
}

pub fn instance_id(node: NodeId) -> String {
    format!("i-{node:017x}")
}

fn node_of_instance(id: &str) -> Option<NodeId> {
    usize::from_str_radix(id.strip_prefix("i-")?, 16).ok()
}

fn node_name(node: NodeId) -> String {
    format!("node-{node}")
}

fn node_of_name(name: &str) -> Option<NodeId> {
    name.strip_prefix("node-")?.parse().ok()
}

impl Bridge {
    pub fn new(sc: &Scenario) -> Self {
        let ports = SimPorts(Arc::new(Mutex::new(View::new(sc))));
        let clock = FixedClock::new(sc.start);
        let reconciler = Reconciler {
            config: Arc::new(sc.ballast.clone()),
            autoscaling: ports.clone(),
            cluster: ports.clone(),
            store: ports.clone(),
            clock: clock.clone(),
            owner: "simulator".into(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
        Bridge {
            ports,
            clock,
            reconciler,
            runtime,
            start: sc.start,
            delay_ms: sc.delivery_delay.0.as_millis() as u64,
            inbox: Vec::new(),
            next_id: 0,
            pools: pool_names(sc),
            newest_unschedulable: vec![None; sc.pools().len()],
            unschedulable_at: vec![BTreeMap::new(); sc.pools().len()],
            unschedulable_sent: vec![None; sc.pools().len()],
            invocations: 0,
            rebalances_sent: 0,
            launch_failures_sent: 0,
            unschedulable_reports: vec![0; sc.pools().len()],
            waits: vec![(0, Vec::new()); sc.pools().len()],
            waits_reports: vec![0; sc.pools().len()],
            wait_targets: sc.pools().iter().map(|p| p.headroom.target.is_some()).collect(),
            demand_sent: vec![None; sc.pools().len()],
            started_shapes: vec![BTreeMap::new(); sc.pools().len()],
            look_at: None,
            #[cfg(test)]
            demand_published: vec![Vec::new(); sc.pools().len()],
            #[cfg(test)]
            unschedulable_published: vec![Vec::new(); sc.pools().len()],
        }
    }

    /// A workload pod was bound: the forwarder counts its shape for the pool's next
    /// demand report, and its wait (creation to binding) in the pool of its node.
    pub fn pod_started(&mut self, pool: Option<usize>, waited_ms: u64, shape: PodShape, kind: WorkloadKind) {
        if let Some(started) = pool.and_then(|p| self.started_shapes.get_mut(p)) {
            *started.entry((shape, kind)).or_default() += 1;
        }
        let Some(pool) = pool.filter(|&p| self.wait_targets.get(p).copied().unwrap_or(false)) else { return };
        if let Some((_, waits)) = self.waits.get_mut(pool) {
            waits.push(waited_ms);
        }
    }

    /// The forwarder sums up each pool's window of waits once it is `WAITS_EVERY` old,
    /// as it does in the cluster (a pool where no pod started says nothing).
    pub fn waits_due(&mut self, now: u64) -> Vec<(u64, Ev)> {
        let mut sent = Vec::new();
        for pool in 0..self.waits.len() {
            let (opened, waits) = &mut self.waits[pool];
            if now < *opened + WAITS_EVERY {
                continue;
            }
            let window_start = std::mem::replace(opened, now);
            let mut seconds: Vec<f64> = std::mem::take(waits).into_iter().map(|ms| ms as f64 / 1000.0).collect();
            let (start, end) = (self.time(window_start), self.time(now));
            let Some(detail) = PoolWaitsDetail::summing(&self.pools[pool], start, end, &mut seconds) else { continue };
            self.waits_reports[pool] += 1;
            sent.push(self.send(now, EventKind::PoolWaitsMeasured, Signal::PoolWaits(detail)));
        }
        sent
    }

    /// The forwarder's look (its one-second tick, where something falls due): Pods
    /// Unschedulable as [`Bridge::unschedulable_due`] says, and Pool Demand Changed for
    /// each pool whose demand moved by more than its threshold since it last spoke, once
    /// the debounce is over, or whose heartbeat is due, by the forwarder's own rule. Also
    /// returns the next look, when one falls due.
    pub fn forwarder_look(&mut self, model: &Model, now: u64) -> Vec<(u64, Ev)> {
        let timing = DemandTiming::default();
        let (mut sent, unschedulable_look) = self.unschedulable_due(model, now);
        let mut next_look = unschedulable_look.unwrap_or(u64::MAX);
        for pool in 0..self.pools.len() {
            let w = model.pool_workload(pool);
            let requests = Requests { cpu_millis: w.cpu, memory_bytes: w.mem, pods: w.pods };
            let last = self.demand_sent[pool].map(|(then, at)| (then, Duration::from_millis(now.saturating_sub(at))));
            if !timing.due(last, &requests) {
                next_look = next_look.min(now + timing.due_in(last, &requests).as_millis() as u64);
                continue;
            }
            self.demand_sent[pool] = Some((requests, now));
            #[cfg(test)]
            self.demand_published[pool].push(now);
            next_look = next_look.min(now + timing.heartbeat.as_millis() as u64);
            let nodes = model
                .cluster
                .nodes
                .iter()
                .filter(|n| n.phase != NodePhase::Gone && model.sc.groups[n.group].pool == Some(pool))
                .count();
            let detail = PoolDemandDetail {
                shapes: self.shapes_report(model, pool),
                pool: self.pools[pool].clone(),
                cpu_millis: w.cpu,
                memory_bytes: w.mem,
                pods: w.pods,
                nodes: u32::try_from(nodes).unwrap_or(u32::MAX),
                observed_at: self.time(now),
            };
            sent.push(self.send(now, EventKind::PoolDemandChanged, Signal::PoolDemand(detail)));
        }
        // One look scheduled at a time: the earliest any pool needs.
        if next_look < u64::MAX && self.look_at.is_none_or(|at| at <= now || at > next_look) {
            self.look_at = Some(next_look);
            sent.push((next_look, Ev::ForwarderLook));
        }
        sent
    }

    /// The shapes the forwarder reports with a pool's demand: those bound since its last
    /// report (taken) and those waiting now, the most frequent.
    fn shapes_report(&mut self, model: &Model, pool: usize) -> Vec<ShapeCount> {
        let mut counts: BTreeMap<(PodShape, WorkloadKind), (u32, u32)> = BTreeMap::new();
        for (key, n) in std::mem::take(&mut self.started_shapes[pool]) {
            counts.entry(key).or_default().0 += n;
        }
        for pod in model.cluster.pending_pods().map(|id| &model.cluster.pods[id]) {
            if pod.is_workload() && model.sc.class_pool[pod.class] == Some(pool) {
                let kind = if matches!(pod.kind, PodKind::Batch { .. }) {
                    WorkloadKind::Job
                } else {
                    WorkloadKind::LongRunning
                };
                let shape = ports::shape_of(crate::cluster::Requests { cpu: pod.cpu, mem: pod.mem, gpu: pod.gpu });
                counts.entry((shape, kind)).or_default().1 += 1;
            }
        }
        let shapes = counts
            .into_iter()
            .map(|((shape, kind), (started, waiting))| ShapeCount { shape, kind, started, waiting })
            .collect();
        ballast_core::shape::most_frequent(shapes)
    }

    fn time(&self, ms: u64) -> DateTime<Utc> {
        self.start + chrono::Duration::milliseconds(ms as i64)
    }

    /// An event on its way to Ballast; returns its delivery, to schedule.
    fn send(&mut self, now: u64, kind: EventKind, signal: Signal) -> (u64, Ev) {
        self.next_id += 1;
        let event = Event::new(format!("sim-{}", self.next_id), self.time(now), kind, signal);
        let at = now + self.delay_ms;
        self.inbox.push((at, event));
        (at, Ev::BallastDeliver)
    }

    pub fn spot_warning(&mut self, node: NodeId, now: u64) -> (u64, Ev) {
        let signal = Signal::SpotInterruption { instance_id: instance_id(node), action: InstanceAction::Terminate };
        self.send(now, EventKind::SpotInterruptionWarning, signal)
    }

    pub fn rebalance(&mut self, node: NodeId, now: u64) -> (u64, Ev) {
        self.rebalances_sent += 1;
        self.send(
            now,
            EventKind::RebalanceRecommendation,
            Signal::RebalanceRecommendation { instance_id: instance_id(node) },
        )
    }

    /// The ASG launched a node of a pool: Auto Scaling sends Launch Successful once the
    /// instance runs (AWS's sample: 34 s after the launch started), with the start.
    /// While no pool has a wait target Ballast drops it before any call (see
    /// `Reconciler::route`): an invocation that changes nothing, which is not simulated.
    pub fn launched(&mut self, asg: &str, node: NodeId, now: u64, ready_at: u64) -> Option<(u64, Ev)> {
        if !self.wait_targets.iter().any(|&t| t) {
            return None;
        }
        let signal =
            Signal::LaunchSuccessful { asg: asg.into(), instance_id: instance_id(node), started: self.time(now) };
        let running = (now + INSTANCE_RUNNING_AFTER).min(ready_at);
        Some(self.send(running, EventKind::LaunchSuccessful, signal))
    }

    /// A pool's node became Ready: the forwarder reports it (Node Lifecycle). Only for a
    /// pool with a wait target, which times its launches by it: elsewhere the event only
    /// brings the pool's next reconcile forward, and a thousand-node day of them would
    /// cost the simulator more than the rest of Ballast (`scripts/bench-simulate`).
    pub fn node_ready(&mut self, pool: usize, node: NodeId, spot: bool, now: u64) -> Option<(u64, Ev)> {
        if !self.wait_targets.get(pool).copied().unwrap_or(false) {
            return None;
        }
        let detail = NodeLifecycleDetail {
            pool: self.pools[pool].clone(),
            node: node_name(node),
            provider_id: format!("aws:///{}", instance_id(node)),
            instance_id: instance_id(node),
            capacity_type: if spot { CapacityType::Spot } else { CapacityType::OnDemand },
            condition: NodeCondition::Ready,
            observed_at: Some(self.time(now)),
        };
        Some(self.send(now, EventKind::NodeLifecycle, Signal::NodeLifecycle(detail)))
    }

    pub fn launch_failed(&mut self, asg: &str, now: u64) -> (u64, Ev) {
        self.launch_failures_sent += 1;
        let failure = LaunchFailure {
            asg: asg.into(),
            activity_id: format!("activity-{now}-{asg}"),
            availability_zone: None,
            subnet_id: None,
            status_message: NO_SPOT_MESSAGE.into(),
            cause: String::new(),
            error: LaunchError::Capacity(CapacityError::NoSpotCapacity),
            at: Some(self.time(now)),
        };
        self.send(now, EventKind::LaunchUnsuccessful, Signal::LaunchUnsuccessful(failure))
    }

    /// A scheduling pass marked these workload pods unschedulable: the forwarder sees
    /// their `PodScheduled=False` now (reported at its next look).
    pub fn scheduling_pass_done(&mut self, model: &Model, now: u64, newly_unschedulable: &[PodId]) {
        for &pod in newly_unschedulable {
            if let Some(pool) = model.sc.class_pool[model.cluster.pods[pod].class] {
                self.newest_unschedulable[pool] = Some(now);
                self.unschedulable_at[pool].insert(pod, now);
            }
        }
    }

    /// The forwarder's Pods Unschedulable for each pool with pods newly unschedulable, by
    /// its own rule (at once for the first, then at most every 5 s); returns the events
    /// and, when a report waits out the 5 s, when to look again.
    fn unschedulable_due(&mut self, model: &Model, now: u64) -> (Vec<(u64, Ev)>, Option<u64>) {
        let rule = UnschedulableTiming::default();
        let (mut sent, mut look) = (Vec::new(), None);
        for pool in 0..self.pools.len() {
            let Some(newest) = self.newest_unschedulable[pool] else { continue };
            let last = self.unschedulable_sent[pool].map(|(reported, at)| (reported, Duration::from_millis(now - at)));
            if !rule.due(last, newest) {
                // Newer pods wait out the 5 s since the last report.
                if let Some((_, at)) = self.unschedulable_sent[pool].filter(|(reported, _)| newest > *reported) {
                    let at = at + rule.every.as_millis() as u64;
                    look = Some(look.map_or(at, |l: u64| l.min(at)));
                }
                continue;
            }
            // Placed meanwhile: nothing to report, and no unschedulable pod left whose time
            // a later report could carry (the forwarder's newest is of the pods it lists).
            let count = model.pool_workload(pool).pending;
            // As the forwarder's: the time the oldest pod still unschedulable became so.
            let pods = &model.cluster.pods;
            self.unschedulable_at[pool]
                .retain(|&p, _| pods[p].alive && pods[p].node.is_none() && pods[p].unschedulable);
            let Some(oldest) = self.unschedulable_at[pool].values().copied().min().filter(|_| count > 0) else {
                self.newest_unschedulable[pool] = None;
                self.unschedulable_at[pool].clear();
                continue;
            };
            self.unschedulable_sent[pool] = Some((newest, now));
            #[cfg(test)]
            self.unschedulable_published[pool].push((now, oldest));
            self.unschedulable_reports[pool] += 1;
            let detail = PodsUnschedulableDetail {
                pool: self.pools[pool].clone(),
                count,
                cpu_millis: 0,
                memory_bytes: 0,
                oldest_pending_since: self.time(oldest),
            };
            sent.push(self.send(now, EventKind::PodsUnschedulable, Signal::PodsUnschedulable(detail)));
        }
        (sent, look)
    }

    /// The schedule function's rate(1 minute) reconcile (invoked directly, no queue).
    pub fn scheduled_reconcile(&mut self, now: u64) {
        self.next_id += 1;
        let event =
            Event::new(format!("sim-{}", self.next_id), self.time(now), EventKind::ScheduledEvent, Signal::Reconcile);
        self.inbox.push((now, event));
    }

    /// What has arrived by `now`, in the batches the Lambda functions take: one
    /// invocation each, in order.
    pub fn due_batches(&mut self, now: u64) -> Vec<Vec<Event>> {
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.inbox).into_iter().partition(|(at, _)| *at <= now);
        self.inbox = later;
        let events: Vec<Event> = due.into_iter().map(|(_, e)| e).collect();
        events.chunks(BATCH).map(<[Event]>::to_vec).collect()
    }

    /// Invokes Ballast with `batch`, on the pool as `model` has it now; returns its calls.
    pub fn invoke(&mut self, batch: Vec<Event>, model: &Model, now: u64) -> Invocation {
        self.ports.view().sync(model, now, self.start);
        self.clock.set(self.time(now));
        self.invocations += 1;
        let outcome = self.runtime.block_on(self.reconciler.handle(batch, Budget::default()));
        let headroom = outcome
            .pools
            .iter()
            .filter_map(|p| Some((self.pools.iter().position(|n| *n == p.plan.pool)?, p.plan.headroom?)))
            .collect();
        let stopped = outcome.failures.iter().filter_map(|(e, _)| e.plan());
        let remade = outcome.pools.iter().map(|p| &p.plan).chain(stopped).map(|p| p.raises_remade()).sum();
        let recorded = std::mem::take(&mut self.ports.view().calls);
        Invocation { calls: calls_on_model(model, recorded), headroom, remade }
    }
}

fn pool_names(sc: &Scenario) -> Vec<String> {
    sc.pools().iter().map(|p| p.name.clone()).collect()
}

#[cfg(test)]
impl Bridge {
    /// A pool's record as Ballast last saved it.
    pub fn record(&self, pool: usize) -> Option<ballast_core::record::PoolRecord> {
        self.ports.view().records.get(&self.pools[pool]).map(|r| r.value.clone())
    }

    /// Each pool's demand as Ballast's cluster port would answer it now.
    pub fn observed_demand(&self, model: &Model, now: u64) -> Vec<Option<ballast_core::observe::Demand>> {
        let mut view = self.ports.view();
        view.sync(model, now, self.start);
        view.demand.clone()
    }
}
