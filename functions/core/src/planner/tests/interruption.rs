//! Interruptions: spot warnings, rebalances, AWS Health, surges and their terminations.

use super::failback::{drain_count, failback_step_started};
use super::journal::{drain_blocked, journaled, made_only};
use super::*;

#[test]
fn interruption_surges_cordons_drains_and_terminates_with_decrement() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).build();
    let warning = spot_warning(&observed, 0, InstanceAction::Terminate);
    let p = run(&cfg, &PoolRecord::default(), &observed, std::slice::from_ref(&warning), now());
    assert_eq!(kinds(&p), vec!["record", "desired", "cordon", "drain", "terminate"]);
    assert_eq!(desired(&p, "spot-a"), Some(4));
    assert!(p
        .actions
        .iter()
        .any(|a| matches!(a.kind, ActionKind::TerminateInstance { decrement: true, only_if_drained: false, .. })));
    // Delivered again (or late), after the plan was applied: nothing new.
    let again = run(&cfg, &applied(&p), &observed, &[warning], now() + Duration::seconds(20));
    assert!(again.effects().next().is_none(), "{:#?}", again.actions);
}

/// The drain a plan gives an instance's node, and its reason.
fn drain_of(plan: &Plan, instance_id: &str) -> Option<(crate::units::HumanDuration, String)> {
    plan.actions.iter().find_map(|a| match &a.kind {
        ActionKind::DrainNode { instance_id: id, timeout, .. } if id == instance_id => {
            Some((*timeout, a.reason.clone()))
        }
        _ => None,
    })
}

/// The drain a plan gives an instance's node, in seconds.
fn drain_seconds(plan: &Plan, instance_id: &str) -> Option<u64> {
    drain_of(plan, instance_id).map(|(timeout, _)| timeout.0.as_secs())
}

/// The config with rebalance recommendations surged for.
fn surging_rebalances() -> Config {
    with(|y| {
        y.replace("interruption: { drain_timeout: 90s }", "interruption: { drain_timeout: 90s, rebalance: surge }")
    })
}

/// The record after `plan`, its first interruption's terminate never made (the run died
/// in its drain, or left it to another): the next plan plans it again.
fn terminate_never_made(plan: &Plan) -> PoolRecord {
    let mut record = applied(plan);
    record.interruptions[0].planned_at = None;
    record.interruptions[0].terminated = false;
    record
}

#[test]
fn a_spot_warnings_drain_ends_drain_timeout_after_the_warning_whichever_plan_drains() {
    // A run that takes over a drained plan (a second warning during the drain) or retries
    // it plans the node's drain again. From the start, every takeover in a reclaim wave
    // would push the terminate-with-decrement past the two minutes' notice: AWS reclaims
    // the node first and its ASG replaces it beside the surge.
    let cfg = surging_rebalances();
    let observed = pool().spot("spot-a", sized(3)).build();
    let id = observed.spot[0].instances[0].id.clone();
    for (signal, drained_after_60s) in [
        (Signal::SpotInterruption { instance_id: id.clone(), action: InstanceAction::Terminate }, 40),
        // No reclaim follows a rebalance recommendation or a Health change at a set time:
        // their drains may start again.
        (Signal::RebalanceRecommendation { instance_id: id.clone() }, 90),
    ] {
        let first = run(&cfg, &PoolRecord::default(), &observed, &[event(signal.clone(), now())], now());
        assert_eq!(drain_seconds(&first, &id), Some(90));
        let record = terminate_never_made(&first);
        let again = run(&cfg, &record, &observed, &[], now() + Duration::seconds(60));
        assert_eq!(drain_seconds(&again, &id), Some(drained_after_60s), "{signal:?}");
        if drained_after_60s == 40 {
            let late = run(&cfg, &record, &observed, &[], now() + Duration::seconds(110));
            assert_eq!(drain_seconds(&late, &id), Some(5), "past it: evictions still asked for, briefly");
            assert!(late.actions.iter().any(|a| a.reason.contains("drains until")), "{:#?}", late.actions);
        }
    }
}

/// The record a run leaves when it dies in its drain (or leaves the rest to another):
/// its raises landed, its terminate not reached.
pub(super) fn left_in_its_drain(plan: &Plan) -> PoolRecord {
    let mut record = plan.record.clone();
    if let Some(journal) = record.journal.as_mut() {
        let mut reached = 0;
        for call in &mut journal.calls {
            if let CapacityCall::SetDesired { done, .. } = call {
                *done = true;
                reached += 1;
            }
        }
        journal.attempted = reached;
    }
    record
}

#[test]
fn a_spot_warning_after_a_rebalance_bounds_the_drain_as_one_alone() {
    // AWS often sends the rebalance recommendation just before the warning: the
    // interruption, recorded for the first, takes the warning's reclaim.
    let cfg = surging_rebalances();
    let observed = pool().spot("spot-a", sized(3)).build();
    let id = observed.spot[0].instances[0].id.clone();
    let other = observed.spot[0].instances[1].id.clone();
    let first = run(
        &cfg,
        &PoolRecord::default(),
        &observed,
        &[event(Signal::RebalanceRecommendation { instance_id: id.clone() }, now())],
        now(),
    );
    assert_eq!(drain_seconds(&first, &id), Some(90));
    let warned_at = now() + Duration::seconds(20);
    let warning =
        event(Signal::SpotInterruption { instance_id: id.clone(), action: InstanceAction::Terminate }, warned_at);
    let second = run(&cfg, &left_in_its_drain(&first), &observed, &[warning], warned_at);
    assert_eq!(drain_seconds(&second, &id), Some(90), "taken over at the warning: 90 s from it");
    let third_at = now() + Duration::seconds(50);
    let third =
        event(Signal::SpotInterruption { instance_id: other.clone(), action: InstanceAction::Terminate }, third_at);
    let third = run(&cfg, &left_in_its_drain(&second), &observed, &[third], third_at);
    assert_eq!(drain_seconds(&third, &other), Some(90));
    assert_eq!(drain_seconds(&third, &id), Some(70), "warned at +20, drained again at +50: until +120 less delivery");
}

#[test]
fn an_ordinary_first_plan_for_a_spot_warning_drains_the_whole_drain_timeout() {
    // Every warning reaches Ballast a little after its time: its first plan drains the
    // whole drain_timeout, in whole seconds, with no word of a cut.
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).build();
    let id = observed.spot[0].instances[0].id.clone();
    let signal = Signal::SpotInterruption { instance_id: id.clone(), action: InstanceAction::Terminate };
    let first = run(
        &cfg,
        &PoolRecord::default(),
        &observed,
        &[event(signal, now() - Duration::seconds(3))],
        now() + Duration::milliseconds(250),
    );
    let (timeout, reason) = drain_of(&first, &id).unwrap();
    assert_eq!((timeout.0, reason.contains("drains until")), (std::time::Duration::from_secs(90), false));
    // Cut, it is whole seconds too.
    let again = run(&cfg, &terminate_never_made(&first), &observed, &[], now() + Duration::milliseconds(40_250));
    let (timeout, reason) = drain_of(&again, &id).unwrap();
    assert_eq!((timeout.to_string(), reason.contains("drains until")), ("56s".to_string(), true));
}

#[test]
fn hibernate_stop_and_batches_surge_once_per_asg() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).build();
    let events: Vec<Event> = [InstanceAction::Hibernate, InstanceAction::Stop, InstanceAction::Terminate]
        .into_iter()
        .enumerate()
        .map(|(n, a)| spot_warning(&observed, n, a))
        .collect();
    let cfg3 = with(|y| y.replace("count: 3", "count: 9"));
    let p = run(&cfg3, &PoolRecord::default(), &observed, &events, now());
    let sets: Vec<_> = p.actions.iter().filter(|a| matches!(a.kind, ActionKind::SetDesiredCapacity { .. })).collect();
    assert_eq!(sets.len(), 1, "one SetDesiredCapacity per ASG per batch");
    assert_eq!(desired(&p, "spot-a"), Some(6));
    assert_eq!(kinds(&p).iter().filter(|k| **k == "terminate").count(), 3);
    assert!(p.actions.iter().any(|a| a.reason.contains("hibernate, no lead time")));
    let _ = cfg;
}

#[test]
fn interruption_surge_goes_to_on_demand_when_spot_is_failing_and_counts_as_fallback() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(3)).build();
    observed.spot[1].max = 0;
    let mut record = PoolRecord::default();
    record.unavailable.insert(
        "spot-a".into(),
        Unavailable { until: now() + Duration::minutes(5), reason: "ICE".into(), by: KeptOffBy::Capacity },
    );
    let p = run(&cfg, &record, &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
    assert_eq!(desired(&p, "od"), Some(1));
    assert_eq!(p.record.fallback_units, 1);
    assert_eq!(p.record.interruptions[0].surge.as_ref().unwrap().asg, "od");
}

/// spot-a (3 instances, minimum `min`) kept off by its interruption rate; spot-b and
/// on-demand without room.
fn kept_off_by_its_rate_with_nowhere_else(min: u32) -> (Config, ObservedPool, PoolRecord) {
    let mut observed = pool().spot("spot-a", sized(3)).build();
    observed.spot[0].min = min;
    observed.spot[1].max = 0;
    od(&mut observed).max = 0;
    let mut record = PoolRecord::default();
    let by_rate = Unavailable {
        until: now() + Duration::minutes(5),
        reason: "5 interruptions".into(),
        by: KeptOffBy::InterruptionRate,
    };
    record.unavailable.insert("spot-a".into(), by_rate);
    (config(), observed, record)
}

#[test]
fn a_failing_spot_asg_with_nowhere_else_to_go_is_surged_before_the_drain() {
    // Kept off by the interruption rate, the other spot ASG and on-demand full: the slot
    // stays in spot-a either way, so it is asked for at the warning, not after the drain.
    let (cfg, observed, record) = kept_off_by_its_rate_with_nowhere_else(0);
    let p = run(&cfg, &record, &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
    assert_eq!(desired(&p, "spot-a"), Some(4), "{:#?}", p.actions);
    let surge_at = p.actions.iter().position(|a| matches!(a.kind, ActionKind::SetDesiredCapacity { .. }));
    let terminate_at = p.actions.iter().position(|a| matches!(a.kind, ActionKind::TerminateInstance { .. }));
    assert!(surge_at < terminate_at, "the surge comes before the drain and the terminate");
    assert!(p.actions.iter().any(|a| matches!(a.kind, ActionKind::TerminateInstance { decrement: true, .. })));
    assert_eq!(p.record.fallback_units, 0);
    assert_eq!(p.record.interruptions[0].surge.as_ref().unwrap().asg, "spot-a");
}

#[test]
fn a_kept_off_asg_with_missing_instances_is_not_surged() {
    // spot-a short past its grace: this plan moves a missing slot to spot-b (its last
    // room). A surge in spot-a would buy nothing, and be netted into that move's lower,
    // then taken as made if spot-b's raise failed: the instance goes without decrement.
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(10).live(8)).spot("spot-b", sized(3).max(4)).build();
    od(&mut observed).max = 0;
    let mut record = PoolRecord::default();
    record.short_since.insert("spot-a".into(), now() - Duration::minutes(10));
    let p = run(&cfg, &record, &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
    assert_eq!(desired(&p, "spot-b"), Some(4), "{:#?}", p.actions);
    assert_eq!(desired(&p, "spot-a"), Some(9), "the move's lower, no surge netted into it");
    assert!(p.record.interruptions[0].surge.is_none());
    assert!(p.actions.iter().any(|a| matches!(a.kind, ActionKind::TerminateInstance { decrement: false, .. })));
    let note = p.notes.iter().find(|n| n.contains("no room to surge")).expect("the note");
    assert!(note.contains("spot-a cannot launch now"), "{note}");
    assert!(note.contains("od is at its maximum 0"), "{note}");
    assert_eq!(total(&p, &observed), observed.total_desired());
}

#[test]
fn a_kept_off_asg_at_its_minimum_is_surged_too() {
    // The surge comes before the decrement, so the minimum holds: net nothing, and the
    // replacement asked for at the warning.
    let (cfg, observed, record) = kept_off_by_its_rate_with_nowhere_else(3);
    let p = run(&cfg, &record, &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
    assert_eq!(desired(&p, "spot-a"), Some(4), "{:#?}", p.actions);
    assert!(p.actions.iter().any(|a| matches!(a.kind, ActionKind::TerminateInstance { decrement: true, .. })));
}

#[test]
fn a_spot_asg_kept_off_by_a_capacity_error_is_not_surged_even_past_its_rate() {
    // A capacity error keeps spot-a off; three warnings reach its interruption rate too.
    // The rate's mark does not hide the capacity error: spot-a cannot launch, so its
    // instances go without decrement, asking for nothing it cannot fill.
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(3)).build();
    observed.spot[1].max = 0;
    od(&mut observed).max = 0;
    let mut record = PoolRecord::default();
    let capacity = Unavailable { until: now() + Duration::minutes(1), reason: "ICE".into(), by: KeptOffBy::Capacity };
    record.unavailable.insert("spot-a".into(), capacity);
    let warnings: Vec<Event> = (0..3).map(|n| spot_warning(&observed, n, InstanceAction::Terminate)).collect();
    let p = run(&cfg, &record, &observed, &warnings, now());
    let kept = &p.record.unavailable["spot-a"];
    assert_eq!((kept.by, kept.until), (KeptOffBy::Capacity, now() + Duration::minutes(15)), "{kept:?}");
    assert_eq!(desired(&p, "spot-a"), None, "{:#?}", p.actions);
    assert!(p.notes.iter().any(|n| n.contains("spot-a cannot launch now")), "{:#?}", p.notes);
    // The same three warnings with spot-a healthy before: kept off by the rate alone, and
    // surged, since it still launches.
    let p = run(&cfg, &PoolRecord::default(), &observed, &warnings, now());
    assert_eq!(p.record.unavailable["spot-a"].by, KeptOffBy::InterruptionRate);
    assert_eq!(desired(&p, "spot-a"), Some(6), "{:#?}", p.actions);
}

#[test]
fn no_room_to_surge_terminates_without_decrement() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(3)).build();
    observed.spot[0].max = 3;
    observed.spot[1].max = 0;
    od(&mut observed).max = 0;
    let p =
        run(&cfg, &PoolRecord::default(), &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
    assert!(p.actions.iter().any(|a| matches!(a.kind, ActionKind::TerminateInstance { decrement: false, .. })));
    assert!(p.notes.iter().any(|n| n.contains("no room to surge")));
    assert_eq!(total(&p, &observed), observed.total_desired());
}

#[test]
fn surge_and_drain_can_be_turned_off() {
    let cfg = with(|y| {
        y.replace(
            "interruption: { drain_timeout: 90s }",
            "interruption: { drain_timeout: 90s, surge: false, drain: false }",
        )
    });
    let observed = pool().spot("spot-a", sized(3)).build();
    let p =
        run(&cfg, &PoolRecord::default(), &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
    assert_eq!(kinds(&p), vec!["record", "terminate"]);
    assert!(p.actions.iter().any(|a| matches!(a.kind, ActionKind::TerminateInstance { decrement: false, .. })));
}

#[test]
fn rebalance_follows_config() {
    let observed = pool().spot("spot-a", sized(3)).build();
    let id = observed.spot[0].instances[1].id.clone();
    let rebalance = event(Signal::RebalanceRecommendation { instance_id: id }, now());
    let ignore = run(&config(), &PoolRecord::default(), &observed, std::slice::from_ref(&rebalance), now());
    assert!(ignore.effects().next().is_none());
    assert!(ignore.notes.iter().any(|n| n.contains("ignored")));
    let surge = run(&surging_rebalances(), &PoolRecord::default(), &observed, &[rebalance], now());
    assert_eq!(kinds(&surge), vec!["record", "desired", "cordon", "drain", "terminate"]);
    assert!(surge.record.disruptions.is_empty(), "a recommendation is not an interruption");
}

#[test]
fn health_scheduled_change_replaces_ahead() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).on_demand(sized(2)).build();
    let od_id = observed.on_demand.as_ref().unwrap().instances[0].id.clone();
    let health = event(
        Signal::ScheduledChange {
            event_type_code: "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED".into(),
            start_time: Some(now() + Duration::days(3)),
            end_time: None,
            instance_ids: vec![od_id.clone(), "i-0000000000000dead".into()],
        },
        now(),
    );
    let p = run(&cfg, &PoolRecord::default(), &observed, &[health], now());
    assert_eq!(desired(&p, "od"), Some(3), "the on-demand instance's own ASG surges");
    assert_eq!(p.record.fallback_units, 0, "a replacement, not a fallback");
    assert!(p.actions.iter().any(|a| matches!(&a.kind, ActionKind::TerminateInstance { instance_id, decrement: true, .. } if *instance_id == od_id)));
}

#[test]
fn interrupted_instance_gone_is_forgotten_and_unknown_instances_noted() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).build();
    let p =
        run(&cfg, &PoolRecord::default(), &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
    let mut after = observed.clone();
    after.spot[0].instances.remove(0); // terminated and gone
    let p2 = run(&cfg, &p.record, &after, &[], now() + Duration::minutes(2));
    assert!(p2.record.interruptions.is_empty());
    let stranger = event(
        Signal::SpotInterruption { instance_id: "i-0123456789abcdef0".into(), action: InstanceAction::Terminate },
        now(),
    );
    let p3 = run(&cfg, &PoolRecord::default(), &observed, &[stranger], now());
    assert!(p3.notes.iter().any(|n| n.contains("not (or no longer) in pool")));
}

#[test]
fn replanned_after_drain_timeout_if_instance_still_there() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).build();
    let p =
        run(&cfg, &PoolRecord::default(), &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
    let mut surged = observed.clone();
    surged.spot[0].desired = 4;
    let retry = run(&cfg, &applied(&p), &surged, &[], now() + Duration::minutes(3));
    assert_eq!(desired(&retry, "spot-a"), None, "the surge is not repeated");
    assert!(kinds(&retry).contains(&"terminate"));
    // If the run died before the surge (the journal shows it never reached the ASG),
    // the surge is made again.
    let restore = run(&cfg, &p.record, &observed, &[], now() + Duration::minutes(3));
    assert_eq!(desired(&restore, "spot-a"), Some(4));
}

#[test]
fn scale_ins_and_on_demand_instances_of_a_mixed_asg_are_not_interruptions() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(5)).build();
    let ids: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    // Cluster-autoscaler's scale-in: the ASG is terminating it already.
    observed.spot[0].instances[0].lifecycle_state = LifecycleState::Terminating;
    // A mixed-instances ASG's on-demand instance.
    observed.spot[0].instances[1].market = Market::OnDemand;
    let losses: Vec<Event> = ids[..2]
        .iter()
        .map(|id| {
            event(Signal::InstanceStateChange { instance_id: id.clone(), state: InstanceState::ShuttingDown }, now())
        })
        .collect();
    let p = run(&cfg, &PoolRecord::default(), &observed, &losses, now());
    assert!(p.record.disruptions.is_empty(), "{:?}", p.record.disruptions);
    let warning =
        event(Signal::SpotInterruption { instance_id: ids[1].clone(), action: InstanceAction::Terminate }, now());
    assert!(run(&cfg, &PoolRecord::default(), &observed, &[warning], now()).record.disruptions.is_empty());
}

#[test]
fn a_surge_is_withdrawn_when_the_instance_leaves_before_ballast_removes_it() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).build();
    let warning = spot_warning(&observed, 0, InstanceAction::Terminate);
    let p = run(&cfg, &PoolRecord::default(), &observed, std::slice::from_ref(&warning), now());
    // The surge landed; AWS reclaimed the instance before the terminate was made (the
    // run died in the drain). The ASG launches its own replacement: one too many.
    let mut record = p.record.clone();
    let journal = record.journal.as_mut().unwrap();
    journal.attempted = 1;
    if let CapacityCall::SetDesired { done, .. } = &mut journal.calls[0] {
        *done = true;
    }
    let mut later = pool().spot("spot-a", sized(4).live(3)).build();
    later.spot[0].instances.remove(0);
    let p2 = run(&cfg, &record, &later, &[], now() + Duration::minutes(3));
    assert_eq!(desired(&p2, "spot-a"), Some(3), "one warning, one replacement: {:#?}", p2.actions);
}

#[test]
fn terminations_never_decrement_below_min_nor_double_replace_on_a_fixed_size_asg() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(4)).build();
    observed.spot[0].min = 3;
    observed.spot[0].max = 4;
    let warnings =
        [spot_warning(&observed, 0, InstanceAction::Terminate), spot_warning(&observed, 1, InstanceAction::Terminate)];
    let p = run(&cfg, &PoolRecord::default(), &observed, &warnings, now());
    let decrements: u32 =
        p.actions.iter().filter(|a| matches!(a.kind, ActionKind::TerminateInstance { decrement: true, .. })).count()
            as u32;
    let raised = desired(&p, "spot-b").unwrap_or(0);
    assert!(4 - decrements + raised >= 4, "{:#?}", p.actions);
    assert!(4 - decrements >= 3, "never below min: {:#?}", p.actions);
    // min = max: a surge elsewhere would be a second replacement (the ASG replaces too).
    let mut fixed = pool().spot("spot-a", sized(3)).build();
    fixed.spot[0].min = 3;
    fixed.spot[0].max = 3;
    let p = run(&cfg, &PoolRecord::default(), &fixed, &[spot_warning(&fixed, 0, InstanceAction::Terminate)], now());
    assert_eq!(desired(&p, "spot-b"), None, "{:#?}", p.actions);
    assert!(p.actions.iter().any(|a| matches!(a.kind, ActionKind::TerminateInstance { decrement: false, .. })));
}

/// 5,000 interruptions in flight: the plan's log line stays far under CloudWatch's
/// 256 KB event limit (the record's size is checked where it is stored, ballast-aws).
#[test]
fn a_storm_of_5000_interruptions_logs_a_bounded_line_and_loses_none() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(5000)).build();
    observed.spot[0].max = 20000;
    let events: Vec<Event> = (0..5000).map(|n| spot_warning(&observed, n, InstanceAction::Terminate)).collect();
    let p = run(&cfg, &PoolRecord::default(), &observed, &events, now());
    assert_eq!(p.record.interruptions.len(), 5000);
    assert_eq!(kinds(&p).iter().filter(|k| **k == "terminate").count(), 5000);
    let line = p.log_line();
    assert!(line.len() < 64 * 1024, "{} bytes", line.len());
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let counted: u64 = v["more_actions"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(
        counted as usize + v["actions"].as_array().unwrap().len(),
        p.actions.len(),
        "every action accounted for"
    );
}

/// The pool's size once the plan is applied: each ASG's desired size, less the
/// terminations with decrement.
fn size_after(plan: &Plan, observed: &ObservedPool) -> u32 {
    let decrements =
        plan.actions.iter().filter(|a| matches!(a.kind, ActionKind::TerminateInstance { decrement: true, .. })).count()
            as u32;
    total(plan, observed) - decrements
}

// A surge moved by a fallback whose raise never landed comes back to its ASG with what
// it held there, so a slot deleted there since is still seen.
#[test]
fn a_surge_unmoved_after_a_move_that_never_landed_is_still_judged() {
    let (cfg, observed) = one_spot(pool().spot("spot-a", sized(4)).on_demand(sized(2)));
    let warning = spot_warning(&observed, 0, InstanceAction::Terminate);
    let p1 = run(&cfg, &PoolRecord::default(), &observed, &[warning], now());
    assert_eq!(desired(&p1, "spot-a"), Some(5));
    // P1's surge landed, its terminate was throttled.
    let record = journaled(&p1, 1);
    let mut later = observed.clone();
    later.spot[0].desired = 5;
    let at = now() + Duration::seconds(30);
    let p2 = run(&cfg, &record, &later, &[capacity_error("spot-a", at)], at);
    assert_eq!((desired(&p2, "od"), desired(&p2, "spot-a")), (Some(3), Some(4)), "{:#?}", p2.actions);
    assert_eq!(p2.record.interruptions[0].surge.as_ref().unwrap().asg, "od", "moved with the slot");
    // P2's raise of od is throttled: nothing of P2 landed.
    let record = made_only(&p2, |_| false);
    // Cluster-autoscaler deletes spot-a's unfilled slot (the surge's): 5 -> 4.
    let mut deleted = observed.clone();
    deleted.spot[0].desired = 4;
    let at = at + Duration::seconds(30);
    let p3 = run(&cfg, &record, &deleted, &[], at);
    assert_eq!(size_after(&p3, &deleted), 6, "one short: {:#?} {:?}", p3.actions, p3.notes);
}

// A surge on the on-demand ASG for an on-demand instance (AWS Health) is no fallback
// unit: its slot deleted, the fallback units stay.
#[test]
fn a_deleted_surge_of_an_on_demand_instance_takes_no_fallback_unit() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).on_demand(sized(5)).build();
    let record =
        PoolRecord { fallback_units: 3, fallback_since: Some(now() - Duration::hours(1)), ..Default::default() };
    let od_id = observed.on_demand.as_ref().unwrap().instances[0].id.clone();
    let health = event(
        Signal::ScheduledChange {
            event_type_code: "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED".into(),
            start_time: Some(now() + Duration::days(3)),
            end_time: None,
            instance_ids: vec![od_id],
        },
        now(),
    );
    let p1 = run(&cfg, &record, &observed, &[health], now());
    assert_eq!(desired(&p1, "od"), Some(6));
    assert_eq!(p1.record.fallback_units, 3, "a replacement, not a fallback");
    // The surge landed, the terminate was throttled; cluster-autoscaler deleted the
    // unfilled slot (6 -> 5).
    let record = journaled(&p1, 1);
    let at = now() + Duration::seconds(30);
    let p2 = run(&cfg, &record, &observed, &[], at);
    assert!(p2.notes.iter().any(|n| n.contains("the surge is made again")), "{:?}", p2.notes);
    assert_eq!(desired(&p2, "od"), Some(6), "surged again");
    assert_eq!(p2.record.fallback_units, 3, "the fallback units od holds: {:?}", p2.notes);
}

// A surge whose raise nets out against a withdrawal in the same plan makes no call on its
// ASG: it holds at the size before the plan, and is judged.
#[test]
fn a_surge_netted_against_a_withdrawal_is_still_judged() {
    let (cfg, observed) = one_spot(pool().spot("spot-a", sized(4)).on_demand(sized(2)));
    let x1 = observed.spot[0].instances[0].id.clone();
    let p1 =
        run(&cfg, &PoolRecord::default(), &observed, &[spot_warning(&observed, 0, InstanceAction::Terminate)], now());
    assert_eq!(desired(&p1, "spot-a"), Some(5));
    // P1's surge landed; it died in the drain. AWS reclaims x1 (spot-a reopens its slot),
    // and x2 is warned.
    let record = drain_blocked(&p1);
    let mut reclaimed = observed.clone();
    reclaimed.spot[0].desired = 5;
    reclaimed.spot[0].instances.retain(|i| i.id != x1);
    let at = now() + Duration::seconds(30);
    let mut warning2 = spot_warning(&observed, 1, InstanceAction::Terminate);
    warning2.time = at;
    let p2 = run(&cfg, &record, &reclaimed, &[warning2], at);
    assert_eq!(desired(&p2, "spot-a"), None, "withdraw 1, surge 1: no call {:#?}", p2.actions);
    // x2's terminate is throttled; cluster-autoscaler deletes spot-a's unfilled slots (5 -> 3).
    let record = made_only(&p2, |_| false);
    let mut deleted = reclaimed.clone();
    deleted.spot[0].desired = 3;
    let at = at + Duration::seconds(30);
    let p3 = run(&cfg, &record, &deleted, &[], at);
    assert_eq!(size_after(&p3, &deleted), 5, "x2 not replaced: {:#?} {:?}", p3.actions, p3.notes);
}

#[test]
fn an_old_instance_replaced_during_a_failback_step_is_not_the_steps_node() {
    // As `an_interruption_during_a_failback_step_does_not_shrink_what_it_counts`, but one of
    // the step's own two nodes is still joining when the interrupted old instance's
    // replacement is Ready. The replacement is an instance launched since the step began
    // (not in `instances_before`), and once the interrupted instance's decrement has landed
    // spot-a is back at `raised_to`: nothing marks the replacement as another's. Only one
    // of the step's nodes is Ready: at most one on-demand node may go.
    let (cfg, _, observed, started) = failback_step_started();
    let mut booting = observed.clone();
    booting.spot[0] = spot_asg("spot-a", sized(4));
    let warning = spot_warning(&booting, 0, InstanceAction::Terminate);
    let replaced = run(&cfg, &applied(&started), &booting, &[warning], now() + Duration::seconds(30));
    assert_eq!(desired(&replaced, "spot-a"), Some(5));
    let mut ready = observed.clone();
    ready.spot[0] = spot_asg("spot-a", sized(4).live(5));
    ready.spot[0].instances.remove(0);
    // Left: [0] old, [1] [2] the step's, [3] the replacement.
    let joining = ready.spot[0].instances[2].id.clone();
    nodes_where(&mut ready, |id| Some(id != joining));
    let go = run(&cfg, &applied(&replaced), &ready, &[], now() + Duration::minutes(2));
    let drains = drain_count(&go);
    assert!(drains <= 1, "{drains} on-demand node(s) drained for 1 Ready node of the step: {:?}", go.notes);
}
