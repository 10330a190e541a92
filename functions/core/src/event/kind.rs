//! The kinds of event Ballast accepts, each its envelope's `source` and `detail-type`
//! spelled once: the parser, the forwarder, the simulator and the rule-pattern test all
//! take them from here, so a rule or an emitter cannot drift from what is parsed.

/// One kind of EventBridge event Ballast accepts: a `source` and a `detail-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// EC2's two-minute warning before it takes a spot instance.
    SpotInterruptionWarning,
    /// EC2's advice that a spot instance is at raised risk of interruption.
    RebalanceRecommendation,
    /// An EC2 instance changed state (stopping, terminated, ...).
    InstanceStateChange,
    /// An ASG failed (or cancelled) a launch.
    LaunchUnsuccessful,
    /// An ASG launched an instance.
    LaunchSuccessful,
    /// An ASG's terminate lifecycle hook holds an instance for Ballast.
    TerminateLifecycleAction,
    /// An AWS Health event (Ballast acts on EC2 scheduled changes).
    HealthEvent,
    /// An EventBridge scheduled rule's tick, or its reconcile/headroom input.
    ScheduledEvent,
    /// A Parameter Store parameter was written.
    ParameterStoreChange,
    /// The forwarder: a pool's pod requests changed.
    PoolDemandChanged,
    /// The forwarder: pods of a pool cannot be scheduled.
    PodsUnschedulable,
    /// The forwarder: a pool's node became Ready or went away.
    NodeLifecycle,
    /// The forwarder: a pool's first-start waits over a window.
    PoolWaitsMeasured,
}

/// The forwarder's `source`: every event it publishes carries it.
pub const FORWARDER_SOURCE: &str = "ballast.kubernetes";

impl EventKind {
    /// Every kind, in the order above.
    pub const ALL: [EventKind; 13] = [
        EventKind::SpotInterruptionWarning,
        EventKind::RebalanceRecommendation,
        EventKind::InstanceStateChange,
        EventKind::LaunchUnsuccessful,
        EventKind::LaunchSuccessful,
        EventKind::TerminateLifecycleAction,
        EventKind::HealthEvent,
        EventKind::ScheduledEvent,
        EventKind::ParameterStoreChange,
        EventKind::PoolDemandChanged,
        EventKind::PodsUnschedulable,
        EventKind::NodeLifecycle,
        EventKind::PoolWaitsMeasured,
    ];

    /// The envelope's `source`, as AWS (or the forwarder) sends it.
    pub const fn source(self) -> &'static str {
        match self {
            EventKind::SpotInterruptionWarning
            | EventKind::RebalanceRecommendation
            | EventKind::InstanceStateChange => "aws.ec2",
            EventKind::LaunchUnsuccessful | EventKind::LaunchSuccessful | EventKind::TerminateLifecycleAction => {
                "aws.autoscaling"
            }
            EventKind::HealthEvent => "aws.health",
            EventKind::ScheduledEvent => "aws.events",
            EventKind::ParameterStoreChange => "aws.ssm",
            EventKind::PoolDemandChanged
            | EventKind::PodsUnschedulable
            | EventKind::NodeLifecycle
            | EventKind::PoolWaitsMeasured => FORWARDER_SOURCE,
        }
    }

    /// The envelope's `detail-type`, byte for byte as AWS (or the forwarder) sends it.
    pub const fn detail_type(self) -> &'static str {
        match self {
            EventKind::SpotInterruptionWarning => "EC2 Spot Instance Interruption Warning",
            EventKind::RebalanceRecommendation => "EC2 Instance Rebalance Recommendation",
            EventKind::InstanceStateChange => "EC2 Instance State-change Notification",
            EventKind::LaunchUnsuccessful => "EC2 Instance Launch Unsuccessful",
            EventKind::LaunchSuccessful => "EC2 Instance Launch Successful",
            EventKind::TerminateLifecycleAction => "EC2 Instance-terminate Lifecycle Action",
            EventKind::HealthEvent => "AWS Health Event",
            EventKind::ScheduledEvent => "Scheduled Event",
            EventKind::ParameterStoreChange => "Parameter Store Change",
            EventKind::PoolDemandChanged => "Pool Demand Changed",
            EventKind::PodsUnschedulable => "Pods Unschedulable",
            EventKind::NodeLifecycle => "Node Lifecycle",
            EventKind::PoolWaitsMeasured => "Pool Waits Measured",
        }
    }

    /// The kind a `source` and `detail-type` name; `None` for one Ballast does not handle.
    pub fn of(source: &str, detail_type: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.source() == source && k.detail_type() == detail_type)
    }

    /// Whether an EventBridge rule routes this kind to Ballast (the templates' rules);
    /// scheduled events reach the schedule function by invocation, without one.
    pub const fn routed_by_rule(self) -> bool {
        !matches!(self, EventKind::ScheduledEvent)
    }
}

#[cfg(test)]
mod tests {
    use super::EventKind;

    #[test]
    fn each_kind_is_found_by_its_own_source_and_detail_type_only() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::of(kind.source(), kind.detail_type()), Some(kind));
            assert_eq!(EventKind::of("aws.other", kind.detail_type()), None, "{kind:?}");
        }
        let pairs: std::collections::BTreeSet<_> =
            EventKind::ALL.iter().map(|k| (k.source(), k.detail_type())).collect();
        assert_eq!(pairs.len(), EventKind::ALL.len());
        assert_eq!(EventKind::of("aws.ec2", "EC2 Instance Teleport Notice"), None);
    }
}
