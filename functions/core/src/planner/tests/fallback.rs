//! Fallback: capacity errors and interruption rates move the shortfall to healthy spot, then on-demand.

use super::failback::in_fallback;
use super::journal::{journaled, named_surplus};
use super::*;

#[test]
fn capacity_error_moves_the_shortfall_to_healthy_spot_first_then_on_demand() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(6).live(2)).build();
    observed.spot[1].max = 1; // spot-b can take one
    let p = run(&cfg, &PoolRecord::default(), &observed, &[capacity_error("spot-a", now())], now());
    assert_eq!(desired(&p, "spot-a"), Some(2));
    assert_eq!(desired(&p, "spot-b"), Some(1));
    assert_eq!(desired(&p, "od"), Some(3));
    assert_eq!(p.record.fallback_units, 3);
    assert_eq!(total(&p, &observed), observed.total_desired(), "total desired never drops");
    assert!(p.record.unavailable["spot-a"].until == now() + Duration::minutes(15));
}

/// A pool without an on-demand ASG: fallback stays within spot, says why the rest
/// stays short, and interruptions, failback state and headroom work as in any pool.
#[test]
fn a_spot_only_pool_moves_within_spot_and_never_to_on_demand() {
    let cfg = with(|y| y.replace("    on_demand_asg: od\n", ""));
    assert_eq!(cfg.pools[0].on_demand_asg, None, "the test's config has no on-demand ASG");
    let mut observed = pool().spot("spot-a", sized(6).live(2)).build();
    observed.on_demand = None;
    observed.spot[1].max = 1; // spot-b can take one
    let p = run(&cfg, &PoolRecord::default(), &observed, &[capacity_error("spot-a", now())], now());
    assert_eq!(desired(&p, "spot-a"), Some(5), "one moved to spot-b");
    assert_eq!(desired(&p, "spot-b"), Some(1));
    assert_eq!(p.record.fallback_units, 0);
    assert!(p.actions.iter().all(|a| !format!("{:?}", a.kind).contains("\"od\"")), "{:#?}", p.actions);
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("3 missing instance(s) of spot-a stay on spot: the pool has no on-demand ASG")),
        "{:#?}",
        p.notes
    );
    // A record that still holds fallback (the on-demand ASG was taken out of the config)
    // lets it go instead of planning against an ASG the pool no longer has.
    let record = PoolRecord { fallback_units: 2, fallback_since: Some(now()), ..Default::default() };
    let p = run(&cfg, &record, &observed, &[], now());
    assert_eq!((p.record.fallback_units, p.record.fallback_since), (0, None));
    assert!(p.notes.iter().any(|n| n.contains("the pool has no on-demand ASG")), "{:#?}", p.notes);
    // An interruption surges within spot.
    let observed = {
        let mut o = pool().spot("spot-a", sized(3)).build();
        o.on_demand = None;
        o
    };
    let warning = spot_warning(&observed, 0, InstanceAction::Terminate);
    let p = run(&cfg, &PoolRecord::default(), &observed, &[warning], now());
    assert_eq!(kinds(&p), vec!["record", "desired", "cordon", "drain", "terminate"]);
    assert_eq!(desired(&p, "spot-a"), Some(4));
}

/// The on-demand ASG taken out of the config while a fallback move's raise on it is
/// unconfirmed: the move is re-planned, never finished by lowering the spot ASG alone.
#[test]
fn a_move_to_an_on_demand_asg_that_left_the_pool_is_not_finished_by_its_lower() {
    let (cfg, observed) = one_spot(pool().spot("spot-a", sized(6).live(4)).on_demand(sized(2)));
    let p = run(&cfg, &PoolRecord::default(), &observed, &[capacity_error("spot-a", now())], now());
    assert_eq!((desired(&p, "od"), desired(&p, "spot-a")), (Some(4), Some(4)), "the move as planned");
    // Nothing applied (a stop before the first call); then od leaves the config.
    let cfg = Config { pools: vec![PoolConfig { on_demand_asg: None, ..cfg.pools[0].clone() }], ..cfg };
    let mut later = observed.clone();
    later.on_demand = None;
    let next = run(&cfg, &p.record, &later, &[], now() + Duration::seconds(30));
    assert_eq!(desired(&next, "spot-a"), None, "spot-a is not lowered: no receiver was raised\n{:#?}", next.actions);
    assert!(next.notes.iter().any(|n| n.contains("did not land")), "{:#?}", next.notes);
}

/// The same, but the raise on the on-demand ASG may have landed (its answer was lost):
/// what it added is no longer Ballast's to withdraw, so it is named.
#[test]
fn a_raise_that_may_have_landed_on_an_asg_that_left_the_pool_is_named() {
    let (cfg, observed) = one_spot(pool().spot("spot-a", sized(6).live(4)).on_demand(sized(2)));
    let p = run(&cfg, &PoolRecord::default(), &observed, &[capacity_error("spot-a", now())], now());
    let cfg = Config { pools: vec![PoolConfig { on_demand_asg: None, ..cfg.pools[0].clone() }], ..cfg };
    let mut later = observed.clone();
    later.on_demand = None;
    let next = run(&cfg, &journaled(&p, 0), &later, &[], now() + Duration::seconds(30));
    assert_eq!(desired(&next, "spot-a"), None, "spot-a is not lowered\n{:#?}", next.actions);
    assert_eq!(next.surplus.get("od"), Some(&2), "{:#?}", next.notes);
    assert_eq!(named_surplus(&next), 2);
}

/// A failback step's victims when the on-demand ASG leaves the pool: uncordoned.
#[test]
fn failback_victims_are_released_when_the_on_demand_asg_leaves_the_pool() {
    let cfg = config();
    let (record, observed) = in_fallback();
    let victims: Vec<String> =
        observed.on_demand.as_ref().unwrap().instances.iter().take(2).map(|i| i.id.clone()).collect();
    let step = FailbackStep {
        spot_asg: "spot-a".into(),
        count: 2,
        started_at: now(),
        plan: 1,
        desired_before: 2,
        raised_to: 0,
        ready_before: 2,
        instances_before: None,
        unfilled_before: 0,
        victims: victims.clone(),
        victims_since: Some(now()),
        over_before: 0,
        asked: 0,
        seen_new: Vec::new(),
        floor_lowered_for: Vec::new(),
    };
    let record = PoolRecord { failback: Some(step), ..record };
    let cfg = Config { pools: vec![PoolConfig { on_demand_asg: None, ..cfg.pools[0].clone() }], ..cfg };
    let mut gone = observed.clone();
    gone.on_demand = None;
    for n in gone.nodes.iter_mut().filter(|n| victims.contains(&n.instance_id)) {
        n.unschedulable = true;
    }
    let p = run(&cfg, &record, &gone, &[], now() + Duration::minutes(1));
    assert_eq!(p.record.failback, None);
    assert_eq!(kinds(&p).iter().filter(|k| **k == "uncordon").count(), 2, "{:#?}", p.actions);
    assert!(p.notes.iter().any(|n| n.contains("victims") && n.contains("released")), "{:#?}", p.notes);
}

#[test]
fn fallback_respects_max_on_demand_asg_max_and_spot_min() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(9).live(1)).build();
    observed.spot[1].max = 0;
    let p = run(&cfg, &PoolRecord::default(), &observed, &[capacity_error("spot-a", now())], now());
    assert_eq!(desired(&p, "od"), Some(4), "max_on_demand 4");
    assert_eq!(desired(&p, "spot-a"), Some(5), "the rest stays on spot");
    assert!(p.notes.iter().any(|n| n.contains("stay on spot")));
    od(&mut observed).max = 2;
    let p = run(&cfg, &PoolRecord::default(), &observed, &[capacity_error("spot-a", now())], now());
    assert_eq!(desired(&p, "od"), Some(2), "on-demand ASG max");
    od(&mut observed).max = 10;
    observed.spot[0].min = 8;
    let p = run(&cfg, &PoolRecord::default(), &observed, &[capacity_error("spot-a", now())], now());
    assert_eq!(desired(&p, "spot-a"), Some(8), "never below the spot ASG's min");
    assert_eq!(desired(&p, "od"), Some(1));
    // Units already held count against the cap.
    let mut record = PoolRecord { fallback_units: 3, ..Default::default() };
    observed.spot[0].min = 0;
    od(&mut observed).desired = 3;
    record.unavailable.insert(
        "spot-a".into(),
        Unavailable { until: now() + Duration::minutes(5), reason: "x".into(), by: KeptOffBy::Capacity },
    );
    let p = run(&cfg, &record, &observed, &[], now());
    assert_eq!(desired(&p, "od"), Some(4));
}

#[test]
fn non_capacity_launch_errors_are_reported_not_fallen_back() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(6).live(2)).build();
    let quota = event(
        Signal::LaunchUnsuccessful(LaunchFailure {
            asg: "spot-a".into(),
            activity_id: "a1".into(),
            availability_zone: None,
            subnet_id: None,
            status_message: "vCPU limit".into(),
            cause: String::new(),
            error: LaunchError::Other(Some("VcpuLimitExceeded".into())),
            at: Some(now()),
        }),
        now(),
    );
    let p = run(&cfg, &PoolRecord::default(), &observed, std::slice::from_ref(&quota), now());
    assert_eq!(desired(&p, "od"), None);
    assert!(p.notes.iter().any(|n| n.contains("VcpuLimitExceeded") && n.contains("not falling back")));
    // Reported once.
    let again = run(&cfg, &p.record, &observed, &[quota], now());
    assert!(!again.notes.iter().any(|n| n.contains("VcpuLimitExceeded")));
}

#[test]
fn launch_grace_then_fallback_without_an_event() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(5).live(3)).build();
    let p = run(&cfg, &PoolRecord::default(), &observed, &[], now());
    assert_eq!(desired(&p, "spot-b"), None, "within grace: launching, not failing");
    assert_eq!(p.record.short_since["spot-a"], now());
    let later = now() + Duration::minutes(3);
    let p2 = run(&cfg, &p.record, &observed, &[], later);
    assert_eq!(desired(&p2, "spot-a"), Some(3));
    assert_eq!(desired(&p2, "spot-b"), Some(2), "healthy spot takes it before on-demand");
    // Whole again: the shortfall memory clears.
    let whole = pool().spot("spot-a", sized(3)).spot("spot-b", sized(2)).build();
    assert!(run(&cfg, &p2.record, &whole, &[], later).record.short_since.is_empty());
}

#[test]
fn capacity_errors_in_scaling_activities_count_too_and_expire() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(4).live(2)).build();
    observed.spot[1].max = 0;
    observed.spot[0].activities.push(ScalingActivity {
        id: "act-9".into(),
        status: ActivityStatus::Failed,
        description: "Launching a new EC2 instance.  Status Reason: Could not launch Spot Instances.".into(),
        status_message: "Could not launch Spot Instances. UnfulfillableCapacity - ...".into(),
        cause: String::new(),
        start: now() - Duration::minutes(1),
        end: Some(now() - Duration::minutes(1)),
    });
    let p = run(&cfg, &PoolRecord::default(), &observed, &[], now());
    assert_eq!(desired(&p, "od"), Some(2));
    // Fifteen minutes on, the mark is gone and an old activity does not renew it.
    let p2 = run(
        &cfg,
        &p.record,
        &pool().spot("spot-a", sized(2)).on_demand(sized(2)).build(),
        &[],
        now() + Duration::minutes(15),
    );
    assert!(p2.record.unavailable.is_empty());
}

#[test]
fn interruption_rate_marks_spot_unavailable() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(5)).build();
    let ids: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    let warnings: Vec<Event> = ids[..3]
        .iter()
        .enumerate()
        .map(|(n, id)| {
            event(
                Signal::SpotInterruption { instance_id: id.clone(), action: InstanceAction::Terminate },
                now() - Duration::minutes(n as i64),
            )
        })
        .collect();
    let p = run(&cfg, &PoolRecord::default(), &observed, &warnings, now());
    assert!(p.record.unavailable["spot-a"].reason.contains("3 interruptions within 10m"));
    // Replacements go to the next healthy spot ASG, not the failing one.
    assert_eq!(desired(&p, "spot-b"), Some(3));
    assert_eq!(desired(&p, "spot-a"), None);
    // Two are below the rate.
    let p = run(&cfg, &PoolRecord::default(), &observed, &warnings[..2], now());
    assert!(p.record.unavailable.is_empty());
}

#[test]
fn unplanned_losses_count_toward_the_rate() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(5)).build();
    let ids: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    let losses: Vec<Event> = ids[..3]
        .iter()
        .map(|id| {
            event(Signal::InstanceStateChange { instance_id: id.clone(), state: InstanceState::Terminated }, now())
        })
        .collect();
    let p = run(&cfg, &PoolRecord::default(), &observed, &losses, now());
    assert_eq!(p.record.disruptions.len(), 3);
    assert!(p.record.disruptions.iter().all(|d| d.kind == DisruptionKind::UnplannedLoss));
    assert!(p.record.unavailable.contains_key("spot-a"));
    let running =
        event(Signal::InstanceStateChange { instance_id: ids[4].clone(), state: InstanceState::Running }, now());
    assert!(run(&cfg, &PoolRecord::default(), &observed, &[running], now()).record.disruptions.is_empty());
}

#[test]
fn fallback_units_follow_the_on_demand_asg() {
    let cfg = config();
    let (record, mut observed) = in_fallback();
    observed.on_demand = Some(on_demand_asg(sized(1))); // CA removed two
    let p = run(&cfg, &record, &observed, &[], now());
    assert_eq!(p.record.fallback_units, 1);
}

// ---- guards ----

#[test]
fn dry_run_is_carried_on_the_plan() {
    let cfg = with(|y| y.replace("state_table: tbl", "state_table: tbl\ndry_run: true"));
    let observed = pool().spot("spot-a", sized(3)).build();
    let p =
        run(&cfg, &PoolRecord::default(), &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
    assert!(p.dry_run);
}

#[test]
fn desired_is_clamped_to_asg_bounds() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(3)).build();
    observed.spot[0].max = 3;
    observed.spot[1].max = 0;
    od(&mut observed).max = 0;
    let p = run(&cfg, &PoolRecord::default(), &observed, &[capacity_error("spot-a", now())], now());
    for action in &p.actions {
        if let ActionKind::SetDesiredCapacity { asg, to, .. } = &action.kind {
            let a = observed.asg(asg).unwrap();
            assert!(*to >= a.min && *to <= a.max);
        }
    }
}
