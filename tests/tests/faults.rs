//! The fault model: random event sequences through the real `reconcile`, where any
//! run may die after its k-th call (nothing after it happens, not even its own
//! bookkeeping), any call may be carried out and still reported failed, and
//! cluster-autoscaler acts between observe and apply and again between runs
//! (scale-outs, scale-ins by terminate-with-decrement, removal of idle on-demand nodes;
//! as the real one, it backs off for five minutes from a node group whose instances
//! failed to launch), and
//! PodDisruptionBudgets may block every drain of a step. After each step:
//! - Ballast's own net change to the pool's desired size is never negative (a move
//!   raises before it lowers; a surge comes before its terminate-with-decrement; a
//!   write never undoes cluster-autoscaler's change; a raise whose answer was lost is
//!   never taken for one cluster-autoscaler made; the one case no observation can tell
//!   apart is excused, see `Harness::check`), and never negative on the on-demand ASG
//!   (the baseline is never drained);
//! - no ASG is outside its min and max; Ballast never lowers an ASG below its live
//!   instances (the ASG would pick which to kill) nor terminates on-demand without
//!   decrement;
//! - fallback units never exceed `max_on_demand`;
//! - only warned or reclaimed spot instances count as interruptions.
//!
//! Then a healthy world with no faults: within a bounded number of reconciles every
//! plan is empty, nothing is cordoned or mid-failback, fallback is moved back, and
//! Ballast's net change is no more than the surplus it left to cluster-autoscaler by
//! name in its notes ("N surplus instance(s) left in ASG"), plus what
//! cluster-autoscaler's scale-ins may have removed of it.
//! `BALLAST_FAULT_DEBUG=1` prints each run: events, journal, plan, notes, net change.
//!
//! `BALLAST_FAULT_CASES` sets the number of sequences (default 10,000) and
//! `BALLAST_FAULT_SEED` which (default fixed; `random` to explore).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use ballast_core::event::{
    CapacityError, CapacityType, Event, InstanceAction, InstanceState, LaunchError, LaunchFailure, NodeCondition,
    NodeLifecycleDetail, PoolWaitsDetail, Signal,
};
use ballast_core::observe::{LifecycleState, Market, ObservedAsg};
use ballast_core::planner::SURPLUS_NOTE;
use ballast_core::ports::{ErrorKind, FixedClock, PortError};
use ballast_core::reconcile::{Budget, ReconcileError, Reconciler};
use ballast_core::record::CapacityCall;
use ballast_core::testing::{Fault as PortFault, Faulty, InMemory, PortCall, World};
use ballast_tests::{config_with_dry_run, state};
use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;

#[path = "faults/ca.rs"]
mod ca;

const POOL: &str = "general";
const SPOT: [&str; 2] = ["eks-general-spot-m6", "eks-general-spot-fallback"];
const OD: &str = "eks-general-on-demand";

#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    /// The run dies after this many calls.
    Crash(usize),
    /// This call is carried out and reported failed.
    Ambiguous(usize),
}

#[derive(Debug, Clone, Copy)]
enum CaMove {
    None,
    ScaleOut {
        asg: usize,
        by: u32,
    },
    ScaleIn {
        asg: usize,
        pick: usize,
    },
    RemoveIdleOnDemand {
        pick: usize,
    },
    /// A scale-up that failed (the ASG backed off): cluster-autoscaler deletes its
    /// unfulfillable placeholders by setting the ASG to the instances it has, whoever
    /// asked for the unfilled slots (cloudprovider/aws `DeleteInstances`).
    DeleteUnfulfillable {
        asg: usize,
    },
}

#[derive(Default)]
struct FaultState {
    fault: Option<Fault>,
    calls: usize,
    dead: bool,
    /// Cluster-autoscaler's backoff: a node group whose scale-up failed (instances that
    /// could not launch) is not scaled up again until this time (CA's initial 5 minutes).
    backoff_until: std::collections::BTreeMap<String, DateTime<Utc>>,
    now: Option<DateTime<Utc>>,
    /// A lower carried out (ASG, by how much) whose confirmation (the journal's next
    /// write) is not in yet.
    unconfirmed_lower: Option<(String, u32)>,
    /// Lowers carried out but never confirmed (their answer was lost or the run died
    /// right after), by ASG: until a run of Ballast's records a look at them, a raise by
    /// cluster-autoscaler of as much cannot be told from the lower never made.
    doubted: BTreeMap<String, u32>,
    /// Lowers this run leaves in doubt: the doubted ones once it ends.
    doubted_next: BTreeMap<String, u32>,
    /// How far Ballast's net change may dip, by the harness's ground truth: what
    /// cluster-autoscaler added to an ASG while a lower on it was in doubt (at most that
    /// lower), which finishing the lower takes, in whichever later run it is finished.
    excusable: i64,
    /// PodDisruptionBudgets block every eviction in this run.
    pdb_blocks: bool,
    /// Cluster-autoscaler's scale-in moves so far: each may have removed a surplus
    /// Ballast left to it (which is how surplus is meant to go).
    scale_ins: i64,
    ca: Option<CaMove>,
    /// Ballast's own net change of desired size per ASG.
    ballast_net: std::collections::BTreeMap<String, i64>,
    /// Cluster-autoscaler's ASG cache (its writes are made from it).
    ca_cache: ca::Cache,
    /// Slots Ballast's writes added that cluster-autoscaler took since (a write from a
    /// stale size, unfulfillable slots deleted with its own): the pool's capacity is
    /// Ballast's net change less these.
    taken: i64,
    /// Of those, taken since Ballast last looked: not yet Ballast's to make good.
    taken_unseen: i64,
    /// Of those, taken again right after Ballast made them again (made once, not fought).
    taken_excused: i64,
    /// Per ASG, slots cluster-autoscaler took of Ballast's that no plan has made again
    /// yet: its own raise of that ASG meanwhile cannot be told from them coming back.
    taken_not_remade: BTreeMap<String, u32>,
    /// The ASGs Ballast's last look made a raise again on.
    remade_last_look: BTreeSet<String>,
    /// No excuse for a failed scale-up's deletion (`unfilled_slots_deleted_under_a_raise_...`).
    strict: bool,
    /// Per ASG, its slots not yet filled by an instance, oldest first: `true` for one a
    /// raise of Ballast's asked for. An ASG fills the oldest first; a lower cancels the
    /// newest. (Which of them a failed scale-up's deletion takes from Ballast.)
    unfilled: BTreeMap<String, std::collections::VecDeque<bool>>,
    /// Desired-size writes under way, by ASG: the size before the write, and whether
    /// its answer will be lost.
    write_from: BTreeMap<String, (u32, bool)>,
    violations: Vec<String>,
}

/// The faults and the adversary, put to every call of the in-memory ports.
#[derive(Clone)]
struct Adversary {
    memory: InMemory,
    state: Arc<Mutex<FaultState>>,
}

/// Every port over the in-memory world, with the faults and the adversary.
type Ports = Faulty<InMemory, Adversary>;

impl Adversary {
    fn st(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cluster-autoscaler's move, outside Ballast's calls: between a run's observe and its
    /// first write, or between runs.
    fn ca_moves(&self, m: CaMove) {
        let mut st = self.st();
        let now = st.now.unwrap_or_default();
        let backed_off: BTreeSet<String> =
            st.backoff_until.iter().filter(|(_, until)| **until > now).map(|(a, _)| a.clone()).collect();
        let mut world = self.memory.world();
        st.track_unfilled(&world, None);
        let ballast_unfilled: BTreeMap<String, u32> =
            st.unfilled.iter().map(|(a, q)| (a.clone(), q.iter().filter(|b| **b).count() as u32)).collect();
        let done = st.ca_cache.act(&mut world, m, &backed_off, &ballast_unfilled, now);
        if let Some((name, change)) = &done.changed {
            let change = *change;
            st.track_unfilled(&world, Some((name, change, false)));
        }
        drop(world);
        // Each slot cluster-autoscaler removed may have been a surplus Ballast left it.
        st.scale_ins += i64::from(done.scaled_in);
        if let Some((name, change)) = done.changed {
            let raised = u32::try_from(change.max(0)).unwrap_or(0);
            if let Some(lowered) = st.doubted.get_mut(&name) {
                let excused = raised.min(*lowered);
                *lowered -= excused;
                st.excusable += i64::from(excused);
            }
            // The next look reads the raise as Ballast's slots back (no observation
            // tells them apart): as far as it goes and no look has judged them yet, they are.
            let unseen = u32::try_from(st.taken_unseen.max(0)).unwrap_or(0);
            if let Some(owed) = st.taken_not_remade.get_mut(&name) {
                let back = raised.min(*owed).min(unseen);
                *owed -= back;
                st.taken_unseen -= i64::from(back);
                st.excusable += i64::from(back);
            }
            if done.taken > 0 {
                st.taken += i64::from(done.taken);
                *st.taken_not_remade.entry(name.clone()).or_default() += done.taken;
                // Ballast makes a raise undone again once; undone again right after, it is
                // left (the cache refreshes within the minute; pending pods bring it back).
                let unfulfillable = !st.strict && matches!(m, CaMove::DeleteUnfulfillable { .. });
                if st.remade_last_look.contains(&name) || unfulfillable {
                    // The second: a failed scale-up's unfilled slots, Ballast's among them,
                    // are not all made good yet (`unfilled_slots_deleted_under_a_raise_...`).
                    st.taken_excused += i64::from(done.taken);
                } else {
                    st.taken_unseen += i64::from(done.taken);
                }
            }
        }
    }

    /// Before a mutating call: cluster-autoscaler may act first (once per run), and
    /// the fault decides whether the call happens and what it answers.
    fn before_call(&self, op: &str) -> Result<bool, PortError> {
        let ca = self.st().ca.take();
        if let Some(m) = ca {
            self.ca_moves(m);
        }
        let mut st = self.st();
        if st.dead {
            return Err(PortError::new(ErrorKind::Retryable, op, "the run is dead"));
        }
        let index = st.calls;
        st.calls += 1;
        match st.fault {
            Some(Fault::Crash(k)) if index >= k => {
                st.dead = true;
                if let Some((asg, by)) = st.unconfirmed_lower.take() {
                    *st.doubted_next.entry(asg).or_default() += by;
                }
                Err(PortError::new(ErrorKind::Retryable, op, "the run died"))
            }
            Some(Fault::Ambiguous(k)) if index == k => Ok(true),
            _ => Ok(false),
        }
    }
}

impl FaultState {
    /// Brings the unfilled slots in line with the world, after `write` (ASG, change of
    /// desired size, whether Ballast's) if one was just made: a raise's slots join the
    /// newest, a lower cancels the newest; launches since filled the oldest, and a slot
    /// the ASG opened itself (an instance gone without decrement) is nobody's raise.
    fn track_unfilled(&mut self, world: &World, write: Option<(&str, i64, bool)>) {
        if let Some((asg, change, ballast)) = write {
            let q = self.unfilled.entry(asg.to_string()).or_default();
            if change > 0 {
                q.extend(std::iter::repeat_n(ballast, change as usize));
            } else {
                q.truncate(q.len().saturating_sub(change.unsigned_abs() as usize));
            }
        }
        for a in &world.asgs {
            let open = a.desired.saturating_sub(a.live()) as usize;
            let q = self.unfilled.entry(a.name.clone()).or_default();
            while q.len() > open {
                q.pop_front();
            }
            while q.len() < open {
                q.push_back(false);
            }
        }
    }
}

fn violation(st: &mut FaultState, what: String) {
    st.violations.push(what);
}

impl PortFault for Adversary {
    fn before(&self, call: &PortCall<'_>) -> Result<Option<PortError>, PortError> {
        match call {
            // A dead run's lease calls fail too (they count as no call of the run's).
            PortCall::AcquireLease { .. } | PortCall::ReleaseLease { .. } if self.st().dead => {
                return Err(PortError::new(ErrorKind::Retryable, "lease", "the run is dead"))
            }
            // The run's calls the faults count: its writes, not its lease or dedup marks.
            PortCall::AcquireLease { .. } | PortCall::ReleaseLease { .. } | PortCall::MarkSeen { .. } => {
                return Ok(None)
            }
            _ if !call.is_mutating() => return Ok(None),
            _ => {}
        }
        let ambiguous = self.before_call(call.method())?;
        match *call {
            PortCall::SetDesiredCapacity { asg, desired } => {
                let before = self.memory.world().asg(asg).map(ObservedAsg::size);
                if let Some(before) = before {
                    let live = before.live.unwrap_or_default();
                    if desired < before.desired && desired < live {
                        violation(
                            &mut self.st(),
                            format!("{asg} lowered to {desired} below its {live} live instances"),
                        );
                    }
                    // One write per ASG at a time (apply makes capacity calls one by one); one
                    // the ASG refused leaves its entry to the next write's.
                    self.st().write_from.insert(asg.to_string(), (before.desired, ambiguous));
                }
            }
            PortCall::TerminateInstance { instance_id, decrement } => {
                let world = self.memory.world();
                let asg = world.asgs.iter().find(|a| a.instance(instance_id).is_some()).map(|a| a.name.clone());
                drop(world);
                if asg.as_deref() == Some(OD) && !decrement {
                    violation(&mut self.st(), format!("on-demand {instance_id} terminated without decrement"));
                }
            }
            PortCall::Drain { node, .. } => {
                let blocked = if self.st().pdb_blocks { vec!["default/web-0".to_string()] } else { Vec::new() };
                if let Some(n) = self.memory.world().nodes.iter_mut().find(|n| n.state.name == node) {
                    n.pdb_blocked_pods = blocked;
                }
            }
            _ => {}
        }
        Ok(ambiguous.then(|| PortError::new(ErrorKind::Retryable, call.method(), "timed out (it was carried out)")))
    }

    fn after(&self, call: &PortCall<'_>) {
        match *call {
            PortCall::SetDesiredCapacity { asg, desired } => {
                let mut st = self.st();
                let Some((from, ambiguous)) = st.write_from.remove(asg) else { return };
                let change = i64::from(desired) - i64::from(from);
                let world = self.memory.world();
                st.track_unfilled(&world, Some((asg, change, true)));
                drop(world);
                *st.ballast_net.entry(asg.to_string()).or_default() += change;
                if desired < from {
                    let by = from - desired;
                    if ambiguous {
                        // Its error is the answer: no later write of the run confirms it.
                        *st.doubted_next.entry(asg.to_string()).or_default() += by;
                    } else {
                        st.unconfirmed_lower = Some((asg.to_string(), by));
                    }
                }
            }
            PortCall::TerminateInstance { instance_id, decrement: true } => {
                let world = self.memory.world();
                let asg = world.asgs.iter().find(|a| a.instance(instance_id).is_some()).map(|a| a.name.clone());
                drop(world);
                *self.st().ballast_net.entry(asg.unwrap_or_default()).or_default() -= 1;
            }
            PortCall::Save { .. } => self.st().unconfirmed_lower = None,
            _ => {}
        }
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Warning {
        pick: usize,
    },
    /// AWS reclaims a spot instance (with or without its warning before).
    Reclaim {
        pick: usize,
        state_change: bool,
    },
    CapacityError {
        group: usize,
    },
    /// What a wait target learns from: the ASG's Launch Successful for a live instance
    /// (maybe late, its node long Ready), the forwarder's Node Lifecycle Ready, and its
    /// Pool Waits Measured window (maybe a late or repeated one).
    Launched {
        pick: usize,
        secs_ago: u32,
    },
    NodeReady {
        pick: usize,
    },
    Waits {
        pods: u32,
        p95_secs: u32,
        mins_ago: u32,
    },
    Tick,
}

#[derive(Debug, Clone)]
struct Step {
    kind: Kind,
    fault: Fault,
    /// Cluster-autoscaler's move between this run's observe and its first write.
    ca: CaMove,
    /// Its move after this run, before the next one looks (after a call whose answer
    /// was lost, say).
    ca_after: CaMove,
    advance_secs: u32,
    spot_capacity_lost: bool,
    /// Every drain of the step is blocked by a PodDisruptionBudget.
    pdb_blocks: bool,
}

fn step() -> impl Strategy<Value = Step> {
    let kind = prop_oneof![
        4 => any::<usize>().prop_map(|pick| Kind::Warning { pick }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, state_change)| Kind::Reclaim { pick, state_change }),
        2 => (0usize..2).prop_map(|group| Kind::CapacityError { group }),
        1 => (any::<usize>(), 0u32..600).prop_map(|(pick, secs_ago)| Kind::Launched { pick, secs_ago }),
        1 => any::<usize>().prop_map(|pick| Kind::NodeReady { pick }),
        1 => (0u32..40, 0u32..200, 0u32..30).prop_map(|(pods, p95_secs, mins_ago)| Kind::Waits { pods, p95_secs, mins_ago }),
        3 => Just(Kind::Tick),
    ];
    let fault = prop_oneof![
        3 => Just(Fault::None),
        2 => (0usize..10).prop_map(Fault::Crash),
        2 => (0usize..10).prop_map(Fault::Ambiguous),
    ];
    let adversary = u32::from(std::env::var("BALLAST_FAULT_CA").map_or(true, |v| v != "0"));
    let ca = prop_oneof![
        3 => Just(CaMove::None),
        adversary => (0usize..3, 1u32..3).prop_map(|(asg, by)| CaMove::ScaleOut { asg, by }),
        adversary => (0usize..3, any::<usize>()).prop_map(|(asg, pick)| CaMove::ScaleIn { asg, pick }),
        adversary => any::<usize>().prop_map(|pick| CaMove::RemoveIdleOnDemand { pick }),
        adversary => (0usize..3).prop_map(|asg| CaMove::DeleteUnfulfillable { asg }),
    ];
    (kind, fault, ca.clone(), ca, 0u32..900, prop::bool::weighted(0.3), prop::bool::weighted(0.2)).prop_map(
        |(kind, fault, ca, ca_after, advance_secs, lost, pdb_blocks)| Step {
            kind,
            fault,
            ca,
            ca_after,
            advance_secs,
            spot_capacity_lost: lost,
            pdb_blocks,
        },
    )
}

fn live_spot(world: &World) -> Vec<String> {
    SPOT.iter()
        .filter_map(|n| world.asg(n))
        .flat_map(|a| a.instances.iter().filter(|i| i.lifecycle_state == LifecycleState::InService))
        .map(|i| i.id.clone())
        .collect()
}

struct Harness {
    ports: Ports,
    clock: FixedClock,
    reconciler: Reconciler<Ports, Ports, Ports, FixedClock>,
    rt: tokio::runtime::Runtime,
    next_id: u64,
    /// Spot instances warned or reclaimed: the only ones that may count as interruptions.
    disrupted: BTreeSet<String>,
    reclaimed: Vec<String>,
    events: u64,
    /// The pool has no on-demand ASG in its config (the ASG stays, not Ballast's).
    spot_only: bool,
    /// Events of a run that died or failed for them: SQS delivers them again with the
    /// next run's.
    redeliver: Vec<Event>,
}

impl Harness {
    fn new(spot_only: bool) -> Harness {
        let start = DateTime::parse_from_rfc3339("2026-11-20T09:00:00Z").unwrap().with_timezone(&Utc);
        let mut world = state("steady.json");
        // Mixed-instances spot ASG: one of its instances is on-demand.
        if let Some(i) = world.asg_mut(SPOT[0]).and_then(|a| a.instances.last_mut()) {
            i.market = Market::OnDemand;
        }
        let memory = InMemory::new(world);
        let ports = Faulty::new(memory.clone(), Adversary { memory, state: Arc::default() });
        let clock = FixedClock::new(start);
        let mut config = config_with_dry_run(false);
        if spot_only {
            let pool = config.pools.iter_mut().find(|p| p.name == POOL).unwrap();
            pool.on_demand_asg = None;
            // Its headroom learned from a wait target: the learner's state rides through
            // the same crashes, ambiguous calls and cluster-autoscaler moves.
            pool.headroom.target = Some(ballast_core::config::WaitTarget {
                wait_p95: "10s".parse().unwrap(),
                history: "14d".parse().unwrap(),
                floor: true,
                time_zone: "Europe/Paris".parse().unwrap(),
            });
        }
        let reconciler = Reconciler {
            config: Arc::new(config),
            autoscaling: ports.clone(),
            cluster: ports.clone(),
            store: ports.clone(),
            clock: clock.clone(),
            owner: "fault-model".into(),
        };
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        Harness {
            ports,
            clock,
            reconciler,
            rt,
            next_id: 1 << 40,
            disrupted: BTreeSet::new(),
            reclaimed: Vec::new(),
            events: 0,
            spot_only,
            redeliver: Vec::new(),
        }
    }

    fn now(&self) -> DateTime<Utc> {
        *self.clock.0.lock().unwrap()
    }

    fn event(&mut self, signal: Signal) -> Event {
        self.events += 1;
        Event {
            id: format!("ev-{}", self.events),
            time: self.now(),
            source: "fault".into(),
            detail_type: "fault".into(),
            signal,
        }
    }

    fn make(&mut self, kind: &Kind) -> Option<Event> {
        let spot = live_spot(&self.ports.port.world());
        let pick = |n: usize| (!spot.is_empty()).then(|| spot[n % spot.len()].clone());
        let signal = match kind {
            Kind::Warning { pick: n } => {
                let id = pick(*n)?;
                let market = self.ports.port.world().asgs.iter().find_map(|a| a.instance(&id).map(|i| i.market));
                if market == Some(Market::Spot) {
                    self.disrupted.insert(id.clone());
                }
                Signal::SpotInterruption { instance_id: id, action: InstanceAction::Terminate }
            }
            Kind::Reclaim { pick: n, state_change } => {
                let id = pick(*n)?;
                let mut world = self.ports.port.world();
                let market = world.asgs.iter().find_map(|a| a.instance(&id).map(|i| i.market));
                if market != Some(Market::Spot) {
                    return None;
                }
                self.disrupted.insert(id.clone());
                // EC2 takes it; the ASG still lists it in service until its health check.
                world.nodes.retain(|n| n.state.instance_id != id);
                drop(world);
                // The ASG's health check notices later: the instance leaves at the
                // next settle, and the ASG replaces it (no decrement).
                self.reclaimed.push(id.clone());
                if !state_change {
                    return None;
                }
                Signal::InstanceStateChange { instance_id: id, state: InstanceState::ShuttingDown }
            }
            Kind::CapacityError { group } => Signal::LaunchUnsuccessful(LaunchFailure {
                asg: SPOT[*group].into(),
                activity_id: format!("act-{}", self.events),
                availability_zone: Some("eu-west-1a".into()),
                subnet_id: None,
                status_message: "There is no Spot capacity available that matches your request.".into(),
                cause: String::new(),
                error: LaunchError::Capacity(CapacityError::NoSpotCapacity),
                at: Some(self.now()),
            }),
            Kind::Launched { pick: n, secs_ago } => {
                let id = pick(*n)?;
                let mut world = self.ports.port.world();
                let asg = world.asgs.iter().find(|a| a.instance(&id).is_some())?.name.clone();
                // Its kubelet registered the node; the CNI has not made it Ready yet (the
                // event may also come late, for a node long Ready: then it stays Ready).
                if *secs_ago < 300 {
                    world.nodes.iter_mut().filter(|n| n.state.instance_id == id).for_each(|n| n.state.ready = false);
                }
                drop(world);
                Signal::LaunchSuccessful {
                    asg,
                    instance_id: id,
                    started: self.now() - Duration::seconds(i64::from(*secs_ago)),
                }
            }
            Kind::NodeReady { pick: n } => {
                // A launching node becomes Ready, or (none launching) a Ready one is told again.
                let mut world = self.ports.port.world();
                let launching: Vec<String> = world
                    .nodes
                    .iter()
                    .filter(|w| !w.state.ready && spot.contains(&w.state.instance_id))
                    .map(|w| w.state.instance_id.clone())
                    .collect();
                let id = if launching.is_empty() { pick(*n)? } else { launching[n % launching.len()].clone() };
                world.nodes.iter_mut().filter(|w| w.state.instance_id == id).for_each(|w| w.state.ready = true);
                drop(world);
                Signal::NodeLifecycle(NodeLifecycleDetail {
                    pool: POOL.into(),
                    node: format!("node-{id}"),
                    provider_id: format!("aws:///eu-west-1a/{id}"),
                    instance_id: id,
                    capacity_type: CapacityType::Spot,
                    condition: NodeCondition::Ready,
                    observed_at: Some(self.now()),
                })
            }
            Kind::Waits { pods, p95_secs, mins_ago } => {
                let end = self.now() - Duration::minutes(i64::from(*mins_ago));
                // As the forwarder sums a window up (buckets too): one pod waits longest.
                // No pod: a window the event format allows but no forwarder sends.
                let mut waits = vec![f64::from(*p95_secs); *pods as usize];
                if let Some(first) = waits.first_mut() {
                    *first *= 1.5;
                }
                let start = end - Duration::minutes(5);
                let detail = PoolWaitsDetail::summing(POOL, start, end, &mut waits).unwrap_or(PoolWaitsDetail {
                    pool: POOL.into(),
                    window_start: start,
                    window_end: end,
                    pods: 0,
                    p95_seconds: 0.0,
                    max_seconds: 0.0,
                    buckets: vec![],
                    over_with_room: 0,
                });
                Signal::PoolWaits(detail)
            }
            Kind::Tick => Signal::Reconcile,
        };
        Some(self.event(signal))
    }

    fn total(&self) -> i64 {
        self.ports.fault.st().ballast_net.values().sum()
    }

    fn check(&self, at: &str) -> Result<(), TestCaseError> {
        let st = self.ports.fault.st();
        prop_assert!(st.violations.is_empty(), "{at}: {:?}", st.violations);
        let net: i64 = st.ballast_net.values().sum();
        // Ballast's own net change: a move raises before it lowers and a surge comes
        // before its terminate-with-decrement, and each desired-size write is rebased on
        // a size read after its journal entry, so another writer's change is never undone.
        // The one case no observation can tell apart (a lower whose answer was lost, then
        // cluster-autoscaler raising the same ASG by as much before Ballast records a look
        // again) is excused by the harness's own ground truth, for at most what
        // cluster-autoscaler added meanwhile (`excusable`); every other dip fails.
        prop_assert!(
            net + st.excusable >= 0,
            "{at}: Ballast's net change of the pool's desired size is {net} ({} excusable): {:?}",
            st.excusable,
            st.ballast_net
        );
        // The pool's capacity: what Ballast's writes added, less what cluster-autoscaler
        // took of it since (its writes from a stale cached size, its deleting of a failed
        // scale-up's unfilled slots). Taken since Ballast's last look is not yet its to
        // make good; taken right after it made them good once is left.
        let capacity = net - st.taken;
        prop_assert!(
            capacity + st.excusable + st.taken_unseen + st.taken_excused >= 0,
            "{at}: the pool holds {capacity} of Ballast's slots: cluster-autoscaler took {} ({} since Ballast's last \
             look, {} after it made them again), net {:?}",
            st.taken,
            st.taken_unseen,
            st.taken_excused,
            st.ballast_net
        );
        let od = st.ballast_net.get(OD).copied().unwrap_or(0);
        prop_assert!(od >= 0, "{at}: Ballast removed {} on-demand instances it never added", -od);
        prop_assert!(!self.spot_only || od == 0, "{at}: Ballast changed {OD}, not in the spot-only pool, by {od}");
        drop(st);
        let world = self.ports.port.world();
        for asg in &world.asgs {
            prop_assert!(
                asg.desired >= asg.min && asg.desired <= asg.max,
                "{at}: {} at {} outside {}..{}",
                asg.name,
                asg.desired,
                asg.min,
                asg.max
            );
        }
        let record = &world.pools.get(POOL).map(|p| p.record.clone()).unwrap_or_default();
        let cap = self.reconciler.config.pool(POOL).unwrap().fallback.max_on_demand;
        prop_assert!(record.fallback_units <= cap, "{at}: fallback units {} over {cap}", record.fallback_units);
        prop_assert!(
            od <= i64::from(cap) + record.interruptions.len() as i64,
            "{at}: on-demand grew {od} past the cap"
        );
        for d in &record.disruptions {
            prop_assert!(self.disrupted.contains(&d.instance_id), "{at}: {} counted as an interruption", d.instance_id);
        }
        if let Some(learned) = &record.learned {
            // Bounded whatever arrives, late or repeated: the record must fit DynamoDB's item.
            let size = serde_json::to_vec(learned).unwrap().len();
            prop_assert!(size < 48_000, "{at}: the learned history is {size} bytes");
            prop_assert!(
                (0..=4_000).contains(&learned.correction.correction_permille),
                "{at}: {}",
                learned.correction.correction_permille
            );
            prop_assert!(
                learned.lead.lead_secs.len() <= 20 && learned.lead.lead_secs.iter().all(|&s| s < 3600),
                "{at}: {:?}",
                learned.lead.lead_secs
            );
        }
        Ok(())
    }

    fn reconcile(&mut self, events: Vec<Event>, fault: Fault, ca: CaMove, pdb_blocks: bool) -> Vec<String> {
        {
            let mut st = self.ports.fault.st();
            st.pdb_blocks = pdb_blocks;
            st.fault = Some(fault);
            st.calls = 0;
            st.dead = false;
            st.ca = Some(ca);
            st.now = Some(*self.clock.0.lock().unwrap());
        }
        // What cluster-autoscaler took before this run observes (its move inside the run
        // comes after the observe).
        let unseen_before = self.ports.fault.st().taken_unseen;

        if std::env::var_os("BALLAST_FAULT_DEBUG").is_some() {
            let w = self.ports.port.world();
            eprintln!("== {:?} {:?} {:?}", events.iter().map(|e| &e.signal).collect::<Vec<_>>(), fault, ca);
            eprintln!(
                "  before: journal {:?} asgs {:?}",
                w.pools.get(POOL).map(|p| p.record.journal.clone()),
                w.asgs.iter().map(|a| (a.name.clone(), a.desired, a.live())).collect::<Vec<_>>()
            );
            let record = w.pools.get(POOL).map(|p| p.record.clone()).unwrap_or_default();
            eprintln!("  interruptions {:?}", record.interruptions);
            let live: Vec<Vec<&str>> = w
                .asgs
                .iter()
                .map(|a| a.instances.iter().filter(|i| i.lifecycle_state.is_live()).map(|i| i.id.as_str()).collect())
                .collect();
            eprintln!("  live {live:?}");
        }
        let events: Vec<Event> = std::mem::take(&mut self.redeliver).into_iter().chain(events).collect();
        let outcome = self.rt.block_on(self.reconciler.handle(events.clone(), Budget::default()));
        let failed: BTreeSet<&String> = outcome.failures.iter().flat_map(|(_, ids)| ids).collect();
        let died = self.ports.fault.st().dead;
        if std::env::var_os("BALLAST_FAULT_NO_REDELIVERY").is_none() {
            self.redeliver = events.into_iter().filter(|e| died || failed.contains(&e.id)).collect();
        }
        // Whether Ballast looked at the pool's ASGs in this run and recorded what it
        // judged (a run with no event for the pool, stopped before it observed, or whose
        // record write failed, leaves every doubt standing: the next run judges again).
        let recorded = |e: &ReconcileError| match e {
            ReconcileError::Apply { failed_at, .. } => *failed_at > 0,
            ReconcileError::MarkSeen { .. } => true,
            _ => false,
        };
        let looked = outcome.pools.iter().any(|p| p.plan.pool == POOL)
            || outcome.failures.iter().any(|(e, _)| e.plan().is_some_and(|p| p.pool == POOL) && recorded(e));
        let crashed = {
            let mut st = self.ports.fault.st();
            // This run observed the ASGs again: only its own unconfirmed lowers stay in doubt.
            if let Some((asg, by)) = st.unconfirmed_lower.take() {
                *st.doubted_next.entry(asg).or_default() += by;
            }
            let next = std::mem::take(&mut st.doubted_next);
            // What cluster-autoscaler took before the run is Ballast's to make good once a
            // run that saw it applied its plan whole.
            if let Some(plan) = outcome.pools.iter().map(|p| &p.plan).find(|p| p.pool == POOL) {
                st.taken_unseen = (st.taken_unseen - unseen_before).max(0);
                st.remade_last_look = plan.remade.keys().cloned().collect();
                // Judged: what this look did not make again is Ballast's decision.
                st.taken_not_remade.clear();
            }
            // A run stopped after its record: its raises made again whose write landed.
            let journal = self.ports.port.world().pools.get(POOL).and_then(|p| p.record.journal.clone());
            let landed = |asg: &String| {
                journal
                    .iter()
                    .flat_map(|j| &j.calls)
                    .any(|c| matches!(c, CapacityCall::SetDesired { asg: a, .. } if a == asg && c.done()))
            };
            for (e, _) in &outcome.failures {
                if let Some(plan) = e.plan().filter(|p| p.pool == POOL && recorded(e)) {
                    st.remade_last_look.extend(plan.remade.keys().filter(|a| landed(a)).cloned());
                }
            }
            if looked {
                st.doubted = next;
            } else {
                for (asg, by) in next {
                    *st.doubted.entry(asg).or_default() += by;
                }
            }
            st.fault = None;
            std::mem::replace(&mut st.dead, false)
        };
        if crashed {
            // A dead run's lease expires before anyone else may act.
            self.ports.port.world().leases.clear();
        }
        if std::env::var_os("BALLAST_FAULT_DEBUG").is_some() {
            for p in &outcome.pools {
                eprintln!(
                    "{} {} {fault:?} {ca:?} {} applied {:?}",
                    p.plan.pool,
                    self.now(),
                    serde_json::to_string(&p.plan.actions).unwrap_or_default(),
                    p.applied
                );
                eprintln!("  notes {:?} net {:?}", p.plan.notes, self.ports.fault.st().ballast_net);
            }
            for (e, _) in &outcome.failures {
                eprintln!("  failure {e}");
                if let Some(p) = e.plan() {
                    eprintln!("  stopped plan {}", serde_json::to_string(&p.actions).unwrap_or_default());
                    eprintln!("  notes {:?}", p.notes);
                }
            }
            eprintln!("  net {:?}", self.ports.fault.st().ballast_net);
        }
        // A run that stopped part-way still says (and logs) what it left to cluster-autoscaler.
        let stopped = outcome.failures.iter().filter_map(|(e, _)| e.plan());
        let plans: Vec<_> = outcome.pools.iter().map(|p| &p.plan).chain(stopped).collect();
        for plan in &plans {
            // The count the metric and the summary carry is the one the notes say.
            assert_eq!(i64::from(plan.surplus_named()), left_to_ca(&plan.notes), "{:?}", plan.notes);
        }
        plans.iter().flat_map(|p| p.notes.clone()).collect()
    }

    fn settle(&mut self, lost: bool) {
        let no_capacity: BTreeSet<String> =
            if lost { SPOT.iter().map(|s| s.to_string()).collect() } else { BTreeSet::new() };
        let now = self.now();
        let mut world = self.ports.port.world();
        // Reclaimed: the ASG's health check finds it terminated; it leaves at this settle.
        for id in self.reclaimed.drain(..) {
            world.asgs.iter_mut().flat_map(|a| a.instances.iter_mut()).filter(|i| i.id == id).for_each(|i| {
                i.lifecycle_state = LifecycleState::Terminated;
            });
        }
        world.settle(&self.reconciler.config, &no_capacity, &mut self.next_id, now);
        self.ports.fault.st().track_unfilled(&world, None);
        let failed: Vec<String> = world.asgs.iter().filter(|a| a.live() < a.desired).map(|a| a.name.clone()).collect();
        drop(world);
        let until = self.now() + Duration::minutes(5);
        let mut st = self.ports.fault.st();
        for asg in failed {
            st.backoff_until.insert(asg, until);
        }
    }
}

/// Instances Ballast left to cluster-autoscaler in these notes ("N surplus instance(s) left in ASG").
fn left_to_ca(notes: &[String]) -> i64 {
    notes
        .iter()
        .filter_map(|n| {
            let (before, _) = n.split_once(SURPLUS_NOTE)?;
            before.trim_end().rsplit(' ').next()?.parse::<i64>().ok()
        })
        .sum()
}

/// `BALLAST_FAULT_STRICT=1` drops the excuse for what a failed scale-up's deletion takes
/// in the random runs too (the replayed sequences below run strict always).
fn run(steps: Vec<Step>, spot_only: bool) -> Result<(), TestCaseError> {
    run_strict(steps, spot_only, std::env::var_os("BALLAST_FAULT_STRICT").is_some_and(|v| v == "1"))
}

fn run_strict(steps: Vec<Step>, spot_only: bool, strict: bool) -> Result<(), TestCaseError> {
    let mut h = Harness::new(spot_only);
    h.ports.fault.st().strict = strict;
    let mut handed_to_ca = 0i64;
    for (index, step) in steps.iter().enumerate() {
        h.clock.advance(Duration::seconds(i64::from(step.advance_secs)));
        let events: Vec<Event> = h.make(&step.kind).into_iter().collect();
        let notes = h.reconcile(events, step.fault, step.ca, step.pdb_blocks);
        h.ports.fault.ca_moves(step.ca_after);
        handed_to_ca += left_to_ca(&notes);
        h.check(&format!("step {index} ({step:?})"))?;
        h.settle(step.spot_capacity_lost);
    }
    // A healthy world: no faults, no adversary, spot capacity back, every node Ready.
    // Every pool comes to rest within a bounded number of reconciles.
    h.ports.port.world().nodes.iter_mut().for_each(|n| n.state.ready = true);
    let mut quiet = 0;
    for round in 0..400 {
        h.clock.advance(Duration::minutes(5));
        let tick = h.event(Signal::Reconcile);
        let before = h.ports.port.world().calls.iter().filter(|c| c.is_effect()).count();
        let notes = h.reconcile(vec![tick], Fault::None, CaMove::None, false);
        handed_to_ca += left_to_ca(&notes);
        h.check(&format!("healthy round {round}"))?;
        h.settle(false);
        let after = h.ports.port.world().calls.iter().filter(|c| c.is_effect()).count();
        quiet = if after == before { quiet + 1 } else { 0 };
        // Long enough for spot's unavailability, failback_after and every step.
        if round >= 100 && quiet >= 3 {
            break;
        }
    }
    prop_assert!(quiet >= 3, "no rest after 400 healthy reconciles");
    let world = h.ports.port.world().clone();
    let record = world.pools.get(POOL).map(|p| p.record.clone()).unwrap_or_default();
    prop_assert!(record.failback.is_none(), "still mid-failback: {:?}", record.failback);
    prop_assert_eq!(record.fallback_units, 0, "fallback not moved back");
    prop_assert!(world.nodes.iter().all(|n| !n.state.unschedulable), "a node stays cordoned");
    let net = h.total();
    let (scale_ins, ballast_net, taken) = {
        let st = h.ports.fault.st();
        (st.scale_ins, st.ballast_net.clone(), st.taken)
    };
    // What Ballast's writes still hold: cluster-autoscaler's takings are not Ballast's surplus.
    let net = net - taken;
    // No surplus beyond what Ballast named in its notes (one replacement per interruption,
    // no leaked surge or move), less what cluster-autoscaler's scale-ins may have removed.
    prop_assert!(
        net <= handed_to_ca + scale_ins,
        "Ballast left {net} more instances than it found, {handed_to_ca} of them handed to cluster-autoscaler, which \
         scaled in {} times: {:?}",
        scale_ins,
        ballast_net
    );
    Ok(())
}

fn cases() -> u32 {
    std::env::var("BALLAST_FAULT_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}

/// The test command explores a fixed set of sequences (a run that passes stays passing);
/// `BALLAST_FAULT_SEED=random` (or a number) explores others.
fn seed() -> proptest::test_runner::RngSeed {
    match std::env::var("BALLAST_FAULT_SEED").ok().as_deref() {
        Some("random") => proptest::test_runner::RngSeed::Random,
        Some(n) => {
            n.parse().map(proptest::test_runner::RngSeed::Fixed).unwrap_or(proptest::test_runner::RngSeed::Random)
        }
        None => proptest::test_runner::RngSeed::Fixed(0xba11a57),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        rng_seed: seed(),
        ..ProptestConfig::default()
    })]

    #[test]
    fn crashes_ambiguous_calls_and_cluster_autoscaler_never_cost_capacity(steps in prop::collection::vec(step(), 1..12)) {
        run(steps, false)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases() / 10,
        failure_persistence: None,
        rng_seed: seed(),
        ..ProptestConfig::default()
    })]

    /// The same faults on a spot-only pool (no `on_demand_asg`, headroom from a wait
    /// target): its capacity is never
    /// lost, and the on-demand ASG it does not own is never touched.
    #[test]
    fn a_spot_only_pool_never_costs_capacity_either(steps in prop::collection::vec(step(), 1..12)) {
        run(steps, true)?;
    }
}

/// The wait-target signals above reach the learner: a launch the ASG dated, its node
/// Ready a step later, is timed, crash-free or not. (Without this the random runs could
/// pass with the learner never timing anything.)
#[test]
fn the_spot_only_pools_learner_times_a_launch_through_the_harness() {
    for fault in [Fault::None, Fault::Crash(0), Fault::Ambiguous(0)] {
        let mut h = Harness::new(true);
        let tick = h.event(Signal::Reconcile);
        h.reconcile(vec![tick], Fault::None, CaMove::None, false);
        let launched = h.make(&Kind::Launched { pick: 0, secs_ago: 40 }).unwrap();
        h.reconcile(vec![launched], fault, CaMove::None, false);
        h.clock.advance(Duration::seconds(80));
        let ready = h.make(&Kind::NodeReady { pick: 0 }).unwrap();
        h.reconcile(vec![ready], Fault::None, CaMove::None, false);
        let record = h.ports.port.world().pools.get(POOL).map(|p| p.record.clone()).unwrap_or_default();
        let lead = record.learned.map(|l| l.lead.lead_secs).unwrap_or_default();
        // A run that died before saving took nothing in: its events come again (SQS).
        if matches!(fault, Fault::Crash(0)) && lead.is_empty() {
            continue;
        }
        assert_eq!(lead, [120], "{fault:?}: 40 s before the launch event to 80 s after it");
    }
}

/// A step of a sequence proptest once shrank to, replayed as found (no PDB blocks in any).
fn replayed(
    kind: Kind,
    fault: Fault,
    ca: CaMove,
    ca_after: CaMove,
    advance_secs: u32,
    spot_capacity_lost: bool,
) -> Step {
    Step { kind, fault, ca, ca_after, advance_secs, spot_capacity_lost, pdb_blocks: false }
}

/// Found by `scripts/bench-faults` (seed 150897356623233): a lower on the fallback spot
/// ASG lands and its run dies; the next run looks (the lower landed: not repeated) but
/// dies before writing its record, and cluster-autoscaler raises the ASG by as much; the
/// run after judges the lower again from the raised size, which is the one case no
/// observation tells apart. The harness excused it only in the run where
/// cluster-autoscaler acted; the doubt stands until a run records its look.
#[test]
fn a_look_that_died_before_its_record_leaves_the_doubt_standing() {
    let step = |kind, fault, ca, advance_secs, lost| replayed(kind, fault, ca, CaMove::None, advance_secs, lost);
    let steps = vec![
        step(Kind::NodeReady { pick: 0 }, Fault::None, CaMove::ScaleOut { asg: 0, by: 1 }, 0, true),
        step(Kind::CapacityError { group: 1 }, Fault::None, CaMove::None, 0, false),
        step(Kind::NodeReady { pick: 0 }, Fault::None, CaMove::ScaleOut { asg: 1, by: 2 }, 0, true),
        step(Kind::Warning { pick: 0 }, Fault::Crash(5), CaMove::None, 0, false),
        step(Kind::NodeReady { pick: 0 }, Fault::Crash(0), CaMove::ScaleOut { asg: 1, by: 2 }, 300, true),
    ];
    run(steps.clone(), false).unwrap();
    run(steps, true).unwrap();
}

/// Found on the same seed: a move's lower lands and its run dies; cluster-autoscaler then
/// raises that ASG by one; the next run judges the lower not made (the ASG is where it
/// was) and journals it as owed, but dies; a later run finishes it, taking the slot
/// cluster-autoscaler asked for. The excuse came from the run where cluster-autoscaler
/// acted; it is now the amount cluster-autoscaler added while the lower was in doubt,
/// whenever the lower is finished.
#[test]
fn a_lower_in_doubt_finished_runs_later_takes_only_what_cluster_autoscaler_added() {
    let step = |kind, fault, ca_after, advance_secs| replayed(kind, fault, CaMove::None, ca_after, advance_secs, true);
    let steps = vec![
        step(Kind::Warning { pick: 0 }, Fault::None, CaMove::ScaleIn { asg: 0, pick: 0 }, 0),
        step(Kind::CapacityError { group: 1 }, Fault::None, CaMove::None, 0),
        step(Kind::Warning { pick: 131429572530492409 }, Fault::Crash(5), CaMove::ScaleOut { asg: 0, by: 1 }, 300),
        step(Kind::Warning { pick: 3421869587236148780 }, Fault::Crash(1), CaMove::None, 0),
    ];
    run(steps, false).unwrap();
}

/// `scripts/bench-faults` (seed 133022140322834): a move from a failing spot ASG
/// planned 0->9 on the fallback ASG, cluster-autoscaler raises the fallback by 2 before
/// the write, the rebased raise would be clamped at the ASG's max (8 of 9) while the
/// move's lower takes 9. A raise that does not fit whole is not made; the next run
/// plans afresh (`rebase` in reconcile/apply.rs).
#[test]
fn a_move_whose_raise_no_longer_fits_under_max_is_not_applied() {
    let step = |kind, fault, ca, advance_secs, lost| replayed(kind, fault, ca, CaMove::None, advance_secs, lost);
    let w = || Kind::Warning { pick: 0 };
    let steps = vec![
        step(Kind::CapacityError { group: 0 }, Fault::None, CaMove::ScaleOut { asg: 1, by: 2 }, 0, true),
        step(w(), Fault::None, CaMove::ScaleOut { asg: 0, by: 2 }, 127, true),
        step(w(), Fault::Ambiguous(4), CaMove::None, 773, true),
        step(w(), Fault::None, CaMove::None, 180, true),
        step(w(), Fault::None, CaMove::ScaleOut { asg: 0, by: 2 }, 120, true),
        step(Kind::NodeReady { pick: 0 }, Fault::None, CaMove::None, 180, true),
        step(Kind::CapacityError { group: 0 }, Fault::None, CaMove::ScaleOut { asg: 1, by: 2 }, 120, false),
    ];
    run(steps, false).unwrap();
}

/// Found by `scripts/bench-faults` (seed 101570038781494): two surges became surplus
/// (their interrupted instances left before Ballast removed them) while spot capacity was
/// gone; the plan that withdrew them also moved the failing fallback ASG's slots back,
/// one call on eks-general-spot-m6 (2 -> 3) for both. Its run died before the call; the
/// next judged the raise not landed and dropped the withdrawals netted into it, leaving
/// two instances nobody named. Lowers owed are now carried past a raise not landed.
#[test]
fn withdrawals_netted_into_a_raise_that_did_not_land_are_still_made() {
    let step = |kind, fault, ca, advance_secs, lost| replayed(kind, fault, ca, CaMove::None, advance_secs, lost);
    let steps = vec![
        step(Kind::Warning { pick: 0 }, Fault::None, CaMove::ScaleIn { asg: 1, pick: 0 }, 0, true),
        step(Kind::Reclaim { pick: 9331467830769388482, state_change: true }, Fault::None, CaMove::None, 0, true),
        step(
            Kind::Warning { pick: 543829932387017532 },
            Fault::Crash(6),
            CaMove::ScaleIn { asg: 1, pick: 0 },
            180,
            true,
        ),
        step(
            Kind::Warning { pick: 9829919276581239509 },
            Fault::Crash(4),
            CaMove::ScaleIn { asg: 0, pick: 12591094038306954019 },
            0,
            true,
        ),
        step(Kind::Reclaim { pick: 0, state_change: false }, Fault::None, CaMove::None, 0, true),
        step(Kind::Waits { pods: 0, p95_secs: 0, mins_ago: 0 }, Fault::Crash(1), CaMove::None, 180, false),
    ];
    run(steps, false).unwrap();
}

/// A scale-in's terminate lifecycle action is planned by a run that dies: right after
/// the plan is stored (its heartbeat never made), or after its first action (the
/// heartbeat). Nothing takes its intent back (a killed run never gets there), and its
/// redelivered event is deduplicated. Before, every later plan skipped the action as
/// `planned`: the hook lapsed and the instance went with its pods undrained. Now the
/// record says which run planned it and until when: within that window a tick does not
/// plan it twice; past it, with the instance still in Terminating:Wait, a tick plans it
/// again (heartbeat, cordon, drain, complete).
#[test]
fn a_lifecycle_action_left_planned_by_a_run_that_died_is_planned_again_after_its_window() {
    use ballast_core::event::LifecycleAction;
    use ballast_core::testing::Call;
    for crash in [1, 2] {
        let mut h = Harness::new(false);
        let instance = "i-0f9e8d7c6b5a40001";
        if let Some(i) =
            h.ports.port.world().asg_mut(OD).and_then(|a| a.instances.iter_mut().find(|i| i.id == instance))
        {
            i.lifecycle_state = LifecycleState::TerminatingWait;
        }
        let token = format!("token-{crash}");
        let action = LifecycleAction {
            asg: OD.into(),
            hook: "ballast-drain".into(),
            token: token.clone(),
            instance_id: instance.into(),
        };
        let hook = h.event(Signal::TerminateLifecycleAction(action));
        let calls =
            |h: &Harness, what: fn(&Call) -> bool| h.ports.port.world().calls.iter().filter(|c| what(c)).count();
        let heartbeats = |c: &Call| matches!(c, Call::Heartbeat { .. });
        let completes = |c: &Call| matches!(c, Call::Complete { .. });
        h.reconcile(vec![hook], Fault::Crash(crash), CaMove::None, false);
        let record = h.ports.port.world().pools.get(POOL).map(|p| p.record.clone()).unwrap_or_default();
        let pending = record.lifecycle_actions.iter().find(|a| a.token == token).cloned().expect("recorded");
        assert!(pending.planned, "crash {crash}: {pending:?}");
        assert_eq!(pending.planned_by.as_deref(), Some("fault-model"));
        let until = pending.planned_until.expect("until when");
        assert_eq!(calls(&h, completes), 0, "crash {crash}: the dead run completed nothing");
        let beats_of_the_dead_run = calls(&h, heartbeats);

        // Within the dead run's window (it may still be draining): not planned twice.
        h.clock.advance(Duration::seconds(60));
        assert!(h.now() < until);
        let tick = h.event(Signal::Reconcile);
        h.reconcile(vec![tick], Fault::None, CaMove::None, false);
        assert_eq!(calls(&h, heartbeats), beats_of_the_dead_run, "crash {crash}: planned twice within the window");
        assert_eq!(calls(&h, completes), 0);

        // Past it, the instance still waiting: planned again and completed.
        h.clock.advance(until - h.now() + Duration::seconds(1));
        let tick = h.event(Signal::Reconcile);
        let notes = h.reconcile(vec![tick], Fault::None, CaMove::None, false);
        assert!(notes.iter().any(|n| n.contains("planned by fault-model, which left it undone")), "{notes:?}");
        assert_eq!(calls(&h, heartbeats), beats_of_the_dead_run + 1, "crash {crash}: the hook kept open");
        assert_eq!(calls(&h, completes), 1, "crash {crash}: drained and completed");
        let world = h.ports.port.world();
        assert!(world.calls.contains(&Call::Complete { token: token.clone() }));
    }
}

/// Found by the pool-capacity invariant (and there before cluster-autoscaler's cache was
/// modelled): two warnings surge onto the fallback spot ASG, which cannot launch;
/// cluster-autoscaler deletes the first surge's unfilled slot between the second run's
/// observe and its raise, which apply rebases onto the deleted size, so one slot is left
/// for two interrupted instances gone with decrement. The raise kept from the first run
/// carries what was undone before the second wrote: the next look makes it again.
/// (Strict: outside it the invariant still excuses what a failed scale-up's deletion
/// takes, `unfulfillable`: unfilled slots deleted on a spot ASG kept off stay lost.)
#[test]
fn unfilled_slots_deleted_under_a_raise_are_made_again() {
    let step = |kind, ca, lost| replayed(kind, Fault::None, ca, CaMove::None, 0, lost);
    let steps = vec![
        step(Kind::CapacityError { group: 0 }, CaMove::None, false),
        step(Kind::Warning { pick: 0 }, CaMove::None, true),
        step(Kind::Warning { pick: 0 }, CaMove::DeleteUnfulfillable { asg: 1 }, false),
    ];
    run_strict(steps, false, true).unwrap();
}

/// Found by the pool-capacity invariant once cluster-autoscaler wrote from its cache: a
/// fallback moves spot-m6's missing slots onto on-demand; cluster-autoscaler, its cache
/// read before the move, scales on-demand up by one from the size before it, taking
/// back two of the move's three slots without removing an instance. The next look
/// makes them again.
#[test]
fn a_fallback_move_undone_by_a_stale_write_is_made_again() {
    let step = |kind, ca, ca_after, advance_secs, lost| replayed(kind, Fault::None, ca, ca_after, advance_secs, lost);
    let steps = vec![
        step(Kind::CapacityError { group: 1 }, CaMove::None, CaMove::None, 0, false),
        step(Kind::Warning { pick: 0 }, CaMove::None, CaMove::ScaleOut { asg: 0, by: 1 }, 0, true),
        step(Kind::CapacityError { group: 0 }, CaMove::ScaleOut { asg: 0, by: 1 }, CaMove::None, 300, true),
        step(Kind::CapacityError { group: 0 }, CaMove::ScaleOut { asg: 2, by: 1 }, CaMove::None, 0, false),
    ];
    run(steps, false).unwrap();
}

/// Found by the same invariant: a fallback moves spot-m6's missing slots onto the fallback
/// spot ASG; cluster-autoscaler, its cache read before, scales that ASG from the size
/// before the move, undoing one slot; then the fallback ASG fails too. The slot is made
/// again and moved on with the ASG's other missing ones, not left lost.
#[test]
fn a_move_undone_on_an_asg_that_then_fails_is_moved_on() {
    let step = |kind, ca, ca_after| replayed(kind, Fault::None, ca, ca_after, 0, false);
    let steps = vec![
        replayed(
            Kind::CapacityError { group: 0 },
            Fault::None,
            CaMove::ScaleOut { asg: 0, by: 2 },
            CaMove::None,
            0,
            true,
        ),
        step(Kind::NodeReady { pick: 0 }, CaMove::RemoveIdleOnDemand { pick: 0 }, CaMove::ScaleOut { asg: 1, by: 1 }),
        step(Kind::CapacityError { group: 1 }, CaMove::None, CaMove::None),
    ];
    run(steps, false).unwrap();
}

/// Found by `BALLAST_FAULT_CASES=10000`: an instance launched into a raise's slot is
/// withdrawn by Ballast (terminate with decrement) in a later plan and leaves the ASG's
/// list; the raise kept from before holds one less for it, so the ASG one lower is not
/// taken for an undone raise (nor is a raise made again counted twice).
#[test]
fn a_withdrawal_of_an_instance_launched_since_is_no_undone_raise() {
    let steps = vec![
        replayed(Kind::Tick, Fault::None, CaMove::ScaleOut { asg: 0, by: 1 }, CaMove::None, 0, false),
        replayed(
            Kind::Reclaim { pick: 9603072301882136784, state_change: false },
            Fault::None,
            CaMove::None,
            CaMove::ScaleOut { asg: 1, by: 1 },
            121,
            true,
        ),
        replayed(
            Kind::NodeReady { pick: 0 },
            Fault::Ambiguous(3),
            CaMove::RemoveIdleOnDemand { pick: 0 },
            CaMove::RemoveIdleOnDemand { pick: 0 },
            59,
            false,
        ),
        replayed(
            Kind::Reclaim { pick: 8997342943237446411, state_change: true },
            Fault::None,
            CaMove::None,
            CaMove::None,
            0,
            false,
        ),
    ];
    run(steps, false).unwrap();
}

/// A spot warning on a settled pool surges before the pool is read (the example config
/// selects by tags; routing read them). The run dies after each of its calls, or a call
/// lands and its answer is lost, with cluster-autoscaler scaling the same ASG out before
/// the first write; the warning is delivered again. Every invariant holds and the pool
/// settles with no capacity lost.
#[test]
fn a_surge_made_before_the_pool_is_read_survives_crashes_lost_answers_and_cluster_autoscaler() {
    for k in 0..6 {
        for fault in [Fault::Crash(k), Fault::Ambiguous(k)] {
            let steps = vec![
                replayed(Kind::Warning { pick: 0 }, fault, CaMove::ScaleOut { asg: 0, by: 1 }, CaMove::None, 0, false),
                replayed(Kind::Warning { pick: 0 }, Fault::None, CaMove::None, CaMove::None, 20, false),
            ];
            run(steps, false).unwrap_or_else(|e| panic!("{fault:?}: {e}"));
        }
    }
}

/// Found by the pool-capacity invariant made strict (no excuse for what a failed
/// scale-up's deletion takes): cluster-autoscaler deletes a failed scale-up's unfilled
/// slots, whoever asked for them, up to its `max-node-provision-time` after it saw them,
/// long after the stale-write window. Each sequence lost a slot of Ballast's:
/// - a surge unfilled (spot lost), its slot deleted 3 minutes on, after a run that died;
/// - two surges on one ASG, the second's raise replacing the first's watch;
/// - a slot deleted between a look and the write that raised the ASG again;
/// - cluster-autoscaler's scale-in before the write, its instance counted twice;
/// - a raise made again and moved on at once, the move's raise lost with its run.
#[test]
fn unfilled_slots_deleted_long_after_the_raise_are_made_again() {
    use CaMove::{DeleteUnfulfillable as Delete, ScaleOut};
    use Kind::{Launched, NodeReady, Warning};
    let none = CaMove::None;
    let sequences = vec![
        vec![
            replayed(Warning { pick: 0 }, Fault::None, none, none, 0, true),
            replayed(NodeReady { pick: 0 }, Fault::Crash(1), none, Delete { asg: 0 }, 180, false),
        ],
        vec![
            replayed(Warning { pick: 1 }, Fault::None, none, none, 0, true),
            replayed(Warning { pick: 0 }, Fault::None, none, none, 0, true),
            replayed(Launched { pick: 0, secs_ago: 0 }, Fault::None, none, Delete { asg: 0 }, 0, false),
        ],
        vec![
            replayed(Warning { pick: 0 }, Fault::None, none, none, 0, true),
            replayed(Warning { pick: 0 }, Fault::None, Delete { asg: 0 }, none, 0, false),
            replayed(Warning { pick: 0 }, Fault::Ambiguous(3), none, none, 0, true),
            replayed(Warning { pick: 0 }, Fault::None, Delete { asg: 0 }, none, 0, false),
        ],
        vec![
            replayed(Warning { pick: 2982572232369024742 }, Fault::None, none, none, 0, true),
            replayed(Warning { pick: 0 }, Fault::Crash(0), none, none, 0, true),
            replayed(Launched { pick: 0, secs_ago: 0 }, Fault::None, none, ScaleOut { asg: 1, by: 1 }, 180, false),
            replayed(Kind::CapacityError { group: 1 }, Fault::Crash(1), none, none, 0, false),
        ],
    ];
    for (i, steps) in sequences.into_iter().enumerate() {
        run_strict(steps, false, true).unwrap_or_else(|e| panic!("sequence {i}: {e}"));
    }
}

/// Found by the random runs: three warnings, the third's slot unfillable (spot lost)
/// while cluster-autoscaler scales the ASG out; a capacity error then moves the missing
/// slots out, and cluster-autoscaler deletes them (its failed scale-up) just before the
/// move's lower, which apply finds made. That lower took no raise of Ballast's: nothing
/// is made again beside the move.
#[test]
fn a_moves_lower_found_made_by_cluster_autoscaler_is_no_undone_raise() {
    use CaMove::{DeleteUnfulfillable as Delete, ScaleOut};
    use Kind::Warning;
    let none = CaMove::None;
    let steps = vec![
        replayed(Warning { pick: 0 }, Fault::None, none, none, 0, false),
        replayed(Warning { pick: 0 }, Fault::None, none, none, 0, false),
        replayed(Warning { pick: 0 }, Fault::None, ScaleOut { asg: 0, by: 1 }, none, 0, true),
        replayed(Kind::CapacityError { group: 0 }, Fault::None, Delete { asg: 0 }, none, 0, false),
    ];
    run(steps, false).unwrap();
}

/// Found by the strict run (`BALLAST_FAULT_STRICT=1`, case 5,907 of the fixed seed): a
/// spot instance is reclaimed without a warning; the run its state change reaches dies
/// before anything, and cluster-autoscaler deletes a surge's unfilled slot meanwhile. The
/// event comes again after the instance has left its ASG, which Auto Scaling then no
/// longer knows. It is routed by the ASG EC2's `aws:autoscaling:groupName` tag names
/// (EC2 lists a terminated instance for an hour), so its going is read as a reclaim, not
/// a scale-in, and the slot is made good.
#[test]
fn a_state_change_redelivered_after_its_instance_left_the_asg_is_routed_by_its_tag() {
    let steps = vec![
        replayed(
            Kind::Warning { pick: 0 },
            Fault::None,
            CaMove::ScaleIn { asg: 0, pick: 12226360466585809 },
            CaMove::None,
            0,
            true,
        ),
        replayed(
            Kind::Reclaim { pick: 10578430816188165380, state_change: true },
            Fault::Crash(0),
            CaMove::DeleteUnfulfillable { asg: 0 },
            CaMove::None,
            0,
            false,
        ),
    ];
    run_strict(steps, false, true).unwrap();
}

/// Found by the strict random runs: a surge unfilled (spot lost); another spot instance
/// is reclaimed and no state change reaches Ballast; cluster-autoscaler deletes the failed
/// scale-up's slots. The reclaimed instance's going explains no lower of its ASG (EC2,
/// asked, says the market took it): the slots deleted are made again.
#[test]
fn a_reclaim_no_event_told_is_no_lower_under_a_kept_raise() {
    let steps = vec![
        replayed(Kind::Warning { pick: 0 }, Fault::None, CaMove::None, CaMove::None, 0, true),
        replayed(
            Kind::Reclaim { pick: 52949941928685030, state_change: false },
            Fault::None,
            CaMove::None,
            CaMove::DeleteUnfulfillable { asg: 0 },
            0,
            false,
        ),
    ];
    run_strict(steps, false, true).unwrap();
}

/// Found by the random runs (spot-only pool): a surge ahead stacked on an earlier
/// journal, then a terminate turned into one without decrement whose run died before
/// its answer; the instance gone, the terminate is taken as landed and its surge named.
#[test]
fn spot_only_three_warnings_then_a_capacity_error() {
    use CaMove::{RemoveIdleOnDemand, ScaleIn, ScaleOut};
    use Kind::{CapacityError, Launched, Tick, Warning};
    let none = CaMove::None;
    let steps = vec![
        replayed(Tick, Fault::None, ScaleOut { asg: 0, by: 1 }, none, 0, false),
        replayed(Warning { pick: 0 }, Fault::None, none, RemoveIdleOnDemand { pick: 0 }, 0, false),
        replayed(Warning { pick: 729746446425710224 }, Fault::Crash(3), none, ScaleIn { asg: 1, pick: 0 }, 0, false),
        replayed(Warning { pick: 2260344980270251979 }, Fault::Crash(0), none, none, 0, false),
        replayed(Launched { pick: 0, secs_ago: 0 }, Fault::Crash(4), ScaleIn { asg: 1, pick: 0 }, none, 0, true),
        replayed(
            CapacityError { group: 1 },
            Fault::Crash(9),
            ScaleIn { asg: 0, pick: 650116766785852996 },
            none,
            0,
            false,
        ),
    ];
    run(steps, true).unwrap();
}

/// Found by the random runs: a terminate without decrement in doubt, its instance gone.
#[test]
fn two_warnings_then_a_capacity_error() {
    use CaMove::{RemoveIdleOnDemand, ScaleIn, ScaleOut};
    use Kind::{CapacityError, Warning};
    let none = CaMove::None;
    let steps = vec![
        replayed(Warning { pick: 0 }, Fault::Ambiguous(2), ScaleOut { asg: 1, by: 1 }, none, 0, false),
        replayed(
            Warning { pick: 1168452238424064079 },
            Fault::Crash(4),
            none,
            RemoveIdleOnDemand { pick: 0 },
            0,
            false,
        ),
        replayed(
            CapacityError { group: 0 },
            Fault::Crash(7),
            ScaleIn { asg: 1, pick: 14045751229363969262 },
            none,
            0,
            false,
        ),
    ];
    run(steps, false).unwrap();
}
