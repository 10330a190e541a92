//! Raises of Ballast's undone by cluster-autoscaler writing from its stale ASG cache.

use super::*;

/// A fallback move onto on-demand (spot-a failing: its 4 missing slots to od), applied.
fn moved_to_on_demand() -> (Config, ObservedPool, Plan) {
    let (cfg, mut observed) = one_spot(pool().spot("spot-a", sized(6).live(2)));
    od(&mut observed).max = 10;
    let p = run(&cfg, &PoolRecord::default(), &observed, &[capacity_error("spot-a", now())], now());
    assert_eq!((desired(&p, "od"), desired(&p, "spot-a")), (Some(4), Some(2)), "{:#?}", p.actions);
    (cfg, observed, p)
}

/// The pool as the move left it, then cluster-autoscaler sets od from the size its cache
/// read before the raise (0) plus one for a pending pod: 1, no instance removed.
fn undone(observed: &ObservedPool) -> ObservedPool {
    let mut after = observed.clone();
    after.spot[0].desired = 2;
    od(&mut after).desired = 1;
    after
}

#[test]
fn a_fallback_move_undone_by_a_stale_write_is_made_again_once() {
    let (cfg, observed, p) = moved_to_on_demand();
    let later = now() + Duration::seconds(50);
    let after = undone(&observed);
    let p2 = run(&cfg, &applied(&p), &after, &[], later);
    // Back to 4 (the 3 taken, on top of cluster-autoscaler's own 1 it reads as ours).
    assert_eq!(desired(&p2, "od"), Some(4), "{:#?} {:#?}", p2.actions, p2.notes);
    assert_eq!(p2.raises_remade(), 3);
    assert_eq!(p2.record.fallback_units, 4, "the move's units are held again");
    assert!(p2.notes.iter().any(|n| n.contains("undone by another writer") && n.contains("made again, once (3)")));
    // Undone once more: left, said, not fought.
    let mut again = after.clone();
    od(&mut again).desired = 2;
    let p3 = run(&cfg, &applied(&p2), &again, &[], later + Duration::seconds(30));
    assert_eq!(desired(&p3, "od"), None, "{:#?} {:#?}", p3.actions, p3.notes);
    assert_eq!(p3.raises_remade(), 0);
    assert!(p3.notes.iter().any(|n| n.contains("not made a third time")), "{:#?}", p3.notes);
    let p4 = run(&cfg, &p3.record, &again, &[], later + Duration::minutes(1));
    assert_eq!(p4.raises_remade(), 0, "{:#?}", p4.notes);
}

#[test]
fn a_lower_explained_by_instances_gone_is_not_undone() {
    let (cfg, observed, p) = moved_to_on_demand();
    let mut after = observed.clone();
    after.spot[0].desired = 2;
    // od filled its 4 slots; cluster-autoscaler then scaled one in with decrement.
    let filled = on_demand_asg(sized(4));
    after.on_demand = Some(filled);
    let mut record = applied(&p);
    let p2 = run(&cfg, &record, &after, &[], now() + Duration::seconds(30));
    assert_eq!(p2.raises_remade(), 0);
    record = p2.record.clone();
    if let Some(od) = after.on_demand.as_mut() {
        od.desired = 3;
        od.instances[3].lifecycle_state = LifecycleState::Terminating;
    }
    let p3 = run(&cfg, &record, &after, &[], now() + Duration::seconds(60));
    assert_eq!((p3.raises_remade(), desired(&p3, "od")), (0, None), "{:#?} {:#?}", p3.actions, p3.notes);
}

#[test]
fn a_filled_raise_standing_past_the_window_is_forgotten() {
    let (cfg, observed, p) = moved_to_on_demand();
    let mut after = observed.clone();
    after.spot[0].desired = 2;
    after.on_demand = Some(on_demand_asg(sized(4)));
    let p2 = run(&cfg, &applied(&p), &after, &[], now() + STALE_WRITE_WINDOW);
    assert!(p2.record.raised.is_empty(), "{:?}", p2.record.raised);
    // Within it, kept: a stale write may still come.
    let p2 = run(&cfg, &applied(&p), &after, &[], now() + Duration::seconds(30));
    assert_eq!(p2.record.raised["od"].to, 4);
}

/// Cluster-autoscaler deletes a failed scale-up's slots, Ballast's among them, up to its
/// `max-node-provision-time` after it saw them: a raise no instance filled is watched
/// that long, and its slots deleted are made again.
#[test]
fn an_unfilled_raise_is_watched_until_a_failed_scale_up_would_be_deleted() {
    let (cfg, observed, p) = moved_to_on_demand();
    let mut after = observed.clone();
    after.spot[0].desired = 2;
    after.on_demand = Some(on_demand_asg(sized(4).live(2)));
    let kept = run(&cfg, &applied(&p), &after, &[], now() + STALE_WRITE_WINDOW);
    assert_eq!(kept.record.raised["od"].to, 4, "two of its slots unfilled: kept");
    let p2 = run(&cfg, &kept.record, &after, &[], now() + UNFILLED_WINDOW);
    assert!(p2.record.raised.is_empty(), "{:?}", p2.record.raised);
    // Ten minutes on, the two unfilled slots deleted (the ASG set to its instances).
    od(&mut after).desired = 2;
    let p3 = run(&cfg, &kept.record, &after, &[], now() + Duration::minutes(10));
    assert_eq!((p3.raises_remade(), desired(&p3, "od")), (2, Some(4)), "{:#?}", p3.notes);
}

#[test]
fn a_remake_that_did_not_land_is_made_again() {
    let (cfg, observed, p) = moved_to_on_demand();
    let after = undone(&observed);
    let p2 = run(&cfg, &applied(&p), &after, &[], now() + Duration::seconds(50));
    assert_eq!(p2.raises_remade(), 3);
    // Its call never landed (the run died before it): the next look makes it again.
    let p3 = run(&cfg, &p2.record, &after, &[], now() + Duration::seconds(70));
    assert_eq!((p3.raises_remade(), desired(&p3, "od")), (3, Some(4)), "{:#?}", p3.notes);
}

#[test]
fn a_failing_spot_asgs_raise_undone_is_made_again_and_moved_on() {
    // A failback step raised spot-a 2 -> 4; cluster-autoscaler set it back to 2 and
    // spot-a fails again: the two slots go where the pool has capacity, not lost.
    let (cfg, mut observed) = one_spot(pool().spot("spot-a", sized(4).live(2)).on_demand(sized(2)));
    let mut record = PoolRecord::default();
    let live = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    record.raised.insert(
        "spot-a".into(),
        OwnRaise {
            to: 4,
            by: 2,
            at: now() - Duration::seconds(40),
            live,
            gone_before: 0,
            seen: vec![],
            seen_late: vec![],
            remade: false,
        },
    );
    observed.spot[0].desired = 2;
    let p = run(&cfg, &record, &observed, &[capacity_error("spot-a", now())], now());
    assert_eq!(p.raises_remade(), 2, "{:#?}", p.notes);
    assert_eq!((desired(&p, "spot-a"), desired(&p, "od")), (None, Some(4)), "{:#?} {:#?}", p.actions, p.notes);
    // Moved on, they are made: spot-a still short of them next look is no cause to make
    // them again (each time moving two more onto on-demand).
    od(&mut observed).desired = 4;
    let next = run(&cfg, &applied(&p), &observed, &[], now() + Duration::seconds(30));
    assert_eq!((next.raises_remade(), desired(&next, "od")), (0, None), "{:#?} {:#?}", next.actions, next.notes);
}

/// A raise made again once, then a new raise on the same ASG: both undone, only the new
/// one is made again (the first is not made a third time).
#[test]
fn slots_made_again_once_are_not_carried_into_a_later_raise() {
    use crate::record::{CapacityCall, Journal};
    let (cfg, mut observed) = one_spot(pool().spot("spot-a", sized(2)).on_demand(sized(5).live(1)));
    let live: Vec<String> = od(&mut observed).instances.iter().map(|i| i.id.clone()).collect();
    let mut record = PoolRecord { plans: 5, ..PoolRecord::default() };
    let made_again = OwnRaise {
        to: 4,
        by: 3,
        at: now() - Duration::seconds(60),
        live: live.clone(),
        gone_before: 0,
        seen: vec![],
        seen_late: vec![],
        remade: true,
    };
    record.raised.insert("od".into(), made_again);
    record.journal = Some(Journal {
        planned_at: now() - Duration::seconds(30),
        seq: 5,
        units_added: 0,
        calls: vec![CapacityCall::SetDesired { asg: "od".into(), from: 4, to: 5, planned_lower: 0, done: true }],
        attempted: 1,
        owed: vec![],
        moves: vec![],
        live: [("od".to_string(), live)].into(),
        looked_at: [("od".to_string(), 4)].into(),
        remakes: vec![],
    });
    // Cluster-autoscaler set od back to the 1 it read before either raise.
    od(&mut observed).desired = 1;
    let p = run(&cfg, &record, &observed, &[], now());
    assert_eq!((p.raises_remade(), desired(&p, "od")), (1, Some(2)), "{:#?} {:#?}", p.actions, p.notes);
}

/// A failing spot ASG's missing slots moved out: cluster-autoscaler deleted them (a
/// failed scale-up) before the move's lower, which apply then found made ("already at
/// 3"). The raise kept there lost those slots to the lower Ballast meant, not to a stale
/// write: nothing is made again (it would land beside the move's own raise).
#[test]
fn a_moves_lower_found_made_by_a_failed_scale_ups_deletion_is_no_undone_raise() {
    use crate::record::{CapacityCall, Journal, Move};
    let observed = pool().spot("spot-a", sized(3)).spot("spot-b", sized(2)).build();
    let live: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    let mut record = PoolRecord { plans: 5, ..PoolRecord::default() };
    let surges = OwnRaise {
        to: 5,
        by: 2,
        at: now() - Duration::seconds(90),
        live: live.clone(),
        gone_before: 0,
        seen: vec![],
        seen_late: vec![],
        remade: false,
    };
    record.raised.insert("spot-a".into(), surges);
    let lower_found_made = |planned_lower| Journal {
        planned_at: now() - Duration::seconds(30),
        seq: 5,
        units_added: 0,
        calls: vec![
            CapacityCall::SetDesired { asg: "spot-b".into(), from: 0, to: 2, planned_lower: 0, done: true },
            // Planned 5 -> 3, rebased on the 3 found: floored at the live instances.
            CapacityCall::SetDesired { asg: "spot-a".into(), from: 3, to: 3, planned_lower, done: true },
        ],
        attempted: 2,
        owed: vec![],
        moves: vec![Move { from: "spot-a".into(), to: "spot-b".into(), n: 2 }],
        live: [("spot-b".to_string(), vec![])].into(),
        looked_at: [("spot-b".to_string(), 0)].into(),
        remakes: vec![],
    };
    record.journal = Some(lower_found_made(2));
    let p = run(&config(), &record, &observed, &[], now());
    assert_eq!(p.raises_remade(), 0, "{:#?} {:#?}", p.actions, p.notes);
    assert_eq!(desired(&p, "spot-a"), None, "{:#?}", p.actions);
    // Told apart only by what the lower meant: a write found at its start reads as the
    // kept raise undone before it.
    record.journal = Some(lower_found_made(0));
    let p = run(&config(), &record, &observed, &[], now());
    assert_eq!(p.raises_remade(), 2, "{:#?}", p.notes);
}
