//! Headroom from a percent: schedules, overrides, the interruption boost, bounds.

use super::*;

#[test]
fn headroom_uses_the_schedule_that_fired_last_in_its_time_zone() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(2)).build();
    observed.demand = Some(demand(40_000, 80));
    // 11:00 Paris: the 07:00 profile (25%) is in force: max(40*0.25/1, 80*0.25/2) = 10.
    let p = run(&cfg, &PoolRecord::default(), &observed, &[], now());
    assert!(
        matches!(p.actions.last().unwrap().kind, ActionKind::SetHeadroomReplicas { to: 10, .. }),
        "{:#?}",
        p.actions
    );
    assert!(p.actions.last().unwrap().reason.contains("0 7 * * MON-FRI"));
    // Friday 05:30 UTC = 06:30 Paris: Thursday's 19:00 profile (5%) is in force: ceil(2) = 2.
    let early = Utc.with_ymd_and_hms(2026, 11, 20, 5, 30, 0).unwrap();
    let p = run(&cfg, &PoolRecord::default(), &observed, &[], early);
    assert!(matches!(p.actions.last().unwrap().kind, ActionKind::SetHeadroomReplicas { to: 2, .. }));
    // Saturday noon: still Friday's 19:00 profile.
    let weekend = Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, 0).unwrap();
    let PercentInForce { percent, source, .. } =
        headroom_percent(&cfg.pools[0].headroom, &PoolRecord::default(), weekend);
    assert_eq!(percent, 5);
    assert!(
        matches!(source, PercentSource::Schedule { fired_at, .. } if fired_at == Utc.with_ymd_and_hms(2026, 11, 20, 18, 0, 0).unwrap())
    );
}

#[test]
fn headroom_default_without_schedules_and_override_wins() {
    let cfg = with(|y| y.split("      schedules:").next().unwrap().to_string());
    let mut record = PoolRecord::default();
    assert_eq!(headroom_percent(&cfg.pools[0].headroom, &record, now()).percent, 10);
    let over = event(
        Signal::HeadroomOverride { pool: "p".into(), percent: 40, duration: "2h".parse().unwrap() },
        now() - Duration::minutes(30),
    );
    let mut observed = pool().spot("spot-a", sized(2)).build();
    observed.demand = Some(demand(10_000, 10));
    let p = run(&cfg, &record, &observed, std::slice::from_ref(&over), now());
    assert!(
        matches!(p.actions.last().unwrap().kind, ActionKind::SetHeadroomReplicas { to: 4, .. }),
        "40% of 10 CPU = 4 pods"
    );
    record = p.record.clone();
    assert_eq!(record.headroom_override.as_ref().unwrap().until, now() + Duration::minutes(90));
    // An older override delivered late does not replace the newer one.
    let older = event(
        Signal::HeadroomOverride { pool: "p".into(), percent: 1, duration: "5h".parse().unwrap() },
        now() - Duration::hours(1),
    );
    let p2 = run(&cfg, &record, &observed, &[older], now());
    assert_eq!(p2.record.headroom_override, record.headroom_override);
    // After it expires, the default returns and the record forgets it.
    let later = now() + Duration::hours(2);
    let p3 = run(&cfg, &record, &observed, &[], later);
    assert_eq!(p3.record.headroom_override, None);
    assert!(
        matches!(p3.actions.last().unwrap().kind, ActionKind::SetHeadroomReplicas { to: 1, .. }),
        "10% of 10 CPU = 1"
    );
}

#[test]
fn headroom_boost_after_interruption_and_clamp() {
    let cfg = config();
    let mut record = PoolRecord::default();
    record.disruptions.push(Disruption {
        instance_id: "i-1".into(),
        asg: "spot-a".into(),
        at: now() - Duration::minutes(10),
        kind: DisruptionKind::InterruptionWarning,
    });
    let PercentInForce { percent, boosted, .. } = headroom_percent(&cfg.pools[0].headroom, &record, now());
    assert_eq!((percent, boosted), (35, true));
    let PercentInForce { percent, .. } =
        headroom_percent(&cfg.pools[0].headroom, &record, now() + Duration::minutes(25));
    assert_eq!(percent, 25, "boost lasts boost_for (30m) after the interruption");
    let h = &cfg.pools[0].headroom;
    assert_eq!(headroom_replicas(h, &demand(0, 0), 25), (0, 1), "clamped up to min 1");
    assert_eq!(headroom_replicas(h, &demand(1_000_000, 1), 25), (250, 30), "clamped down to max 30");
    assert_eq!(headroom_replicas(h, &demand(1_000, 100), 10), (5, 5), "memory dominates: 10Gi / 2Gi");
}

#[test]
fn headroom_needs_demand_and_changes_only_what_differs() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(2)).build();
    let p = run(&cfg, &PoolRecord::default(), &observed, &[], now());
    assert!(p.actions.is_empty() || !kinds(&p).contains(&"headroom"));
    assert!(p.notes.iter().any(|n| n.contains("no demand known")));
    assert_eq!(p.headroom, None, "no decision without demand");
    observed.demand = Some(demand(40_000, 80));
    observed.headroom = unit_slots(10);
    let unchanged = run(&cfg, &PoolRecord::default(), &observed, &[], now());
    assert!(!kinds(&unchanged).contains(&"headroom"));
    // The decision is in the plan (and its log line) even when nothing changes.
    let decision = unchanged.headroom.expect("decided");
    assert_eq!((decision.wanted, decision.replicas), (10, 10));
    assert_eq!(decision.clamped(), std::cmp::Ordering::Equal);
    assert!(unchanged.log_line().contains(r#""headroom":{"percent":"#), "{}", unchanged.log_line());
    let mut capped = cfg.clone();
    capped.pools[0].headroom.max = 4;
    let held = run(&capped, &PoolRecord::default(), &observed, &[], now()).headroom.unwrap();
    assert_eq!((held.wanted, held.replicas, held.clamped()), (10, 4, std::cmp::Ordering::Less), "held at max");
    // The forwarder's newer demand wins over an older listing.
    let newer = crate::event::PoolDemandDetail {
        shapes: Vec::new(),
        pool: "p".into(),
        cpu_millis: 80_000,
        memory_bytes: 0,
        pods: 1,
        nodes: 1,
        observed_at: now(),
    };
    let p = run(&cfg, &PoolRecord::default(), &observed, &[event(Signal::PoolDemand(newer), now())], now());
    assert!(matches!(p.actions.last().unwrap().kind, ActionKind::SetHeadroomReplicas { from: Some(10), to: 20, .. }));
}

#[test]
fn a_demand_time_ahead_of_now_is_taken_as_now() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).build();
    let ahead = event(
        Signal::PoolDemand(crate::event::PoolDemandDetail {
            shapes: Vec::new(),
            pool: "p".into(),
            cpu_millis: 10_000,
            memory_bytes: 1 << 30,
            pods: 10,
            nodes: 3,
            observed_at: now() + Duration::days(1),
        }),
        now(),
    );
    let p = run(&cfg, &PoolRecord::default(), &observed, &[ahead], now());
    assert_eq!(p.record.demand.unwrap().observed_at, now());
    assert!(p.notes.iter().any(|n| n.contains("ahead of now")), "{:?}", p.notes);
}
