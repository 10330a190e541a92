//! What drains spot nodes on interruption signals when Ballast does not: the baselines
//! get what real clusters run (see `InterruptionHandling`).
//! - aws-node-termination-handler, queue-processor mode: EventBridge delivers the
//!   rebalance recommendation or the interruption warning to its SQS queue; it cordons
//!   and drains the node. It does not uncordon after a recommendation that no
//!   interruption follows: the empty node waits for cluster-autoscaler's scale-down.
//! - EKS managed node groups (Capacity Rebalancing): on a recommendation the ASG launches
//!   a replacement; once it is Ready, the old node is cordoned, drained and terminated.
//!   A warning that comes first drains the old node at once.

use crate::cluster::{NodeId, NodePhase};
use crate::engine::{Ev, Sim};
use crate::scenario::{InterruptionHandling, Market};

/// A rebalance recommendation for `id`.
pub fn rebalance(sim: &mut Sim, id: NodeId) {
    match sim.sc.interruption_handling {
        InterruptionHandling::NodeTerminationHandler => queue_drain(sim, id),
        InterruptionHandling::CapacityRebalance => replace(sim, id),
        InterruptionHandling::None => {}
    }
}

/// The two-minute interruption warning for `id`.
pub fn warning(sim: &mut Sim, id: NodeId) {
    match sim.sc.interruption_handling {
        InterruptionHandling::NodeTerminationHandler => queue_drain(sim, id),
        InterruptionHandling::CapacityRebalance => {
            // Only a node a recommendation is replacing is drained on the warning.
            if sim.cluster.nodes[id].leaving {
                drain(sim, id);
            }
        }
        InterruptionHandling::None => {}
    }
}

/// A node became Ready: if it replaces one, that one is drained and terminated.
pub fn node_ready(sim: &mut Sim, id: NodeId) {
    let Some(old) = sim.cluster.nodes[id].replaces else { return };
    if sim.cluster.nodes[old].phase == NodePhase::Gone {
        return;
    }
    drain(sim, old);
    sim.remove_node(old, false);
}

/// NTH reads the event from its queue after EventBridge and SQS delivered it.
fn queue_drain(sim: &mut Sim, id: NodeId) {
    let at = sim.now + sim.sc.delivery_delay.0.as_millis() as u64;
    sim.at(at, Ev::Drain(id));
}

/// Cordon, then evict every pod (they go pending and are placed again).
pub fn drain(sim: &mut Sim, id: NodeId) {
    if sim.cluster.nodes[id].phase == NodePhase::Gone {
        return;
    }
    sim.cluster.cordon(id);
    sim.cluster.evict_all(id, sim.now);
    sim.mark_schedulable_dirty();
}

/// Capacity Rebalancing: a replacement in the node's group, if the market has one; the
/// old node stays until the replacement is Ready (or the interruption comes).
fn replace(sim: &mut Sim, id: NodeId) {
    let node = &sim.cluster.nodes[id];
    if node.phase == NodePhase::Gone || node.leaving {
        return;
    }
    let g = node.group;
    if sim.sc.groups[g].market != Market::Spot {
        return;
    }
    let Some((az, instance_type)) = sim.launch_target(g) else { return };
    let new = sim.launch(g, az, &instance_type);
    sim.cluster.nodes[new].replaces = Some(id);
    sim.cluster.nodes[id].leaving = true;
}
