//! Failback: back to spot in steps, surge first, on-demand drained once spot is Ready.

use super::*;

/// A pool an hour into fallback (3 units on od), spot-a healthy for 31 minutes.
pub(super) fn in_fallback() -> (PoolRecord, ObservedPool) {
    let record = PoolRecord {
        fallback_units: 3,
        fallback_since: Some(now() - Duration::hours(1)),
        healthy_since: [
            ("spot-a".to_string(), now() - Duration::minutes(31)),
            ("spot-b".to_string(), now() - Duration::minutes(5)),
        ]
        .into(),
        ..Default::default()
    };
    (record, pool().spot("spot-a", sized(2)).on_demand(sized(3)).build())
}

/// The drains a plan asks for.
pub(super) fn drain_count(plan: &Plan) -> usize {
    kinds(plan).iter().filter(|k| **k == "drain").count()
}

/// A pool in fallback whose first failback step starts now: spot-a raised 2 -> 4.
/// Returns the config, the record and observation it started from, and the step's plan.
pub(super) fn failback_step_started() -> (Config, PoolRecord, ObservedPool, Plan) {
    let cfg = config();
    let (record, observed) = in_fallback();
    let started = run(&cfg, &record, &observed, &[], now());
    assert_eq!(desired(&started, "spot-a"), Some(4), "the step raises spot-a by failback_step");
    (cfg, record, observed, started)
}

#[test]
fn failback_waits_for_failback_after() {
    let cfg = config();
    let (mut record, observed) = in_fallback();
    record.healthy_since.insert("spot-a".into(), now() - Duration::minutes(29));
    let p = run(&cfg, &record, &observed, &[], now());
    assert_eq!(p.record.failback, None);
    assert_eq!(desired(&p, "spot-a"), None);
}

#[test]
fn failback_surges_spot_first_then_drains_on_demand_when_ready() {
    let cfg = config();
    let (record, mut observed) = in_fallback();
    let p = run(&cfg, &record, &observed, &[], now());
    assert_eq!(desired(&p, "spot-a"), Some(4), "surge failback_step (2) first");
    assert_eq!(desired(&p, "od"), None, "on-demand untouched until spot is Ready");
    let step = p.record.failback.clone().unwrap();
    assert_eq!((step.count, step.ready_before), (2, 2));

    // The new instances are in service but their nodes are not Ready yet: wait.
    observed.spot[0] = spot_asg("spot-a", sized(4));
    let ids: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    for id in &ids[..2] {
        observed.nodes.push(NodeState {
            allocatable: None,
            name: format!("node-{id}"),
            instance_id: id.clone(),
            ready: true,
            unschedulable: false,
        });
    }
    for id in &ids[2..] {
        observed.nodes.push(NodeState {
            allocatable: None,
            name: format!("node-{id}"),
            instance_id: id.clone(),
            ready: false,
            unschedulable: false,
        });
    }
    let wait = run(&cfg, &applied(&p), &observed, &[], now() + Duration::minutes(1));
    assert!(!kinds(&wait).contains(&"terminate"));
    assert!(wait.notes.iter().any(|n| n.contains("waiting: 0 of 2")));

    // Ready: drain and remove two on-demand instances with decrement.
    for n in observed.nodes.iter_mut() {
        n.ready = true;
    }
    let go = run(&cfg, &applied(&p), &observed, &[], now() + Duration::minutes(2));
    assert_eq!(kinds(&go).iter().filter(|k| **k == "terminate").count(), 2);
    assert_eq!(drain_count(&go), 2);
    assert!(go.actions.iter().all(|a| !matches!(a.kind, ActionKind::TerminateInstance { decrement: false, .. })));
    assert!(go.actions.iter().any(|a| matches!(a.kind, ActionKind::TerminateInstance { only_if_drained: true, .. })));
    let victims = go.record.failback.clone().unwrap().victims;
    assert_eq!(victims.len(), 2);

    // Victims gone: the step is done and units drop by two.
    od(&mut observed).instances.retain(|i| !victims.contains(&i.id));
    od(&mut observed).desired = 1;
    let done = run(&cfg, &applied(&go), &observed, &[], now() + Duration::minutes(4));
    assert_eq!(done.record.fallback_units, 1);
    assert!(done.notes.iter().any(|n| n.contains("failback step done")));
    // Next step starts right away (spot still healthy), capped by the units left.
    assert_eq!(desired(&done, "spot-a"), Some(5));
}

#[test]
fn failback_counts_only_the_ready_nodes_its_own_raise_brought() {
    // The step raised spot-a 2 -> 4; cluster-autoscaler raised it by 2 more for pending
    // pods, and its two nodes are Ready first. They are not the step's: draining two
    // on-demand nodes now would put their pods on nodes meant for the pending ones.
    let cfg = config();
    let (record, mut observed) = in_fallback();
    let p = run(&cfg, &record, &observed, &[], now());
    assert_eq!(desired(&p, "spot-a"), Some(4));
    observed.spot[0] = spot_asg("spot-a", sized(6));
    let ids: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    for (n, id) in ids.iter().enumerate() {
        // The two already there and cluster-autoscaler's two are Ready; the step's are not.
        observed.nodes.push(NodeState {
            allocatable: None,
            name: format!("node-{id}"),
            instance_id: id.clone(),
            ready: n < 4,
            unschedulable: false,
        });
    }
    let wait = run(&cfg, &applied(&p), &observed, &[], now() + Duration::minutes(1));
    assert!(!kinds(&wait).contains(&"drain"), "{:#?} {:?}", wait.actions, wait.notes);
    assert!(wait.notes.iter().any(|n| n.contains("waiting: 0 of 2")), "{:?}", wait.notes);
    // All six Ready: now the step's two count.
    for n in observed.nodes.iter_mut() {
        n.ready = true;
    }
    let go = run(&cfg, &applied(&p), &observed, &[], now() + Duration::minutes(2));
    assert_eq!(drain_count(&go), 2);
}

#[test]
fn failback_does_not_count_nodes_cluster_autoscaler_was_booting_when_the_step_started() {
    // cluster-autoscaler raised spot-a 2 -> 4 for pending pods (headroom pause
    // pods preempted, say) just before the step started; its two instances are in service
    // but their nodes are not Ready yet. The step raises spot-a 4 -> 6 (ready_before = 2).
    // cluster-autoscaler's two nodes become Ready first: they are not the step's, and
    // draining two on-demand nodes now drops the pool's Ready capacity ("Total ready
    // capacity never drops below what it was"), their pods competing with the pending
    // pods cluster-autoscaler's nodes were brought for.
    let cfg = config();
    let (record, mut observed) = in_fallback();
    observed.spot[0] = spot_asg("spot-a", sized(4));
    let ids: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    for (n, id) in ids.iter().enumerate() {
        observed.nodes.retain(|node| &node.instance_id != id);
        observed.nodes.push(NodeState {
            allocatable: None,
            name: format!("node-{id}"),
            instance_id: id.clone(),
            ready: n < 2,
            unschedulable: false,
        });
    }
    let p = run(&cfg, &record, &observed, &[], now());
    assert_eq!(desired(&p, "spot-a"), Some(6), "{:#?} {:?}", p.actions, p.notes);
    assert_eq!(p.record.failback.as_ref().map(|s| s.ready_before), Some(2));
    // A minute later: cluster-autoscaler's two nodes are Ready, the step's two are not.
    observed.spot[0] = spot_asg("spot-a", sized(6));
    let ids: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    for (n, id) in ids.iter().enumerate() {
        observed.nodes.retain(|node| &node.instance_id != id);
        observed.nodes.push(NodeState {
            allocatable: None,
            name: format!("node-{id}"),
            instance_id: id.clone(),
            ready: n < 4,
            unschedulable: false,
        });
    }
    let wait = run(&cfg, &applied(&p), &observed, &[], now() + Duration::minutes(1));
    assert!(
        !kinds(&wait).contains(&"drain"),
        "drained on-demand for nodes the step did not bring: {:#?} {:?}",
        wait.actions,
        wait.notes
    );
}

#[test]
fn a_timed_out_failback_step_never_withdraws_instances_cluster_autoscaler_is_booting() {
    // The step raised spot-a 2 -> 4. Near its end cluster-autoscaler raised
    // spot-a 4 -> 6 for pending pods; its two instances are booting. At the grace's end
    // one of the step's nodes is Ready, the other still joining. `others_raise` takes
    // cluster-autoscaler's two off what the step gained although they are not Ready, so
    // the step counts 0 of 2 and withdraws 2 "instances that are not yet a Ready node",
    // picked by id among all of spot-a's: cluster-autoscaler's booting instances. (With
    // both of the step's nodes Ready it is the same: 0 of 2, and the two withdrawn are
    // exactly cluster-autoscaler's; the step's Ready nodes are left as surplus.)
    let cfg = config();
    let (record, mut observed) = in_fallback();
    let p = run(&cfg, &record, &observed, &[], now());
    assert_eq!(desired(&p, "spot-a"), Some(4));
    observed.spot[0] = spot_asg("spot-a", sized(6));
    let ids: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    for (n, id) in ids.iter().enumerate() {
        observed.nodes.retain(|node| &node.instance_id != id);
        // 0, 1: there before; 2, 3: the step's, Ready; 4, 5: cluster-autoscaler's, booting.
        observed.nodes.push(NodeState {
            allocatable: None,
            name: format!("node-{id}"),
            instance_id: id.clone(),
            ready: n < 4,
            unschedulable: false,
        });
    }
    let late = run(&cfg, &applied(&p), &observed, &[], now() + Duration::minutes(3));
    let withdrawn: Vec<&String> = late
        .actions
        .iter()
        .filter_map(|a| match &a.kind {
            ActionKind::TerminateInstance { instance_id, .. } => Some(instance_id),
            _ => None,
        })
        .collect();
    assert!(
        !withdrawn.iter().any(|id| **id == ids[4] || **id == ids[5]),
        "terminated cluster-autoscaler's booting instance(s) with decrement: {withdrawn:?} (CA's: {:?}) {:?}",
        &ids[4..],
        late.notes
    );
}

#[test]
fn an_interruption_during_a_failback_step_does_not_shrink_what_it_counts() {
    // The step raised spot-a 2 -> 4; then one of spot-a's instances was interrupted: a
    // surge in spot-a (+1) and its termination with decrement (-1), which lowers the
    // step's floor too. spot-a is back at 4, all four nodes Ready: both of the step's
    // count, and two on-demand nodes go.
    let (cfg, _, observed, started) = failback_step_started();
    let mut booting = observed.clone();
    booting.spot[0] = spot_asg("spot-a", sized(4));
    let warning = spot_warning(&booting, 0, InstanceAction::Terminate);
    let replaced = run(&cfg, &applied(&started), &booting, &[warning], now() + Duration::seconds(30));
    assert_eq!(desired(&replaced, "spot-a"), Some(5), "surged in spot-a: {:#?}", replaced.actions);
    assert!(kinds(&replaced).contains(&"terminate"));
    let mut ready = observed.clone();
    ready.spot[0] = spot_asg("spot-a", sized(4).live(5));
    ready.spot[0].instances.remove(0);
    nodes_where(&mut ready, |_| Some(true));
    let go = run(&cfg, &applied(&replaced), &ready, &[], now() + Duration::minutes(2));
    assert_eq!(drain_count(&go), 2, "{:#?} {:?}", go.actions, go.notes);
}

#[test]
fn failed_failback_step_is_withdrawn_and_waits_to_retry() {
    let cfg = config();
    let (record, mut observed) = in_fallback();
    let p = run(&cfg, &record, &observed, &[], now());
    observed.spot[0].desired = 4; // applied, but nothing launches
    let later = now() + Duration::minutes(3);
    let failed = run(&cfg, &applied(&p), &observed, &[], later);
    assert_eq!(desired(&failed, "spot-a"), Some(2), "undelivered surge withdrawn");
    assert_eq!(failed.record.failback, None);
    assert_eq!(failed.record.retry_after, Some(later + Duration::minutes(10)));
    assert!(!kinds(&failed).contains(&"terminate"), "no on-demand removed");
    observed.spot[0].desired = 2;
    let too_soon = run(&cfg, &failed.record, &observed, &[], later + Duration::minutes(5));
    assert_eq!(too_soon.record.failback, None, "wait_and_retry holds the next attempt");
    let retry = run(&cfg, &failed.record, &observed, &[], later + Duration::minutes(10));
    assert!(retry.record.failback.is_some());
}

#[test]
fn a_failback_surge_that_never_landed_is_not_withdrawn_below_where_it_started() {
    let cfg = config();
    let (record, observed) = in_fallback();
    let p = run(&cfg, &record, &observed, &[], now());
    assert_eq!(p.record.failback.as_ref().unwrap().desired_before, 2);
    // The SetDesiredCapacity was reported done but never happened: spot is still at 2
    // when the step times out.
    let later = now() + Duration::minutes(3);
    let timed_out = run(&cfg, &applied(&p), &observed, &[], later);
    assert_eq!(desired(&timed_out, "spot-a"), None, "nothing to withdraw: {:#?}", timed_out.actions);
    assert_eq!(timed_out.record.failback, None);
    assert_eq!(timed_out.record.retry_after, Some(later + Duration::minutes(10)));
    // Not reported done (the run died in the call): the journal shows it never landed,
    // so the step is planned afresh, from where spot is.
    let retried = run(&cfg, &p.record, &observed, &[], later);
    assert_eq!(desired(&retried, "spot-a"), Some(4), "{:#?}", retried.actions);
    assert_eq!(retried.record.failback.as_ref().unwrap().desired_before, 2);
}

#[test]
fn failback_never_drains_the_on_demand_baseline() {
    let cfg = config();
    let (record, mut observed) = in_fallback();
    let p = run(&cfg, &record, &observed, &[], now());
    // Spot Ready; meanwhile cluster-autoscaler removed the fallback nodes: on-demand at min.
    observed.spot[0] = spot_asg("spot-a", sized(4));
    let ids: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    for id in ids {
        observed.nodes.push(NodeState {
            allocatable: None,
            name: format!("node-{id}"),
            instance_id: id,
            ready: true,
            unschedulable: false,
        });
    }
    od(&mut observed).min = 3;
    let go = run(&cfg, &applied(&p), &observed, &[], now() + Duration::minutes(2));
    assert!(!kinds(&go).contains(&"terminate"), "{:#?}", go.actions);
    assert!(!kinds(&go).contains(&"drain"));
    assert_eq!(go.record.failback, None, "abandoned: nothing left to move back");
}

#[test]
fn a_failback_step_blocked_by_a_budget_ends_at_its_deadline() {
    let cfg = config();
    let (record, mut observed) = in_fallback();
    let p = run(&cfg, &record, &observed, &[], now());
    observed.spot[0] = spot_asg("spot-a", sized(4));
    let ids: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    for id in ids {
        observed.nodes.push(NodeState {
            allocatable: None,
            name: format!("node-{id}"),
            instance_id: id,
            ready: true,
            unschedulable: false,
        });
    }
    let go = run(&cfg, &applied(&p), &observed, &[], now() + Duration::minutes(2));
    let victims = go.record.failback.clone().unwrap().victims;
    assert_eq!(victims.len(), 2);
    // The drains are blocked: the victims stay, cordoned.
    for n in observed.nodes.iter_mut().filter(|n| victims.contains(&n.instance_id)) {
        n.unschedulable = true;
    }
    let again = run(&cfg, &applied(&go), &observed, &[], now() + Duration::minutes(4));
    assert!(kinds(&again).contains(&"drain"), "drained again before the deadline");
    let late = now() + Duration::minutes(2) + Duration::seconds(90 * 3 + 60);
    let past = run(&cfg, &applied(&again), &observed, &[], late);
    assert_eq!(kinds(&past).iter().filter(|k| **k == "uncordon").count(), 2, "{:#?}", past.actions);
    assert!(!kinds(&past).contains(&"terminate"));
    assert_eq!(past.record.failback, None);
    assert_eq!(past.record.retry_after, Some(late + Duration::minutes(10)));
    // The run died before its uncordons: the next one uncordons them still.
    let retry = run(&cfg, &past.record, &observed, &[], late + Duration::minutes(1));
    assert_eq!(kinds(&retry).iter().filter(|k| **k == "uncordon").count(), 2, "{:#?}", retry.actions);
    // Once the nodes are schedulable they are forgotten.
    for n in observed.nodes.iter_mut() {
        n.unschedulable = false;
    }
    let done = run(&cfg, &retry.record, &observed, &[], late + Duration::minutes(2));
    assert!(!kinds(&done).contains(&"uncordon"));
    assert!(done.record.uncordon.is_empty());
}
