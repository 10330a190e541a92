//! Failback steps counting their nodes while other writers (cluster-autoscaler, AWS, interruptions) change the pool.

use super::failback::{drain_count, failback_step_started, in_fallback};
use super::interruption::left_in_its_drain;
use super::*;

#[test]
fn an_instance_the_asg_replaced_during_a_failback_step_is_not_the_steps_node() {
    // The step raised spot-a 2 -> 4. Meanwhile Auto Scaling replaced one of the two old
    // instances on its own (a failed health check, Capacity Rebalancing, a reclaim Ballast
    // never heard of): desired unchanged, a new instance id. Its node is Ready, as is one
    // of the step's; the other step node is still joining. A difference of Ready nodes
    // would count one of two (the old one's going offsets its replacement) and wait;
    // counted by what launched since, the replacement counts as the step's.
    let (cfg, _, observed, started) = failback_step_started();
    let mut later = observed.clone();
    later.spot[0] = spot_asg("spot-a", sized(4).live(5));
    later.spot[0].instances.remove(0); // the old instance gone; [3] is its replacement
    let joining = later.spot[0].instances[2].id.clone(); // the step's second
    nodes_where(&mut later, |id| Some(id != joining));
    let go = run(&cfg, &applied(&started), &later, &[], now() + Duration::minutes(1));
    let drains = drain_count(&go);
    assert!(drains <= 1, "{drains} on-demand node(s) drained for 1 Ready node of the step: {:?}", go.notes);
}

#[test]
fn a_step_that_moved_nothing_back_does_not_surge_again_at_once() {
    // As `a_timed_out_failback_step_never_withdraws_instances_cluster_autoscaler_is_booting`,
    // with both of the step's nodes Ready at the grace's end and cluster-autoscaler's two
    // still booting: 0 of 2 surely the step's, 2 in doubt. Nothing is drained and
    // nothing withdrawn: the step ends as if it succeeded (no wait_and_retry), so the next
    // reconcile surges spot-a by another 2 while the 2 in doubt are still there.
    let cfg = config();
    let (record, mut observed) = in_fallback();
    let p = run(&cfg, &record, &observed, &[], now());
    assert_eq!(desired(&p, "spot-a"), Some(4));
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
    let late = run(&cfg, &applied(&p), &observed, &[], now() + Duration::minutes(3));
    assert!(!kinds(&late).contains(&"drain"), "{:?}", late.notes);
    assert_eq!(
        desired(&late, "spot-a"),
        None,
        "the plan that ended a step which moved nothing back surges again at once: {:?} {:?}",
        late.notes,
        late.record.failback
    );
}

#[test]
fn a_node_booting_when_the_step_began_does_not_hide_an_instance_the_asg_replaced() {
    // As `an_instance_the_asg_replaced_during_a_failback_step_is_not_the_steps_node`, but
    // spot-a also had a third instance booting when the step began (cluster-autoscaler's,
    // for pending pods): in `instances_before`, not in `ready_before`. Its node turning
    // Ready during the step adds one to a count by net rise in Ready nodes, which then
    // does not bound it: the ASG's replacement of an old instance would be taken for the
    // step's second node, and two on-demand nodes go for one Ready node of the step.
    let cfg = config();
    let (record, mut observed) = in_fallback();
    observed.spot[0] = spot_asg("spot-a", sized(3));
    let ids: Vec<String> = observed.spot[0].instances.iter().map(|i| i.id.clone()).collect();
    for (n, id) in ids.iter().enumerate() {
        observed.nodes.retain(|node| &node.instance_id != id);
        observed.nodes.push(NodeState {
            allocatable: None,
            name: format!("node-{id}"),
            instance_id: id.clone(),
            ready: n < 2, // [2]: cluster-autoscaler's, booting
            unschedulable: false,
        });
    }
    let started = run(&cfg, &record, &observed, &[], now());
    assert_eq!(desired(&started, "spot-a"), Some(5), "{:?}", started.notes);
    assert_eq!(started.record.failback.as_ref().map(|s| s.ready_before), Some(2));
    let mut later = observed.clone();
    later.spot[0] = spot_asg("spot-a", sized(5).live(6));
    // The ASG replaced [0] on its own. Left: [0] old, [1] cluster-autoscaler's (now
    // Ready), [2] the step's first (Ready), [3] the step's second (joining), [4] the
    // replacement of the old [0] (Ready).
    later.spot[0].instances.remove(0);
    let joining = later.spot[0].instances[3].id.clone();
    nodes_where(&mut later, |id| Some(id != joining));
    let go = run(&cfg, &applied(&started), &later, &[], now() + Duration::minutes(1));
    let drains = drain_count(&go);
    assert!(drains <= 1, "{drains} on-demand node(s) drained for 1 Ready node of the step: {:?}", go.notes);
}

#[test]
fn cluster_autoscaler_removing_an_old_spot_node_during_a_step_leaves_no_node_of_the_step_in_doubt() {
    // The step raised spot-a 2 -> 4. Meanwhile cluster-autoscaler scaled spot-a in by one
    // of its old nodes (terminate with decrement: desired 4 -> 3). The only instances
    // launched since the step began are the step's two, both Ready, and nobody raised
    // spot-a: both are surely the step's. A count by net rise in Ready nodes (3 - 2 = 1)
    // took the scale-in for a replacement: the step ended at its grace in doubt, drained
    // one on-demand node, left the step's other spot node to cluster-autoscaler as
    // surplus (beside the on-demand node it was launched to replace) and held the next
    // step back for wait_and_retry.
    let (cfg, _, observed, started) = failback_step_started();
    let mut later = observed.clone();
    later.spot[0] = spot_asg("spot-a", sized(3).live(4));
    later.spot[0].instances.remove(0); // scaled in by cluster-autoscaler, with decrement
    nodes_where(&mut later, |_| Some(true));
    let end = run(&cfg, &applied(&started), &later, &[], now() + Duration::minutes(3));
    let drains = drain_count(&end);
    assert_eq!(
        drains,
        2,
        "both new spot nodes are the step's, yet {drains} on-demand node(s) drained: {:?} surplus {:?} retry_after {:?}",
        end.notes,
        end.surplus,
        end.record.retry_after
    );
}

#[test]
fn an_interruption_being_drained_at_a_steps_end_is_not_subtracted_twice() {
    // The step raised spot-a 2 -> 4 and both its nodes are Ready. Then one of the two old
    // instances gets a spot warning: its surge raises spot-a to 5 and its drain begins
    // (the terminate with decrement comes after it). The step's grace ends while the
    // drain runs and another run plans the pool (a second warning, an override: events
    // that do not wait for a drain). The replacement is booting. Net of the going
    // instance the pool has one more Ready spot node than before the step, so one
    // on-demand node may go. Counted by net rise, the surge's slot above `raised_to` was
    // also taken off as "another writer's", the replacement subtracted twice: 0 of 2,
    // both of the step's Ready nodes left as surplus, nothing moved back.
    let (cfg, _, observed, started) = failback_step_started();
    let mut raised = observed.clone();
    raised.spot[0] = spot_asg("spot-a", sized(4));
    nodes_where(&mut raised, |_| Some(true));
    let at = now() + Duration::seconds(150);
    let old = raised.spot[0].instances[0].id.clone();
    let warning = event(Signal::SpotInterruption { instance_id: old.clone(), action: InstanceAction::Terminate }, at);
    let warned = run(&cfg, &applied(&started), &raised, &[warning], at);
    assert_eq!(desired(&warned, "spot-a"), Some(5), "{:?}", warned.notes);
    // 30 s into the drain: the surge landed, the terminate not yet made.
    let mut draining = raised.clone();
    draining.spot[0] = spot_asg("spot-a", sized(5));
    let replacement = draining.spot[0].instances[4].id.clone();
    draining.nodes = draining
        .asgs()
        .flat_map(|a| a.instances.iter())
        .filter(|i| i.id != replacement) // booting: no node yet
        .map(|i| NodeState {
            allocatable: None,
            name: format!("node-{}", i.id),
            instance_id: i.id.clone(),
            ready: true,
            unschedulable: i.id == old,
        })
        .collect();
    let end = run(&cfg, &left_in_its_drain(&warned), &draining, &[], now() + Duration::minutes(3));
    let drains: Vec<String> = end
        .actions
        .iter()
        .filter_map(|a| match &a.kind {
            ActionKind::DrainNode { instance_id, .. } if *instance_id != old => Some(instance_id.clone()),
            _ => None,
        })
        .collect();
    assert!(
        !drains.is_empty(),
        "no on-demand node drained though spot-a has one more Ready node than before the step, net of the going one: {:?} surplus {:?}",
        end.notes,
        end.surplus
    );
}

#[test]
fn a_takeover_replanning_an_interruptions_terminate_lowers_the_steps_floor_once() {
    // A spot warning during a failback step for an old instance of spot-a, at its max: the
    // surge goes to spot-b and the old instance is terminated with decrement, lowering the
    // step's floor `desired_before` 2 -> 1. A run taking over during the drain (the
    // terminate not reached) plans the same terminate again, and lowered the floor again,
    // to 0: one decrement, counted twice.
    let (cfg, _, observed, started) = failback_step_started();
    let mut raised = observed.clone();
    raised.spot[0] = spot_asg("spot-a", sized(4).max(4));
    let at = now() + Duration::seconds(30);
    let old = raised.spot[0].instances[0].id.clone();
    let warning = event(Signal::SpotInterruption { instance_id: old, action: InstanceAction::Terminate }, at);
    let warned = run(&cfg, &applied(&started), &raised, &[warning], at);
    assert_eq!(desired(&warned, "spot-b"), Some(1), "the surge in spot-b: {:?}", warned.notes);
    assert_eq!(warned.record.failback.as_ref().map(|f| f.desired_before), Some(1));
    let mut draining = raised.clone();
    draining.spot[1] = spot_asg("spot-b", sized(1));
    let again = run(&cfg, &left_in_its_drain(&warned), &draining, &[], now() + Duration::seconds(60));
    assert!(kinds(&again).contains(&"terminate"), "{:?}", again.notes);
    assert_eq!(
        again.record.failback.as_ref().map(|f| f.desired_before),
        Some(1),
        "the step's floor lowered twice for one decrement"
    );
}

#[test]
fn an_old_instance_replaced_by_a_surge_in_its_own_asg_leaves_the_steps_floor() {
    // The same warning with room in spot-a: its surge raises spot-a, its terminate with
    // decrement lowers it again, and the ASG's size without the step's surge is unmoved.
    // The floor was lowered all the same: a failed step's withdrawal could go one below.
    let (cfg, _, observed, started) = failback_step_started();
    let mut raised = observed.clone();
    raised.spot[0] = spot_asg("spot-a", sized(4));
    let at = now() + Duration::seconds(30);
    let old = raised.spot[0].instances[0].id.clone();
    let warning = event(Signal::SpotInterruption { instance_id: old, action: InstanceAction::Terminate }, at);
    let warned = run(&cfg, &applied(&started), &raised, &[warning], at);
    assert_eq!(desired(&warned, "spot-a"), Some(5), "the surge in spot-a: {:?}", warned.notes);
    assert_eq!(warned.record.failback.as_ref().map(|f| f.desired_before), Some(2));
}

// ---- which nodes are the step's while other writers act ----

#[test]
fn a_replacement_launched_before_the_instance_it_replaces_leaves_is_not_the_steps_node() {
    // The step raised spot-a 2 -> 4. Auto Scaling then replaces old [0] launching first
    // (Capacity Rebalancing, on by default in EKS managed spot node groups; AZ rebalancing;
    // an instance maintenance policy that launches before terminating): the replacement [4]
    // is InService and Ready while [0] is still InService, desired unchanged (live 5 of 4).
    // One of the step's nodes ([2]) is Ready, the other ([3]) is joining. Nothing is gone
    // from `instances_before` yet: counted by what left, nothing marked [4] as another's,
    // and 2 on-demand nodes were drained for 1 Ready node of the step ([0] leaving after).
    let (cfg, _, observed, started) = failback_step_started();
    let mut later = observed.clone();
    later.spot[0] = spot_asg("spot-a", sized(4).live(5));
    let joining = later.spot[0].instances[3].id.clone();
    nodes_where(&mut later, |id| Some(id != joining));
    let go = run(&cfg, &applied(&started), &later, &[], now() + Duration::minutes(1));
    let drains = drain_count(&go);
    assert!(drains <= 1, "{drains} on-demand node(s) drained for 1 Ready node of the step: {:?}", go.notes);
}

/// The step raised spot-a (max 4) 2 -> 4; its first new instance [2] gets a spot warning
/// while both of its nodes are booting: spot-a is at its max, so the surge goes to spot-b
/// and [2] is terminated with decrement (spot-a 4 -> 3). Returns the config, the applied
/// record after that plan, and the pool as observed then.
fn a_step_node_surged_elsewhere() -> (Config, PoolRecord, ObservedPool) {
    let cfg = config();
    let (record, mut observed) = in_fallback();
    observed.spot[0].max = 4;
    let started = run(&cfg, &record, &observed, &[], now());
    assert_eq!(desired(&started, "spot-a"), Some(4));
    let mut booting = observed.clone();
    booting.spot[0] = spot_asg("spot-a", sized(4).max(4));
    let new: Vec<String> = booting.spot[0].instances[2..].iter().map(|i| i.id.clone()).collect();
    nodes_where(&mut booting, |id| (!new.iter().any(|n| n == id)).then_some(true));
    let step_node = booting.spot[0].instances[2].id.clone();
    let at = now() + Duration::seconds(60);
    let warning =
        event(Signal::SpotInterruption { instance_id: step_node.clone(), action: InstanceAction::Terminate }, at);
    let warned = run(&cfg, &applied(&started), &booting, &[warning], at);
    assert_eq!(desired(&warned, "spot-b"), Some(1), "{:?}", warned.notes);
    assert!(
        warned.actions.iter().any(|a| matches!(&a.kind,
            ActionKind::TerminateInstance { instance_id, decrement: true, .. } if *instance_id == step_node)),
        "{:#?}",
        warned.actions
    );
    (cfg, applied(&warned), booting)
}

#[test]
fn a_step_node_surged_elsewhere_does_not_make_cluster_autoscalers_node_the_steps() {
    // After the step's [2] went with decrement (its replacement booting in spot-b), the
    // pods evicted from it are pending and cluster-autoscaler scales spot-a (its preferred
    // group, room again under max) 3 -> 4: its node [4] is Ready, as is the step's [3].
    // spot-a is back at `raised_to` with two new Ready nodes: both were counted as the
    // step's, 2 on-demand nodes drained while the step had 1 Ready node (its other one's
    // replacement still booting in spot-b).
    let (cfg, record, booting) = a_step_node_surged_elsewhere();
    let mut later = booting.clone();
    later.spot[0] = spot_asg("spot-a", sized(4).live(5).max(4));
    later.spot[0].instances.remove(2); // the step's [2], gone; [4] is cluster-autoscaler's
    later.spot[1] = spot_asg("spot-b", sized(1)); // the surge, booting
    let surge = later.spot[1].instances[0].id.clone();
    nodes_where(&mut later, |id| (id != surge).then_some(true));
    let go = run(&cfg, &record, &later, &[], now() + Duration::minutes(2));
    let drains = drain_count(&go);
    assert_eq!(drains, 1, "on-demand node(s) drained for the step's 1 Ready node: {:?}", go.notes);
}

#[test]
fn a_step_node_surged_elsewhere_does_not_make_an_old_instances_replacement_the_steps() {
    // As above, but instead of a scale-out AWS reclaims old [0] without warning and
    // spot-a (now 3) replaces it with [4]. Its decrement (the step's [2]) was taken to be
    // the old one's, so [4] was counted as the step's: 2 drained for 1.
    let (cfg, record, booting) = a_step_node_surged_elsewhere();
    let mut later = booting.clone();
    later.spot[0] = spot_asg("spot-a", sized(3).live(5).max(4));
    later.spot[0].instances.remove(2); // the step's [2], gone
    later.spot[0].instances.remove(0); // old [0], reclaimed; [4] replaces it
    later.spot[1] = spot_asg("spot-b", sized(1));
    let surge = later.spot[1].instances[0].id.clone();
    nodes_where(&mut later, |id| (id != surge).then_some(true));
    let go = run(&cfg, &record, &later, &[], now() + Duration::minutes(2));
    let drains = drain_count(&go);
    assert_eq!(drains, 1, "on-demand node(s) drained for the step's 1 Ready node: {:?}", go.notes);
}

// ---- steps whose nodes leave meanwhile ----

#[test]
fn a_step_whose_every_node_was_reclaimed_is_not_followed_at_once_by_another() {
    // The step raised spot-a (max 4) 2 -> 4. Its [2] gets a spot warning (surge to spot-b,
    // count 2 -> 1); with spot-a at its max (3 here) once [2] went, its [3] gets one too
    // (surge to spot-b, count 1 -> 0). Both nodes of the step reclaimed within two
    // minutes: the step delivered nothing. It ended with count 0 ("gained 0 >= 0"):
    // silently, without `wait_and_retry`, and start_failback raised spot-a again at once,
    // into the capacity pool that had just reclaimed both nodes. A step ending short of
    // what it set out to move is not followed at once by another.
    let (cfg, record, booting) = a_step_node_surged_elsewhere();
    assert_eq!(record.failback.as_ref().map(|f| f.count), Some(1));
    let mut second = booting.clone();
    second.spot[0] = spot_asg("spot-a", sized(3).live(5).max(3));
    second.spot[0].instances.remove(2); // [2] gone; [0] [1] [3] live, [3] booting
    second.spot[0].instances.truncate(3);
    second.spot[1] = spot_asg("spot-b", sized(1));
    let step_node = second.spot[0].instances[2].id.clone();
    let spot_b_new = second.spot[1].instances[0].id.clone();
    nodes_where(&mut second, |id| (id != step_node && id != spot_b_new).then_some(true));
    let at = now() + Duration::seconds(90);
    let warning =
        event(Signal::SpotInterruption { instance_id: step_node.clone(), action: InstanceAction::Terminate }, at);
    let warned = run(&cfg, &record, &second, &[warning], at);
    assert_eq!(desired(&warned, "spot-b"), Some(2), "the second surge in spot-b: {:?}", warned.notes);
    assert_eq!(warned.record.failback.as_ref().map(|f| f.count), Some(0), "{:?}", warned.notes);
    // A minute later: both of the step's nodes gone, spot-a back at 2 (max 3).
    let mut after = second.clone();
    after.spot[0] = spot_asg("spot-a", sized(2).max(3));
    after.spot[1] = spot_asg("spot-b", sized(2));
    nodes_where(&mut after, |_| Some(true));
    let later = now() + Duration::minutes(3);
    let next = run(&cfg, &applied(&warned), &after, &[], later);
    assert_eq!(
        desired(&next, "spot-a"),
        None,
        "a new failback step raised spot-a at once after the last one lost every node: {:?}",
        next.notes
    );
    assert!(next.record.retry_after.is_some_and(|t| t > later), "no wait_and_retry: {:?}", next.notes);
}

#[test]
fn a_step_node_scaled_in_by_cluster_autoscaler_is_not_an_old_instances_decrement() {
    // The step raised spot-a 2 -> 4; its [2] and [3] are seen booting. Cluster-autoscaler
    // (a short scale-down-unneeded-time) scales in the step's [2] with decrement (4 -> 3):
    // an empty new node, unneeded. AWS reclaims old [0] without warning, and spot-a
    // replaces it with [4]. Ready new nodes: [3] (the step's) and [4] (a replacement).
    // The decrement was taken to be an old instance's, which cancelled [0]'s leaving:
    // nothing was counted as another's, and 2 on-demand nodes were drained for the step's
    // 1 surviving node: the pool ended one node short.
    let (cfg, _, observed, started) = failback_step_started();
    let mut booting = observed.clone();
    booting.spot[0] = spot_asg("spot-a", sized(4));
    let new = [booting.spot[0].instances[2].id.clone(), booting.spot[0].instances[3].id.clone()];
    nodes_where(&mut booting, |id| (!new.iter().any(|n| n == id)).then_some(true));
    let seen = run(&cfg, &applied(&started), &booting, &[], now() + Duration::minutes(1));
    assert!(!kinds(&seen).contains(&"drain"), "{:?}", seen.notes);
    let record = applied(&seen);
    let mut later = observed.clone();
    later.spot[0] = spot_asg("spot-a", sized(3).live(5));
    later.spot[0].instances.remove(2); // the step's [2], scaled in with decrement
    later.spot[0].instances.remove(0); // old [0], reclaimed; [4] replaces it
    nodes_where(&mut later, |_| Some(true));
    let go = run(&cfg, &record, &later, &[], now() + Duration::minutes(2));
    let drains = drain_count(&go);
    assert!(drains <= 1, "{drains} on-demand node(s) drained for 1 Ready node of the step: {:?}", go.notes);
}

// ---- an interrupted step node forgotten before it is seen gone ----

#[test]
fn a_step_node_surged_elsewhere_that_left_its_asg_is_not_taken_off_the_step_twice() {
    // As a_step_node_surged_elsewhere_does_not_make_cluster_autoscalers_node_the_steps:
    // the step's [2] went with decrement (surge in spot-b; count 2 -> 1 then), [3] (the
    // step's) and [4] (cluster-autoscaler's) are Ready. Once [2] has left spot-a's list
    // (terminated, no longer described), forget_expired drops its interruption before
    // advance_failback, so follow_new_instances took it for another writer's removal and
    // lowered the step a second time (count 0): no on-demand node was drained for [3].
    let (cfg, record, booting) = a_step_node_surged_elsewhere();
    let step_node = booting.spot[0].instances[2].id.clone();
    let mut later = booting.clone();
    later.spot[0] = spot_asg("spot-a", sized(4).live(5).max(4));
    later.spot[1] = spot_asg("spot-b", sized(1));
    let surge = later.spot[1].instances[0].id.clone();
    nodes_where(&mut later, |id| (id != surge && id != step_node).then_some(true));
    // Still listed, Terminating: 1 drained.
    let mut terminating = later.clone();
    terminating.spot[0].instances[2].lifecycle_state = LifecycleState::Terminating;
    let go = run(&cfg, &record, &terminating, &[], now() + Duration::minutes(2));
    let drains = drain_count(&go);
    assert_eq!(drains, 1, "[2] still listed: {:?}", go.notes);
    // Gone from the list: the same pool, the same step.
    later.spot[0].instances.remove(2);
    let go = run(&cfg, &record, &later, &[], now() + Duration::minutes(2));
    let drains = drain_count(&go);
    assert_eq!(drains, 1, "the step's Ready [3] left undrained once [2] left the list: {:?}", go.notes);
}

#[test]
fn a_step_node_replaced_by_a_surge_in_its_own_asg_is_still_the_steps() {
    // The step raised spot-a 2 -> 4; its [2] gets a spot warning while booting: surged in
    // spot-a itself (5), terminated with decrement (4): the step's sizes unmoved, [4]
    // replaces [2]. Once [2] had left spot-a's list its interruption was forgotten first,
    // and follow_new_instances lowered the step (count 1, raised_to 3): [4] was taken for
    // another writer's and 1 on-demand node drained for 2 new spot nodes ("1 of its 2
    // left meanwhile", wait_and_retry).
    let (cfg, _, observed, started) = failback_step_started();
    let mut booting = observed.clone();
    booting.spot[0] = spot_asg("spot-a", sized(4));
    let new: Vec<String> = booting.spot[0].instances[2..].iter().map(|i| i.id.clone()).collect();
    nodes_where(&mut booting, |id| (!new.iter().any(|n| n == id)).then_some(true));
    let step_node = new[0].clone();
    let at = now() + Duration::seconds(60);
    let warning =
        event(Signal::SpotInterruption { instance_id: step_node.clone(), action: InstanceAction::Terminate }, at);
    let warned = run(&cfg, &applied(&started), &booting, &[warning], at);
    assert_eq!(desired(&warned, "spot-a"), Some(5), "surged in its own ASG: {:?}", warned.notes);
    assert_eq!(warned.record.failback.as_ref().map(|f| f.count), Some(2));
    let mut later = booting.clone();
    later.spot[0] = spot_asg("spot-a", sized(4).live(5));
    later.spot[0].instances.remove(2); // [2] terminated and gone; [4] its surge
    nodes_where(&mut later, |_| Some(true));
    let go = run(&cfg, &applied(&warned), &later, &[], now() + Duration::minutes(3));
    let drains = drain_count(&go);
    assert_eq!(drains, 2, "2 new Ready spot nodes of the step ([3], [2]'s surge [4]): {:?}", go.notes);
    assert!(!go.notes.iter().any(|n| n.contains("left meanwhile")), "{:?}", go.notes);
}
