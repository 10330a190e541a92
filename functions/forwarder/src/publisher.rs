//! When the forwarder speaks: its four events (demand, unschedulable pods, node
//! lifecycle, each pool's first-start waits per window), debounced so that churn does
//! not become a flood. Pure: the caller passes the state and the time.

use std::time::Duration;

use ballast_core::event::{EventKind, NodeLifecycleDetail, PodsUnschedulableDetail, PoolDemandDetail, PoolWaitsDetail};
use ballast_core::forwarder::{DemandTiming, Requests, UnschedulableTiming};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::state::{ClusterState, FirstStart, PoolTotals};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Outgoing {
    PoolDemand(PoolDemandDetail),
    PodsUnschedulable(PodsUnschedulableDetail),
    NodeLifecycle(NodeLifecycleDetail),
    PoolWaits(PoolWaitsDetail),
}

impl Outgoing {
    /// The kind Ballast parses the event as.
    pub fn kind(&self) -> EventKind {
        match self {
            Outgoing::PoolDemand(_) => EventKind::PoolDemandChanged,
            Outgoing::PodsUnschedulable(_) => EventKind::PodsUnschedulable,
            Outgoing::NodeLifecycle(_) => EventKind::NodeLifecycle,
            Outgoing::PoolWaits(_) => EventKind::PoolWaitsMeasured,
        }
    }

    /// The envelope's `detail-type`: the kind's.
    pub fn detail_type(&self) -> &'static str {
        self.kind().detail_type()
    }

    pub fn detail_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// At most one demand event per pool within this window.
    pub debounce: Duration,
    /// A demand event per pool at least this often, changed or not.
    pub heartbeat: Duration,
    /// Demand must move by more than this (percent of CPU, memory or pods) to count.
    pub threshold_percent: u32,
    /// At most one unschedulable event per pool within this window (the first is at once).
    pub unschedulable_every: Duration,
    /// The window over which first-start waits are summed up per pool (a wait target's
    /// correction is taken from each).
    pub waits_every: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        let demand = DemandTiming::default();
        Timing {
            debounce: demand.debounce,
            heartbeat: demand.heartbeat,
            threshold_percent: demand.threshold_percent,
            unschedulable_every: UnschedulableTiming::default().every,
            waits_every: Duration::from_secs(300),
        }
    }
}

impl Timing {
    /// The shared rule for demand events (the simulator's forwarder follows it too).
    fn demand(&self) -> DemandTiming {
        DemandTiming { debounce: self.debounce, heartbeat: self.heartbeat, threshold_percent: self.threshold_percent }
    }

    fn unschedulable(&self) -> UnschedulableTiming {
        UnschedulableTiming { every: self.unschedulable_every }
    }
}

/// A pool's first starts in the window open.
#[derive(Debug, Clone, Default)]
struct Window {
    /// Their waits, in seconds.
    seconds: Vec<f64>,
    /// How many waited past the target with room held (`FirstStart::with_room`).
    over_with_room: u32,
}

#[derive(Debug, Clone, Copy)]
struct Sent<T> {
    what: T,
    at: DateTime<Utc>,
}

pub struct Publisher {
    timing: Timing,
    demand: Vec<Option<Sent<PoolTotals>>>,
    /// The newest unschedulable-since already reported, per pool.
    unschedulable: Vec<Option<Sent<DateTime<Utc>>>>,
    /// Per pool: the first starts of the window open since `Sent::at`.
    waits: Vec<Option<Sent<Window>>>,
    /// Per pool: whether its waits are published (only a pool with a wait target uses them).
    waits_wanted: Vec<bool>,
}

/// Waits held per pool and window: a scale-up of this many pods within five minutes is
/// measured well enough by them.
const MAX_WAITS_PER_WINDOW: usize = 16_384;

fn requests(totals: &PoolTotals) -> Requests {
    Requests { cpu_millis: totals.cpu_millis, memory_bytes: totals.memory_bytes, pods: totals.pods }
}

impl Publisher {
    pub fn new(timing: Timing, pools: usize) -> Publisher {
        Publisher {
            timing,
            demand: vec![None; pools],
            unschedulable: vec![None; pools],
            waits: vec![None; pools],
            waits_wanted: vec![true; pools],
        }
    }

    /// Publishes waits only for the pools `wanted` marks (those with a wait target).
    pub fn waits_only_for(mut self, wanted: Vec<bool>) -> Publisher {
        self.waits_wanted = wanted;
        self
    }

    /// Takes in first starts measured since the last call.
    pub fn waits_measured(&mut self, waits: &[FirstStart], now: DateTime<Utc>) {
        for start in waits {
            let pool = usize::from(start.pool);
            if !self.waits_wanted.get(pool).copied().unwrap_or(false) {
                continue;
            }
            let Some(slot) = self.waits.get_mut(pool) else { continue };
            let window = &mut slot.get_or_insert_with(|| Sent { what: Window::default(), at: now }).what;
            if window.seconds.len() < MAX_WAITS_PER_WINDOW {
                window.seconds.push(start.seconds);
                window.over_with_room += u32::from(start.with_room);
            }
        }
    }

    /// Events that were never handed to the sender: demand and unschedulable counts are
    /// published afresh at the next tick (a dropped change would wait for the heartbeat),
    /// node changes go back to the state (bounded), waits windows are lost and counted.
    pub fn unsent(&mut self, state: &mut ClusterState, dropped: Vec<Outgoing>) {
        let mut nodes = Vec::new();
        for event in dropped {
            match event {
                Outgoing::PoolDemand(d) => {
                    if let Some(p) = state.pool_named(&d.pool) {
                        self.demand[p] = None;
                        state.restore_shapes(p as u16, &d.shapes);
                    }
                }
                Outgoing::PodsUnschedulable(d) => {
                    if let Some(p) = state.pool_named(&d.pool) {
                        self.unschedulable[p] = None;
                    }
                }
                Outgoing::NodeLifecycle(change) => nodes.push(change),
                Outgoing::PoolWaits(_) => {}
            }
        }
        state.requeue_node_changes(nodes);
    }

    /// What to publish now.
    pub fn tick(&mut self, state: &mut ClusterState, now: DateTime<Utc>) -> Vec<Outgoing> {
        // Stamped now, a tick after the watch saw it: a retried send keeps the time.
        let mut out: Vec<Outgoing> = state
            .take_node_changes()
            .into_iter()
            // A change held back while the sender was behind keeps the time it was seen:
            // the learner times launch to Ready from it.
            .map(|change| {
                Outgoing::NodeLifecycle(NodeLifecycleDetail { observed_at: change.observed_at.or(Some(now)), ..change })
            })
            .collect();
        if !state.synced() {
            // Half-listed totals would be wrong, not early.
            return out;
        }
        let elapsed = |at: DateTime<Utc>| (now - at).to_std().unwrap_or_default();
        for (pool, totals) in state.totals().into_iter().enumerate() {
            let last = self.demand[pool].as_ref().map(|last| (requests(&last.what), elapsed(last.at)));
            let due = self.timing.demand().due(last, &requests(&totals));
            if due {
                self.demand[pool] = Some(Sent { what: totals, at: now });
                out.push(Outgoing::PoolDemand(PoolDemandDetail {
                    // The pods that started since the previous report, and those waiting.
                    shapes: state.take_shapes(pool as u16),
                    pool: state.pool_name(pool as u16).to_string(),
                    cpu_millis: totals.cpu_millis,
                    memory_bytes: totals.memory_bytes,
                    pods: totals.pods,
                    nodes: totals.nodes,
                    observed_at: now,
                }));
            }
        }
        for (pool, window) in self.waits.iter_mut().enumerate() {
            let Some(open) = window.as_mut() else { continue };
            if elapsed(open.at) < self.timing.waits_every {
                continue;
            }
            let Window { seconds: mut waits, over_with_room } = std::mem::take(&mut open.what);
            let window_start = std::mem::replace(&mut open.at, now);
            let pool_name = state.pool_name(pool as u16);
            out.extend(
                PoolWaitsDetail::summing(pool_name, window_start, now, &mut waits)
                    .map(|detail| Outgoing::PoolWaits(PoolWaitsDetail { over_with_room, ..detail })),
            );
        }
        for (pool, stuck) in state.unschedulable().into_iter().enumerate() {
            let Some(stuck) = stuck else { continue };
            let last = self.unschedulable[pool].as_ref().map(|l| (l.what, elapsed(l.at)));
            let due = self.timing.unschedulable().due(last, stuck.newest_since);
            if due {
                self.unschedulable[pool] = Some(Sent { what: stuck.newest_since, at: now });
                out.push(Outgoing::PodsUnschedulable(PodsUnschedulableDetail {
                    pool: state.pool_name(pool as u16).to_string(),
                    count: stuck.count,
                    cpu_millis: stuck.cpu_millis,
                    memory_bytes: stuck.memory_bytes,
                    oldest_pending_since: stuck.oldest_since,
                }));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_core::config::Config;
    use ballast_kube::pools::PoolMatcher;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    fn state() -> ClusterState {
        let yaml = r#"
cluster: demo
region: eu-west-1
state_table: ballast-state
pools:
  - name: general
    spot_asgs: [general-spot]
    on_demand_asg: general-od
    node_selector: {ballast.io/pool: general}
"#;
        ClusterState::new(PoolMatcher::new(&Config::from_yaml(yaml).unwrap().pools))
    }

    fn node(name: &str, ready: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { "ballast.io/pool": "general", "eks.amazonaws.com/capacityType": "SPOT" } },
            "spec": { "providerID": format!("aws:///eu-west-1a/i-{name}") },
            "status": { "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" } }] },
        }))
        .unwrap()
    }

    fn pod(uid: u32, node: Option<&str>, cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": format!("p{uid}"), "namespace": "default", "uid": format!("00000000-0000-0000-0000-{uid:012}") },
            "spec": { "nodeName": node, "nodeSelector": { "ballast.io/pool": "general" },
                      "containers": [{ "name": "c", "resources": { "requests": { "cpu": cpu, "memory": "1Gi" } } }] },
        }))
        .unwrap()
    }

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn start(pool: u16, seconds: f64) -> FirstStart {
        FirstStart { pool, seconds, with_room: false }
    }

    fn synced() -> ClusterState {
        let mut s = state();
        s.begin_list(crate::state::Kind::Nodes);
        s.apply_node(&node("n1", true));
        s.end_list(crate::state::Kind::Nodes);
        s.begin_list(crate::state::Kind::Pods);
        s.apply_pod(&pod(1, Some("n1"), "1"));
        s.end_list(crate::state::Kind::Pods);
        s
    }

    #[test]
    fn each_pools_first_start_waits_are_summed_up_once_a_window() {
        let mut s = synced();
        let mut p = Publisher::new(Timing::default(), 1);
        let waits_of = |out: Vec<Outgoing>| -> Vec<PoolWaitsDetail> {
            out.into_iter().filter_map(|o| if let Outgoing::PoolWaits(w) = o { Some(w) } else { None }).collect()
        };
        assert!(waits_of(p.tick(&mut s, at(0))).is_empty(), "no pod started: nothing to say");
        // 20 pods: 19 quick ones and one that waited for a node.
        let waits: Vec<FirstStart> =
            (0..19).map(|i| start(0, 1.0 + f64::from(i) / 10.0)).chain([start(0, 95.0)]).collect();
        p.waits_measured(&waits, at(10));
        assert!(waits_of(p.tick(&mut s, at(200))).is_empty(), "the window is still open");
        let out = waits_of(p.tick(&mut s, at(310)));
        assert_eq!(out.len(), 1);
        let w = &out[0];
        assert_eq!((w.pool.as_str(), w.pods, w.window_start, w.window_end), ("general", 20, at(10), at(310)));
        // Nearest rank: the 19th of 20 is the slowest quick one; the node wait is the max.
        assert_eq!((w.p95_seconds, w.max_seconds), (2.8, 95.0));
        assert!(waits_of(p.tick(&mut s, at(700))).is_empty(), "nothing started since");
        p.waits_measured(&[start(0, 3.0), start(7, 1.0)], at(710));
        let next = waits_of(p.tick(&mut s, at(1100)));
        assert_eq!((next[0].pods, next[0].window_start, next[0].p95_seconds), (1, at(700), 3.0), "pool 7 is unknown");
        // A pool without a wait target: nothing to publish.
        let mut quiet = Publisher::new(Timing::default(), 1).waits_only_for(vec![false]);
        quiet.waits_measured(&waits, at(10));
        assert!(waits_of(quiet.tick(&mut s, at(400))).is_empty());
    }

    fn demand_of(out: Vec<Outgoing>) -> PoolDemandDetail {
        let mut demand = out.into_iter().filter_map(|o| if let Outgoing::PoolDemand(d) = o { Some(d) } else { None });
        demand.next().expect("a demand report")
    }

    #[test]
    fn demand_reports_carry_the_shapes_of_pods_started_since_the_last_and_of_those_waiting() {
        use ballast_core::shape::{PodShape, ShapeCount, WorkloadKind};
        let mut s = synced();
        let mut p = Publisher::new(Timing::default(), 1);
        assert!(demand_of(p.tick(&mut s, at(0))).shapes.is_empty(), "pod 1 ran before the forwarder started");
        // A Job's GPU pod waits; a web pod waits then is bound; another is new and bound.
        let mut job = pod(2, None, "4");
        job.metadata.owner_references = serde_json::from_value(json!([{ "apiVersion": "batch/v1", "kind": "Job",
            "name": "train", "uid": "u", "controller": true }]))
        .unwrap();
        let requests = job.spec.as_mut().unwrap().containers[0].resources.as_mut().unwrap().requests.as_mut().unwrap();
        requests.insert("nvidia.com/gpu".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()));
        s.apply_pod(&job);
        s.apply_pod(&pod(3, None, "500m"));
        s.apply_pod(&pod(3, Some("n1"), "500m"));
        s.apply_pod(&pod(4, Some("n1"), "500m"));
        let mut gpu = PodShape::new(4000, 1 << 30);
        gpu.extended.insert("nvidia.com/gpu".into(), 1);
        let web = PodShape::new(500, 1 << 30);
        let shapes = |started_web, started_job, waiting_job| {
            let mut v = Vec::new();
            if started_web > 0 {
                v.push(ShapeCount {
                    shape: web.clone(),
                    kind: WorkloadKind::LongRunning,
                    started: started_web,
                    waiting: 0,
                });
            }
            if started_job + waiting_job > 0 {
                v.push(ShapeCount {
                    shape: gpu.clone(),
                    kind: WorkloadKind::Job,
                    started: started_job,
                    waiting: waiting_job,
                });
            }
            v
        };
        let report = demand_of(p.tick(&mut s, at(30)));
        assert_eq!(report.shapes, shapes(2, 0, 1));
        assert!(ballast_core::shape::check_report(&report.shapes).is_ok());
        // The heartbeat: nothing started since, the Job's pod still waits.
        assert_eq!(demand_of(p.tick(&mut s, at(330))).shapes, shapes(0, 0, 1));
        // The Job's pod is bound; the report that says so is never sent: the next says it.
        let mut bound = job.clone();
        bound.spec.as_mut().unwrap().node_name = Some("n1".into());
        s.apply_pod(&bound);
        let lost = p.tick(&mut s, at(660));
        assert_eq!(demand_of(lost.clone()).shapes, shapes(0, 1, 0));
        p.unsent(&mut s, lost);
        assert_eq!(demand_of(p.tick(&mut s, at(661))).shapes, shapes(0, 1, 0));
        // Gone while waiting, or bound and then seen again: nothing more to say.
        s.apply_pod(&bound);
        let mut waiting = pod(5, None, "500m");
        s.apply_pod(&waiting);
        waiting.status = serde_json::from_value(json!({ "phase": "Failed" })).unwrap();
        s.apply_pod(&waiting);
        assert!(demand_of(p.tick(&mut s, at(1000))).shapes.is_empty());
    }

    #[test]
    fn nothing_until_both_lists_are_in_then_demand_at_once() {
        let mut s = state();
        let mut p = Publisher::new(Timing::default(), 1);
        s.begin_list(crate::state::Kind::Pods);
        s.apply_pod(&pod(1, Some("n1"), "1"));
        s.end_list(crate::state::Kind::Pods);
        assert!(p.tick(&mut s, at(0)).is_empty(), "nodes not listed yet");
        s.begin_list(crate::state::Kind::Nodes);
        s.apply_node(&node("n1", true));
        s.end_list(crate::state::Kind::Nodes);
        let out = p.tick(&mut s, at(1));
        assert_eq!(out.len(), 1, "no node events for the initial list: {out:?}");
        let Outgoing::PoolDemand(d) = &out[0] else { panic!("{out:?}") };
        assert_eq!((d.cpu_millis, d.memory_bytes, d.pods, d.nodes), (1000, 1 << 30, 1, 1));
    }

    /// `pod` created at `created` and, with `scheduled`, bound by the scheduler then.
    fn scheduled_pod(uid: u32, created: &str, scheduled: Option<&str>) -> Pod {
        let mut p = pod(uid, scheduled.map(|_| "n1"), "1");
        p.metadata.creation_timestamp = serde_json::from_value(json!(created)).unwrap();
        if let Some(at) = scheduled {
            p.status = serde_json::from_value(json!({ "phase": "Pending", "conditions": [{ "type": "PodScheduled",
                "status": "True", "lastTransitionTime": at }] }))
            .unwrap();
        }
        p
    }

    #[test]
    fn a_pods_first_start_wait_counts_once_for_its_pool() {
        let mut s = state();
        s.begin_list(crate::state::Kind::Nodes);
        s.apply_node(&node("n1", true));
        s.end_list(crate::state::Kind::Nodes);
        s.begin_list(crate::state::Kind::Pods);
        // Bound before the forwarder started: not a wait it saw.
        s.apply_pod(&scheduled_pod(1, "2027-01-15T07:00:00Z", Some("2027-01-15T07:00:03Z")));
        s.end_list(crate::state::Kind::Pods);
        assert!(s.take_first_start_waits().is_empty());
        // Pending, then bound 7.5 s after its creation.
        s.apply_pod(&scheduled_pod(2, "2027-01-15T08:00:00Z", None));
        assert!(s.take_first_start_waits().is_empty(), "still pending");
        s.apply_pod(&scheduled_pod(2, "2027-01-15T08:00:00Z", Some("2027-01-15T08:00:07.5Z")));
        assert_eq!(s.take_first_start_waits(), [start(0, 7.5)]);
        // Seen bound again (a status update, a relist): counted once.
        s.apply_pod(&scheduled_pod(2, "2027-01-15T08:00:00Z", Some("2027-01-15T08:00:07.5Z")));
        s.begin_list(crate::state::Kind::Pods);
        s.apply_pod(&scheduled_pod(2, "2027-01-15T08:00:00Z", Some("2027-01-15T08:00:07.5Z")));
        s.end_list(crate::state::Kind::Pods);
        assert!(s.take_first_start_waits().is_empty());
        // New since the first list and first seen bound: counted.
        s.apply_pod(&scheduled_pod(3, "2027-01-15T09:00:00Z", Some("2027-01-15T09:00:01Z")));
        // Given its node at creation (no scheduler, no PodScheduled condition): not counted.
        s.apply_pod(&pod(4, Some("n1"), "1"));
        assert_eq!(s.take_first_start_waits(), [start(0, 1.0)]);
    }

    #[test]
    fn what_was_never_sent_goes_again_and_node_changes_are_held_within_a_bound() {
        let mut s = synced();
        let mut p = Publisher::new(Timing::default(), 1);
        let first = p.tick(&mut s, at(0));
        assert!(first.iter().any(|e| matches!(e, Outgoing::PoolDemand(_))), "{first:?}");
        assert!(p.tick(&mut s, at(40)).is_empty(), "sent: nothing new before the heartbeat");
        // The sender was too far behind to take it: the demand goes at the next tick.
        p.unsent(&mut s, first);
        let again = p.tick(&mut s, at(41));
        assert_eq!(again.iter().filter(|e| matches!(e, Outgoing::PoolDemand(_))).count(), 1, "{again:?}");
        // Node changes come back before newer ones, the newest kept, each with the time it
        // was first seen (the learner times launch to Ready from it).
        s.apply_node(&node("n2", true));
        let lifecycle = |out: Vec<Outgoing>| -> Vec<Outgoing> {
            out.into_iter().filter(|e| matches!(e, Outgoing::NodeLifecycle(_))).collect()
        };
        let changes = lifecycle(p.tick(&mut s, at(42)));
        assert!(!changes.is_empty(), "n2 joined");
        p.unsent(&mut s, changes.clone());
        assert_eq!(lifecycle(p.tick(&mut s, at(300))), changes, "seen at 42, not at 300");
        let many: Vec<Outgoing> = (0..crate::state::MAX_QUEUED_NODE_CHANGES + 10).map(|_| changes[0].clone()).collect();
        p.unsent(&mut s, many);
        assert_eq!(s.take_node_changes().len(), crate::state::MAX_QUEUED_NODE_CHANGES);
    }

    #[test]
    fn demand_is_debounced_and_a_heartbeat_repeats_it() {
        let mut s = synced();
        let mut p = Publisher::new(Timing::default(), 1);
        assert_eq!(p.tick(&mut s, at(0)).len(), 1);
        for i in 2..50 {
            s.apply_pod(&pod(i, Some("n1"), "1"));
        }
        assert!(p.tick(&mut s, at(10)).is_empty(), "within the debounce window");
        assert_eq!(p.tick(&mut s, at(30)).len(), 1, "window over, demand moved");
        assert!(p.tick(&mut s, at(100)).is_empty(), "no change, no heartbeat yet");
        s.apply_pod(&pod(50, Some("n1"), "10m"));
        assert!(p.tick(&mut s, at(200)).is_empty(), "a move below the threshold waits for the heartbeat");
        assert_eq!(p.tick(&mut s, at(330)).len(), 1, "heartbeat");
    }

    #[test]
    fn unschedulable_pods_are_reported_at_once_and_again_only_when_new_ones_come() {
        let mut s = synced();
        let mut p = Publisher::new(Timing::default(), 1);
        p.tick(&mut s, at(0));
        let mut stuck = pod(7, None, "2");
        stuck.status = serde_json::from_value(json!({ "phase": "Pending", "conditions": [{ "type": "PodScheduled",
            "status": "False", "reason": "Unschedulable", "lastTransitionTime": "2027-01-15T08:00:05Z" }] }))
        .unwrap();
        s.apply_pod(&stuck);
        let out = p.tick(&mut s, at(1));
        let Some(Outgoing::PodsUnschedulable(u)) = out.iter().find(|o| matches!(o, Outgoing::PodsUnschedulable(_)))
        else {
            panic!("{out:?}")
        };
        assert_eq!((u.count, u.cpu_millis), (1, 2000));
        assert!(p.tick(&mut s, at(20)).iter().all(|o| !matches!(o, Outgoing::PodsUnschedulable(_))), "same pods");
    }

    #[test]
    fn a_pending_pod_listed_before_the_nodes_is_placed_again_once_they_are_known() {
        let mut s = state();
        s.begin_list(crate::state::Kind::Pods);
        let mut arm = pod(9, None, "1");
        arm.spec.as_mut().unwrap().node_selector =
            Some([("kubernetes.io/arch".to_string(), "arm64".to_string())].into_iter().collect());
        s.apply_pod(&arm);
        s.end_list(crate::state::Kind::Pods);
        assert_eq!(s.totals()[0].pods, 0, "nothing known says the pool is arm64");
        let mut n = node("n1", true);
        n.metadata.labels.as_mut().unwrap().insert("kubernetes.io/arch".into(), "arm64".into());
        s.begin_list(crate::state::Kind::Nodes);
        s.apply_node(&n);
        s.end_list(crate::state::Kind::Nodes);
        assert_eq!(s.totals()[0].pods, 1, "the pool's nodes are arm64: the pod waits for this pool");
    }

    #[test]
    fn node_changes_after_the_initial_list_and_across_a_relist() {
        let mut s = synced();
        let mut p = Publisher::new(Timing::default(), 1);
        p.tick(&mut s, at(0));
        s.apply_node(&node("n1", false));
        s.apply_node(&node("n2", true));
        let kinds = |out: Vec<Outgoing>| -> Vec<(String, String)> {
            out.into_iter()
                .filter_map(|o| match o {
                    Outgoing::NodeLifecycle(n) => {
                        Some((n.node, serde_json::to_value(n.condition).unwrap().as_str().unwrap().to_string()))
                    }
                    _ => None,
                })
                .collect()
        };
        let seen = kinds(p.tick(&mut s, at(1)));
        let expected = [("n1", "not_ready"), ("n2", "joined"), ("n2", "ready")];
        assert_eq!(seen, expected.map(|(a, b)| (a.to_string(), b.to_string())));
        // A relist (after 410 Gone) that no longer shows n1: it left while we were away.
        s.begin_list(crate::state::Kind::Nodes);
        s.apply_node(&node("n2", true));
        s.end_list(crate::state::Kind::Nodes);
        assert_eq!(kinds(p.tick(&mut s, at(2))), vec![("n1".to_string(), "left".to_string())]);
        // Its pod no longer counts.
        assert_eq!(s.totals()[0].pods, 0);
    }
}
