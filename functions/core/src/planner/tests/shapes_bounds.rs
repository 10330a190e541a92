//! Review of `shapes` (issue 37): the planner's side of headroom in slots.

use super::*;
use crate::shape::{MixEntry, PodShape, ShapeMix, SlotState, WorkloadKind};

const GI: u64 = 1 << 30;

/// The headroom writes of a plan: (slot, shape, from, to).
fn writes(plan: &Plan) -> Vec<(usize, PodShape, Option<u32>, u32)> {
    plan.actions
        .iter()
        .filter_map(|a| match &a.kind {
            ActionKind::SetHeadroomReplicas { slot, shape, from, to, .. } => Some((*slot, shape.clone(), *from, *to)),
            _ => None,
        })
        .collect()
}

fn after(plan: &Plan, before: &[SlotState]) -> Vec<SlotState> {
    let mut slots = before.to_vec();
    for (slot, shape, _, to) in writes(plan) {
        let state = SlotState { slot, shape, replicas: Some(to) };
        match slots.iter_mut().find(|s| s.slot == slot) {
            Some(s) => *s = state,
            None => slots.push(state),
        }
    }
    slots.sort_by_key(|s| s.slot);
    slots
}

/// A mix of (shape, pods started) with no hours kept: `arrivals()` weighs them.
fn mix(shapes: &[(PodShape, u64)]) -> ShapeMix {
    ShapeMix {
        entries: shapes
            .iter()
            .map(|(shape, pods)| MixEntry {
                shape: shape.clone(),
                kind: WorkloadKind::LongRunning,
                weight_milli: pods * 1000,
                by_hour_milli: Vec::new(),
                waiting: 0,
                at: now(),
            })
            .collect(),
        reported_at: Some(now() - Duration::minutes(1)),
        unfit_reported_at: None,
    }
}

/// the +1 hysteresis (slots.rs:83-89) is meant for the split between shapes
/// moving; it applies to the one unit Deployment too (`fixed`, or `auto` before any
/// shape is reported, which is every pool until the forwarder reports shapes). A
/// headroom that falls by exactly one pod is never written: 11 running, 10 decided.
#[test]
fn a_one_pod_decrease_of_the_unit_deployment_is_written() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(4)).build();
    observed.demand = Some(demand(40_000, 0));
    observed.headroom = unit_slots(11);
    let p = run(&cfg, &PoolRecord::default(), &observed, &[], now());
    assert_eq!(p.headroom.unwrap().replicas, 10, "25 % of 40 CPU");
    assert_eq!(writes(&p), vec![(0, PodShape::new(1000, 2 * GI), Some(11), 10)], "the decision is applied");
}

/// the same hysteresis keeps the last pause pod for ever: with `min: 0` and no
/// demand left (or an override of 0 %), 1 pod stays running.
#[test]
fn the_last_pause_pod_goes_when_nothing_is_wanted() {
    let cfg = with(|c| c.replace("      min: 1\n", "      min: 0\n"));
    let mut observed = pool().spot("spot-a", sized(4)).build();
    observed.demand = Some(demand(0, 0));
    observed.headroom = unit_slots(1);
    let p = run(&cfg, &PoolRecord::default(), &observed, &[], now());
    assert_eq!(p.headroom.unwrap().replicas, 0);
    assert_eq!(writes(&p), vec![(0, PodShape::new(1000, 2 * GI), Some(1), 0)]);
}

/// docs/src/operations.md says `max` bounds the room too, "so the headroom
/// namespace's quota, written for `max` pods of `pod_cpu` / `pod_memory`, holds whatever
/// the shapes". Only the pod count is bounded (slots.rs:90-96): with max 10 (10 CPU /
/// 20Gi of quota for the pool), the 4 CPU / 14Gi training jobs get 3 pods,
/// 12 CPU / 42Gi; a memory-heavy shape gets 10 pods of 16Gi, 160Gi.
#[test]
fn the_room_held_stays_within_max_times_the_unit() {
    let mut cfg = config();
    cfg.pools[0].headroom.max = 10;
    let (max_cpu, max_memory) = (10 * 1000, 10 * 2 * GI);
    let mut over = Vec::new();
    for shape in [PodShape::new(4000, 14 * GI), PodShape::new(500, 16 * GI)] {
        let mut observed = pool().spot("spot-a", sized(4)).build();
        observed.demand = Some(demand(100_000, 0));
        observed.headroom = unit_slots(0);
        let record = PoolRecord { shapes: mix(&[(shape.clone(), 20)]), ..Default::default() };
        let p = run(&cfg, &record, &observed, &[], now());
        let held = after(&p, &observed.headroom);
        let cpu: u64 = held.iter().map(|s| u64::from(s.replicas.unwrap_or(0)) * s.shape.cpu_millis).sum();
        let memory: u64 = held.iter().map(|s| u64::from(s.replicas.unwrap_or(0)) * s.shape.memory_bytes).sum();
        if cpu > max_cpu || memory > max_memory {
            over.push(format!("{shape}: {cpu} m CPU / {} Gi held in {:?}", memory / GI, writes(&p)));
        }
    }
    assert!(over.is_empty(), "quota for max is 10 CPU / 20Gi: {over:#?}");
}

/// a shape at the 5 % threshold flips in and out of `choose` with each report
/// (no hysteresis on the threshold). With four shapes, in: C and D merge into D; out:
/// C stands alone. All three slots hold pods, so the new shape takes the slot of the
/// one gone: every pod of that Deployment is replaced, and again on the way back. A
/// 2 % move of the mix (D from 5.9 % to 4.0 % and back) replaces a Deployment twice.
#[test]
fn a_shape_hovering_at_five_percent_does_not_recreate_a_slot_each_time() {
    let cfg = config();
    let (a, b, c, d) = (
        PodShape::new(1000, 2 * GI),
        PodShape::new(2000, 8 * GI),
        PodShape::new(4000, 14 * GI),
        PodShape::new(4000, 16 * GI),
    );
    let mut observed = pool().spot("spot-a", sized(4)).build();
    observed.demand = Some(demand(100_000, 0));
    observed.headroom = unit_slots(0);
    let mut recreated = Vec::new();
    for (k, d_pods) in [60, 40, 60, 40].into_iter().enumerate() {
        let record = PoolRecord {
            shapes: mix(&[(a.clone(), 500), (b.clone(), 250), (c.clone(), 200), (d.clone(), d_pods)]),
            ..Default::default()
        };
        let at = now() + Duration::minutes(5 * k as i64);
        let p = run(&cfg, &record, &observed, &[], at);
        for (slot, shape, from, to) in writes(&p) {
            let was = observed.headroom.iter().find(|s| s.slot == slot);
            if k > 0 && was.is_some_and(|w| w.shape != shape && w.replicas.unwrap_or(0) > 0) && to > 0 {
                recreated.push(format!("run {k}: slot {slot} {} → {shape} ({from:?} → {to})", was.unwrap().shape));
            }
        }
        observed.headroom = after(&p, &observed.headroom);
    }
    assert!(recreated.is_empty(), "pods replaced as D hovers at 5 %: {recreated:#?}");
}

/// a pod shape whose requests are tiny in one resource (`memory: "128"`, bytes,
/// a common typo for 128Mi) makes `pods_for` ask for ~419 million pods; the cap loop
/// (slots.rs:92-96) then takes them off one at a time. With `memory: "1"` `pods_for`
/// saturates at u32::MAX and `s.pods + 1` (slots.rs:86) overflows (a panic in debug,
/// a wrap in release). Any tenant of the pool whose Job is 5 % of arrivals can do it.
#[test]
fn a_typo_d_memory_request_does_not_stall_the_reconcile() {
    for memory in [128, 1] {
        let cfg = config();
        let mut observed = pool().spot("spot-a", sized(4)).build();
        observed.demand = Some(demand(100_000, 0));
        observed.headroom = unit_slots(0);
        let record = PoolRecord { shapes: mix(&[(PodShape::new(100, memory), 20)]), ..Default::default() };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let p = std::panic::catch_unwind(|| run(&cfg, &record, &observed, &[], now()));
            let _ = tx.send(p.map(|p| writes(&p).iter().map(|w| w.3).sum::<u32>()).map_err(|_| "panicked"));
        });
        match rx.recv_timeout(std::time::Duration::from_secs(5)) {
            Ok(Ok(pods)) => assert!(pods <= 30, "memory {memory} B: {pods} pods, max is 30"),
            Ok(Err(why)) => panic!("memory {memory} B: the planner {why}"),
            Err(_) => panic!("memory {memory} B: the planner took more than 5 s"),
        }
    }
}
