//! What the engine's queue holds, and what an actor hands back: calls on the pool and
//! events to schedule, as data.

use crate::cluster::{NodeId, PodId};
use crate::model::Call;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ev {
    NodeReady(NodeId),
    Reclaim(NodeId),
    Warning(NodeId),
    Rebalance(NodeId),
    JobDone(PodId, u32),
    BatchStart(usize),
    AsgLoop,
    CaScan,
    WorkloadTick,
    MarketTick,
    Sample,
    BallastTick,
    BallastDeliver,
    /// The forwarder looks at each pool's demand (a move past its debounce, a heartbeat).
    ForwarderLook,
    /// kube-scheduler's pass, a cycle after what made it due.
    SchedulePass,
    /// A nominated pod's victims are gone: a pass binds it.
    NomineeReady,
    /// aws-node-termination-handler cordons and drains the node.
    Drain(NodeId),
}

/// An actor's answer: calls carried out first, then events scheduled, each in order.
#[derive(Debug, Default)]
pub struct Reaction {
    pub calls: Vec<Call>,
    /// (when, what).
    pub events: Vec<(u64, Ev)>,
}

impl Reaction {
    pub fn calls(calls: Vec<Call>) -> Reaction {
        Reaction { calls, events: Vec::new() }
    }

    pub fn event(at: u64, ev: Ev) -> Reaction {
        Reaction { calls: Vec::new(), events: vec![(at, ev)] }
    }
}
