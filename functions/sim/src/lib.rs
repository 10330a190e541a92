//! `ballast simulate`: a discrete-event model of an EKS pool with cluster-autoscaler,
//! run three ways — CA alone, CA with static overprovisioning, and CA with Ballast
//! (its production planner and reconcile over the in-memory adapters).

mod bridge;
mod ca;
mod cluster;
mod engine;
pub mod metrics;
pub mod plot;
pub mod scenario;

use serde::Serialize;

pub use metrics::{Report, Sample};
pub use scenario::{Scenario, ScenarioError};

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

/// Runs one strategy over the scenario.
pub fn simulate(scenario: &Scenario, strategy: Strategy, seed: u64, progress: &mut dyn FnMut(f64)) -> Report {
    let mut sim = engine::Sim::new(scenario, strategy, seed);
    sim.run(progress);
    let invocations = sim.ballast.as_ref().map(|b| b.invocations).unwrap_or(0);
    sim.metrics.report(scenario, strategy.label(), sim.interruptions, invocations)
}

/// The scenario with Ballast's headroom fixed at `percent` all day (for `--sweep`).
pub fn with_headroom_percent(scenario: &Scenario, percent: u32) -> Scenario {
    let mut s = scenario.clone();
    let headroom = &mut s.ballast.pools[0].headroom;
    headroom.percent = percent;
    headroom.schedules.clear();
    s
}

#[cfg(test)]
mod tests;
