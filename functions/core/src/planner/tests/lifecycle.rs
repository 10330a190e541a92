//! Lifecycle hooks: heartbeats, drains and completion, across runs that die.

use super::*;

#[test]
fn lifecycle_action_heartbeats_drains_and_completes_once() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).on_demand(sized(1)).build();
    let id = observed.on_demand.as_ref().unwrap().instances[0].id.clone();
    let action = event(
        Signal::TerminateLifecycleAction(LifecycleAction {
            asg: "od".into(),
            hook: "drain".into(),
            token: "tok".into(),
            instance_id: id,
        }),
        now(),
    );
    let p = run(&cfg, &PoolRecord::default(), &observed, std::slice::from_ref(&action), now());
    assert_eq!(kinds(&p), vec!["record", "heartbeat", "cordon", "drain", "complete"]);
    assert!(p
        .actions
        .iter()
        .any(|a| matches!(&a.kind, ActionKind::DrainNode { lifecycle: Some(l), .. } if l.token == "tok")));
    assert!(run(&cfg, &p.record, &observed, &[action], now()).effects().next().is_none());
}

/// The od instance's scale-in hook, planned at `now()` by run `test-run`.
fn planned_hook(cfg: &Config, observed: &ObservedPool) -> (Plan, Event) {
    let id = observed.on_demand.as_ref().unwrap().instances[0].id.clone();
    let action = event(
        Signal::TerminateLifecycleAction(LifecycleAction {
            asg: "od".into(),
            hook: "drain".into(),
            token: "tok".into(),
            instance_id: id,
        }),
        now(),
    );
    (run(cfg, &PoolRecord::default(), observed, std::slice::from_ref(&action), now()), action)
}

#[test]
fn a_lifecycle_action_left_by_a_run_that_died_is_planned_again_after_its_window() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(3)).on_demand(sized(1)).build();
    od(&mut observed).instances[0].lifecycle_state = LifecycleState::TerminatingWait;
    let (p, _) = planned_hook(&cfg, &observed);
    let pending = &p.record.lifecycle_actions[0];
    assert_eq!(pending.planned_by.as_deref(), Some("test-run"));
    // Its drain (drain_timeout, 90 s) and the 120 s a run has beside it.
    assert_eq!(pending.planned_until, Some(now() + Duration::seconds(90 + 120)));
    assert_eq!(pending.drain_until, Some(now() + Duration::seconds(90)));
    let until = pending.planned_until.unwrap();
    // That run may still be at it: never planned twice.
    assert!(run(&cfg, &p.record, &observed, &[], until - Duration::seconds(1)).effects().next().is_none());
    // Past it, the instance still in Terminating:Wait: the run died; planned again, its
    // drain time over, drained briefly and completed.
    let again = run(&cfg, &p.record, &observed, &[], until);
    assert_eq!(kinds(&again), vec!["record", "heartbeat", "cordon", "drain", "complete"]);
    assert!(again.notes.iter().any(|n| n.contains("planned by test-run, which left it undone")), "{:?}", again.notes);
    assert_eq!(again.record.lifecycle_actions[0].planned_until, Some(until + Duration::seconds(5 + 120)));
    // Not again within the new window.
    assert!(run(&cfg, &again.record, &observed, &[], until + Duration::seconds(60)).effects().next().is_none());
    // An action that is over (completed: Terminating:Proceed) is left alone.
    let mut over = observed.clone();
    od(&mut over).instances[0].lifecycle_state = LifecycleState::TerminatingProceed;
    assert!(run(&cfg, &p.record, &over, &[], until).effects().next().is_none());
}

#[test]
fn a_lifecycle_action_handed_on_drains_for_what_is_left_of_its_time() {
    let cfg = config();
    let observed = pool().spot("spot-a", sized(3)).on_demand(sized(1)).build();
    let (p, _) = planned_hook(&cfg, &observed);
    // The run's deadline cut its drain short: it handed the action on (not planned).
    let mut record = p.record.clone();
    record.lifecycle_actions[0].planned = false;
    let next = run(&cfg, &record, &observed, &[], now() + Duration::seconds(60));
    let drain = next.actions.iter().find_map(|a| match &a.kind {
        ActionKind::DrainNode { timeout, lifecycle: Some(_), .. } => Some((timeout.0, a.reason.clone())),
        _ => None,
    });
    let (timeout, reason) = drain.expect("drained again");
    assert_eq!(timeout, std::time::Duration::from_secs(30), "{reason}");
    assert!(reason.contains("drains until"), "{reason}");
    assert!(kinds(&next).ends_with(&["drain", "complete"]));
}

#[test]
fn a_lifecycle_action_recorded_before_runs_were_named_is_given_a_window_from_now() {
    let cfg = config();
    let mut observed = pool().spot("spot-a", sized(3)).on_demand(sized(1)).build();
    od(&mut observed).instances[0].lifecycle_state = LifecycleState::TerminatingWait;
    let id = observed.on_demand.as_ref().unwrap().instances[0].id.clone();
    let old = format!(
        r#"{{"lifecycle_actions":[{{"asg":"od","hook":"drain","token":"tok","instance_id":"{id}","received_at":"2026-11-20T08:00:00Z","planned":true}}]}}"#
    );
    let record: PoolRecord = serde_json::from_str(&old).expect("an old record loads");
    assert_eq!(record.lifecycle_actions[0].planned_until, None);
    // Whichever run planned it may still be at it: not planned now, given a whole window.
    let first = run(&cfg, &record, &observed, &[], now());
    assert!(first.effects().next().is_none());
    let until = first.record.lifecycle_actions[0].planned_until;
    assert_eq!(until, Some(now() + Duration::seconds(90 + 120)));
    // Past it, still waiting: planned again.
    let again = run(&cfg, &first.record, &observed, &[], until.unwrap());
    assert!(kinds(&again).ends_with(&["drain", "complete"]), "{:?}", kinds(&again));
}
