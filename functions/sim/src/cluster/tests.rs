use super::*;

fn node(cpu: u64) -> Node {
    Node::booting(0, 0, true, cpu, cpu << 22)
}

#[test]
fn workload_preempts_pause_pods_and_they_go_pending() {
    let mut c = Cluster::new(-10, 2000, vec![vec![true]]);
    let n = c.add_node(node(4000));
    c.node_ready(n);
    for _ in 0..4 {
        c.create_pod(PodKind::Pause, 0, Requests { cpu: 1000, mem: 1 << 30, gpu: 0 }, PAUSE_PRIORITY, 0);
    }
    c.schedule(0, &[n]);
    assert_eq!(c.pending_count(), 0);
    let w = c.create_pod(PodKind::Deployment(0), 0, Requests { cpu: 2000, mem: 1 << 30, gpu: 0 }, WORKLOAD_PRIORITY, 5);
    let placed = c.schedule(5, &[n]);
    assert_eq!(placed.preempted, 2);
    assert_eq!(c.pods[w].node, None, "nominated, not bound while its victims terminate");
    assert_eq!(placed.wake_at, Some(2005));
    let p = c.create_pod(PodKind::Pause, 0, Requests { cpu: 1000, mem: 1 << 30, gpu: 0 }, PAUSE_PRIORITY, 6);
    let placed = c.schedule(6, &[n]);
    assert_eq!((placed.started.len(), c.pods[p].node), (0, None), "the room is held for the nominee");
    c.wake();
    let placed = c.schedule(2005, &[n]);
    assert_eq!(c.pods[w].node, Some(n));
    assert_eq!(placed.started, vec![(w, 2000)], "bound after the preemption delay");
    assert_eq!(c.pending_count(), 3, "two evicted pause pods and the new one pending");
    assert_eq!(c.pending_workload, 0);
}

/// A nominee's pod slot is held like its room: the pause pod it evicted cannot take
/// the slot back on a full node before the nominee is bound.
#[test]
fn a_nominee_holds_its_pod_slot() {
    let mut c = Cluster::new(-10, 2000, vec![vec![true]]);
    let mut full = node(4000);
    full.max_pods = 2;
    let n = c.add_node(full);
    c.node_ready(n);
    c.create_pod(PodKind::Pause, 0, Requests { cpu: 1000, mem: 1 << 30, gpu: 0 }, PAUSE_PRIORITY, 0);
    c.create_pod(PodKind::Deployment(0), 0, Requests { cpu: 1000, mem: 1 << 30, gpu: 0 }, WORKLOAD_PRIORITY, 0);
    c.schedule(0, &[n]);
    assert_eq!(c.nodes[n].pods.len(), 2);
    let w = c.create_pod(PodKind::Deployment(0), 0, Requests { cpu: 1000, mem: 1 << 30, gpu: 0 }, WORKLOAD_PRIORITY, 5);
    let placed = c.schedule(5, &[n]);
    assert_eq!(placed.preempted, 1, "room enough, but no pod slot: the pause pod goes");
    c.wake();
    c.schedule(6, &[n]);
    assert_eq!(c.nodes[n].pods.len(), 1, "the evicted pause pod does not take the held slot");
    c.wake();
    c.schedule(2005, &[n]);
    assert_eq!(c.pods[w].node, Some(n));
    assert_eq!(c.nodes[n].pods.len(), 2, "never more than max_pods");
}

/// Three ready nodes: 4 CPU with 3 used, 8 CPU with 2 used, 8 CPU empty but its
/// memory mostly taken.
fn scored_cluster(scoring: Scoring) -> (Cluster, [NodeId; 3]) {
    let mut c = Cluster::new(-10, 2000, vec![vec![true]]);
    c.scoring = scoring;
    let gib = 1u64 << 30;
    let ids = [
        c.add_node(Node::booting(0, 0, true, 4000, 16 * gib)),
        c.add_node(Node::booting(0, 0, true, 8000, 16 * gib)),
        c.add_node(Node::booting(0, 0, true, 8000, 16 * gib)),
    ];
    for (&n, (cpu, mem)) in ids.iter().zip([(3000, gib), (2000, 2 * gib), (0, 14 * gib)]) {
        c.node_ready(n);
        if cpu + mem > 0 {
            let filler = c.create_pod(
                PodKind::Deployment(0),
                0,
                Requests { cpu: cpu.max(1), mem, gpu: 0 },
                WORKLOAD_PRIORITY,
                0,
            );
            c.bind(filler, n);
            c.dequeue(filler);
        }
    }
    (c, ids)
}

#[test]
fn first_fit_takes_the_first_node_with_room() {
    let (mut c, [first, _, _]) = scored_cluster(Scoring::FirstFit);
    let pod =
        c.create_pod(PodKind::Deployment(0), 0, Requests { cpu: 500, mem: 1 << 30, gpu: 0 }, WORKLOAD_PRIORITY, 1);
    let all: Vec<NodeId> = (0..3).collect();
    c.schedule(1, &all);
    assert_eq!(c.pods[pod].node, Some(first));
}

/// kube-scheduler's LeastAllocated, in its integers: with the pod (1 CPU, 1 GiB) on
/// it, the 4-CPU node scores (0 + 87) / 2 = 43, the 8-CPU one with 2 used
/// (62 + 81) / 2 = 71, the empty one with its memory taken (87 + 6) / 2 = 46: the
/// mean of the two shares, so the node with the most CPU free does not win.
#[test]
fn least_allocated_takes_the_node_with_the_most_free_share_of_cpu_and_memory_averaged() {
    let (mut c, [small, busy, mem_full]) = scored_cluster(Scoring::LeastAllocated);
    let pod =
        c.create_pod(PodKind::Deployment(0), 0, Requests { cpu: 1000, mem: 1 << 30, gpu: 0 }, WORKLOAD_PRIORITY, 1);
    let scores: Vec<u64> =
        [small, busy, mem_full].iter().map(|&n| c.nodes[n].least_allocated_score(&c.pods[pod])).collect();
    assert_eq!(scores, vec![43, 71, 46]);
    let all: Vec<NodeId> = (0..3).collect();
    c.schedule(1, &all);
    assert_eq!(c.pods[pod].node, Some(busy));
    // Equal scores: the first of them.
    let mut c = Cluster::new(-10, 2000, vec![vec![true]]);
    c.scoring = Scoring::LeastAllocated;
    let (a, b) = (c.add_node(node(4000)), c.add_node(node(4000)));
    c.node_ready(a);
    c.node_ready(b);
    let p = c.create_pod(PodKind::Deployment(0), 0, Requests { cpu: 1000, mem: 1 << 30, gpu: 0 }, WORKLOAD_PRIORITY, 0);
    c.schedule(0, &[a, b]);
    assert_eq!(c.pods[p].node, Some(a));
    let q = c.create_pod(PodKind::Deployment(0), 0, Requests { cpu: 1000, mem: 1 << 30, gpu: 0 }, WORKLOAD_PRIORITY, 0);
    c.schedule(0, &[a, b]);
    assert_eq!(c.pods[q].node, Some(b), "spread: the emptier node");
}

/// A GPU goes to one pod: a second GPU pod does not fit beside the first however much
/// CPU is left, and evicting pause pods (which hold none) frees none for it.
#[test]
fn a_gpu_is_never_shared_and_preemption_frees_none() {
    let mut c = Cluster::new(-10, 2000, vec![vec![true]]);
    let mut gpu_node = node(8000);
    gpu_node.gpu = 1;
    let n = c.add_node(gpu_node);
    c.node_ready(n);
    let first =
        c.create_pod(PodKind::Deployment(0), 0, Requests { cpu: 2000, mem: 1 << 30, gpu: 1 }, WORKLOAD_PRIORITY, 0);
    c.create_pod(PodKind::Pause, 0, Requests { cpu: 2000, mem: 1 << 30, gpu: 0 }, PAUSE_PRIORITY, 0);
    c.schedule(0, &[n]);
    assert_eq!(c.pods[first].node, Some(n));
    let second =
        c.create_pod(PodKind::Deployment(0), 0, Requests { cpu: 1000, mem: 1 << 30, gpu: 1 }, WORKLOAD_PRIORITY, 1);
    let placed = c.schedule(1, &[n]);
    assert_eq!(c.pods[second].node, None);
    assert_eq!(placed.preempted, 0, "no pause pod evicted for a GPU it does not hold");
    assert_eq!(placed.newly_unschedulable, vec![second]);
    assert_eq!((c.nodes[n].gpu_used, c.nodes[n].gpu), (1, 1));
    // The device back: the next pass binds the waiting pod.
    c.delete_pod(first);
    c.schedule(2, &[n]);
    assert_eq!(c.pods[second].node, Some(n));
}

#[test]
fn pause_pods_never_preempt_and_accounting_is_exact() {
    let mut c = Cluster::new(-10, 2000, vec![vec![true]]);
    let n = c.add_node(node(2000));
    c.node_ready(n);
    let w = c.create_pod(PodKind::Deployment(0), 0, Requests { cpu: 2000, mem: 1, gpu: 0 }, WORKLOAD_PRIORITY, 0);
    c.schedule(0, &[n]);
    c.create_pod(PodKind::Pause, 0, Requests { cpu: 1000, mem: 1, gpu: 0 }, PAUSE_PRIORITY, 0);
    c.schedule(1, &[n]);
    assert_eq!(c.pending_count(), 1);
    c.remove_node(n, 10);
    assert_eq!(c.pods[w].node, None);
    assert_eq!(c.pending_workload, 1);
    assert_eq!((c.ready_cpu, c.running_workload_cpu), (0, 0));
    c.delete_pod(w);
    assert_eq!((c.workload_pods, c.pending_workload, c.workload_cpu), (0, 0, 0));
}
