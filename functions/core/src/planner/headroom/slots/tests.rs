//! Slots: which running Deployment a shape keeps, and pause pods that hold room for
//! several pods, with the flapping each could cause.

use super::*;

const GI: u64 = 1 << 30;

/// The planner tests' pool (1 CPU / 2Gi pause pods) with `max` pause pods.
fn cfg(max: u32) -> HeadroomConfig {
    let mut h = crate::planner::tests::config().pools[0].headroom.clone();
    h.max = max;
    h
}

fn slot(shape: &PodShape, pods: u32) -> Slots {
    Slots { shape: shape.clone(), pods, serves: String::new() }
}

fn running(slot: usize, shape: &PodShape, replicas: u32) -> SlotState {
    SlotState { slot, shape: shape.clone(), replicas: Some(replicas) }
}

/// Before b2cae45 a shape kept the Deployment running exactly its shape. Now the
/// first running slot whose shape is *any* multiple of it wins: here the slot of a
/// shape (2 CPU / 4Gi) just dropped from the mix. Every pod of slot 0 is replaced by
/// the 1 CPU / 2Gi shape and slot 1 (already running it) goes to 0: no coarsening
/// involved (k = 1 everywhere).
#[test]
fn a_shape_keeps_the_slot_running_it_exactly_before_one_of_a_multiple() {
    let small = PodShape::new(1000, 2 * GI);
    let dropped = PodShape::new(2000, 4 * GI);
    let out = assign(vec![slot(&small, 10)], &[running(0, &dropped, 5), running(1, &small, 10)]);
    assert!(out[0].is_none() && out[1].as_ref().is_some_and(|s| s.shape == small), "{out:?}");
}

/// A shape of devices only (a pod asking `nvidia.com/gpu: 1` and no CPU or memory
/// request) is not a multiple of itself, so it never keeps its own slot: it moves
/// to an empty slot every run (slot 0 -> 1 -> 0 ...), replacing every GPU pause pod.
#[test]
fn a_devices_only_shape_keeps_its_slot() {
    let mut gpu = PodShape::new(0, 0);
    gpu.extended.insert("nvidia.com/gpu".into(), 1);
    let out = assign(vec![slot(&gpu, 2)], &[running(0, &gpu, 2)]);
    assert!(out[0].is_some(), "moved off the slot running it: {out:?}");
    assert_eq!(gpu.multiple_of(&gpu), Some(1));
}

/// Over `max`, a slot's pause pods each take room for as many of its pods as fit in the
/// unit (one change, not one per step of a ramp); back within `max`, a slot running so
/// keeps it (no pod replaced at each crossing of `max`).
#[test]
fn a_slot_shares_pause_pods_once_and_keeps_sharing_within_max() {
    let cfg = cfg(10);
    let small = PodShape::new(250, GI / 2);
    let mut placed = Placed { slots: vec![Some(slot(&small, 11)), None, None], unfit: Vec::new() };
    in_fewer_pods(&cfg, &mut placed, &[running(0, &small, 10)]);
    let coarse = placed.slots[0].clone().unwrap();
    assert_eq!((coarse.shape.clone(), coarse.pods), (small.times(4), 3), "11 pods over max 10: 4 to a pod");
    let mut placed = Placed { slots: vec![Some(slot(&small, 10)), None, None], unfit: Vec::new() };
    in_fewer_pods(&cfg, &mut placed, &[running(0, &small.times(4), 3)]);
    assert_eq!(placed.slots[0].as_ref().unwrap().shape, small.times(4), "{placed:?}");
}

/// A shape held by pause pods of room for several of its pods counts as held: it stays
/// chosen down to half the share a new shape needs.
#[test]
fn a_shape_held_several_to_a_pause_pod_stays_chosen() {
    use crate::shape::WorkloadKind;
    let wide = PodShape::new(2000, GI);
    let tall = PodShape::new(500, 4 * GI);
    let arrivals = [(wide.clone(), WorkloadKind::LongRunning, 96.5), (tall.clone(), WorkloadKind::Job, 3.5)];
    let chosen = |keep: &[PodShape]| -> Vec<PodShape> {
        shape::shares_within(&arrivals, keep, 3).unwrap().shapes.into_iter().map(|s| s.0).collect()
    };
    assert!(!chosen(&[]).contains(&tall), "3.5 % is under the 5 % a new shape needs");
    assert!(chosen(&[tall.times(2)]).contains(&tall), "held two to a pause pod");
}

/// Slots as the cluster runs them after `placed` is written: a slot no shape is placed
/// in any more goes to 0.
fn written(placed: &Placed, before: &[SlotState]) -> Vec<SlotState> {
    let mut out = Vec::new();
    for (i, s) in placed.slots.iter().enumerate() {
        match (s, before.iter().find(|r| r.slot == i)) {
            (Some(s), _) => out.push(running(i, &s.shape, s.pods)),
            (None, Some(r)) => out.push(running(i, &r.shape, 0)),
            (None, None) => {}
        }
    }
    out
}

/// What the cluster runs after each report of arrivals `mixes` (shape, kind, pods), the
/// room `units` throughout: per report, each Deployment's shape and replicas.
fn runs_after(
    cfg: &HeadroomConfig,
    units: u32,
    mixes: &[Vec<(PodShape, crate::shape::WorkloadKind, u64)>],
) -> Vec<Vec<(String, u32)>> {
    use crate::shape::{MixEntry, ShapeMix};
    let now = chrono::Utc::now();
    let window = (now, now + chrono::Duration::minutes(30), chrono_tz::Tz::UTC);
    let mut runs: Vec<SlotState> = Vec::new();
    let mut seen = Vec::new();
    for arrivals in mixes {
        let entries = arrivals
            .iter()
            .map(|(shape, kind, pods)| MixEntry {
                shape: shape.clone(),
                kind: *kind,
                weight_milli: pods * 1000,
                by_hour_milli: Vec::new(),
                waiting: 0,
                at: now,
            })
            .collect();
        let placed = place(cfg, &ShapeMix { entries, ..ShapeMix::default() }, units, &runs, &[], window, None);
        runs = written(&placed, &runs);
        seen.push(runs.iter().map(|r| (r.shape.to_string(), r.replicas.unwrap_or(0))).collect());
    }
    seen
}

/// Whether, from the third report on, no Deployment changed.
fn settled(seen: &[Vec<(String, u32)>]) -> bool {
    seen[2..].windows(2).all(|w| w[0] == w[1])
}

/// `within_quota` takes back pods of the shape placed over `max`'s memory, so that
/// shape never runs the count its part rounds to and its rounding has no band: 4-CPU /
/// 14Gi Jobs (60 % of pods, a part of 3.745 or 3.755 pods of 16 units) round to 3 or
/// 4, the rest of the room then goes into 8 web pods or 2, and the quota (40Gi) cuts
/// the Jobs to 2 either way. Shares moving by one point of the pods between reports
/// (0.01 pod of the Jobs' part) create and delete 6 web pause pods at every report;
/// with 2 web pods they hold 9 CPU of a 16-CPU room, where the quota lets 8 hold 12.
#[test]
fn a_shape_the_quota_cuts_does_not_move_pods_at_every_report() {
    use crate::shape::WorkloadKind;
    let cfg = cfg(20);
    let web = PodShape::new(500, GI);
    let job = PodShape::new(4000, 14 * GI);
    let mixes: Vec<_> = [395, 405, 395, 405, 395, 405]
        .map(|web_pods| {
            vec![(job.clone(), WorkloadKind::Job, 1000 - web_pods), (web.clone(), WorkloadKind::LongRunning, web_pods)]
        })
        .to_vec();
    let seen = runs_after(&cfg, 16, &mixes);
    assert!(settled(&seen), "{seen:#?}");
}

/// Over `max`, 250m / 512Mi pods four to a pause pod and 500m / 1Gi pods two to one
/// run in two Deployments of the same 1 CPU / 2Gi pause pods: each shape counted the
/// other's Deployment as its own pods, so each rounded up from a quarter pod whatever
/// it ran, and shares moving by two points of the pods (0.25 pod of a part) took a
/// pause pod and gave it back at every report.
#[test]
fn shapes_sharing_pause_pods_of_one_size_keep_their_pods() {
    use crate::shape::WorkloadKind;
    let cfg = cfg(8);
    let small = PodShape::new(250, GI / 2);
    let web = PodShape::new(500, GI);
    let long = WorkloadKind::LongRunning;
    let mixes: Vec<_> = [400, 420, 400, 420, 400, 420]
        .map(|small_pods| vec![(small.clone(), long, small_pods), (web.clone(), long, 1000 - small_pods)])
        .to_vec();
    let seen = runs_after(&cfg, 4, &mixes);
    assert!(settled(&seen), "{seen:?}");
}

/// Pods that cannot share a pause pod (800m / 1Gi: one fits in the 1 CPU / 2Gi unit)
/// count one to a pause pod against `max`: `within_quota` takes back the pods past it
/// after the rest of the room was placed, so the shape cut never runs the count its
/// part rounds to, and shares moving by two points of the pods move a pause pod
/// between the Deployments at every report.
#[test]
fn a_shape_cut_to_max_pods_does_not_move_pods_at_every_report() {
    use crate::shape::WorkloadKind;
    let cfg = cfg(8);
    let web = PodShape::new(800, GI);
    let api = PodShape::new(700, 3 * GI / 2);
    let long = WorkloadKind::LongRunning;
    let mixes: Vec<_> = [800, 820, 800, 820, 800, 820]
        .map(|web_pods| vec![(web.clone(), long, web_pods), (api.clone(), long, 1000 - web_pods)])
        .to_vec();
    let seen = runs_after(&cfg, 6, &mixes);
    assert!(settled(&seen), "{seen:?}");
}
