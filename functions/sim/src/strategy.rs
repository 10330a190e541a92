//! The three ways a scenario is run.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// cluster-autoscaler alone.
    ClusterAutoscaler,
    /// cluster-autoscaler with a fixed number of pause pods.
    StaticOverprovisioning,
    /// cluster-autoscaler with Ballast.
    Ballast,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [Strategy::ClusterAutoscaler, Strategy::StaticOverprovisioning, Strategy::Ballast];

    pub fn label(self) -> &'static str {
        match self {
            Strategy::ClusterAutoscaler => "CA alone",
            Strategy::StaticOverprovisioning => "CA + static",
            Strategy::Ballast => "CA + Ballast",
        }
    }
}
