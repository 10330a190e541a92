//! The `over_with_room` rule, from the pods the watch sees to the Pool Waits Measured
//! event: a first start past the pool's wait target counts when a Running pause pod of
//! the pool, at least the pod's size, held room at the time.

use std::time::Duration;

use ballast_core::config::Config;
use ballast_core::event::PoolWaitsDetail;
use ballast_kube::pools::PoolMatcher;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use crate::publisher::{Outgoing, Publisher, Timing};
use crate::state::{ClusterState, FirstStart, Kind};

const CREATED: &str = "2027-01-15T08:00:00Z";

fn config() -> Config {
    Config::from_yaml(
        r#"
cluster: demo
region: eu-west-1
state_table: ballast-state
pools:
  - name: general
    spot_asgs: [general-spot]
    on_demand_asg: general-od
    node_selector: {ballast.io/pool: general}
  - name: gpu
    spot_asgs: [gpu-spot]
    on_demand_asg: gpu-od
    node_selector: {ballast.io/pool: gpu}
"#,
    )
    .unwrap()
}

fn node(name: &str, pool: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "ballast.io/pool": pool } },
        "spec": { "providerID": format!("aws:///eu-west-1a/i-{name}") },
        "status": { "conditions": [{ "type": "Ready", "status": "True" }] },
    }))
    .unwrap()
}

/// Both pools with a 10 s target (none for `targets: false`), nodes g1, g2 (general) and
/// x1 (gpu), listed.
fn cluster(targets: bool) -> ClusterState {
    let target = targets.then_some(Duration::from_secs(10));
    let mut s = ClusterState::new(PoolMatcher::new(&config().pools)).with_wait_targets(vec![target, target]);
    s.begin_list(Kind::Nodes);
    for (name, pool) in [("g1", "general"), ("g2", "general"), ("x1", "gpu")] {
        s.apply_node(&node(name, pool));
    }
    s.end_list(Kind::Nodes);
    s.begin_list(Kind::Pods);
    s.end_list(Kind::Pods);
    s
}

fn uid(n: u32) -> String {
    format!("00000000-0000-0000-0000-{n:012}")
}

fn requests(cpu: &str, memory: &str, gpus: Option<u32>) -> Value {
    let mut r = json!({ "cpu": cpu, "memory": memory });
    if let Some(g) = gpus {
        r["nvidia.com/gpu"] = json!(g.to_string());
    }
    r
}

/// [`CREATED`] moved by `secs`.
fn at(secs: i64) -> DateTime<Utc> {
    CREATED.parse::<DateTime<Utc>>().unwrap() + chrono::Duration::seconds(secs)
}

/// A pause pod of `pool` on `node` (none: pending) in `phase`, bound a minute before the
/// workload pods are created.
fn pause(n: u32, pool: &str, node: Option<&str>, phase: &str, requests: Value) -> Pod {
    pause_bound(n, pool, node, phase, -60, requests)
}

/// A pause pod bound `bound` seconds after [`CREATED`].
fn pause_bound(n: u32, pool: &str, node: Option<&str>, phase: &str, bound: i64, requests: Value) -> Pod {
    let scheduled = match node {
        Some(_) => json!([{ "type": "PodScheduled", "status": "True", "lastTransitionTime": at(bound) }]),
        None => json!([]),
    };
    serde_json::from_value(json!({
        "metadata": { "name": format!("pause-{n}"), "namespace": "ballast-headroom", "uid": uid(n),
                      "labels": { "ballast.io/headroom": "true", "ballast.io/pool": pool },
                      "creationTimestamp": at(bound - 1) },
        "spec": { "nodeName": node, "nodeSelector": { "ballast.io/pool": pool },
                  "containers": [{ "name": "pause", "resources": { "requests": requests } }] },
        "status": { "phase": phase, "conditions": scheduled },
    }))
    .unwrap()
}

/// A workload pod created at [`CREATED`] and bound to `node` `waited` seconds later.
fn started(n: u32, node: &str, waited: u32, requests: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": format!("web-{n}"), "namespace": "default", "uid": uid(n),
                      "creationTimestamp": CREATED },
        "spec": { "nodeName": node, "containers": [{ "name": "app", "resources": { "requests": requests } }] },
        "status": { "phase": "Pending", "conditions": [{ "type": "PodScheduled", "status": "True",
            "lastTransitionTime": at(waited.into()) }] },
    }))
    .unwrap()
}

/// Whether the pod's first start counted as over with room.
fn with_room(s: &mut ClusterState, pod: &Pod) -> bool {
    s.apply_pod(pod);
    let starts = s.take_first_start_waits();
    assert_eq!(starts.len(), 1, "{starts:?}");
    starts[0].with_room
}

#[test]
fn a_wait_past_the_target_beside_running_room_of_its_size_counts() {
    let mut s = cluster(true);
    s.apply_pod(&pause(1, "general", Some("g1"), "Running", requests("1", "2Gi", None)));
    assert!(with_room(&mut s, &started(10, "g2", 30, requests("500m", "1Gi", None))), "30 s past a 10 s target");
    assert!(with_room(&mut s, &started(11, "g2", 30, requests("1", "2Gi", None))), "exactly the pause pod's size");
    assert!(!with_room(&mut s, &started(12, "g2", 30, requests("1500m", "1Gi", None))), "more CPU than it holds");
    assert!(!with_room(&mut s, &started(13, "g2", 30, requests("500m", "3Gi", None))), "more memory");
    assert!(!with_room(&mut s, &started(14, "g2", 10, requests("500m", "1Gi", None))), "at the target is not over");
    assert!(!with_room(&mut s, &started(15, "g2", 2, requests("500m", "1Gi", None))), "under the target");
}

#[test]
fn no_room_is_claimed_without_a_running_pause_pod_of_the_pool() {
    let mut s = cluster(true);
    let small = || requests("500m", "1Gi", None);
    assert!(!with_room(&mut s, &started(10, "g2", 30, small())), "no pause pod at all");
    s.apply_pod(&pause(1, "general", None, "Pending", requests("1", "2Gi", None)));
    assert!(!with_room(&mut s, &started(11, "g2", 30, small())), "a pending pause pod holds nothing");
    s.apply_pod(&pause(1, "general", Some("g1"), "Pending", requests("1", "2Gi", None)));
    assert!(!with_room(&mut s, &started(12, "g2", 30, small())), "bound, not Running yet");
    s.apply_pod(&pause(2, "gpu", Some("x1"), "Running", requests("4", "16Gi", None)));
    assert!(!with_room(&mut s, &started(13, "g2", 30, small())), "another pool's room");
    s.apply_pod(&pause(1, "general", Some("g1"), "Running", requests("1", "2Gi", None)));
    assert!(with_room(&mut s, &started(14, "g2", 30, small())));
    // Preempted or scaled down: gone with its pod.
    s.delete_pod(&pause(1, "general", Some("g1"), "Running", requests("1", "2Gi", None)));
    assert!(!with_room(&mut s, &started(15, "g2", 30, small())), "deleted");
    // A relist that no longer shows it (deleted while the watch was down).
    s.apply_pod(&pause(1, "general", Some("g1"), "Running", requests("1", "2Gi", None)));
    s.begin_list(Kind::Pods);
    s.end_list(Kind::Pods);
    assert!(!with_room(&mut s, &started(16, "g2", 30, small())), "not in the relist");
}

#[test]
fn room_that_came_after_the_target_passed_says_nothing_of_the_wait() {
    // A scale-up: the pod waited 120 s for a node; pause pods evicted for the burst were
    // bound on that node before it (the scheduler's backoff), Running when it binds.
    let mut s = cluster(true);
    s.apply_pod(&pause_bound(1, "general", Some("g2"), "Running", 100, requests("1", "2Gi", None)));
    assert!(
        !with_room(&mut s, &started(10, "g2", 120, requests("500m", "1Gi", None))),
        "bound at 100 s, target at 10 s"
    );
    // Bound exactly as the wait reached the target: held by then.
    s.apply_pod(&pause_bound(2, "general", Some("g1"), "Running", 10, requests("1", "2Gi", None)));
    assert!(with_room(&mut s, &started(11, "g2", 120, requests("500m", "1Gi", None))));
}

#[test]
fn gpus_and_other_extended_resources_must_be_held_too() {
    let mut s = cluster(true);
    s.apply_pod(&pause(1, "gpu", Some("x1"), "Running", requests("4", "14Gi", None)));
    assert!(!with_room(&mut s, &started(10, "x1", 60, requests("2", "8Gi", Some(1)))), "no GPU in the pause pod");
    s.apply_pod(&pause(2, "gpu", Some("x1"), "Running", requests("4", "14Gi", Some(1))));
    assert!(with_room(&mut s, &started(11, "x1", 60, requests("2", "8Gi", Some(1)))));
    assert!(!with_room(&mut s, &started(12, "x1", 60, requests("2", "8Gi", Some(2)))), "two GPUs");
    let mut hugepages = requests("2", "8Gi", None);
    hugepages["hugepages-2Mi"] = json!("1Gi");
    assert!(!with_room(&mut s, &started(13, "x1", 60, hugepages)), "hugepages no pause pod holds");
}

#[test]
fn without_a_wait_target_nothing_is_over() {
    let mut s = cluster(false);
    s.apply_pod(&pause(1, "general", Some("g1"), "Running", requests("1", "2Gi", None)));
    assert!(!with_room(&mut s, &started(10, "g2", 300, requests("500m", "1Gi", None))));
}

#[test]
fn the_window_publishes_how_many_waited_with_room() {
    let mut s = cluster(true);
    s.apply_pod(&pause(1, "general", Some("g1"), "Running", requests("1", "2Gi", None)));
    let mut starts: Vec<FirstStart> = Vec::new();
    for (n, waited, cpu) in [(10, 30, "500m"), (11, 40, "500m"), (12, 30, "2"), (13, 1, "500m")] {
        s.apply_pod(&started(n, "g2", waited, requests(cpu, "1Gi", None)));
        starts.extend(s.take_first_start_waits());
    }
    let mut publisher = Publisher::new(Timing::default(), 2);
    publisher.waits_measured(&starts, at(0));
    let out = publisher.tick(&mut s, at(301));
    let waits: Vec<&PoolWaitsDetail> =
        out.iter().filter_map(|o| if let Outgoing::PoolWaits(w) = o { Some(w) } else { None }).collect();
    assert_eq!(waits.len(), 1, "{out:?}");
    assert_eq!((waits[0].pods, waits[0].over_with_room, waits[0].pods_over(10.0)), (4, 2, Some(3)));
    let json: Value = serde_json::from_str(&Outgoing::PoolWaits(waits[0].clone()).detail_json()).unwrap();
    assert_eq!(json["over_with_room"], 2);
    // A window where none waited with room says nothing of it (as an older forwarder).
    publisher.waits_measured(&[FirstStart { pool: 0, seconds: 1.0, with_room: false }], at(302));
    let quiet = publisher.tick(&mut s, at(700));
    let Some(Outgoing::PoolWaits(w)) = quiet.iter().find(|o| matches!(o, Outgoing::PoolWaits(_))) else {
        panic!("{quiet:?}")
    };
    assert!(!Outgoing::PoolWaits(w.clone()).detail_json().contains("over_with_room"));
}
