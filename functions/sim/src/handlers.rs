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
use crate::event::{Ev, Reaction};
use crate::model::{Call, Model};
use crate::scenario::{InterruptionHandling, Market, Scenario};

pub struct InterruptionHandlers {
    handling: InterruptionHandling,
    /// EventBridge and SQS delivering a signal to NTH's queue.
    delivery_ms: u64,
    /// Nodes NTH cordoned and drained (on a recommendation or a warning).
    pub nth_drains: u32,
}

impl InterruptionHandlers {
    pub fn new(sc: &Scenario) -> Self {
        InterruptionHandlers {
            handling: sc.interruption_handling,
            delivery_ms: sc.delivery_delay.0.as_millis() as u64,
            nth_drains: 0,
        }
    }

    /// A rebalance recommendation for `id`.
    pub fn rebalance(&self, model: &Model, id: NodeId, now: u64) -> Reaction {
        match self.handling {
            InterruptionHandling::NodeTerminationHandler => self.queue_drain(id, now),
            InterruptionHandling::CapacityRebalance => Reaction::calls(replace(model, id)),
            InterruptionHandling::None => Reaction::default(),
        }
    }

    /// The two-minute interruption warning for `id`.
    pub fn warning(&self, model: &Model, id: NodeId, now: u64) -> Reaction {
        match self.handling {
            InterruptionHandling::NodeTerminationHandler => self.queue_drain(id, now),
            // Only a node a recommendation is replacing is drained on the warning.
            InterruptionHandling::CapacityRebalance if model.cluster.nodes[id].leaving => {
                Reaction::calls(drain(model, id))
            }
            InterruptionHandling::CapacityRebalance | InterruptionHandling::None => Reaction::default(),
        }
    }

    /// A node became Ready: if it replaces one, that one is drained and terminated.
    pub fn node_ready(&self, model: &Model, id: NodeId) -> Vec<Call> {
        let Some(old) = model.cluster.nodes[id].replaces else { return Vec::new() };
        if model.cluster.nodes[old].phase == NodePhase::Gone {
            return Vec::new();
        }
        let mut calls = drain(model, old);
        calls.push(Call::Remove { node: old, decrement: false });
        calls
    }

    /// NTH reads the event from its queue after EventBridge and SQS delivered it.
    fn queue_drain(&self, id: NodeId, now: u64) -> Reaction {
        Reaction::event(now + self.delivery_ms, Ev::Drain(id))
    }

    /// NTH's drain, once its queue delivered the signal (a node it drained already is
    /// cordoned: draining it again counts once).
    pub fn drain(&mut self, model: &Model, id: NodeId) -> Vec<Call> {
        let node = &model.cluster.nodes[id];
        if node.phase != NodePhase::Gone && !node.cordoned {
            self.nth_drains += 1;
        }
        drain(model, id)
    }
}

/// Cordon, then evict every pod (they go pending and are placed again).
fn drain(model: &Model, id: NodeId) -> Vec<Call> {
    if model.cluster.nodes[id].phase == NodePhase::Gone {
        return Vec::new();
    }
    vec![Call::Cordon { node: id }, Call::Evict { node: id }]
}

/// Capacity Rebalancing: a replacement in the node's group, if the market has one; the
/// old node stays until the replacement is Ready (or the interruption comes).
fn replace(model: &Model, id: NodeId) -> Vec<Call> {
    let node = &model.cluster.nodes[id];
    if node.phase == NodePhase::Gone || node.leaving || model.sc.groups[node.group].market != Market::Spot {
        return Vec::new();
    }
    vec![Call::Replace { node: id }]
}
