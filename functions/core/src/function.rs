//! The deployment's Lambda functions, named once: their binaries, their names in
//! `ballast-CLUSTER-NAME` (function, role, log group) and in logs and metrics, and their
//! logical ids in the SAM template.

use std::fmt;

/// One of the three Lambda functions a deployment runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Function {
    /// Takes the events queue's batches: spot interruptions, rebalances, lifecycle hooks.
    Interruption,
    /// Invoked on a schedule: the minute's look at every pool.
    Schedule,
    /// Invoked by the forwarder's cluster events: demand and node changes.
    ClusterEvents,
}

impl Function {
    /// Every function, in the templates' order.
    pub const ALL: [Function; 3] = [Function::Interruption, Function::Schedule, Function::ClusterEvents];

    /// Every function's [`name`](Self::name), in [`ALL`](Self::ALL)'s order.
    pub const NAMES: [&'static str; Function::ALL.len()] = {
        let mut names = [""; Function::ALL.len()];
        let mut i = 0;
        while i < names.len() {
            names[i] = Function::ALL[i].name();
            i += 1;
        }
        names
    };

    /// Its name: the binary's, the `Function` dimension of its metrics, the `function`
    /// field of its logs, and the last part of `ballast-CLUSTER-NAME`.
    pub const fn name(self) -> &'static str {
        match self {
            Function::Interruption => "interruption",
            Function::Schedule => "schedule",
            Function::ClusterEvents => "cluster-events",
        }
    }

    /// The function whose [`name`](Self::name) is `name`, if one is.
    pub fn from_name(name: &str) -> Option<Function> {
        Function::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The name a deployment for `cluster` gives the function and its role.
    pub fn deployed_name(self, cluster: &str) -> String {
        format!("ballast-{cluster}-{}", self.name())
    }

    /// Its logical id in the SAM template (`infra/sam/template.yaml`).
    pub const fn logical_id(self) -> &'static str {
        match self {
            Function::Interruption => "InterruptionFunction",
            Function::Schedule => "ScheduleFunction",
            Function::ClusterEvents => "ClusterEventsFunction",
        }
    }
}

impl fmt::Display for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_is_found_by_its_name_and_no_other() {
        for f in Function::ALL {
            assert_eq!(Function::from_name(f.name()), Some(f));
            assert_eq!(f.to_string(), f.name());
        }
        assert_eq!(Function::NAMES, ["interruption", "schedule", "cluster-events"]);
        assert_eq!(Function::from_name("cluster_events"), None);
        assert_eq!(Function::from_name("forwarder"), None);
        assert_eq!(Function::ClusterEvents.deployed_name("prod-eks"), "ballast-prod-eks-cluster-events");
    }
}
