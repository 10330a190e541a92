//! Headroom in shapes: the room a strategy decides is held as pause pods of the shapes
//! the pool's pods arrive in, one Deployment per slot.

use super::*;
use crate::shape::{PodShape, ShapeCount, SlotState, WorkloadKind};

pub(super) const GI: u64 = 1 << 30;

fn inference() -> PodShape {
    PodShape::new(2000, 8 * GI)
}

fn training() -> PodShape {
    PodShape::new(4000, 14 * GI)
}

/// A demand report of `cpu` millicores with these shapes (started, waiting).
fn report(cpu: u64, shapes: &[(PodShape, WorkloadKind, u32, u32)], at: DateTime<Utc>) -> Event {
    let shapes = shapes
        .iter()
        .map(|(shape, kind, started, waiting)| ShapeCount {
            shape: shape.clone(),
            kind: *kind,
            started: *started,
            waiting: *waiting,
        })
        .collect();
    let detail = crate::event::PoolDemandDetail {
        pool: "p".into(),
        cpu_millis: cpu,
        memory_bytes: 0,
        pods: 10,
        nodes: 4,
        observed_at: at,
        shapes,
    };
    event(Signal::PoolDemand(detail), at)
}

/// The headroom writes of a plan: (slot, shape, from, to).
pub(super) fn writes(plan: &Plan) -> Vec<(usize, PodShape, Option<u32>, u32)> {
    plan.actions
        .iter()
        .filter_map(|a| match &a.kind {
            ActionKind::SetHeadroomReplicas { slot, shape, from, to, .. } => Some((*slot, shape.clone(), *from, *to)),
            _ => None,
        })
        .collect()
}

/// What the cluster runs once a plan's writes landed.
pub(super) fn after(plan: &Plan, before: &[SlotState]) -> Vec<SlotState> {
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

/// The ML pool: a percent's room, once training jobs are seen arriving, is held
/// in holes a 4-CPU job fits, beside inference-sized ones, with the reason saying so;
/// the shapes keep their Deployments as the mix moves, and a shape no longer seen goes.
#[test]
fn an_ml_pool_s_room_is_held_in_slots_its_training_jobs_fit() {
    // A quota (max) for 100 pods of 1 CPU / 2Gi: 4-CPU / 14Gi holes are memory-heavy.
    let mut cfg = config();
    cfg.pools[0].headroom.max = 100;
    let mut observed = pool().spot("spot-a", sized(4)).build();
    observed.headroom = unit_slots(0);
    // Before any shape is reported: one Deployment of pod_cpu / pod_memory, as always.
    let first = run(&cfg, &PoolRecord::default(), &observed, &[report(100_000, &[], now())], now());
    assert_eq!(writes(&first), vec![(0, PodShape::new(1000, 2 * GI), Some(0), 25)], "25 % of 100 CPU");
    let running = after(&first, &observed.headroom);

    // Training jobs and inference pods start: 25 CPU of room as 4-CPU and 2-CPU holes.
    let mix = [(training(), WorkloadKind::Job, 6, 2), (inference(), WorkloadKind::LongRunning, 8, 0)];
    let at = now() + Duration::minutes(5);
    observed.headroom = running;
    let second = run(&cfg, &applied(&first), &observed, &[report(100_000, &mix, at)], at);
    let w = writes(&second);
    let slot_of = |shape: &PodShape| w.iter().find(|x| x.1 == *shape).map(|x| (x.0, x.3));
    let (t_slot, t_pods) = slot_of(&training()).expect("a training-shaped Deployment");
    let (i_slot, i_pods) = slot_of(&inference()).expect("an inference-shaped Deployment");
    assert_ne!(t_slot, i_slot);
    let held = u64::from(t_pods) * 4000 + u64::from(i_pods) * 2000;
    assert!((25_000..25_000 + 6_000).contains(&held), "25 CPU of room, rounded up per shape: {w:?}");
    assert!(t_pods * 4 > i_pods * 2, "8 jobs of 4 CPU take more of the room than 8 pods of 2: {w:?}");
    let reason =
        &second.actions.iter().find(|a| matches!(a.kind, ActionKind::SetHeadroomReplicas { .. })).unwrap().reason;
    assert!(reason.contains("that room held as") && reason.contains("4 CPU / 14Gi (Job pods"), "{reason}");
    assert!(w.iter().all(|x| x.0 < crate::shape::MAX_SLOT_SHAPES), "{w:?}");

    // The same mix again: nothing to write.
    let running = after(&second, &observed.headroom);
    observed.headroom = running.clone();
    let at = at + Duration::minutes(5);
    let third = run(&cfg, &applied(&second), &observed, &[report(100_000, &mix, at)], at);
    assert_eq!(writes(&third), vec![], "{:?}", third.actions);

    // Weeks later only inference pods are seen: training's Deployment goes to 0, and the
    // inference shape keeps its slot (no Recreate of its pods).
    let at = at + Duration::days(28);
    let only = [(inference(), WorkloadKind::LongRunning, 8, 0)];
    let later = run(&cfg, &applied(&third), &observed, &[report(100_000, &only, at)], at);
    let w = writes(&later);
    assert!(w.contains(&(t_slot, training(), Some(t_pods), 0)), "{w:?}");
    assert!(w.iter().any(|x| x.0 == i_slot && x.1 == inference() && x.3 > i_pods), "{w:?}");
}

/// A written list of shapes is used as written: each arriving pod counts towards the
/// smallest it fits in; pods larger than every listed shape are told of, once an hour.
#[test]
fn listed_shapes_take_the_pods_that_fit_and_tell_of_those_that_do_not() {
    let cfg = with(|c| {
        c.replace(
            "      pod_memory: 2Gi\n",
            "      pod_memory: 2Gi\n      shapes:\n        - { name: small, cpu: 500m, memory: 1Gi }\n        - { name: inference, cpu: \"2\", memory: 8Gi }\n",
        )
    });
    let mut observed = pool().spot("spot-a", sized(4)).build();
    observed.headroom = unit_slots(0);
    let mix = [
        (inference(), WorkloadKind::LongRunning, 10, 0),
        (PodShape::new(1500, 4 * GI), WorkloadKind::LongRunning, 10, 0),
        (training(), WorkloadKind::Job, 5, 1),
    ];
    let p = run(&cfg, &PoolRecord::default(), &observed, &[report(40_000, &mix, now())], now());
    let w = writes(&p);
    assert!(w.iter().all(|x| x.0 == 1 && x.1 == inference()), "every pod fits the second shape only: {w:?}");
    // The first slot held the unit pods before: the small shape has nothing to hold.
    assert!(w.iter().all(|x| x.1 != PodShape::new(500, GI) || x.3 == 0), "{w:?}");
    let note = p.notes.iter().find(|n| n.contains("fit in no pause pod")).expect("told");
    assert!(note.contains("4 CPU / 14Gi"), "{note}");
    let later = now() + Duration::minutes(10);
    let again = run(&cfg, &applied(&p), &observed, &[report(40_000, &mix, later)], later);
    assert!(!again.notes.iter().any(|n| n.contains("fit in no pause pod")), "once an hour: {:?}", again.notes);
}

/// Going from learned shapes back to `fixed` scales the extra Deployments to 0.
#[test]
fn a_deployment_no_shape_is_placed_in_goes_to_zero() {
    let cfg = with(|c| c.replace("      pod_memory: 2Gi\n", "      pod_memory: 2Gi\n      shapes: fixed\n"));
    let mut observed = pool().spot("spot-a", sized(4)).build();
    observed.headroom = vec![
        SlotState { slot: 0, shape: inference(), replicas: Some(3) },
        SlotState { slot: 2, shape: training(), replicas: Some(4) },
    ];
    observed.demand = Some(demand(40_000, 0));
    let p = run(&cfg, &PoolRecord::default(), &observed, &[], now());
    let w = writes(&p);
    assert!(w.contains(&(2, training(), Some(4), 0)), "{w:?}");
    assert!(w.contains(&(0, PodShape::new(1000, 2 * GI), Some(3), 10)), "25 % of 40 CPU in unit pods: {w:?}");
}

/// `max` bounds the pause pods as well as the room: shapes smaller than the unit never
/// make more pods than the quota was written for. Rather than cut the room to `max`
/// small holes, each pause pod then holds room for several such pods (up to the unit):
/// one preemption frees room for all of them.
#[test]
fn max_bounds_the_pause_pods_and_small_pods_share_a_pause_pod() {
    let mut cfg = config();
    cfg.pools[0].headroom.max = 6;
    let unit = cfg.pools[0].headroom.unit_shape();
    let mut observed = pool().spot("spot-a", sized(4)).build();
    observed.headroom = unit_slots(0);
    let small = PodShape::new(unit.cpu_millis / 8, unit.memory_bytes / 8);
    let tiny = [(small.clone(), WorkloadKind::LongRunning, 40, 0)];
    let p = run(&cfg, &PoolRecord::default(), &observed, &[report(100_000, &tiny, now())], now());
    let pods: u32 = writes(&p).iter().map(|x| x.3).sum();
    assert_eq!(pods, 6, "{:?}", writes(&p));
    // As many as max allows, each the room of eight: the unit's room, not a sixth of it.
    assert!(writes(&p).iter().filter(|x| x.3 > 0).all(|x| x.1 == unit), "{:?}", writes(&p));

    // A shape that does not divide the unit: 25 units of room are 84 pods of 0.3 of it;
    // with `max` 60, each pause pod holds three (as many as the unit holds), 28 of them.
    cfg.pools[0].headroom.max = 60;
    let third = PodShape::new(unit.cpu_millis * 3 / 10, unit.memory_bytes * 3 / 10);
    observed.headroom = vec![SlotState { slot: 0, shape: third.clone(), replicas: Some(0) }];
    let few = [(third.clone(), WorkloadKind::LongRunning, 40, 0)];
    let p = run(&cfg, &PoolRecord::default(), &observed, &[report(100_000, &few, now())], now());
    let held: Vec<(PodShape, u32)> = writes(&p).iter().filter(|x| x.3 > 0).map(|x| (x.1.clone(), x.3)).collect();
    assert_eq!(held, [(third.times(3), 28)]);
    assert!(p.actions.iter().any(|a| a.reason.contains("3 pods to a pause pod")), "{:?}", p.actions);

    // A slot running eight to a pause pod keeps them while that fits (no pod replaced).
    let mut after = observed.clone();
    after.headroom = vec![SlotState { slot: 0, shape: small.times(8), replicas: Some(25) }];
    let p = run(&cfg, &PoolRecord::default(), &after, &[report(100_000, &tiny, now())], now());
    assert!(writes(&p).iter().all(|x| x.1 == small.times(8)), "{:?}", writes(&p));

    // Within `max` in small pods: one to a pause pod.
    cfg.pools[0].headroom.max = 200;
    let p = run(&cfg, &PoolRecord::default(), &observed, &[report(100_000, &tiny, now())], now());
    assert!(writes(&p).iter().filter(|x| x.3 > 0).all(|x| x.1 == small), "{:?}", writes(&p));
}

/// A report from a clock ahead of ours does not hold every later report off.
#[test]
fn a_shape_report_from_ahead_of_now_does_not_block_later_ones() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(4)).build();
    observed.headroom = unit_slots(0);
    let ahead = report(10_000, &[(inference(), WorkloadKind::LongRunning, 3, 0)], now() + Duration::days(1));
    let p = run(&cfg, &PoolRecord::default(), &observed, &[ahead], now());
    assert!(p.record.shapes.reported_at.unwrap() <= now() + crate::planner::CLOCK_SKEW);
    let later = now() + Duration::minutes(5);
    let next = report(10_000, &[(training(), WorkloadKind::Job, 3, 0)], later);
    let p2 = run(&cfg, &applied(&p), &observed, &[next], later);
    assert!(p2.record.shapes.entries.iter().any(|e| e.shape == training()), "{:?}", p2.record.shapes);
}

/// Pods larger than every node of the pool are told of apart: no pause pod helps them.
#[test]
fn pods_larger_than_every_node_are_told_of() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(2)).build();
    observed.headroom = unit_slots(0);
    for n in &mut observed.nodes {
        n.allocatable = Some(PodShape::new(7910, 29 * GI));
    }
    let huge = PodShape::new(16_000, 60 * GI);
    let mix = [(inference(), WorkloadKind::LongRunning, 10, 0), (huge.clone(), WorkloadKind::Job, 0, 3)];
    let p = run(&cfg, &PoolRecord::default(), &observed, &[report(40_000, &mix, now())], now());
    let note = p.notes.iter().find(|n| n.contains("larger than any node")).expect("told");
    assert!(note.contains("16 CPU / 60Gi") && note.contains("7910m CPU / 29Gi"), "{note}");
    assert!(writes(&p).iter().all(|x| x.1 != huge), "no pause pod of a shape no node takes: {:?}", writes(&p));
}

/// Day one of a wait target: no past day shows the time, so the percent holds room, and
/// it is held at once in the shapes the last reports showed arriving and waiting.
#[test]
fn on_day_one_a_wait_target_holds_the_percent_in_the_shapes_just_seen() {
    let cfg = with(|c| {
        c.replace("      boost_for: 30m\n", "      boost_for: 30m\n      target: { wait_p95: 30s, history: 14d }\n")
    });
    let mut observed = pool().spot("spot-a", sized(4)).build();
    observed.headroom = unit_slots(0);
    // Training jobs waiting now, nothing learned yet.
    let jobs = [(training(), WorkloadKind::Job, 0, 4)];
    let p = run(&cfg, &PoolRecord::default(), &observed, &[report(40_000, &jobs, now())], now());
    let w = writes(&p);
    let held: Vec<_> = w.iter().filter(|x| x.3 > 0).collect();
    assert!(!held.is_empty() && held.iter().all(|x| x.1 == training()), "room in the jobs' shape at once: {w:?}");
    let reason = &p.actions.iter().find(|a| matches!(a.kind, ActionKind::SetHeadroomReplicas { .. })).unwrap().reason;
    assert!(
        reason.contains("until a past day shows this time of day") && reason.contains("that room held as 3 × 4 CPU"),
        "{reason}"
    );
}

/// The room placed ahead of a daily burst is in the shape of the pods that came at that
/// hour on past days, not of those that come all day; at other hours, theirs.
#[test]
fn room_ahead_of_the_ten_o_clock_burst_is_in_the_burst_s_shape() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(4)).build();
    observed.headroom = unit_slots(0);
    let day1 = Utc.with_ymd_and_hms(2026, 11, 19, 0, 0, 0).unwrap();
    let mut record = PoolRecord::default();
    for hour in 6..18 {
        let at = day1 + Duration::hours(hour);
        let mut shapes = vec![(inference(), WorkloadKind::LongRunning, 10, 0)];
        if hour == 10 {
            shapes.push((training(), WorkloadKind::Job, 8, 0));
        }
        let p = run(&cfg, &record, &observed, &[report(100_000, &shapes, at)], at);
        observed.headroom = after(&p, &observed.headroom);
        record = applied(&p);
    }
    let room_in = |p: &Plan, running: &[SlotState], shape: &PodShape| {
        after(p, running).iter().filter(|s| s.shape == *shape).map(|s| s.replicas.unwrap_or(0)).sum::<u32>()
    };
    // Friday 09:45 UTC: the 09:00–10:15 hours showed 20 inference pods and 8 jobs.
    let ahead = now() - Duration::minutes(15);
    let p = run(&cfg, &record, &observed, &[report(100_000, &[], ahead)], ahead);
    let (jobs, inference_pods) =
        (room_in(&p, &observed.headroom, &training()), room_in(&p, &observed.headroom, &inference()));
    // By the room they took: 8 jobs of 4 CPU / 14Gi against 20 pods of 2 CPU / 8Gi.
    let share = f64::from(jobs * 4) / f64::from(jobs * 4 + inference_pods * 2);
    assert!((0.35..0.6).contains(&share), "the jobs' share of the room before 10:00: {jobs} vs {inference_pods}");
    // 14:00: only inference pods ever came then.
    let afternoon = now() + Duration::hours(4);
    let record = applied(&p);
    let running = after(&p, &observed.headroom);
    observed.headroom = running.clone();
    let p = run(&cfg, &record, &observed, &[report(100_000, &[], afternoon)], afternoon);
    assert_eq!(room_in(&p, &running, &training()), 0, "{:?}", writes(&p));
    assert!(room_in(&p, &running, &inference()) > 0, "{:?}", writes(&p));
}
