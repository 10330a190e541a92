//! A spot warning's surge ahead of the full plan: made only when the full plan would make
//! the same, and the full plan after it neither repeats it nor misses the rest.

use std::collections::BTreeMap;

use super::*;

/// The warned instances of `spot-a` as the reconciler hands them over.
fn warned(observed: &ObservedPool, ns: &[usize]) -> Vec<Warned> {
    ns.iter()
        .map(|&n| Warned {
            instance_id: observed.spot[0].instances[n].id.clone(),
            asg: "spot-a".into(),
            action: InstanceAction::Terminate,
            at: now(),
        })
        .collect()
}

fn ahead(cfg: &Config, record: &PoolRecord, observed: &ObservedPool, ns: &[usize]) -> Result<UrgentSurge, String> {
    urgent_surge(cfg, &cfg.pools[0], record, &warned(observed, ns), None, 0, &observed.spot[0].size(), None, now())
}

/// The pool as observed once the surge ahead landed: `spot-a` one higher per warning,
/// its new instances launching.
fn after_surge(observed: &ObservedPool, by: u32) -> ObservedPool {
    let mut after = observed.clone();
    let asg = &mut after.spot[0];
    asg.desired += by;
    for n in 0..by {
        let mut launching = asg.instances[0].clone();
        launching.id = format!("i-launching{n:08}");
        launching.lifecycle_state = LifecycleState::Pending;
        asg.instances.push(launching);
    }
    after
}

#[test]
fn the_surge_ahead_and_the_full_plan_after_it_do_what_the_full_plan_alone_does() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).build();
    let warning = spot_warning(&observed, 0, InstanceAction::Terminate);
    let alone = run(&cfg, &PoolRecord::default(), &observed, std::slice::from_ref(&warning), now());
    assert_eq!(kinds(&alone), vec!["record", "desired", "cordon", "drain", "terminate"]);

    let surge = ahead(&cfg, &PoolRecord::default(), &observed, &[0]).unwrap();
    assert_eq!((surge.asg.as_str(), surge.from, surge.to), ("spot-a", 3, 4));
    let journal = surge.record.journal.as_ref().unwrap();
    assert_eq!(
        journal.calls,
        vec![CapacityCall::SetDesired { asg: "spot-a".into(), from: 3, to: 4, planned_lower: 0, done: false }]
    );
    assert_eq!(journal.attempted, 1, "the call follows the save at once");
    let entry = &surge.record.interruptions[0];
    assert_eq!(entry.planned_at, None, "its cordon, drain and terminate are the full plan's");
    assert_eq!(entry.surge.as_ref().map(|s| (s.asg.as_str(), s.plan, s.holds_at)), Some(("spot-a", 1, Some(3))));

    // The call landed; the full plan of the same run reads the pool.
    let mut record = surge.record.clone();
    if let Some(CapacityCall::SetDesired { done, .. }) = record.journal.as_mut().map(|j| &mut j.calls[0]) {
        *done = true;
    }
    let full = run(&cfg, &record, &after_surge(&observed, 1), &[warning], now());
    assert_eq!(kinds(&full), vec!["record", "cordon", "drain", "terminate"], "{:#?}", full.actions);
    assert!(full
        .actions
        .iter()
        .any(|a| matches!(&a.kind, ActionKind::TerminateInstance { decrement: true, instance_id, .. }
            if *instance_id == observed.spot[0].instances[0].id)));
    assert_eq!(full.record.interruptions.len(), 1);
    assert_eq!(full.record.interruptions[0].surge.as_ref().map(|s| s.plan), Some(1), "the surge ahead's");
    assert_eq!(full.record.disruptions.len(), 1, "the warning counts toward the interruption rate once");
    // The journal's raise is kept as Ballast's own (another writer undoing it is seen),
    // with the instances of the look that settled it: one of them going (a scale-in)
    // explains a lower, and is not taken for the raise undone.
    let kept = &full.record.raised["spot-a"];
    assert_eq!((kept.to, kept.by), (4, 1));
    assert_eq!(kept.live.len(), 4, "{kept:?}");
    // Its terminate with decrement landed, and cluster-autoscaler scaled another in.
    let later = applied(&full);
    let mut scaled_in = after_surge(&observed, 1);
    scaled_in.spot[0].desired = 2;
    scaled_in.spot[0].instances.retain(|i| i.id != observed.spot[0].instances[0].id);
    scaled_in.spot[0].instances.retain(|i| i.id != observed.spot[0].instances[1].id);
    let tick = run(&cfg, &later, &scaled_in, &[], now() + Duration::seconds(60));
    assert_eq!(tick.remade.get("spot-a"), None, "{:#?}", tick.notes);
}

#[test]
fn a_surge_ahead_that_did_not_land_is_made_again_by_the_full_plan_once() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).build();
    let warning = spot_warning(&observed, 0, InstanceAction::Terminate);
    let surge = ahead(&cfg, &PoolRecord::default(), &observed, &[0]).unwrap();
    // Throttled, or its answer lost with the ASG unmoved: the call is open.
    let full = run(&cfg, &surge.record, &observed, &[warning], now());
    assert_eq!(kinds(&full), vec!["record", "desired", "cordon", "drain", "terminate"], "{:#?}", full.actions);
    assert_eq!(desired(&full, "spot-a"), Some(4), "one surge, not two");
    assert_eq!(full.record.interruptions[0].surge.as_ref().map(|s| s.plan), Some(2), "the full plan's own");
}

#[test]
fn warnings_for_several_instances_surge_in_one_call() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(5)).build();
    let surge = ahead(&cfg, &PoolRecord::default(), &observed, &[0, 1]).unwrap();
    assert_eq!((surge.from, surge.to), (5, 7));
    assert_eq!(surge.record.interruptions.len(), 2);
    // The same instance warned twice in a batch is one surge.
    let twice = ahead(&cfg, &PoolRecord::default(), &observed, &[0, 0]).unwrap();
    assert_eq!((twice.from, twice.to), (5, 6));
    assert_eq!(twice.record.interruptions.len(), 1);
}

#[test]
fn the_surge_waits_for_the_full_plan_whenever_it_might_decide_otherwise() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).build();
    let clean = PoolRecord::default();
    assert!(ahead(&cfg, &clean, &observed, &[0]).is_ok());
    let refused = |cfg: &Config, record: &PoolRecord, observed: &ObservedPool, ns: &[usize], want: &str| {
        let why = ahead(cfg, record, observed, ns).expect_err(want);
        assert!(why.contains(want), "{why}");
    };
    // Dry run, surge off.
    let dry = with(|y| y.replacen("cluster: c", "cluster: c\ndry_run: true", 1));
    refused(&dry, &clean, &observed, &[0], "dry run");
    let off = with(|y| y.replace("drain_timeout: 90s }", "drain_timeout: 90s, surge: false }"));
    refused(&off, &clean, &observed, &[0], "surge is off");
    // Selected by tags: unknown tags could give the ASG another role; known, they tell.
    let tags = with(|y| y.replace("on_demand_asg: od", "on_demand_asg: { tags: { role: od } }"));
    refused(&tags, &clean, &observed, &[0], "tags were not read");
    let size = observed.spot[0].size();
    let with_tags = |t: &[(&str, &str)]| -> BTreeMap<String, String> {
        t.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let tag_pool = &tags.pools[0];
    let plain = with_tags(&[("team", "ml")]);
    assert!(
        urgent_surge(&tags, tag_pool, &clean, &warned(&observed, &[0]), Some(&plain), 0, &size, None, now()).is_ok()
    );
    let on_demand_too = with_tags(&[("role", "od")]);
    let why =
        urgent_surge(&tags, tag_pool, &clean, &warned(&observed, &[0]), Some(&on_demand_too), 0, &size, None, now());
    assert!(why.unwrap_err().contains("not one of the pool's spot ASGs alone"));
    // Not one of the pool's spot ASGs at all.
    let mut elsewhere = warned(&observed, &[0]);
    for w in &mut elsewhere {
        w.asg = "od".into();
    }
    let od_size = AsgSize { desired: 2, min: 0, max: 10, live: Some(2) };
    let why = urgent_surge(&cfg, &cfg.pools[0], &clean, &elsewhere, None, 0, &od_size, None, now()).unwrap_err();
    assert!(why.contains("not one of the pool's spot ASGs alone"), "{why}");
    // A warning past its two minutes.
    let mut stale = warned(&observed, &[0]);
    stale[0].at = now() - Duration::minutes(3);
    let why =
        urgent_surge(&cfg, &cfg.pools[0], &clean, &stale, None, 0, &observed.spot[0].size(), None, now()).unwrap_err();
    assert!(why.contains("two minutes"), "{why}");
    // Two ASGs.
    let mut two = warned(&observed, &[0, 1]);
    two[1].asg = "spot-b".into();
    let why =
        urgent_surge(&cfg, &cfg.pools[0], &clean, &two, None, 0, &observed.spot[0].size(), None, now()).unwrap_err();
    assert!(why.contains("more than one ASG"), "{why}");
    // Another signal for the pool in the batch (a capacity error the full plan judges by).
    let why = urgent_surge(
        &cfg,
        &cfg.pools[0],
        &clean,
        &warned(&observed, &[0]),
        None,
        1,
        &observed.spot[0].size(),
        None,
        now(),
    );
    assert!(why.unwrap_err().contains("other signal"));
    // The last plan's journal with a call that may not have landed: judged first by the
    // full plan. All landed, the surge stacks on it, once.
    let first = ahead(&cfg, &clean, &observed, &[0]).unwrap();
    let mut open = first.record.clone();
    open.interruptions.clear();
    refused(&cfg, &open, &observed, &[1], "may not have landed");
    let landed = applied_record(&open);
    let stacked = ahead(&cfg, &landed, &observed, &[1]).unwrap();
    assert_eq!(stacked.record.surged_over, landed.journal, "the landed journal waits below the surge's");
    refused(&cfg, &applied_record(&stacked.record), &observed, &[2], "two plans' journals");
    // Work in the record on that ASG.
    let busy = |edit: &dyn Fn(&mut PoolRecord)| {
        let mut record = PoolRecord::default();
        edit(&mut record);
        record
    };
    let kept_off = busy(&|r| {
        r.unavailable.insert(
            "spot-a".into(),
            Unavailable { until: now() + Duration::minutes(5), reason: "x".into(), by: KeptOffBy::Capacity },
        );
    });
    refused(&cfg, &kept_off, &observed, &[0], "capacity error");
    let short = busy(&|r| {
        r.short_since.insert("spot-a".into(), now());
    });
    refused(&cfg, &short, &observed, &[0], "short of instances");
    // A raise of Ballast's kept there, another instance's replacement under way: the
    // full plan judges the surge's write against them as against any later write.
    let raised = OwnRaise {
        to: 3,
        by: 1,
        at: now(),
        live: vec![],
        gone_before: 0,
        seen: vec![],
        seen_late: vec![],
        remade: false,
    };
    assert!(ahead(&cfg, &busy(&|r| drop(r.raised.insert("spot-a".into(), raised.clone()))), &observed, &[0]).is_ok());
    let in_progress = first.record.interruptions[0].clone();
    let pending = busy(&|r| r.interruptions.push(in_progress.clone()));
    assert!(ahead(&cfg, &pending, &observed, &[1]).is_ok(), "another instance's replacement under way");
    // Warned again (a redelivery, or after its replacement was done): the full plan knows it.
    refused(&cfg, &pending, &observed, &[0], "planned for already");
    let done = Interruption { terminated: true, ..in_progress.clone() };
    let replaced = busy(&|r| r.interruptions.push(done.clone()));
    assert!(ahead(&cfg, &replaced, &observed, &[1]).is_ok(), "another instance's finished replacement");
    refused(&cfg, &replaced, &observed, &[0], "planned for already");
    // Only the instances not planned for yet are surged for.
    let one_new = ahead(&cfg, &pending, &observed, &[0, 1]).unwrap();
    assert_eq!((one_new.from, one_new.to), (3, 4));
    // Its terminate lifecycle action in progress: it is leaving already.
    let hook = PendingLifecycleAction {
        asg: "spot-a".into(),
        hook: "ballast-drain".into(),
        token: "t".into(),
        instance_id: observed.spot[0].instances[0].id.clone(),
        received_at: now(),
        planned: false,
        planned_by: None,
        planned_until: None,
        drain_until: None,
    };
    refused(&cfg, &busy(&|r| r.lifecycle_actions.push(hook.clone())), &observed, &[0], "planned for already");
    // The interruption rate reached with these warnings (count 3 in the test config).
    let disrupted = busy(&|r| {
        for n in 1..3 {
            r.disruptions.push(Disruption {
                instance_id: format!("i-gone{n}"),
                asg: "spot-a".into(),
                at: now() - Duration::minutes(1),
                kind: DisruptionKind::InterruptionWarning,
            });
        }
    });
    refused(&cfg, &disrupted, &observed, &[0], "spot-b may take the replacement");
    // At its minimum (the decrement would not be taken) or its maximum.
    let mut at_min = observed.clone();
    at_min.spot[0].min = 3;
    refused(&cfg, &clean, &at_min, &[0], "no room");
    let at_max = pool().spot("spot-a", sized(3).max(4)).build();
    refused(&cfg, &clean, &at_max, &[0, 1], "no room");
    assert!(ahead(&cfg, &clean, &at_max, &[0]).is_ok(), "one fits");
}

/// Batch 1's full plan alone for instance 0 of a five-instance `spot-a`, its calls all
/// landed; and the pool as batch 2 finds it: instance 0 gone, `desired` (another writer may
/// have moved it), the surge's launch in its slot.
fn after_one_batch(cfg: &Config) -> (ObservedPool, PoolRecord, ObservedPool) {
    let observed = pool().spot("spot-a", sized(5)).build();
    let first =
        run(cfg, &PoolRecord::default(), &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
    assert_eq!(desired(&first, "spot-a"), Some(6));
    let mut seen = after_surge(&observed, 1);
    seen.spot[0].desired = 5;
    seen.spot[0].instances.remove(0);
    (observed, applied(&first), seen)
}

/// Batch 2's surge ahead of its read, made on `seen`'s size and landed: the record to save
/// and the pool as batch 2's full plan reads it.
fn surged_ahead(
    cfg: &Config,
    observed: &ObservedPool,
    record: &PoolRecord,
    seen: &ObservedPool,
) -> (PoolRecord, ObservedPool) {
    let size = AsgSize { live: None, ..seen.spot[0].size() };
    let od = seen.on_demand.as_ref().map(|od| od.size());
    let surge = urgent_surge(cfg, &cfg.pools[0], record, &warned(observed, &[1]), None, 0, &size, od.as_ref(), now())
        .expect("surged ahead");
    assert_eq!(surge.record.surged_over, record.journal, "batch 1's journal waits below it");
    let mut after = seen.clone();
    after.spot[0].desired = surge.to;
    let mut launching = after.spot[0].instances.last().unwrap().clone();
    launching.id = "i-ahead".into();
    after.spot[0].instances.push(launching);
    (applied_record(&surge.record), after)
}

#[test]
fn a_storm_batch_surges_ahead_while_the_last_batch_s_journal_waits_to_be_settled() {
    let cfg = config();
    let (observed, record, seen) = after_one_batch(&cfg);
    let (record, after) = surged_ahead(&cfg, &observed, &record, &seen);
    let warning = spot_warning(&observed, 1, InstanceAction::Terminate);
    let full = run(&cfg, &record, &after, &[warning], now());
    assert_eq!(kinds(&full), vec!["record", "cordon", "drain", "terminate"], "{:#?}", full.actions);
    assert!(full
        .actions
        .iter()
        .any(|a| matches!(&a.kind, ActionKind::TerminateInstance { decrement: true, instance_id, .. }
        if *instance_id == observed.spot[0].instances[1].id)));
    assert_eq!(full.record.surged_over, None, "both journals settled");
    // Both raises kept as Ballast's own: batch 1's under the surge's write.
    let kept = &full.record.raised["spot-a"];
    assert_eq!((kept.to, kept.by), (6, 2), "{kept:?}");
    assert!(full.surplus.is_empty(), "{:#?}", full.notes);
}

#[test]
fn a_raise_undone_before_the_surge_ahead_read_the_asg_is_made_again() {
    // Cluster-autoscaler wrote from a size read before batch 1's surge: 5 -> 4, no
    // instance removed. The surge ahead reads 4 and sets 5; batch 1's slot is owed.
    let cfg = config();
    let (observed, record, mut seen) = after_one_batch(&cfg);
    seen.spot[0].desired = 4;
    seen.spot[0].instances.pop();
    let (record, after) = surged_ahead(&cfg, &observed, &record, &seen);
    assert_eq!(after.spot[0].desired, 5);
    let warning = spot_warning(&observed, 1, InstanceAction::Terminate);
    let full = run(&cfg, &record, &after, &[warning], now());
    assert_eq!(desired(&full, "spot-a"), Some(6), "{:#?}", full.notes);
    assert!(full.notes.iter().any(|n| n.contains("undone by another writer")), "{:#?}", full.notes);
}

#[test]
fn a_spot_asg_kept_off_by_its_rate_is_surged_ahead_only_where_the_full_plan_would_surge() {
    let cfg = with(|y| y.replace("spot_asgs: [spot-a, spot-b]", "spot_asgs: [spot-a]"));
    let mut record = PoolRecord::default();
    let rate =
        Unavailable { until: now() + Duration::minutes(10), reason: "rate".into(), by: KeptOffBy::InterruptionRate };
    record.unavailable.insert("spot-a".into(), rate);
    let surged_where = |record: &PoolRecord, od_desired: u32, od_max: u32| {
        let mut observed = pool().spot("spot-a", sized(5)).build();
        observed.spot.retain(|a| a.name == "spot-a");
        let od = od(&mut observed);
        (od.desired, od.max) = (od_desired, od_max);
        od.instances.truncate(0);
        let size = AsgSize { live: None, ..observed.spot[0].size() };
        let od_size = observed.on_demand.as_ref().map(|od| AsgSize { live: None, ..od.size() });
        let ahead = urgent_surge(
            &cfg,
            &cfg.pools[0],
            record,
            &warned(&observed, &[0]),
            None,
            0,
            &size,
            od_size.as_ref(),
            now(),
        );
        let alone = run(&cfg, record, &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
        let full_target = alone.actions.iter().find_map(|a| match &a.kind {
            ActionKind::SetDesiredCapacity { asg, from, to, .. } if to > from => Some(asg.clone()),
            _ => None,
        });
        (ahead.map(|s| s.asg), full_target)
    };
    // On-demand full: the slot stays in spot-a, asked for before the read.
    let (ahead, alone) = surged_where(&record, 3, 3);
    assert_eq!((ahead.as_deref(), alone.as_deref()), (Ok("spot-a"), Some("spot-a")));
    // On-demand with room within the cap: there, as a fallback unit, ahead too.
    let (ahead, alone) = surged_where(&record, 0, 3);
    assert_eq!((ahead.as_deref(), alone.as_deref()), (Ok("od"), Some("od")));
    // The fallback cap reached: spot-a again.
    let mut capped = record.clone();
    capped.fallback_units = 4;
    let (ahead, alone) = surged_where(&capped, 4, 10);
    assert_eq!((ahead.as_deref(), alone.as_deref()), (Ok("spot-a"), Some("spot-a")));
}

/// The last plan's journal raised `spot-a` by 2 (a fallback move off `spot-b`),
/// all landed. A warning's surge ahead reads `spot-a` at 5 (that raise in it) and sets 6;
/// its surge `holds_at: Some(5)`. Settling the earlier journal must not move that on by
/// the earlier raise again (7 > 6 observed would read as the surge taken by another
/// writer, and make it a second time).
#[test]
fn a_surge_ahead_over_an_earlier_raise_on_its_asg_is_not_made_twice() {
    use crate::record::{Journal, Move};
    let cfg = config();
    let observed = pool().spot("spot-a", sized(5)).spot("spot-b", sized(2)).build();
    let mut record = PoolRecord { plans: 5, ..PoolRecord::default() };
    let live_a: Vec<String> = observed.spot[0].instances[..3].iter().map(|i| i.id.clone()).collect();
    record.journal = Some(Journal {
        planned_at: now() - Duration::seconds(30),
        seq: 5,
        units_added: 0,
        calls: vec![
            CapacityCall::SetDesired { asg: "spot-a".into(), from: 3, to: 5, planned_lower: 0, done: true },
            CapacityCall::SetDesired { asg: "spot-b".into(), from: 4, to: 2, planned_lower: 2, done: true },
        ],
        attempted: 2,
        owed: vec![],
        moves: vec![Move { from: "spot-b".into(), to: "spot-a".into(), n: 2 }],
        live: [("spot-a".to_string(), live_a)].into(),
        looked_at: [("spot-a".to_string(), 3)].into(),
        remakes: vec![],
    });
    let warning = spot_warning(&observed, 0, InstanceAction::Terminate);
    let alone = run(&cfg, &record, &observed, std::slice::from_ref(&warning), now());
    assert_eq!(desired(&alone, "spot-a"), Some(6), "{:#?}", alone.actions);

    let surge = ahead(&cfg, &record, &observed, &[0]).expect("surged ahead");
    assert_eq!((surge.from, surge.to), (5, 6));
    let full = run(&cfg, &applied_record(&surge.record), &after_surge(&observed, 1), &[warning], now());
    assert_eq!(desired(&full, "spot-a"), None, "made once, ahead: {:#?} {:#?}", full.actions, full.notes);
    assert!(full.surplus.is_empty(), "{:#?}", full.notes);
}

/// Batch 1's surge ahead (two warnings, 5 -> 7) landed and its run died before
/// the full read. Batch 2's surge ahead (one warning) stacks on it: reads 7, sets 8, its
/// surge `holds_at: Some(7)`, which batch 1's journal, settled first, leaves as it is.
#[test]
fn two_stacked_surges_ahead_make_each_replacement_once() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(5)).build();
    let first = ahead(&cfg, &PoolRecord::default(), &observed, &[0, 1]).expect("batch 1 ahead");
    assert_eq!((first.from, first.to), (5, 7));
    // Landed; the run died before the full plan.
    let record = applied_record(&first.record);
    let seen = after_surge(&observed, 2);
    let size = AsgSize { live: None, ..seen.spot[0].size() };
    let second = urgent_surge(&cfg, &cfg.pools[0], &record, &warned(&observed, &[2]), None, 0, &size, None, now())
        .expect("batch 2 ahead, stacked");
    assert_eq!((second.from, second.to), (7, 8));
    let mut after = seen.clone();
    after.spot[0].desired = 8;
    let mut launching = after.spot[0].instances.last().unwrap().clone();
    launching.id = "i-ahead2".into();
    after.spot[0].instances.push(launching);
    let warnings: Vec<Event> =
        [0, 1, 2].iter().map(|&n| spot_warning(&observed, n, InstanceAction::Terminate)).collect();
    let full = run(&cfg, &applied_record(&second.record), &after, &warnings, now());
    assert_eq!(desired(&full, "spot-a"), None, "three made ahead: {:#?} {:#?}", full.actions, full.notes);
    assert!(full.surplus.is_empty(), "{:#?}", full.notes);
}

/// Spot kept off by its rate, on-demand with room under the fallback cap: the surge ahead
/// is the full plan's fallback unit, and the full plan after it only drains and
/// terminates with decrement in the spot ASG. Warnings on-demand can take only some of
/// are left to the full plan, which splits them.
#[test]
fn a_surge_ahead_onto_on_demand_is_a_fallback_unit_the_full_plan_keeps() {
    let cfg = with(|y| y.replace("spot_asgs: [spot-a, spot-b]", "spot_asgs: [spot-a]"));
    let mut record = PoolRecord::default();
    let rate =
        Unavailable { until: now() + Duration::minutes(10), reason: "rate".into(), by: KeptOffBy::InterruptionRate };
    record.unavailable.insert("spot-a".into(), rate);
    let mut observed = pool().spot("spot-a", sized(5)).on_demand(sized(1)).build();
    observed.spot.retain(|a| a.name == "spot-a");
    let size = AsgSize { live: None, ..observed.spot[0].size() };
    let od_size = AsgSize { live: None, ..observed.on_demand.as_ref().unwrap().size() };
    let surge =
        urgent_surge(&cfg, &cfg.pools[0], &record, &warned(&observed, &[0]), None, 0, &size, Some(&od_size), now())
            .unwrap();
    assert_eq!((surge.asg.as_str(), surge.from, surge.to), ("od", 1, 2));
    assert_eq!(surge.record.fallback_units, 1);
    assert_eq!(surge.record.journal.as_ref().map(|j| j.units_added), Some(1));
    let entry = surge.record.interruptions[0].surge.as_ref().unwrap();
    assert_eq!((entry.asg.as_str(), entry.fallback_unit, entry.holds_at), ("od", true, Some(1)));

    let mut after = observed.clone();
    let od_after = od(&mut after);
    od_after.desired = 2;
    let mut launching = od_after.instances[0].clone();
    launching.id = "i-od-ahead".into();
    launching.lifecycle_state = LifecycleState::Pending;
    od_after.instances.push(launching);
    let warning = spot_warning(&observed, 0, InstanceAction::Terminate);
    let full = run(&cfg, &applied_record(&surge.record), &after, &[warning], now());
    assert_eq!(kinds(&full), vec!["record", "cordon", "drain", "terminate"], "{:#?} {:#?}", full.actions, full.notes);
    assert!(full.actions.iter().any(|a| matches!(&a.kind, ActionKind::TerminateInstance { asg, decrement: true, .. }
        if asg == "spot-a")));
    assert_eq!(full.record.fallback_units, 1, "{:#?}", full.notes);
    assert!(full.surplus.is_empty(), "{:#?}", full.notes);

    // Two warnings, room on on-demand for one: the full plan's.
    let one_left = AsgSize { desired: 2, max: 2, ..od_size };
    let mut near_cap = record.clone();
    near_cap.fallback_units = 3;
    let why = urgent_surge(
        &cfg,
        &cfg.pools[0],
        &near_cap,
        &warned(&observed, &[0, 1]),
        None,
        0,
        &size,
        Some(&AsgSize { max: 10, ..one_left }),
        now(),
    )
    .unwrap_err();
    assert!(why.contains("takes 1 of 2"), "{why}");
}
