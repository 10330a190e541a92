//! Ballast inside the simulation: the production `Reconciler` and planner over the
//! in-memory adapters. Before each invocation the simulated pool is projected into
//! the in-memory world; afterwards the calls Ballast made are carried out in the
//! simulation. Ballast's own state (pool record, dedup, leases) persists in between.

use std::sync::Arc;

use ballast_core::event::{
    CapacityError, Event, InstanceAction, LaunchError, LaunchFailure, PodsUnschedulableDetail, Signal,
};
use ballast_core::memory::{Call, FixedClock, InMemory, World, WorldNode};
use ballast_core::model::{
    ActivityStatus, AsgInstance, Demand, LifecycleState, Market as CoreMarket, NodeState, ObservedAsg, ScalingActivity,
};
use ballast_core::reconcile::Reconciler;
use chrono::{DateTime, Utc};

use crate::cluster::{NodeId, NodePhase};
use crate::engine::Sim;
use crate::scenario::{Market, Scenario};

/// The Lambda functions take SQS batches of at most ten messages.
const BATCH: usize = 10;
const NO_SPOT_MESSAGE: &str =
    "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity available that matches your request. Launching EC2 instance failed.";

pub struct Bridge {
    memory: InMemory,
    clock: FixedClock,
    reconciler: Reconciler<InMemory, InMemory, InMemory, FixedClock>,
    runtime: tokio::runtime::Runtime,
    start: DateTime<Utc>,
    delay_ms: u64,
    inbox: Vec<(u64, Event)>,
    next_id: u64,
    pub invocations: u32,
    /// Rebalance recommendations sent (some followed by no interruption).
    pub rebalances_sent: u32,
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
        let memory = InMemory::new(World::default());
        let clock = FixedClock::new(sc.start);
        let reconciler = Reconciler {
            config: Arc::new(sc.ballast.clone()),
            autoscaling: memory.clone(),
            cluster: memory.clone(),
            store: memory.clone(),
            clock: clock.clone(),
            owner: "simulator".into(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
        Bridge {
            memory,
            clock,
            reconciler,
            runtime,
            start: sc.start,
            delay_ms: sc.delivery_delay.0.as_millis() as u64,
            inbox: Vec::new(),
            next_id: 0,
            invocations: 0,
            rebalances_sent: 0,
        }
    }

    fn time(&self, ms: u64) -> DateTime<Utc> {
        self.start + chrono::Duration::milliseconds(ms as i64)
    }

    fn send(&mut self, now: u64, source: &str, detail_type: &str, signal: Signal) {
        self.next_id += 1;
        let event = Event {
            id: format!("sim-{}", self.next_id),
            time: self.time(now),
            source: source.into(),
            detail_type: detail_type.into(),
            signal,
        };
        self.inbox.push((now + self.delay_ms, event));
    }

    pub fn spot_warning(&mut self, node: NodeId, now: u64) {
        let signal = Signal::SpotInterruption { instance_id: instance_id(node), action: InstanceAction::Terminate };
        self.send(now, "aws.ec2", "EC2 Spot Instance Interruption Warning", signal);
    }

    pub fn rebalance(&mut self, node: NodeId, now: u64) {
        self.rebalances_sent += 1;
        self.send(
            now,
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            Signal::RebalanceRecommendation { instance_id: instance_id(node) },
        );
    }

    pub fn launch_failed(&mut self, asg: &str, now: u64) {
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
        self.send(now, "aws.autoscaling", "EC2 Instance Launch Unsuccessful", Signal::LaunchUnsuccessful(failure));
    }

    pub fn pods_unschedulable(&mut self, count: u32, now: u64) {
        let detail = PodsUnschedulableDetail {
            pool: "sim".into(),
            count,
            cpu_millis: 0,
            memory_bytes: 0,
            oldest_pending_since: self.time(now),
        };
        self.send(now, "ballast.kubernetes", "Pods Unschedulable", Signal::PodsUnschedulable(detail));
    }

    /// The schedule function's rate(1 minute) reconcile (invoked directly, no queue).
    pub fn scheduled_reconcile(&mut self, now: u64) {
        self.next_id += 1;
        let event = Event {
            id: format!("sim-{}", self.next_id),
            time: self.time(now),
            source: "aws.events".into(),
            detail_type: "Scheduled Event".into(),
            signal: Signal::Reconcile,
        };
        self.inbox.push((now, event));
    }

    /// Invokes Ballast with what has arrived, in batches, and carries out its calls.
    pub fn deliver(&mut self, sim: &mut Sim) {
        let now = sim.now;
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.inbox).into_iter().partition(|(at, _)| *at <= now);
        self.inbox = later;
        let events: Vec<Event> = due.into_iter().map(|(_, e)| e).collect();
        for batch in events.chunks(BATCH) {
            self.project(sim);
            self.clock.set(self.time(now));
            self.invocations += 1;
            let _outcome = self.runtime.block_on(self.reconciler.handle(batch.to_vec()));
            let calls = std::mem::take(&mut self.memory.world().calls);
            apply(sim, calls);
        }
    }

    /// Writes the simulated pool into the in-memory world Ballast observes.
    fn project(&self, sim: &Sim) {
        let sc = sim.sc;
        let now = sim.now;
        let mut world = self.memory.world();
        world.asgs = sim
            .groups
            .iter()
            .enumerate()
            .map(|(g, state)| {
                let spec = &sc.groups[g];
                let market = match spec.market {
                    Market::Spot => CoreMarket::Spot,
                    Market::OnDemand => CoreMarket::OnDemand,
                };
                ObservedAsg {
                    name: spec.name.clone(),
                    tags: Default::default(),
                    desired: state.desired,
                    min: spec.min,
                    max: spec.max,
                    instances: state
                        .nodes
                        .iter()
                        .map(|&n| AsgInstance {
                            id: instance_id(n),
                            lifecycle_state: if sim.cluster.nodes[n].phase == NodePhase::Ready {
                                LifecycleState::InService
                            } else {
                                LifecycleState::Pending
                            },
                            availability_zone: sc.availability_zones[sim.cluster.nodes[n].az].clone(),
                            instance_type: spec.instance_type.clone(),
                            market,
                        })
                        .collect(),
                    activities: state
                        .failures
                        .last()
                        .filter(|&&t| t + 600_000 > now)
                        .map(|&t| ScalingActivity {
                            id: format!("activity-{t}-{}", spec.name),
                            status: ActivityStatus::Failed,
                            status_message: NO_SPOT_MESSAGE.into(),
                            cause: String::new(),
                            start: self.time(t),
                            end: Some(self.time(t)),
                        })
                        .into_iter()
                        .collect(),
                }
            })
            .collect();
        world.nodes = sim
            .groups
            .iter()
            .flat_map(|s| s.nodes.iter())
            .map(|&n| {
                let node = &sim.cluster.nodes[n];
                WorldNode {
                    state: NodeState {
                        name: node_name(n),
                        instance_id: instance_id(n),
                        ready: node.phase == NodePhase::Ready,
                        unschedulable: node.cordoned,
                    },
                    pods: node.pods.len() as u32,
                    ..Default::default()
                }
            })
            .collect();
        let pool = world.pools.entry("sim".into()).or_default();
        pool.demand = Some(Demand {
            cpu_millis: sim.cluster.workload_cpu,
            memory_bytes: sim.cluster.workload_mem,
            pods: sim.cluster.workload_pods,
            observed_at: self.time(now),
        });
        pool.headroom_replicas = Some(sim.pause_target);
    }
}

/// Carries out Ballast's calls in the simulation.
fn apply(sim: &mut Sim, calls: Vec<Call>) {
    for call in calls {
        match call {
            Call::SetDesired { asg, desired } => {
                if let Some(g) = sim.sc.groups.iter().position(|g| g.name == asg) {
                    sim.groups[g].desired = desired;
                    sim.reconcile_group(g);
                }
            }
            Call::Terminate { instance_id, decrement } => {
                if let Some(n) = node_of_instance(&instance_id) {
                    if n < sim.cluster.nodes.len() && sim.cluster.nodes[n].phase != NodePhase::Gone {
                        let g = sim.cluster.nodes[n].group;
                        sim.remove_node(n, decrement);
                        sim.reconcile_group(g);
                    }
                }
            }
            Call::Cordon { node } => {
                if let Some(n) = node_of_name(&node).filter(|n| *n < sim.cluster.nodes.len()) {
                    sim.cluster.cordon(n);
                    sim.mark_schedulable_dirty();
                }
            }
            Call::Uncordon { node } => {
                if let Some(n) = node_of_name(&node).filter(|n| *n < sim.cluster.nodes.len()) {
                    sim.cluster.uncordon(n);
                    sim.mark_schedulable_dirty();
                }
            }
            Call::Drain { node } => {
                if let Some(n) = node_of_name(&node).filter(|n| *n < sim.cluster.nodes.len()) {
                    sim.cluster.evict_all(n, sim.now);
                }
            }
            Call::SetHeadroom { replicas, .. } => sim.set_pause_target(replicas),
            Call::Heartbeat { .. } | Call::Complete { .. } | Call::SaveRecord { .. } => {}
        }
    }
}
