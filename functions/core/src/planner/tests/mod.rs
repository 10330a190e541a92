//! One test (or more) per planner rule, a module per rule. Here: the config the tests
//! share, the observed pool's builder (`pool().spot("spot-a", sized(3)).build()`), and
//! helpers that make events and read plans.

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::*;
use crate::config::Config;
use crate::event::{
    CapacityError, Event, InstanceAction, InstanceState, LaunchError, LaunchFailure, LifecycleAction, Signal,
};
use crate::observe::*;
use crate::plan::ActionKind;
use crate::record::*;

const CONFIG: &str = r#"
cluster: c
region: eu-west-1
state_table: tbl
pools:
  - name: p
    spot_asgs: [spot-a, spot-b]
    on_demand_asg: od
    fallback:
      spot_launch_grace: 3m
      unavailable_ttl: 15m
      max_on_demand: 4
      failback_after: 30m
      failback_step: 2
      wait_and_retry: 10m
      interruption_rate: { count: 3, window: 10m }
    interruption: { drain_timeout: 90s }
    headroom:
      percent: 10
      pod_cpu: "1"
      pod_memory: 2Gi
      min: 1
      max: 30
      interruption_boost: 10
      boost_for: 30m
      schedules:
        - { cron: "0 7 * * MON-FRI", time_zone: Europe/Paris, percent: 25 }
        - { cron: "0 19 * * MON-FRI", time_zone: Europe/Paris, percent: 5 }
"#;

pub(crate) fn config() -> Config {
    Config::from_yaml(CONFIG).unwrap()
}

fn with(yaml_edit: impl Fn(&str) -> String) -> Config {
    Config::from_yaml(&yaml_edit(CONFIG)).unwrap()
}

/// Friday 2026-11-20 10:00 UTC (11:00 in Paris).
fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 20, 10, 0, 0).unwrap()
}

/// The pool's on-demand ASG (the tests' pools have one unless they drop it).
fn od(pool: &mut ObservedPool) -> &mut ObservedAsg {
    pool.on_demand.as_mut().expect("an on-demand ASG")
}

/// An ASG's size in a test: the desired capacity, how many instances are live (in
/// service; the pool builder gives each a Ready node), and the ASG's max when not the
/// pool's usual one.
#[derive(Debug, Clone, Copy)]
struct Size {
    desired: u32,
    live: u32,
    max: Option<u32>,
}

/// `desired` wanted and as many live; `.live(n)` when fewer or more are.
fn sized(desired: u32) -> Size {
    Size { desired, live: desired, max: None }
}

impl Size {
    fn live(self, live: u32) -> Self {
        Size { live, ..self }
    }

    fn max(self, max: u32) -> Self {
        Size { max: Some(max), ..self }
    }
}

/// The config's pool as observed: `spot-a` and `spot-b` (max 20 each) and on-demand `od`
/// (max 10), each empty until sized.
fn pool() -> PoolBuilder {
    PoolBuilder { spot: [("spot-a", sized(0)), ("spot-b", sized(0))], on_demand: sized(0) }
}

struct PoolBuilder {
    spot: [(&'static str, Size); 2],
    on_demand: Size,
}

impl PoolBuilder {
    /// Sizes one of the config's spot ASGs.
    fn spot(mut self, name: &str, size: Size) -> Self {
        let asg = self.spot.iter_mut().find(|(n, _)| *n == name);
        asg.unwrap_or_else(|| panic!("the config's spot ASGs are spot-a and spot-b, not {name}")).1 = size;
        self
    }

    /// Sizes the on-demand ASG `od`.
    fn on_demand(self, size: Size) -> Self {
        PoolBuilder { on_demand: size, ..self }
    }

    fn build(self) -> ObservedPool {
        let mut p = ObservedPool {
            spot: self.spot.iter().map(|&(name, size)| spot_asg(name, size)).collect(),
            on_demand: Some(on_demand_asg(self.on_demand)),
            nodes: vec![],
            headroom: Vec::new(),
            demand: None,
            left: Default::default(),
        };
        let ids: Vec<String> = p.asgs().flat_map(|a| a.instances.iter().map(|i| i.id.clone())).collect();
        p.nodes = ids
            .into_iter()
            .map(|id| NodeState {
                allocatable: None,
                name: format!("node-{id}"),
                instance_id: id,
                ready: true,
                unschedulable: false,
            })
            .collect();
        p
    }
}

/// A spot ASG of the test pool (max 20), without its nodes.
fn spot_asg(name: &str, size: Size) -> ObservedAsg {
    asg(name, size, 20, Market::Spot)
}

/// The test pool's on-demand ASG `od` (max 10), without its nodes.
fn on_demand_asg(size: Size) -> ObservedAsg {
    asg("od", size, 10, Market::OnDemand)
}

/// An ASG of `size`, all in one zone, with `max` unless the size sets its own.
fn asg(name: &str, size: Size, max: u32, market: Market) -> ObservedAsg {
    ObservedAsg {
        name: name.into(),
        tags: Default::default(),
        desired: size.desired,
        min: 0,
        max: size.max.unwrap_or(max),
        instances: (0..size.live)
            .map(|n| AsgInstance {
                id: format!("i-{:017x}", hash(name) + u64::from(n)),
                lifecycle_state: LifecycleState::InService,
                availability_zone: "eu-west-1a".into(),
                instance_type: "m6i.large".into(),
                market,
            })
            .collect(),
        activities: vec![],
    }
}

/// A stable, distinct instance-id base per ASG name.
fn hash(name: &str) -> u64 {
    name.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))) % 0xffff_ffff * 0x1000
}

/// The config with `spot-b` dropped, and the pool built without it: one spot ASG
/// (`spot-a`) and on-demand.
fn one_spot(pool: PoolBuilder) -> (Config, ObservedPool) {
    assert_eq!(pool.spot[1].1.desired, 0, "spot-b is dropped");
    let cfg = with(|y| y.replace("spot_asgs: [spot-a, spot-b]", "spot_asgs: [spot-a]"));
    let mut observed = pool.build();
    observed.spot.truncate(1);
    (cfg, observed)
}

/// A spot interruption warning for `spot-a`'s `n`th instance, at `now()`.
fn spot_warning(observed: &ObservedPool, n: usize, action: InstanceAction) -> Event {
    let id = observed.spot[0].instances[n].id.clone();
    event(Signal::SpotInterruption { instance_id: id, action }, now())
}

/// Nodes for every instance of the pool: Ready unless `ready` says otherwise (`None`: no
/// node registered yet).
fn nodes_where(observed: &mut ObservedPool, ready: impl Fn(&str) -> Option<bool>) {
    observed.nodes = observed
        .asgs()
        .flat_map(|a| a.instances.iter())
        .filter_map(|i| {
            ready(&i.id).map(|r| NodeState {
                allocatable: None,
                name: format!("node-{}", i.id),
                instance_id: i.id.clone(),
                ready: r,
                unschedulable: false,
            })
        })
        .collect();
}

fn event(signal: Signal, at: DateTime<Utc>) -> Event {
    Event { id: format!("{signal:?}{at}"), time: at, source: "test".into(), detail_type: "test".into(), signal }
}

fn run(cfg: &Config, record: &PoolRecord, observed: &ObservedPool, events: &[Event], now: DateTime<Utc>) -> Plan {
    plan(PlanInput { pool: &cfg.pools[0], dry_run: cfg.dry_run, record, observed, events, now, run: "test-run" })
}

fn desired(plan: &Plan, asg: &str) -> Option<u32> {
    plan.actions.iter().find_map(|a| match &a.kind {
        ActionKind::SetDesiredCapacity { asg: n, to, .. } if n == asg => Some(*to),
        _ => None,
    })
}

fn kinds(plan: &Plan) -> Vec<&'static str> {
    plan.actions
        .iter()
        .map(|a| match a.kind {
            ActionKind::RecordState => "record",
            ActionKind::SetDesiredCapacity { .. } => "desired",
            ActionKind::CordonNode { .. } => "cordon",
            ActionKind::UncordonNode { .. } => "uncordon",
            ActionKind::DrainNode { .. } => "drain",
            ActionKind::TerminateInstance { .. } => "terminate",
            ActionKind::RecordLifecycleHeartbeat(_) => "heartbeat",
            ActionKind::CompleteLifecycleAction(_) => "complete",
            ActionKind::SetHeadroomReplicas { .. } => "headroom",
        })
        .collect()
}

/// The plan's record as the reconciler leaves it when every call succeeded.
fn applied(plan: &Plan) -> PoolRecord {
    applied_record(&plan.record)
}

/// `record` with every call of its journal landed.
fn applied_record(record: &PoolRecord) -> PoolRecord {
    let mut record = record.clone();
    for call in record.journal.iter_mut().flat_map(|j| j.calls.iter_mut()) {
        match call {
            CapacityCall::SetDesired { done, .. } | CapacityCall::Terminate { done, .. } => *done = true,
        }
    }
    record
}

fn capacity_error(asg: &str, at: DateTime<Utc>) -> Event {
    event(
        Signal::LaunchUnsuccessful(LaunchFailure {
            asg: asg.into(),
            activity_id: format!("act-{at}"),
            availability_zone: Some("eu-west-1a".into()),
            subnet_id: None,
            status_message: "InsufficientInstanceCapacity".into(),
            cause: String::new(),
            error: LaunchError::Capacity(CapacityError::InsufficientInstanceCapacity),
            at: Some(at),
        }),
        at,
    )
}

fn total(plan: &Plan, observed: &ObservedPool) -> u32 {
    observed.asgs().map(|a| desired(plan, &a.name).unwrap_or(a.desired)).sum()
}

fn demand(cpu: u64, mem_gi: u64) -> Demand {
    Demand { cpu_millis: cpu, memory_bytes: mem_gi << 30, pods: 10, observed_at: now() - Duration::minutes(1) }
}

mod failback;
mod failback_steps;
mod fallback;
mod headroom;
mod interruption;
mod journal;
mod lifecycle;
mod remake;
mod shapes;
mod shapes_bounds;
mod urgent;
mod wait_target;

/// The first pause-pod Deployment running `replicas` pods of the test config's pod size.
fn unit_slots(replicas: u32) -> Vec<crate::shape::SlotState> {
    let shape = config().pools[0].headroom.unit_shape();
    vec![crate::shape::SlotState { slot: 0, shape, replicas: Some(replicas) }]
}
